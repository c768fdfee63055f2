#pragma once

// The store that keeps everything in this process (`store.backend: memory`), and the queue
// turns any store answers from a MemoryStore of its own.

#include "tokengate/store/memory_store.hpp"
#include "tokengate/store/store.hpp"

namespace tokengate::store {

/// Queue turns for a decision whose charges this process's MemoryStore keeps (Keeper::memory);
/// any other answers as a queue that holds nothing: start.
namespace in_memory {
limiter::ShapeQueue::StartCheck queue_turn(MemoryStore& memory, const limiter::Decision& decision,
                                           const limiter::Charge& charge, std::uint64_t ticket);
void queue_leave(MemoryStore& memory, const limiter::Decision& decision, const limiter::Charge& charge,
                 std::uint64_t ticket);
void queue_set_waker(MemoryStore& memory, const limiter::Decision& decision, const limiter::Charge& charge,
                     std::uint64_t ticket, std::function<void()> wake);
}  // namespace in_memory

/// `store.backend: memory`.
class LocalStore final : public Store {
public:
    explicit LocalStore(const core::Clock& clock) : memory_(clock) {}
    net::awaitable<limiter::Decision> decide(std::span<const limiter::Charge> charges) override;
    net::awaitable<limiter::Decision> peek(std::span<const limiter::Charge> charges) override;
    net::awaitable<std::optional<limiter::QuotaState>> quota(const limiter::Charge& charge, double add,
                                                             bool reset) override;
    net::awaitable<bool> wait_ready(std::chrono::nanoseconds) override;
    void settle(const limiter::Decision& decision, std::span<const limiter::Charge> charged,
                const config::Amounts& actual) override;
    std::vector<std::pair<std::string, std::size_t>> queue_depths() const override { return memory_.queue_depths(); }
    std::size_t evict_idle() override { return memory_.evict_idle(); }
    void forget(std::span<const std::string> keys) override { memory_.forget(keys); }
    Snapshot save() const override { return memory_.save(); }
    std::size_t restore(const Snapshot& saved, core::Nanos downtime) override {
        return memory_.restore(saved, downtime);
    }
    net::awaitable<limiter::ShapeQueue::StartCheck> queue_turn(const limiter::Decision& decision,
                                                               const limiter::Charge& charge,
                                                               std::uint64_t ticket) override;
    net::awaitable<void> queue_leave(const limiter::Decision& decision, const limiter::Charge& charge,
                                     std::uint64_t ticket) override;
    void queue_set_waker(const limiter::Decision& decision, const limiter::Charge& charge, std::uint64_t ticket,
                         std::function<void()> wake) override;

private:
    MemoryStore memory_;
};

}  // namespace tokengate::store
