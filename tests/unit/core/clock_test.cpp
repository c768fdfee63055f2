// The timer factory beside the clock: alarms ring when the clock reaches them, on a manual
// clock when a test moves it, on the steady clock from its own thread.
#include "tokengate/core/clock.hpp"

#include <gtest/gtest.h>

#include <future>
#include <string>

namespace tokengate::core {
namespace {

using namespace std::chrono_literals;

TEST(ManualClock, AlarmsRingInDeadlineOrderWhenTheClockReachesThem) {
    ManualClock clock;
    std::string rang;
    auto b = clock.alarm(clock.now() + 2 * k_nanos_per_second, [&] { rang += "b"; });
    auto a = clock.alarm(clock.now() + k_nanos_per_second, [&] { rang += "a"; });
    auto c = clock.alarm(clock.now() + 3 * k_nanos_per_second, [&] { rang += "c"; });
    clock.advance(999ms);
    EXPECT_EQ(rang, "");
    clock.advance(1ms);
    EXPECT_EQ(rang, "a");
    clock.advance(5s);
    EXPECT_EQ(rang, "abc") << "each once, in order";
    clock.advance(5s);
    EXPECT_EQ(rang, "abc");
}

TEST(ManualClock, ADestroyedAlarmNeverRingsAndAPastOneRingsAtOnce) {
    ManualClock clock;
    int rang = 0;
    {
        auto gone = clock.alarm(clock.now() + 1, [&] { ++rang; });
    }
    clock.advance(1s);
    EXPECT_EQ(rang, 0);
    auto past = clock.alarm(clock.now() - 1, [&] { ++rang; });
    EXPECT_EQ(rang, 1);
}

TEST(SteadyClock, AnAlarmRingsFromTheClocksThreadAndACancelledOneDoesNot) {
    SteadyClock clock;
    std::promise<void> rang;
    int cancelled_rang = 0;
    auto cancelled = clock.alarm(clock.now() + 20'000'000, [&] { ++cancelled_rang; });
    auto alarm = clock.alarm(clock.now() + 50'000'000, [&] { rang.set_value(); });
    cancelled.reset();
    EXPECT_EQ(rang.get_future().wait_for(10s), std::future_status::ready);  // a generous bound
    EXPECT_EQ(cancelled_rang, 0);
}

}  // namespace
}  // namespace tokengate::core
