// The request pipeline's stages, each on its own, with a ManualClock and no sockets: admit,
// limit (decide, permit, queue turn), record. The exchange stage runs over real loopback
// sockets in exchange_test.cpp.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <sstream>

#include "config_text.hpp"
#include "server/pipeline/admit.hpp"
#include "server/pipeline/estimate.hpp"
#include "server/pipeline/limit.hpp"
#include "server/pipeline/record.hpp"
#include "server/services.hpp"
#include "tokengate/config/loader.hpp"
#include "tokengate/store/local_store.hpp"

namespace tokengate::server::pipeline {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

const std::string k_config = testing::config_text(
    "      - { name: requests, algorithm: token_bucket, capacity: 2, rate: 1/s }\n"
    "      - { name: tokens, algorithm: token_bucket, capacity: 100, rate: 10/s, unit: cost }\n",
    "cost:\n  input: { per: 100, min: 1 }\n  output: { per: 50, min: 1 }\n  default_max_tokens: 100\n");

const std::string k_shaped = testing::config_text(
    "      - { name: requests, algorithm: token_bucket, capacity: 100, rate: 100/s }\n",
    "global_limits:\n  - { name: gpu, algorithm: leaky_bucket, mode: shape, capacity: 2, rate: 1/s, max_wait: 10s }\n");

const std::string k_body = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";

struct Stages {
    core::ManualClock clock;
    std::ostringstream log_text;
    Services services;
    store::LocalStore store{clock};
    net::io_context ioc;

    explicit Stages(const std::string& config = k_config)
        : services(std::make_shared<const Runtime>(config::load_config_text(config, "test.yaml")),
                   std::make_shared<AccessLog>(std::make_shared<spdlog::sinks::ostream_sink_mt>(log_text)), clock) {}
    const Runtime& runtime() { return *services.runtime.get(); }

