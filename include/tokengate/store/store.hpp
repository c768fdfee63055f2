#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <span>

#include "tokengate/core/clock.hpp"
#include "tokengate/limiter/decision.hpp"
#include "tokengate/limiter/quota.hpp"
#include "tokengate/limiter/shape_queue.hpp"
#include "tokengate/store/snapshot.hpp"

namespace tokengate::store {

namespace net = boost::asio;

/// The gateway's one seam to whichever store keeps the buckets: the memory store answers at
/// once, Redis after a round trip, so both answer through an awaitable. Everything goes through
/// it — decisions, settlement, queue turns, the snapshot the state file and the admin read —
/// and a decision says which of a store's keepers took its charges (`Decision::keeper`).
class Store {
public:
    virtual ~Store() = default;
    /// Every limit at once, all or nothing (SPEC §3); never throws.
    virtual net::awaitable<limiter::Decision> decide(std::span<const limiter::Charge> charges) = 0;
    /// What decide() would say, changing nothing (admin, explain).
    virtual net::awaitable<limiter::Decision> peek(std::span<const limiter::Charge> charges) = 0;
    /// Settles what `decision` took, once: releases its concurrency slots and moves every
    /// charge counting cost, tokens or usd from what was reserved to what was `actual`ly used.
    virtual void settle(const limiter::Decision& decision, std::span<const limiter::Charge> charged,
                        const config::Amounts& actual) = 0;
    /// Admin (SPEC §14): tops up a quota's current window by `add` (0: not at all) and/or
    /// `reset`s it, and says where it stands then; nothing when the store cannot answer.
    virtual net::awaitable<std::optional<limiter::QuotaState>> quota(const limiter::Charge& charge, double add,
                                                                     bool reset) = 0;
    /// Waits up to `limit` for the store to be able to answer; false if it still cannot.
    virtual net::awaitable<bool> wait_ready(std::chrono::nanoseconds limit) = 0;
    /// Whether requests are being refused for want of the store (a shared store that is
    /// down under `on_error: fail_closed`): /readyz sends traffic elsewhere.
    virtual bool refusing() const { return false; }
    /// Requests waiting in each shaping queue kept in this process, by bucket key (the gauge).
    virtual std::vector<std::pair<std::string, std::size_t>> queue_depths() const = 0;
    /// Drops the buckets kept in this process that are full again and hold nothing.
    virtual std::size_t evict_idle() = 0;
    /// Drops these buckets (an end user pushed out of its tenant's bound, SPEC §21), unless one
    /// holds a request; a shared store's keys expire by themselves.
    virtual void forget(std::span<const std::string> /*keys*/) {}
    /// The levels kept in this process, for store.state_file, and back (each bucket refilled by
    /// `downtime`; what is full by now is left out): how many came back.
    virtual Snapshot save() const = 0;
    virtual std::size_t restore(const Snapshot& saved, core::Nanos downtime) = 0;
    /// Settlements not yet acknowledged by the store (a drain waits for them).
    virtual std::size_t settlements_outstanding() const { return 0; }
    /// Shutdown, no request left: gives back what this replica holds of shared limits (a shared
    /// store's leases, SPEC §18), through the settlements a drain waits for.
    virtual void release_leases() {}
    /// Closes the store's connections; the event loops have stopped.
    virtual void stop() {}

    /// Shaping: a request `decision` queued asks whether its `ticket` in `charge`'s queue may
    /// start (ShapeQueue::try_start), or gives the place back. Queues in this process answer at
    /// once; a shared store's ranked queues, after a round trip.
    virtual net::awaitable<limiter::ShapeQueue::StartCheck> queue_turn(const limiter::Decision& decision,
                                                                       const limiter::Charge& charge,
                                                                       std::uint64_t ticket) = 0;
    virtual net::awaitable<void> queue_leave(const limiter::Decision& decision, const limiter::Charge& charge,
                                             std::uint64_t ticket) = 0;
    /// `wake` is called (from any thread; it must only schedule) when the ticket should ask
    /// again; a queue that cannot call (a shared store's) is asked at its estimate instead.
    virtual void queue_set_waker(const limiter::Decision& decision, const limiter::Charge& charge, std::uint64_t ticket,
                                 std::function<void()> wake) = 0;
};

/// What waiting for a queue turn needs from the request: whether its client left, and where
/// to put the function that wakes the wait when it does.
struct TurnWatch {
    const bool& client_gone;
    std::function<void()>& on_client_gone;
    /// Called once per queue the request waited in, with the time it waited.
    std::function<void(const limiter::Charge&, core::Nanos waited)> waited;
};

/// How waiting for queue turns ended.
struct TurnResult {
    enum class Outcome { started, client_gone, displaced } outcome = Outcome::started;
    const limiter::Charge* displaced_from = nullptr;  // displaced: the queue that gave its place away
    bool started() const { return outcome == Outcome::started; }
};

/// Shaping (SPEC §4): waits until every queue the request was admitted to lets it start —
/// a shared store's start time, or a local queue's ticket. Unless every queue started it (the
/// client went away, or a queue gave its place to higher-priority traffic, SPEC §13), its
/// places in the others are given back.
net::awaitable<TurnResult> wait_for_turn(Store& store, const core::Clock& clock,
                                         std::span<const limiter::Charge> charges, const limiter::Decision& decision,
                                         TurnWatch watch);

}  // namespace tokengate::store
