#include "record.hpp"

#include "../services.hpp"
#include "tokengate/core/json_writer.hpp"

namespace tokengate::server::pipeline {

namespace {

void count(const RequestRecord& r, GatewayMetrics& m) {
    if (!r.rejected_limit.empty()) m.rejections.add({r.rejected_level, r.rejected_limit, r.tenant});
    if (r.cost_reserved > 0) {
        m.series(GatewayMetrics::PerTenant::cost_reserved, r.tenant).add(r.cost_reserved);
        m.series(GatewayMetrics::PerTenant::cost_settled, r.tenant).add(r.cost_settled);
    }
    if (r.prompt_tokens) m.tokens.add({r.tenant, r.model, "prompt"}, static_cast<double>(r.prompt_tokens));
    if (r.completion_tokens) m.tokens.add({r.tenant, r.model, "completion"}, static_cast<double>(r.completion_tokens));
    // Last: whoever sees the request counted (a scrape, a test waiting for N answers) sees
    // everything else about it too.
    m.requests.add({r.tenant, r.route, std::to_string(r.status)});
}

}  // namespace

void record(const RequestRecord& r, Worker& worker) {
    auto& services = worker.services;
    count(r, services.metrics);
    services.activity.request(r.tenant, services.clock.unix_now(), !r.rejected_limit.empty(), r.prompt_tokens,
                              r.completion_tokens);
    if (!services.access_log) return;
    auto now = services.clock.now();
    RequestRecord::Text rejected_by;
    if (!r.rejected_limit.empty()) rejected_by.append(r.rejected_level).append(":").append(r.rejected_limit);
    core::JsonObjectWriter w(worker.next_access_line());
    w.number("ts", static_cast<double>(services.clock.unix_now()) / 1e9)
        .string("request_id", r.request_id)
        .string("client_ip", r.client_ip)
        .string("method", r.method)
        .string("path", r.path)
        .string("tenant", r.tenant)
        .string("key_id", r.key_id)
        .string("model", r.model)
        .string("route", r.route)
        .string("upstream", r.upstream)
        .integer("status", r.status)
        .string("rejected_by", rejected_by)
        .number("cost", r.cost)
        .number("cost_reserved", r.cost_reserved)
        .number("cost_settled", r.cost_settled)
        .integer("prompt_tokens", r.prompt_tokens)
        .integer("completion_tokens", r.completion_tokens);
    if (r.cached_tokens) w.integer("cached_tokens", r.cached_tokens);
    if (!r.subject.empty()) w.string("subject", r.subject);
    if (!r.error.empty()) w.string("error", r.error);
    if (r.first_byte < 0) w.null("ttfb_ms");
    else w.milliseconds("ttfb_ms", r.first_byte - r.started);
    w.milliseconds("duration_ms", now - r.started);
    if (!r.route.empty()) {  // priced: what simulate needs to price the line again
        w.integer("input_tokens", r.input_tokens).integer("output_declared", r.output_declared);
        // Left out when usual (one sequence, no stream): every line's bytes cost every request.
        if (r.sequences != 1) w.integer("sequences", r.sequences);
        if (r.stream) w.boolean("stream", true);
        if (r.output_bound) w.integer("output_bound", r.output_bound);
        if (r.stopped) w.boolean("stopped", true);
    }
    if (r.load_queue) w.number("load_queue", *r.load_queue);
    if (r.load_kv_cache) w.number("load_kv_cache", *r.load_kv_cache);
    w.close();
    worker.access_line_written();
}

}  // namespace tokengate::server::pipeline