    std::variant<Admitted, Rejection> admit(std::string_view key, std::string_view path, std::string_view body,
                                            std::optional<auth::Principal>& who) {
        auto target = proxy::normalize_target(path);
        return pipeline::admit(runtime(), {key, target, "10.0.0.1", body}, services.output_history, who);
    }
    Admitted admitted() {
        std::optional<auth::Principal> who;
        auto a = admit("k1", "/v1/chat/completions", k_body, who);
        return std::get<Admitted>(std::move(a));
    }
    template <class T>
    static net::awaitable<void> into(std::optional<T>& out, net::awaitable<T> work) {
        out.emplace(co_await std::move(work));
    }
    template <class T>
    T run(net::awaitable<T> work) {
        std::optional<T> out;
        net::co_spawn(ioc, into(out, std::move(work)), [](std::exception_ptr e) {
            if (e) std::rethrow_exception(e);
        });
        ioc.restart();
        ioc.run();
        return std::move(*out);
    }
    std::variant<Permit, Rejection> limit(Admitted& a) {
        return run(pipeline::limit(store, a, runtime().config->cost, "acme", services.metrics, clock,
                                   services.answers_in_flight));
    }
    std::string metric(std::string_view series) {
        auto text = services.registry.render();
        auto at = text.find(series);
        if (at == std::string::npos) return "absent";
        auto end = text.find('\n', at);
        return text.substr(at + series.size() + 1, end - at - series.size() - 1);
    }
};

TEST(AdmitStage, RefusesEachWayWithItsStatusAndCode) {
    Stages s;
    std::optional<auth::Principal> who;
    auto code = [&](std::string_view key, std::string_view path, std::string_view body) {
        who.reset();
        auto a = s.admit(key, path, body, who);
        auto* no = std::get_if<Rejection>(&a);
        return no ? std::to_string(static_cast<int>(no->status)) + " " + no->code : std::string("admitted");
    };
    EXPECT_EQ(code("k1", "/v1/%2F/chat", k_body), "400 invalid_path");
    EXPECT_EQ(code("", "/v1/chat/completions", k_body), "401 invalid_api_key");
    EXPECT_FALSE(who);
    EXPECT_EQ(code("nope", "/v1/chat/completions", k_body), "401 invalid_api_key");
    EXPECT_EQ(code("k1", "/v1/chat/completions", "{not json"), "400 invalid_json");
    ASSERT_TRUE(who) << "known before the body failed, so the refusal is logged under its tenant";
    EXPECT_EQ(who->tenant->id, "acme");
    EXPECT_EQ(code("k1", "/v1/chat/completions", R"({"model":"m","messages":"x"})"), "400 invalid_body");
    EXPECT_EQ(code("k1", "/v1/embeddings", k_body), "404 not_found");
    EXPECT_EQ(code("k1", "/v1/chat/completions", k_body), "admitted");
}

TEST(AdmitStage, PricesTheBodyAndListsEveryCharge) {
    Stages s;
    auto a = s.admitted();
    EXPECT_EQ(a.summary.model, "m");
    EXPECT_EQ(a.summary.max_output_tokens, 100u);
    EXPECT_DOUBLE_EQ(a.reserved.cost, 1 + 2) << "input: min 1; output: 100 / 50";
    ASSERT_EQ(a.charges.size(), 2u);
    EXPECT_EQ(a.charges[0].key, "tenant:requests:acme");
    EXPECT_DOUBLE_EQ(a.charges[0].amount, 1);
    EXPECT_DOUBLE_EQ(a.charges[1].amount, a.reserved.cost);
}

TEST(EstimateStage, LearnsWhatATenantReallyGeneratesAndReservesThat) {
    Stages s(testing::config_text(
        "      - { name: tokens, algorithm: token_bucket, capacity: 100000, rate: 10/s, unit: cost }\n",
        "cost:\n  input: { per: 1, min: 1 }\n  output: { per: 1, min: 1 }\n"
        "  output_estimate: learned\n  learned: { window: 10, quantile: 0.9, min_samples: 3 }\n"));
    const std::string body = R"({"model":"m","max_tokens":2000,"messages":[{"role":"user","content":"hi"}]})";
    auto admit = [&] {
        std::optional<auth::Principal> who;
        return std::get<Admitted>(s.admit("k1", "/v1/chat/completions", body, who));
    };
    const auto& cost = s.runtime().config->cost;
    auto settle = [&](const Admitted& a, std::uint64_t completion, unsigned status = 200, bool reported = true) {
        cost::SettledCost settled;
        settled.completion_tokens = completion;
        settled.usage_reported = reported;
        learn(cost, s.services.output_history, "acme", a.summary, status, settled);
    };
    auto a = admit();
    EXPECT_FALSE(a.output.learned);
    EXPECT_EQ(a.output.tokens, 2000u);
    EXPECT_NE(describe(a.output, cost).find("0 of the 3 settlements needed"), std::string::npos)
        << describe(a.output, cost);
    settle(a, 40);
    settle(a, 40, 500);         // an error teaches nothing
    settle(a, 40, 200, false);  // nor an estimate of the gateway's own
    settle(a, 38);
    EXPECT_FALSE(admit().output.learned) << "two samples of three";
    settle(a, 41);
    a = admit();
    ASSERT_TRUE(a.output.learned) << describe(a.output, cost);
    EXPECT_GE(a.output.tokens, 41u);
    EXPECT_LE(a.output.tokens, 43u) << "one byte a sample: at most 4.4% over";
    EXPECT_LT(a.reserved.cost, 100) << "the pre-charge holds the learned output, not 2000";
    EXPECT_NE(describe(a.output, cost).find("learned: the p90 of the last 3 settlements"), std::string::npos)
        << describe(a.output, cost);
    // The tenant starts to generate ten times more: settlement charges it, and the estimate
    // follows within the window.
    for (int i = 0; i < 10; ++i) settle(a, 400);
    EXPECT_GE(admit().output.tokens, 400u);
    // Never above what the request declares.
    for (int i = 0; i < 10; ++i) settle(a, 5000);
    EXPECT_EQ(admit().output.tokens, 2000u);
    EXPECT_FALSE(admit().output.learned);
}

TEST(CapStage, LowersTheOutputToFitTheBudgetInsteadOfRefusing) {
    Stages s(testing::config_text(
        "      - { name: requests, algorithm: token_bucket, capacity: 3, rate: 1/s }\n"
        "      - { name: tokens, algorithm: token_bucket, capacity: 1000, rate: 1/s, unit: cost }\n",
        "cost:\n  input: { per: 1, min: 1 }\n  output: { per: 1, min: 1 }\n  stream_surcharge: 0\n"
        "  cap_output: true\n  min_output: 16\n"));
    std::optional<auth::Principal> who;
    auto ask = [&](std::uint64_t max_tokens) {
        auto body = R"({"model":"m","max_tokens":)" + std::to_string(max_tokens) +
                    R"(,"messages":[{"role":"user","content":"hi"}]})";
        return std::get<Admitted>(s.admit("k1", "/v1/chat/completions", body, who));
    };
    auto a = ask(5000);  // input: 4 + 1 + 3 = 8 tokens
    auto first = s.limit(a);
    ASSERT_TRUE(std::holds_alternative<Permit>(first)) << "capped, not refused";
    EXPECT_TRUE(a.output.capped);
    EXPECT_EQ(a.output.per_sequence, 1000u - 9) << "input + output = the whole bucket";
    EXPECT_DOUBLE_EQ(a.reserved.cost, 1000);
    auto headers = std::get<Permit>(first).headers();
    auto capped = std::find_if(headers.begin(), headers.end(),
                               [](const auto& h) { return h.name == "x-tokengate-output-capped"; });
    ASSERT_NE(capped, headers.end());
    EXPECT_EQ(capped->value, "991");
    std::get<Permit>(first).settle(config::Amounts{1000});
    s.clock.advance(20s);  // 20 units back: 8 of input and 12 of output would fit, under min_output
    auto b = ask(5000);
    auto second = s.limit(b);
    ASSERT_TRUE(std::holds_alternative<Rejection>(second));
    EXPECT_EQ(std::get<Rejection>(second).status, http::status::too_many_requests) << "a 429 still";
    s.clock.advance(10s);
    auto c = ask(5000);
    ASSERT_TRUE(std::holds_alternative<Permit>(s.limit(c)));
    EXPECT_EQ(c.output.per_sequence, 30u - 9);
    EXPECT_EQ(s.metric("tokengate_output_capped_total{tenant=\"acme\"}"), "2");
    // A requests limit that refuses is not a budget: no cap helps.
    s.clock.advance(1000s);
    for (int i = 0; i < 3; ++i) {
        auto d = ask(10);
        ASSERT_TRUE(std::holds_alternative<Permit>(s.limit(d)));
    }
    auto e = ask(5000);
    ASSERT_TRUE(std::holds_alternative<Rejection>(s.limit(e)));
    EXPECT_FALSE(e.output.capped);
}

TEST(LimitStage, AdmitsThenRefusesWithHeadersThenAdmitsOnceTimeHasPassed) {
    Stages s;
    auto a = s.admitted();
    auto first = s.limit(a);
    ASSERT_TRUE(std::holds_alternative<Permit>(first));
    auto second = s.limit(a);
    ASSERT_TRUE(std::holds_alternative<Permit>(second));
    auto third = s.limit(a);
    ASSERT_TRUE(std::holds_alternative<Rejection>(third));
    const auto& no = std::get<Rejection>(third);
    EXPECT_EQ(no.status, http::status::too_many_requests);
    EXPECT_EQ(no.code, "rate_limit_exceeded");
    EXPECT_EQ(no.level, "tenant");
    EXPECT_EQ(no.limit, "requests");
    auto retry =
        std::find_if(no.headers.begin(), no.headers.end(), [](const auto& h) { return h.name == "Retry-After"; });
    ASSERT_NE(retry, no.headers.end());
    EXPECT_EQ(retry->value, "1");
    s.clock.advance(1s);
    EXPECT_TRUE(std::holds_alternative<Permit>(s.limit(a)));
}

TEST(LimitStage, APermitSettlesOnceAndARefundComesBack) {
    Stages s;
    auto a = s.admitted();
    {
        auto limited = s.limit(a);
        auto& permit = std::get<Permit>(limited);
        EXPECT_FALSE(permit.settled());
        permit.settle(config::Amounts{0});   // nothing generated: the whole reservation back
        permit.settle(config::Amounts{50});  // a second settlement changes nothing
        EXPECT_TRUE(permit.settled());
    }
    EXPECT_EQ(s.metric("tokengate_settled_total{tenant=\"acme\"}"), "1");
    auto peek = s.run(pipeline::preview(s.store, a.charges));
    // (peek says what a request would leave: the full bucket less one reservation.)
    EXPECT_DOUBLE_EQ(peek.statuses[1].verdict.remaining, 100 - a.reserved.cost) << "the refund of settle(0), not 50";
    {
        auto limited = s.limit(a);  // dropped unsettled: keeps its reservation, counted once
    }
    EXPECT_EQ(s.metric("tokengate_settled_total{tenant=\"acme\"}"), "2");
    peek = s.run(pipeline::preview(s.store, a.charges));
    EXPECT_DOUBLE_EQ(peek.statuses[1].verdict.remaining, 100 - 2 * a.reserved.cost);
}

/// SPEC §17: a learned reservation of 1 token, a bound of 500 written upstream, a budget of 2,000.
const std::string k_learned_answers = testing::config_text(
    "      - { name: tokens, algorithm: token_bucket, capacity: 2000, rate: 1/s, unit: cost }\n",
    "cost:\n  input: { per: 1, min: 1 }\n  output: { per: 1, min: 1 }\n  stream_surcharge: 0\n"
    "  default_max_tokens: 500\n  output_estimate: learned\n  stop_at_budget: true\n  min_output: 16\n"
    "  learned: { min_samples: 5 }\n");

struct LearnedAnswers : Stages {
    LearnedAnswers() : Stages(k_learned_answers) {
        for (int i = 0; i < 5; ++i) services.output_history.record("acme", "m", 1, history_settings(cost().learned));
    }
    const config::CostConfig& cost() { return runtime().config->cost; }
    Admitted answer(std::string_view body = k_body) {
        std::optional<auth::Principal> who;
        return std::get<Admitted>(admit("k1", "/v1/chat/completions", body, who));
    }
};

TEST(AnswerBound, ParallelAnswersAreBoundedByTheBudgetNotEachByItsOwnBound) {
    LearnedAnswers s;
    const auto bucket = s.answer().charges[0].key;
    std::vector<Permit> permits;
    std::uint64_t bounds = 0;
    int refused = 0;
    for (int i = 0; i < 8; ++i) {
        auto a = s.answer();
        ASSERT_TRUE(a.output.learned);
        ASSERT_EQ(a.output.per_sequence, 1u) << "the learned reservation";
        auto limited = s.limit(a);
        if (auto* no = std::get_if<Rejection>(&limited)) {
            EXPECT_EQ(no->status, http::status::too_many_requests);
            EXPECT_NE(no->message.find("answers in flight"), std::string::npos) << no->message;
            ++refused;
            continue;
        }
        bounds += a.output.bound();
        if (i == 0) {
            EXPECT_EQ(a.output.bound(), 500u) << "the first answer keeps its whole bound";
        }
        permits.push_back(std::move(std::get<Permit>(limited)));
    }
    // What the admitted answers may generate, with their inputs, stays within the budget: the
    // first four take their bound of 500 and the rest is refused, not another 4 x 500.
    EXPECT_LE(bounds, 2000u);
    EXPECT_GE(bounds, 1900u) << "and the budget is used";
    EXPECT_GE(refused, 3);
    EXPECT_GT(s.services.answers_in_flight.of(bucket), 1900.0);
    // An answer that settles gives its hold back: the next one gets a bound again.
    for (auto& p : permits) p.settle(config::Amounts{10, 10, 0});
    EXPECT_EQ(s.services.answers_in_flight.of(bucket), 0.0);
    auto next = s.answer();
    ASSERT_TRUE(std::holds_alternative<Permit>(s.limit(next)));
    EXPECT_EQ(next.output.bound(), 500u);
}

TEST(AnswerBound, AnAnswerGetsTheRoomLeftAsALowerBoundAndSaysSo) {
    LearnedAnswers s;
    auto first = s.answer();
    // 1,700 of the 2,000 are spent first (by a stream, which holds nothing): the next answer can take 300 - its input,
    // not 500.
    auto big = s.answer(R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]})");
    big.charges[0].amount = 1700;
    auto spent = s.limit(big);
    ASSERT_TRUE(std::holds_alternative<Permit>(spent));
    std::get<Permit>(spent).settle(config::Amounts{1700, 1700, 0});
    auto limited = s.limit(first);
    ASSERT_TRUE(std::holds_alternative<Permit>(limited));
    auto input = first.summary.input_tokens;
    EXPECT_EQ(first.output.lowered, 300 - input) << "the room left";
    bool said = false;
    for (const auto& h : std::get<Permit>(limited).headers())
        if (h.name == "x-tokengate-output-capped") {
            said = h.value == std::to_string(300 - input);
        }
    EXPECT_TRUE(said);
    EXPECT_EQ(s.metric("tokengate_output_capped_total{tenant=\"acme\"}"), "1");
}

