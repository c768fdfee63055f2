#pragma once

// `tokengate simulate` (SPEC §15): a trace replayed through the gateway's own admission and
// decision code on a virtual clock — no sockets, no sleeping — to see what a config would do.

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "tokengate/config/config.hpp"

namespace tokengate::server {

/// One request of a trace: JSON lines {"t", "key", "path", "client_ip", "body" | "cost",
/// "usage": {"prompt_tokens", "completion_tokens", "cached_tokens"}, "duration_s", "load"}, or tokengate's own access
/// log (a line with "ts" and "request_id"), whose requests are known by key_id and tenant.
struct TraceEntry {
    double t = 0;  // seconds from the trace's start
    std::string key;
    std::string key_id, tenant;    // an access-log line: who sent it (the key itself is never logged)
    std::string subject;           // and its end user, if it named one (SPEC §21)
    int refused_at_admission = 0;  // an access-log line the gateway answered before pricing (401, 400, ...)
    std::string path = "/v1/chat/completions";
    std::string client_ip = "127.0.0.1";
    std::string body;            // the request body as JSON text; empty when `cost` is given
    std::optional<double> cost;  // a cost given directly instead of a body
    std::optional<std::uint64_t> prompt_tokens, completion_tokens;  // what the upstream reported
    std::uint64_t cached_tokens = 0;                                // of the prompt (cost.cached_input_factor)
    double duration_s = 0;                                          // how long the exchange lasted
    // An access-log line's priced request (record_admission), so its price, output bound and live
    // budget are worked out again under the proposed config; absent in older logs (`cost` then).
    std::string model;
    std::optional<std::uint64_t> input_tokens;
    std::uint64_t output_declared = 0, sequences = 0;
    bool stream = false;
    bool stopped = false;  // the gateway ended the stream at its budget: the upstream would have gone on
    /// The route's upstream load at arrival ({"load": {"queue", "kv_cache"}}, or the access log's
    /// load_queue and load_kv_cache): what shedding reads (SPEC §13). None: nobody is shed.
    std::optional<double> load_queue, load_kv_cache;
    std::size_t line = 0;
};

/// A trace line that is not a request: "line N: why".
class TraceError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct TraceStats {
    bool access_log = false;    // the lines were tokengate's access log
    std::size_t reordered = 0;  // lines earlier than the one before them (the trace is sorted, stably)
    std::size_t skipped = 0;    // an access log's other lines: the gateway's messages, on stdout with it
};

/// Reads every line; a trace out of time order is sorted (stable).
std::vector<TraceEntry> read_trace(std::istream& in, TraceStats& stats);

/// What became of one request.
struct SimulatedDecision {
    double t = 0;                    // arrival
    std::string_view tenant;         // into SimulationResult::tenants; empty: the key is unknown
    int status = 200;                // 200 admitted, 429 refused, 503 shed, 401/400/404 as the gateway would answer
    int limit = -1;                  // into SimulationResult::limits: the refusing limit, or the queue waited in
    double wait_s = 0;               // admitted: from arrival to start
    std::uint64_t output_bound = 0;  // the output bound lowered to (cap_output, answers in flight); 0: not
    std::uint64_t completion_tokens = 0;  // what it generated, as settled
    bool stopped = false;                 // a stream ended at its budget (stop_at_budget)
};

struct LimitSummary {
    std::string limit;  // "level:name"
    std::uint64_t admitted = 0, rejected = 0, queued = 0;
    double wait_p50_s = 0, wait_p99_s = 0;
    // For the report's charts, per time bin (SimulationResult::bin_s wide): the limit's level
    // at its last decision in the bin (NaN: none), arrivals, starts (admitted, or released
    // by a shaping queue) and refusals.
    double capacity = 0;
    bool water = false;  // a leaky bucket: the level is its water (capacity - remaining)
    std::vector<double> level;
    std::vector<std::uint32_t> arrivals, started, refused;
};

struct SimulationResult {
    std::shared_ptr<const config::GatewayConfig> config;
    /// Every tenant that sent a request, the config's or not (a JWT's claimed tier): what the
    /// decisions' names point into (a set's elements stay where they are).
    std::unordered_set<std::string> tenants;
    std::vector<SimulatedDecision> decisions;  // in arrival order
    std::vector<LimitSummary> limits;          // in the order they were first met
    std::uint64_t unauthorized = 0, invalid = 0;
    double bin_s = 1;  // the charts' time bins
};

SimulationResult simulate(std::shared_ptr<const config::GatewayConfig> config, const std::vector<TraceEntry>& trace);

/// summary.json, decisions.csv and report.html (one SVG chart pair per limit, as seed 000
/// draws them) into `out_dir`; false with `error` when a file cannot be written.
bool write_simulation(const SimulationResult& result, const std::string& out_dir, std::string& error);

}  // namespace tokengate::server
