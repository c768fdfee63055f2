#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokengate/config/config.hpp"
#include "tokengate/limiter/rate_bucket.hpp"

namespace tokengate::limiter {

/// A leaky bucket as a real queue (`mode: shape`): admitted requests start at exactly rate R,
/// in FIFO order, or with `fair: true` round-robin across tenants by deficit round robin (each
/// turn a tenant may start up to the largest waiting cost's worth of requests), FIFO within a
/// tenant. `capacity` counts requests waiting; a request that can start at once does not wait.
/// No I/O: callers pass the time and are woken through the callback they register.
class ShapeQueue {
public:
    explicit ShapeQueue(const config::LimitSpec& spec);

    struct Admission {
        Verdict verdict;           // remaining = free waiting places after this request
        std::uint64_t ticket = 0;  // 0: starts at once; else wait with try_start()
        core::Nanos start_at = 0;  // scheduled start (an estimate under fair queueing)
    };
    /// Would this request be admitted, and when would it start? Changes nothing.
    Admission check(std::string_view tenant, double cost, core::Nanos now) const;
    /// Admits (a request refused by check() is refused here too).
    Admission admit(std::string_view tenant, double cost, core::Nanos now);

    struct StartCheck {
        bool started = false;
        bool unknown = false;        // the ticket is not (or no longer) queued
        core::Nanos wait_until = 0;  // not started: sleep until then, or until woken
    };
    /// A waiting request asks to start: it starts when it is first in order and its time came.
    StartCheck try_start(std::uint64_t ticket, core::Nanos now);
    /// The request leaves the queue (its client went away); later requests move up.
    void cancel(std::uint64_t ticket);
    /// Called (under the caller's lock: it must only schedule work) when `ticket` should recheck.
    void set_waker(std::uint64_t ticket, std::function<void()> wake);

    std::size_t waiting() const { return waiting_; }
    bool idle(core::Nanos now) const { return waiting_ == 0 && next_free_ <= now; }
    void reconfigure(const config::LimitSpec& spec);

private:
    struct Ticket {
        std::uint64_t id;
        double cost;
    };
    struct TenantQueue {
        std::string tenant;
        std::deque<Ticket> tickets;
        double deficit = 0;
    };
    struct State {
        std::vector<TenantQueue> ring;
        std::size_t current = 0;
        bool fresh_turn = true;
    };
    struct Slot {
        std::uint64_t id;
        core::Nanos start;
    };

    static Ticket step(State& state);
    /// Start times of every waiting ticket (plus a provisional one), in service order.
    std::vector<Slot> schedule(core::Nanos now, std::string_view extra_tenant = {}, double extra_cost = -1) const;
    core::Nanos interval(double cost) const;
    void push(State& state, std::string_view tenant, Ticket t) const;
    void wake_head(core::Nanos now);

    double capacity_;
    double rate_per_s_;
    core::Nanos max_wait_;
    bool by_cost_;
    bool fair_;
    State state_;
    std::size_t waiting_ = 0;
    core::Nanos next_free_ = 0;
    std::uint64_t next_id_ = 1;
    std::unordered_map<std::uint64_t, std::function<void()>> wakers_;
};

}  // namespace tokengate::limiter