TEST(AnswerBound, ARequestWhoseChargeEatsIntoTheHoldsIsRefusedAndGivenItBack) {
    LearnedAnswers s;
    const auto bucket = s.answer().charges[0].key;
    std::vector<Permit> held;
    for (int i = 0; i < 3; ++i) {  // three answers hold 3 x 499 of the 2,000
        auto a = s.answer();
        held.push_back(std::move(std::get<Permit>(s.limit(a))));
    }
    // A request for a model with no history reserves its max_tokens of 600 in full: the bucket has room
    // for it, but not beside what the three answers may still take.
    auto declared = s.answer(R"({"model":"m2","max_tokens":600,"messages":[{"role":"user","content":"hi"}]})");
    ASSERT_FALSE(declared.output.learned);
    auto before = s.run(pipeline::preview(s.store, declared.charges)).statuses[0].verdict.remaining;
    auto limited = s.limit(declared);
    ASSERT_TRUE(std::holds_alternative<Rejection>(limited));
    EXPECT_EQ(std::get<Rejection>(limited).status, http::status::too_many_requests);
    auto after = s.run(pipeline::preview(s.store, declared.charges)).statuses[0].verdict.remaining;
    EXPECT_DOUBLE_EQ(after, before) << "its charge given back";
    EXPECT_EQ(s.metric("tokengate_settled_total{tenant=\"acme\"}"), "absent") << "never admitted, never settled";
    EXPECT_EQ(s.services.answers_in_flight.of(bucket), 3 * 499.0);
}

