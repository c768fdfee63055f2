#include "tokengate/store/local_store.hpp"

namespace tokengate::store {

net::awaitable<limiter::Decision> LocalStore::decide(std::span<const limiter::Charge> charges) {
    co_return memory_.decide(charges);
}

net::awaitable<limiter::Decision> LocalStore::peek(std::span<const limiter::Charge> charges) {
    co_return memory_.peek(charges);
}

net::awaitable<std::optional<limiter::QuotaState>> LocalStore::quota(const limiter::Charge& charge, double add,
                                                                     bool reset) {
    co_return memory_.quota_admin(charge, add, reset);
}

net::awaitable<bool> LocalStore::wait_ready(std::chrono::nanoseconds) { co_return true; }

void LocalStore::settle(const limiter::Decision& decision, std::span<const limiter::Charge> charged,
                        const config::Amounts& actual) {
    if (decision.keeper == limiter::Keeper::memory) memory_.settle(charged, actual, decision.lease);
}

net::awaitable<limiter::ShapeQueue::StartCheck> LocalStore::queue_turn(const limiter::Decision& decision,
                                                                       const limiter::Charge& charge,
                                                                       std::uint64_t ticket) {
    co_return in_memory::queue_turn(memory_, decision, charge, ticket);
}

net::awaitable<void> LocalStore::queue_leave(const limiter::Decision& decision, const limiter::Charge& charge,
                                             std::uint64_t ticket) {
    in_memory::queue_leave(memory_, decision, charge, ticket);
    co_return;
}

void LocalStore::queue_set_waker(const limiter::Decision& decision, const limiter::Charge& charge, std::uint64_t ticket,
                                 std::function<void()> wake) {
    in_memory::queue_set_waker(memory_, decision, charge, ticket, std::move(wake));
}

namespace in_memory {

limiter::ShapeQueue::StartCheck queue_turn(MemoryStore& memory, const limiter::Decision& decision,
                                           const limiter::Charge& charge, std::uint64_t ticket) {
    // Not kept here: nothing to ask, the request was admitted and starts.
    if (decision.keeper != limiter::Keeper::memory) return {false, true, 0};
    return memory.queue_try_start(charge, ticket);
}

void queue_leave(MemoryStore& memory, const limiter::Decision& decision, const limiter::Charge& charge,
                 std::uint64_t ticket) {
    if (decision.keeper == limiter::Keeper::memory) memory.queue_cancel(charge, ticket);
}

void queue_set_waker(MemoryStore& memory, const limiter::Decision& decision, const limiter::Charge& charge,
                     std::uint64_t ticket, std::function<void()> wake) {
    if (decision.keeper == limiter::Keeper::memory) memory.queue_set_waker(charge, ticket, std::move(wake));
}

}  // namespace in_memory

}  // namespace tokengate::store
