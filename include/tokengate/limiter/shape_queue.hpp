#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokengate/config/config.hpp"
#include "tokengate/limiter/rate_bucket.hpp"

namespace tokengate::limiter {

/// A leaky bucket as a real queue (`mode: shape`): admitted requests start at exactly rate R,
/// in FIFO order, or with `fair: true` round-robin across tenants by deficit round robin (each
/// turn a tenant may start up to the largest waiting cost's worth of requests), FIFO within a
/// tenant. Priority classes come first (SPEC §13): every waiting critical request starts
/// before any standard one, and standard before sheddable; FIFO or fair within a class.
/// `capacity` counts requests waiting; a request that can start at once does not wait. A full
/// queue makes room for a request by displacing the newest waiting request of a lower class;
/// a waiting request whose start moves past `max_wait` from its admission (higher classes
/// came first, or an adaptive rate fell) is displaced too: both are refused then, not held.
/// No I/O: callers pass the time and are woken through the callback they register.
class ShapeQueue {
public:
    explicit ShapeQueue(const config::LimitSpec& spec);

    struct Admission {
        Verdict verdict;              // remaining = free waiting places after this request
        std::uint64_t ticket = 0;     // 0: starts at once; else wait with try_start()
        core::Nanos start_at = 0;     // scheduled start (an estimate under fair queueing or priorities)
        std::uint64_t displaces = 0;  // the lower-class ticket whose place a full queue gives this one
    };
    using Priority = config::Priority;
    /// Would this request be admitted, and when would it start? Changes nothing.
    Admission check(std::string_view tenant, double cost, core::Nanos now,
                    Priority priority = Priority::standard) const;
    /// Admits (a request refused by check() is refused here too).
    Admission admit(std::string_view tenant, double cost, core::Nanos now, Priority priority = Priority::standard);

    struct StartCheck {
        bool started = false;
        bool unknown = false;        // the ticket is not (or no longer) queued
        core::Nanos wait_until = 0;  // not started: sleep until then, or until woken
        bool displaced = false;      // it lost its place (see above): refuse the request
    };
    /// A waiting request asks to start: it starts when it is first in order and its time came.
    StartCheck try_start(std::uint64_t ticket, core::Nanos now);
    /// The request leaves the queue (its client went away); later requests move up.
    void cancel(std::uint64_t ticket);
    /// Called (under the caller's lock: it must only schedule work) when `ticket` should recheck.
    void set_waker(std::uint64_t ticket, std::function<void()> wake);

    std::size_t waiting() const { return waiting_; }
    /// Requests wait on it, or are still to hear that they lost their place.
    bool holds_tickets() const { return waiting_ > 0 || !displaced_.empty(); }
    bool idle(core::Nanos now) const { return !holds_tickets() && next_free_ <= now; }
    void reconfigure(const config::LimitSpec& spec);

private:
    struct Ticket {
        std::uint64_t id;
        double cost;
        core::Nanos deadline = 0;  // the latest start its admission allowed
    };
    struct TenantQueue {
        std::string tenant;
        std::deque<Ticket> tickets;
        double deficit = 0;
    };
    /// One priority class: its tenants in round-robin order (one queue when not fair).
    struct Ring {
        std::vector<TenantQueue> queues;
        std::size_t current = 0;
        bool fresh_turn = true;
    };
    static constexpr std::size_t k_classes = 3;
    struct State {
        std::array<Ring, k_classes> classes;  // indexed by Priority
        bool empty() const;
    };
    struct Slot {
        std::uint64_t id;
        core::Nanos start;
        core::Nanos deadline;
    };

    static Ticket step(State& state);
    static Ticket step(Ring& ring);
    /// Start times of every waiting ticket, in service order: of `state`, plus a provisional
    /// ticket (id 0) when extra_cost >= 0.
    std::vector<Slot> schedule(const State& state, core::Nanos now, std::string_view extra_tenant = {},
                               double extra_cost = -1, Priority extra_priority = Priority::standard) const;
    core::Nanos interval(double cost) const;
    void push(State& state, std::string_view tenant, Priority priority, Ticket t) const;
    /// The newest ticket of the lowest class below `priority`, which a full queue gives up; 0: none.
    std::uint64_t victim_for(Priority priority) const;
    /// Takes a ticket out of `state`; false if it is not there.
    static bool remove(State& state, std::uint64_t ticket);
    /// Takes a ticket out of the queue and tells it, or everyone behind it, to look again.
    void leave(std::uint64_t ticket, bool displaced);
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
    std::unordered_set<std::uint64_t> displaced_;  // until their holders ask (try_start) or leave
};

}  // namespace tokengate::limiter