TEST(AnswerBound, AStreamHoldsNothingForItPaysAsItGoes) {
    LearnedAnswers s;
    const auto bucket = s.answer().charges[0].key;
    auto stream = s.answer(R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]})");
    auto limited = s.limit(stream);
    ASSERT_TRUE(std::holds_alternative<Permit>(limited));
    EXPECT_EQ(stream.output.bound(), 500u);
    EXPECT_EQ(s.services.answers_in_flight.of(bucket), 0.0) << "a stream pays as it goes";
}

/// A shared store that is down under fail_closed, through the same seam: it takes nothing, so
/// there is nothing to settle, queue or save.
class DownStore final : public store::Store {
public:
    net::awaitable<limiter::Decision> decide(std::span<const limiter::Charge>) override {
        limiter::Decision d;
        d.allowed = false;
        d.unavailable = true;
        co_return d;
    }
    net::awaitable<limiter::Decision> peek(std::span<const limiter::Charge> c) override { return decide(c); }
    void settle(const limiter::Decision&, std::span<const limiter::Charge>, const config::Amounts&) override {}
    net::awaitable<std::optional<limiter::QuotaState>> quota(const limiter::Charge&, double, bool) override {
        co_return std::nullopt;
    }
    net::awaitable<bool> wait_ready(std::chrono::nanoseconds) override { co_return false; }
    bool refusing() const override { return true; }
    std::vector<std::pair<std::string, std::size_t>> queue_depths() const override { return {}; }
    std::size_t evict_idle() override { return 0; }
    store::Snapshot save() const override { return {}; }
    std::size_t restore(const store::Snapshot&, core::Nanos) override { return 0; }
    net::awaitable<limiter::ShapeQueue::StartCheck> queue_turn(const limiter::Decision&, const limiter::Charge&,
                                                               std::uint64_t) override {
        co_return limiter::ShapeQueue::StartCheck{false, true, 0};
    }
    net::awaitable<void> queue_leave(const limiter::Decision&, const limiter::Charge&, std::uint64_t) override {
        co_return;
    }
    void queue_set_waker(const limiter::Decision&, const limiter::Charge&, std::uint64_t,
                         std::function<void()>) override {}
};

