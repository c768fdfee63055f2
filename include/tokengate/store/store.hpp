#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <span>

#include "tokengate/core/clock.hpp"
#include "tokengate/limiter/decision.hpp"
#include "tokengate/store/memory_store.hpp"

namespace tokengate::store {

namespace net = boost::asio;

/// The gateway's one seam to whichever store keeps the buckets: the memory store answers at
/// once, Redis after a round trip, so both answer through an awaitable. Settlement and queue
/// turns go through the `BucketStore` a `Decision` names (`settle_with`).
class Store {
public:
    virtual ~Store() = default;
    /// Every limit at once, all or nothing (SPEC §3); never throws.
    virtual net::awaitable<limiter::Decision> decide(std::span<const limiter::Charge> charges) = 0;
    /// What decide() would say, changing nothing (admin, explain).
    virtual net::awaitable<limiter::Decision> peek(std::span<const limiter::Charge> charges) = 0;
    /// Admin (SPEC §14): tops up a quota's current window by `add` (0: not at all) and/or
    /// `reset`s it, and says where it stands then; nothing when the store cannot answer.
    virtual net::awaitable<std::optional<limiter::QuotaState>> quota(const limiter::Charge& charge, double add,
                                                                     bool reset) = 0;
    /// Waits up to `limit` for the store to be able to answer; false if it still cannot.
    virtual net::awaitable<bool> wait_ready(std::chrono::nanoseconds limit) = 0;
    /// Whether requests are being refused for want of the store (a shared store that is
    /// down under `on_error: fail_closed`): /readyz sends traffic elsewhere.
    virtual bool refusing() const { return false; }
    /// The buckets and shaping queues kept in this process (the queue-depth gauge, eviction).
    virtual MemoryStore& local() = 0;
    /// Settlements not yet acknowledged by the store (a drain waits for them).
    virtual std::size_t settlements_outstanding() const { return 0; }
    /// Closes the store's connections; the event loops have stopped.
    virtual void stop() {}

    /// Shaping: a request `decision` queued asks whether its `ticket` in `charge`'s queue may
    /// start (ShapeQueue::try_start), or gives the place back. Queues in this process answer at
    /// once, through the decision's BucketStore; a shared store's ranked queues, after a round trip.
    virtual net::awaitable<limiter::ShapeQueue::StartCheck> queue_turn(const limiter::Decision& decision,
                                                                       const limiter::Charge& charge,
                                                                       std::uint64_t ticket);
    virtual net::awaitable<void> queue_leave(const limiter::Decision& decision, const limiter::Charge& charge,
                                             std::uint64_t ticket);
};

/// `store.backend: memory`.
class LocalStore final : public Store {
public:
    explicit LocalStore(const core::Clock& clock) : memory_(clock) {}
    net::awaitable<limiter::Decision> decide(std::span<const limiter::Charge> charges) override;
    net::awaitable<limiter::Decision> peek(std::span<const limiter::Charge> charges) override;
    net::awaitable<std::optional<limiter::QuotaState>> quota(const limiter::Charge& charge, double add,
                                                             bool reset) override;
    net::awaitable<bool> wait_ready(std::chrono::nanoseconds) override;
    MemoryStore& local() override { return memory_; }

private:
    MemoryStore memory_;
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
