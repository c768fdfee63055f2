#include "tokengate/store/store.hpp"

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

}  // namespace tokengate::store
