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
// How far behind its plan a schedule may run before a waiting request counts as pushed back.
constexpr Nanos k_drift = 50'000'000;
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

bool ShapeQueue::State::empty() const {
    return std::all_of(classes.begin(), classes.end(), [](const Ring& r) { return r.queues.empty(); });
}

void ShapeQueue::push(State& state, std::string_view tenant, Priority priority, Ticket t) const {
    std::string_view key = fair_ ? tenant : std::string_view{};
    auto& ring = state.classes[static_cast<std::size_t>(priority)];
    for (auto& q : ring.queues)
        if (q.tenant == key) {
            q.tickets.push_back(t);
            return;
        }
    ring.queues.push_back(TenantQueue{std::string(key), {t}, 0});
}

ShapeQueue::Ticket ShapeQueue::step(State& s) {
    for (auto& ring : s.classes)
        if (!ring.queues.empty()) return step(ring);
    return {};  // callers step only a state with a ticket in it
}

ShapeQueue::Ticket ShapeQueue::step(Ring& r) {
    // Deficit round robin: a turn adds a quantum (the largest waiting head's cost) to the
    // tenant's deficit, and the tenant starts requests while their cost fits in it.
    for (;;) {
        if (r.current >= r.queues.size()) r.current = 0;
        auto& q = r.queues[r.current];
        if (r.fresh_turn) {
            double quantum = 0;
            for (const auto& other : r.queues) quantum = std::max(quantum, other.tickets.front().cost);
            q.deficit += std::max(quantum, 1e-9);
            r.fresh_turn = false;
        }
        if (q.tickets.front().cost <= q.deficit + 1e-9) {
            Ticket t = q.tickets.front();
            q.tickets.pop_front();
            q.deficit -= t.cost;
            if (q.tickets.empty()) {
                r.queues.erase(r.queues.begin() + static_cast<std::ptrdiff_t>(r.current));
                r.fresh_turn = true;
            }
            return t;
        }
        ++r.current;
        r.fresh_turn = true;
    }
}

std::vector<ShapeQueue::Slot> ShapeQueue::schedule(const State& state, Nanos now, std::string_view extra_tenant,
                                                   double extra_cost, Priority extra_priority) const {
    State s = state;
    if (extra_cost >= 0) push(s, extra_tenant, extra_priority, Ticket{0, extra_cost});
    std::vector<Slot> out;
    Nanos t = std::max(now, next_free_);
    while (!s.empty()) {
        auto ticket = step(s);
        out.push_back({ticket.id, t, ticket.deadline});
        t += interval(ticket.cost);
    }
    return out;
}

std::uint64_t ShapeQueue::victim_for(Priority priority) const {
    for (auto c = k_classes; c-- > static_cast<std::size_t>(priority) + 1;) {
        std::uint64_t newest = 0;
        for (const auto& q : state_.classes[c].queues)
            for (const auto& t : q.tickets) newest = std::max(newest, t.id);
        if (newest) return newest;
    }
    return 0;
}

bool ShapeQueue::remove(State& state, std::uint64_t ticket) {
    for (auto& ring : state.classes)
        for (auto it = ring.queues.begin(); it != ring.queues.end(); ++it) {
            auto& q = it->tickets;
            auto found = std::find_if(q.begin(), q.end(), [&](const Ticket& t) { return t.id == ticket; });
            if (found == q.end()) continue;
            q.erase(found);
            if (q.empty()) {
                auto index = static_cast<std::size_t>(it - ring.queues.begin());
                ring.queues.erase(it);
                if (index < ring.current) --ring.current;
                else if (index == ring.current) ring.fresh_turn = true;
            }
            return true;
        }
    return false;
}

ShapeQueue::Admission ShapeQueue::check(std::string_view tenant, double cost, Nanos now, Priority priority) const {
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
    bool full = static_cast<double>(waiting_) + 1 > capacity_;
    // A full queue still takes a request that outranks someone waiting, in that one's place.
    std::uint64_t victim = full ? victim_for(priority) : 0;
    std::vector<Slot> slots;
    if (victim) {
        State trial = state_;
        remove(trial, victim);
        slots = schedule(trial, now, tenant, cost, priority);
    } else {
        slots = schedule(state_, now, tenant, cost, priority);
    }
    Nanos start = now;
    for (const auto& slot : slots)
        if (slot.id == 0) start = slot.start;
    Nanos drained = slots.empty() ? now : slots.back().start;
    v.until_full = std::max<Nanos>(0, drained - now);
    if (full && !victim) {
        v.remaining = 0;
        v.retry_after = std::max<Nanos>(1, slots.front().start - now);  // the queue moves when its head starts
        return a;
    }
    double waiting_after = static_cast<double>(waiting_) + (victim ? 0 : 1);
    if (start - now > max_wait_) {
        v.remaining = capacity_ - static_cast<double>(waiting_);
        v.retry_after = start - now - max_wait_;
        return a;
    }
    v.admitted = true;
    v.remaining = capacity_ - waiting_after;
    a.start_at = start;
    a.displaces = victim;
    return a;
}

ShapeQueue::Admission ShapeQueue::admit(std::string_view tenant, double cost, Nanos now, Priority priority) {
    auto a = check(tenant, cost, now, priority);
    if (!a.verdict.admitted) return a;
    if (a.start_at <= now && waiting_ == 0) {
        next_free_ = now + interval(cost);
        return a;
    }
    if (a.displaces) leave(a.displaces, true);
    a.ticket = next_id_++;
    push(state_, tenant, priority, Ticket{a.ticket, cost, now + max_wait_});
    ++waiting_;
    return a;
}

ShapeQueue::StartCheck ShapeQueue::try_start(std::uint64_t ticket, Nanos now) {
    if (displaced_.erase(ticket)) return {false, false, now, true};
    auto slots = schedule(state_, now);
    for (std::size_t i = 0; i < slots.size(); ++i) {
        if (slots[i].id != ticket) continue;
        // Pushed past what its admission allowed: refused now rather than held. (The slack is
        // for the schedule's drift: each start is as late as its waiter's timer.)
        if (slots[i].start > slots[i].deadline + max_wait_ / 10 + k_drift) {
            leave(ticket, false);
            return {false, false, now, true};
        }
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

void ShapeQueue::leave(std::uint64_t ticket, bool displaced) {
    if (remove(state_, ticket)) --waiting_;
    auto waker = wakers_.find(ticket);
    if (displaced) {
        displaced_.insert(ticket);
        if (waker != wakers_.end() && waker->second) waker->second();
        if (waker != wakers_.end()) wakers_.erase(waker);
        return;  // its place went to a newcomer: nobody else moves
    }
    if (waker != wakers_.end()) wakers_.erase(waker);
    // Everyone behind moved up: let them all recompute their start.
    for (auto& [id, wake] : wakers_)
        if (wake) wake();
}

void ShapeQueue::cancel(std::uint64_t ticket) {
    displaced_.erase(ticket);
    leave(ticket, false);
}

void ShapeQueue::set_waker(std::uint64_t ticket, std::function<void()> wake) {
    // Displaced before its holder got here: wake it at once to hear so.
    if (displaced_.contains(ticket)) {
        if (wake) wake();
        return;
    }
    wakers_[ticket] = std::move(wake);
}

void ShapeQueue::wake_head(Nanos now) {
    if (state_.empty()) return;
    auto slots = schedule(state_, now);
    if (auto it = wakers_.find(slots.front().id); it != wakers_.end() && it->second) it->second();
}

}  // namespace tokengate::limiter
