#pragma once

// Stage 4, record: one access-log line (SPEC §9) and the request's metrics, once per request.

#include <cstdint>
#include <optional>
#include <string>

#include "tokengate/core/clock.hpp"
#include "tokengate/core/recycled.hpp"

namespace tokengate::server {
struct Worker;
}

namespace tokengate::server::pipeline {

/// Everything the access log line says about one request. Its texts are in recycled blocks: a
/// request id, a path or a model name is longer than a std::string holds inline (SPEC §19).
struct RequestRecord {
    using Text = core::RecycledString;
    core::Nanos started = 0;
    Text request_id;
    Text client_ip;
    Text method;
    Text path;
    Text tenant;
    Text key_id;
    Text subject;  // the end user, when one is named (SPEC §21): the log's, never a metric's
    Text model;
    Text route;
    Text upstream;
    Text rejected_level;
    Text rejected_limit;
    Text error;  // why a caller was refused at the door (401, 403): for the log
    unsigned status = 0;
    double cost = 0;           // the admission's price, refused or not (simulate replays it)
    double cost_reserved = 0;  // what the limits were charged: 0 when refused
    double cost_settled = 0;
    std::uint64_t prompt_tokens = 0;
    std::uint64_t completion_tokens = 0;
    std::uint64_t cached_tokens = 0;  // of the prompt, as the upstream reported them
    core::Nanos first_byte = -1;
    // What admission priced (simulate prices a replayed line from them again).
    std::uint64_t input_tokens = 0;     // the input estimate
    std::uint64_t output_declared = 0;  // the output each sequence may take, as asked (or the default)
    std::uint64_t sequences = 0;        // 0: the request generates nothing
    bool stream = false;
    std::uint64_t output_bound = 0;  // the bound written upstream when lowered (SPEC §12, §17); 0: not
    bool stopped = false;            // a stream ended at its budget (stop_at_budget)
    std::optional<double> load_queue, load_kv_cache;  // what the shed check read (SPEC §13)
};

/// Counts the request and writes its access line into the worker's batch.
void record(const RequestRecord& r, Worker& worker);

}  // namespace tokengate::server::pipeline
