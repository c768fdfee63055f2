#include "sequence.hpp"

#include "subjects.hpp"

#include "../services.hpp"
#include "count_tokens.hpp"
#include "shed.hpp"

namespace tokengate::server::pipeline {

namespace {

Outcome refuse(RequestRecord& rec, Rejection no, bool keep_alive = true) {
    rec.status = static_cast<unsigned>(no.status);
    rec.rejected_level = no.level;
    rec.rejected_limit = no.limit;
    return {std::move(no), keep_alive, {}};
}

}  // namespace

void record_admission(const Runtime& runtime, const Admitted& admitted, RequestRecord& rec) {
    const auto& summary = admitted.summary;
    rec.model = summary.model;
    rec.route = runtime.config->routes[admitted.route].path;
    rec.cost = admitted.reserved.cost;
    rec.input_tokens = summary.input_tokens;
    rec.output_declared = summary.output_per_sequence;
    rec.sequences = summary.sequences;
    rec.stream = summary.stream;
}

net::awaitable<Outcome> proceed(const StageServices& s, const Runtime& runtime, Admitted& admitted, RequestRecord& rec,
                                Ends& ends) {
    const auto& cost = runtime.config->cost;
    if (auto counted = answer_locally(admitted)) {
        rec.cost = 0;  // nothing is charged, in any unit
        rec.status = 200;
        co_return Outcome{{}, true, std::move(*counted)};
    }
    auto load = read_load(runtime, admitted.route, s.clock.now());
    rec.load_queue = load.least_queue();
    rec.load_kv_cache = load.least_kv_cache();
    auto overloaded = shed(*runtime.config, admitted, load);
    if (auto* no = std::get_if<Rejection>(&overloaded)) co_return refuse(rec, std::move(*no));

    keep_subject(s, runtime, admitted);
    auto limited = co_await limit(s.store, admitted, cost, rec.tenant, s.metrics, s.clock, s.answers_in_flight, &ends);
    if (auto* no = std::get_if<Rejection>(&limited)) co_return refuse(rec, std::move(*no));
    auto& permit = std::get<Permit>(limited);
    rec.cost_reserved = admitted.reserved.cost;
    if (admitted.output.bound_lowered()) rec.output_bound = admitted.output.bound();

    ends.admitted();
    if (permit.decision().must_wait()) {
        auto turn = co_await permit.wait_turn(s.store, s.clock, admitted.charges, ends.turn_watch());
        if (!turn.started()) co_await ends.not_started();
        if (turn.displaced_from) co_return refuse(rec, displaced(*turn.displaced_from));
        if (!turn.started()) {
            rec.status = 499;
            co_return Outcome{{}, false, {}};
        }
    }

    LiveBudget live(cost, admitted, permit.decision(), s.answers_in_flight);
    auto done = co_await ends.exchange(admitted, permit, live.active() ? &live : nullptr);
    co_await ends.exchanged();
    if (done.stopped) s.metrics.streams_stopped.add({rec.tenant});
    permit.held_more(live.charges(), live.charged());
    permit.settle(cost::settled_amounts(done.settled, admitted.reserved, admitted.price));
    learn(cost, s.output_history, rec.tenant, admitted.summary, done.status, done.settled);
    rec.upstream = done.upstream;
    rec.first_byte = done.first_byte;
    rec.cost_settled = done.settled.cost;
    rec.prompt_tokens = done.settled.prompt_tokens;
    rec.completion_tokens = done.settled.completion_tokens;
    rec.cached_tokens = done.settled.cached_tokens;
    rec.stopped = done.stopped;
    if (done.rejection) co_return refuse(rec, std::move(*done.rejection), done.keep_alive);
    rec.status = done.status;
    co_return Outcome{{}, done.keep_alive, {}};
}

}  // namespace tokengate::server::pipeline