TEST(LimitStage, AStoreThatIsDownIsA503WithRetryAfter) {
    Stages s;
    DownStore down;
    auto admitted = s.admitted();
    auto refused = s.run(pipeline::limit(down, admitted, s.runtime().config->cost, "acme", s.services.metrics, s.clock,
                                         s.services.answers_in_flight));
    ASSERT_TRUE(std::holds_alternative<Rejection>(refused));
    const auto& no = std::get<Rejection>(refused);
    EXPECT_EQ(no.status, http::status::service_unavailable);
    EXPECT_EQ(no.code, "rate_limiter_unavailable");
    ASSERT_EQ(no.headers.size(), 1u);
    EXPECT_EQ(no.headers[0].value, "1");
    EXPECT_EQ(s.metric("tokengate_admitted_total{tenant=\"acme\"}"), "absent");
}

TEST(LimitStage, AQueuedRequestStartsWhenTheClockReachesItsTurn) {
    Stages s(k_shaped);
    auto a = s.admitted();
    auto first = s.limit(a);
    auto second = s.limit(a);
    auto& starts_now = std::get<Permit>(first);
    auto& waits = std::get<Permit>(second);
    bool gone = false;
    std::function<void()> on_gone;
    int waited = 0;
    store::TurnWatch watch{gone, on_gone, [&](const limiter::Charge&, core::Nanos) { ++waited; }};
    EXPECT_TRUE(s.run(starts_now.wait_turn(s.store, s.clock, a.charges, watch)).started());

    std::optional<bool> started;
    net::co_spawn(s.ioc, waits.wait_turn(s.store, s.clock, a.charges, watch),
                  [&](std::exception_ptr, store::TurnResult turn) { started = turn.started(); });
    // The loop runs until the wait sleeps, and sleeps until the clock rings: no pumping.
    s.ioc.restart();
    s.ioc.poll();
    EXPECT_FALSE(started) << "its slot is a second away on the clock";
    s.clock.advance(999ms);
    s.ioc.poll();
    EXPECT_FALSE(started) << "not a moment early";
    s.clock.advance(1ms);
    s.ioc.poll();
    ASSERT_TRUE(started);
    EXPECT_TRUE(*started);
    EXPECT_GE(waited, 1);
}

