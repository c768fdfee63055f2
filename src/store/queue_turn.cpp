#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <functional>
#include <memory>

#include "tokengate/store/store.hpp"

namespace tokengate::store {

namespace {

constexpr auto k_use = net::as_tuple(net::use_awaitable);
constexpr core::Nanos k_min_sleep = 1'000'000;

/// Sleeps until the clock reaches `until` or `wake` runs, whichever is first: the timer never
/// expires by itself, the clock's alarm (or a queue's wake) cancels it. So the wait follows
/// the injected clock, a ManualClock's included.
net::awaitable<void> sleep_until(const core::Clock& clock, net::steady_timer& timer, core::Nanos until,
                                 const std::function<void()>& wake) {
    timer.expires_at(net::steady_timer::time_point::max());
    auto alarm = clock.alarm(until, wake);
    co_await timer.async_wait(k_use);
}
}  // namespace

net::awaitable<TurnResult> wait_for_turn(Store& queues, const core::Clock& clock,
                                         std::span<const limiter::Charge> charges, const limiter::Decision& decision,
                                         TurnWatch watch) {
    bool kept = decision.keeper != limiter::Keeper::none;
    auto decided_at = clock.now();
    auto ex = co_await net::this_coro::executor;
    // Shared with the wakers, which may run (from another thread) after this wait is over.
    auto timer = std::make_shared<net::steady_timer>(ex);
    std::weak_ptr<net::steady_timer> weak = timer;
    auto wake = [ex, weak] {
        net::post(ex, [weak] {
            if (auto t = weak.lock()) t->cancel();
        });
    };
    watch.on_client_gone = wake;
    TurnResult result;
    bool ok = true;
    for (std::size_t i = 0; i < charges.size(); ++i) {
        // A shared store hands out the start time itself: wait for it here. (Where it holds a
        // place instead, the wait is only an estimate: the place is asked about below.)
        auto ticket = decision.statuses[i].ticket;
        if (auto wait = decision.statuses[i].wait; wait > 0 && ok && !ticket) {
            while (!watch.client_gone && clock.now() < decided_at + wait)
                co_await sleep_until(clock, *timer, decided_at + wait, wake);
            if (watch.client_gone) ok = false, result.outcome = TurnResult::Outcome::client_gone;
            else if (watch.waited) watch.waited(charges[i], wait);
        }
        if (!ticket || !kept) continue;
        if (!ok) {
            co_await queues.queue_leave(decision, charges[i], ticket);
            continue;
        }
        queues.queue_set_waker(decision, charges[i], ticket, wake);
        auto queued_at = clock.now();
        for (;;) {
            if (watch.client_gone) {
                co_await queues.queue_leave(decision, charges[i], ticket);
                ok = false;
                result.outcome = TurnResult::Outcome::client_gone;
                break;
            }
            auto check = co_await queues.queue_turn(decision, charges[i], ticket);
            if (check.displaced) {
                ok = false;
                result = {TurnResult::Outcome::displaced, &charges[i]};
                break;
            }
            if (check.started || check.unknown) {
                if (watch.waited) watch.waited(charges[i], clock.now() - queued_at);
                break;
            }
            // Not first yet: sleep until the estimated start, or until the queue wakes us.
            co_await sleep_until(clock, *timer, std::max(check.wait_until, clock.now() + k_min_sleep), wake);
        }
    }
    watch.on_client_gone = nullptr;
    co_return result;
}

}  // namespace tokengate::store
