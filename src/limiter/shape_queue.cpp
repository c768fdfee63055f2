#include "tokengate/limiter/shape_queue.hpp"

#include <algorithm>
#include <cmath>

#include "tokengate/core/saturate.hpp"

namespace tokengate::limiter {

using core::k_nanos_per_second;
using core::Nanos;

namespace {
// A slot or a wait is at most 2^60 ns (36 years): a whole schedule, the sum of its waiting
// requests' slots after the last start, then stays below 2^62 and clear of int64 overflow.
constexpr Nanos k_longest = Nanos{1} << 60;
}  // namespace

ShapeQueue::ShapeQueue(const config::LimitSpec& spec) { reconfigure(spec); }

void ShapeQueue::reconfigure(const config::LimitSpec& spec) {
    capacity_ = spec.capacity;
    rate_per_s_ = spec.rate_per_s;
    by_cost_ = spec.unit == config::Unit::cost;
    fair_ = spec.fair;
    // Without max_wait, a request may wait as long as a full queue of single units takes.
    double wait_s = spec.max_wait > 0 ? static_cast<double>(spec.max_wait) / 1e9 : capacity_ / rate_per_s_;
    max_wait_ = core::saturate_to_int64(wait_s * static_cast<double>(k_nanos_per_second), k_longest);
}

Nanos ShapeQueue::interval(double cost) const {
    double units = by_cost_ ? cost : 1.0;
    return core::saturate_to_int64(units * static_cast<double>(k_nanos_per_second) / rate_per_s_, k_longest);
}

void ShapeQueue::push(State& state, std::string_view tenant, Ticket t) const {
    std::string_view key = fair_ ? tenant : std::string_view{};
    for (auto& q : state.ring)
        if (q.tenant == key) {
            q.tickets.push_back(t);
            return;
        }
    state.ring.push_back(TenantQueue{std::string(key), {t}, 0});
}

ShapeQueue::Ticket ShapeQueue::step(State& s) {
    // Deficit round robin: a turn adds a quantum (the largest waiting head's cost) to the
    // tenant's deficit, and the tenant starts requests while their cost fits in it.
    for (;;) {
        if (s.current >= s.ring.size()) s.current = 0;
        auto& q = s.ring[s.current];
        if (s.fresh_turn) {
            double quantum = 0;
            for (const auto& other : s.ring) quantum = std::max(quantum, other.tickets.front().cost);
            q.deficit += std::max(quantum, 1e-9);
            s.fresh_turn = false;
        }
        if (q.tickets.front().cost <= q.deficit + 1e-9) {
            Ticket t = q.tickets.front();
            q.tickets.pop_front();
            q.deficit -= t.cost;
            if (q.tickets.empty()) {
                s.ring.erase(s.ring.begin() + static_cast<std::ptrdiff_t>(s.current));
                s.fresh_turn = true;
            }
            return t;
        }
        ++s.current;
        s.fresh_turn = true;
    }
}

std::vector<ShapeQueue::Slot> ShapeQueue::schedule(Nanos now, std::string_view extra_tenant, double extra_cost) const {
    State s = state_;
    if (extra_cost >= 0) push(s, extra_tenant, Ticket{0, extra_cost});
    std::vector<Slot> out;
    Nanos t = std::max(now, next_free_);
    while (!s.ring.empty()) {
        auto ticket = step(s);
        out.push_back({ticket.id, t});
        t += interval(ticket.cost);
    }
    return out;
}

ShapeQueue::Admission ShapeQueue::check(std::string_view tenant, double cost, Nanos now) const {
    Admission a;
    auto& v = a.verdict;
    // `capacity` counts waiting requests, but with `unit: cost` a request holds cost/R of the
    // schedule: one whose slot alone is longer than max_wait would hold back everyone after it
    // past their limit (with a client's 2^64 tokens, for ever), so it can never be admitted.
    if (by_cost_ && (!(cost >= 0) || interval(cost) > max_wait_)) {
        v.never = true;
        v.retry_after = -1;
        v.remaining = capacity_ - static_cast<double>(waiting_);
        v.until_full = std::max<Nanos>(0, std::max(now, next_free_) - now);
        return a;
    }
    if (waiting_ == 0 && next_free_ <= now) {
        v.admitted = true;
        v.remaining = capacity_;
        a.start_at = now;
        return a;
    }
    auto slots = schedule(now, tenant, cost);
    Nanos start = now;
    for (const auto& slot : slots)
        if (slot.id == 0) start = slot.start;
    Nanos drained = slots.empty() ? now : slots.back().start;
    v.until_full = std::max<Nanos>(0, drained - now);
    if (static_cast<double>(waiting_) + 1 > capacity_) {
        v.remaining = 0;
        v.retry_after = std::max<Nanos>(1, slots.front().start - now);  // the queue moves when its head starts
        return a;
    }
    if (start - now > max_wait_) {
        v.remaining = capacity_ - static_cast<double>(waiting_);
        v.retry_after = start - now - max_wait_;
        return a;
    }
    v.admitted = true;
    v.remaining = capacity_ - static_cast<double>(waiting_) - 1;
    a.start_at = start;
    return a;
}

ShapeQueue::Admission ShapeQueue::admit(std::string_view tenant, double cost, Nanos now) {
    auto a = check(tenant, cost, now);
    if (!a.verdict.admitted) return a;
    if (a.start_at <= now && waiting_ == 0) {
        next_free_ = now + interval(cost);
        return a;
    }
    a.ticket = next_id_++;
    push(state_, tenant, Ticket{a.ticket, cost});
    ++waiting_;
    return a;
}

ShapeQueue::StartCheck ShapeQueue::try_start(std::uint64_t ticket, Nanos now) {
    auto slots = schedule(now);
    for (std::size_t i = 0; i < slots.size(); ++i) {
        if (slots[i].id != ticket) continue;
        if (i > 0 || slots[i].start > now) return {false, false, slots[i].start};
        auto t = step(state_);
        next_free_ = slots[i].start + interval(t.cost);
        --waiting_;
        wakers_.erase(ticket);
        wake_head(now);
        return {true, false, now};
    }
    return {false, true, now};
}

void ShapeQueue::cancel(std::uint64_t ticket) {
    for (auto it = state_.ring.begin(); it != state_.ring.end(); ++it) {
        auto& q = it->tickets;
        auto found = std::find_if(q.begin(), q.end(), [&](const Ticket& t) { return t.id == ticket; });
        if (found == q.end()) continue;
        q.erase(found);
        --waiting_;
        if (q.empty()) {
            auto index = static_cast<std::size_t>(it - state_.ring.begin());
            state_.ring.erase(it);
            if (index < state_.current) --state_.current;
            else if (index == state_.current) state_.fresh_turn = true;
        }
        break;
    }
    wakers_.erase(ticket);
    // Everyone behind moved up: let them all recompute their start.
    for (auto& [id, wake] : wakers_)
        if (wake) wake();
}

void ShapeQueue::set_waker(std::uint64_t ticket, std::function<void()> wake) { wakers_[ticket] = std::move(wake); }

void ShapeQueue::wake_head(Nanos now) {
    if (state_.ring.empty()) return;
    auto slots = schedule(now);
    if (auto it = wakers_.find(slots.front().id); it != wakers_.end() && it->second) it->second();
}

}  // namespace tokengate::limiter