TEST(LimitStage, AClientThatLeavesTheQueueGetsEverythingBack) {
    Stages s(k_shaped);
    auto a = s.admitted();
    auto first = s.limit(a);
    auto second = s.limit(a);
    bool gone = false;
    std::function<void()> on_gone;
    store::TurnWatch watch{gone, on_gone, nullptr};
    auto& waits = std::get<Permit>(second);
    std::optional<bool> started;
    net::co_spawn(s.ioc, waits.wait_turn(s.store, s.clock, a.charges, watch),
                  [&](std::exception_ptr, store::TurnResult turn) { started = turn.started(); });
    s.ioc.restart();
    s.ioc.poll();
    ASSERT_FALSE(started);
    ASSERT_TRUE(on_gone) << "the wait left a way to wake it";
    auto depth = [&] {
        std::size_t n = 0;
        for (const auto& [key, waiting] : s.store.queue_depths()) n += waiting;
        return n;
    };
    EXPECT_EQ(depth(), 1u);
    gone = true;
    on_gone();
    s.ioc.poll();
    ASSERT_TRUE(started);
    EXPECT_FALSE(*started);
    EXPECT_TRUE(waits.settled()) << "settled at 0 by the stage itself";
    EXPECT_EQ(depth(), 0u) << "its place in the queue was given back";
}

TEST(RecordStage, WritesOneAccessLineAndCountsTheRequest) {
    Stages s;
    Worker worker(s.services);
    RequestRecord r;
    r.started = s.clock.now();
    r.request_id = "req-1";
    r.tenant = "acme";
    r.route = "/v1/chat/completions";
    r.status = 429;
    r.rejected_level = "tenant";
    r.rejected_limit = "requests";
    r.cost_reserved = 3;
    r.cost_settled = 2;
    r.completion_tokens = 7;
    r.model = "m";
    s.clock.advance(250ms);
    record(r, worker);
    worker.flush_access_log();
    s.services.access_log->flush();
    auto line = json::parse(s.log_text.str());
    EXPECT_EQ(line["request_id"], "req-1");
    EXPECT_EQ(line["status"], 429);
    EXPECT_EQ(line["rejected_by"], "tenant:requests");
    EXPECT_EQ(line["ttfb_ms"], nullptr);
    EXPECT_DOUBLE_EQ(line["duration_ms"].get<double>(), 250);
    EXPECT_EQ(s.metric("tokengate_requests_total{tenant=\"acme\",route=\"/v1/chat/completions\",status=\"429\"}"), "1");
    EXPECT_EQ(s.metric("tokengate_rejections_total{level=\"tenant\",limit=\"requests\",tenant=\"acme\"}"), "1");
    EXPECT_EQ(s.metric("tokengate_cost_settled_total{tenant=\"acme\"}"), "2");
    EXPECT_EQ(s.metric("tokengate_tokens_total{tenant=\"acme\",model=\"m\",kind=\"completion\"}"), "7");
}

}  // namespace
}  // namespace tokengate::server::pipeline
