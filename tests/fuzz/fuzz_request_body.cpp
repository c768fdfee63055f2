// The request-body cost scanner: any bytes a client sends to any endpoint of SPEC §11's
// table are either priced or refused. The first byte picks the path.
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "tokengate/cost/cost.hpp"
#include "tokengate/cost/prompt_prefix.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static constexpr std::array<std::string_view, 12> k_paths = {
        "/v1/chat/completions", "/v1/completions", "/v1/embeddings",   "/v1/rerank",
        "/v1/responses",        "/generate",       "/generate_stream", "/pooling",
        "/somewhere/else",      "/infill",         "/v1/messages",     "/v1/messages/count_tokens"};
    if (size == 0) return 0;
    auto path = k_paths[data[0] % k_paths.size()];
    std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
    tokengate::config::CostConfig cost;
    auto parsed = tokengate::cost::parse_request_body(body, cost, nullptr, path);
    if (parsed.error == tokengate::cost::BodyError::none) {
        auto s = parsed.summary;
        tokengate::config::ModelCost model;
        model.max_output_tokens = 4096;
        tokengate::cost::apply_model_default(s, &model);
        // The product is saturated, never wrapped: sequences × per sequence, or the maximum.
        if (s.sequences && s.max_output_tokens < s.output_per_sequence) __builtin_trap();
        (void)tokengate::cost::request_cost(cost, 3.5, s.input_tokens, s.max_output_tokens, s.stream);
        if (s.stream && s.injects_stream_usage()) (void)tokengate::cost::with_stream_usage(body, s.has_stream_options);
        // SPEC §17: the bound the gateway writes is the one the upstream reads, with no key
        // written twice (a duplicate anywhere is refused, so a priced body has none).
        if (parsed.summary.sequences > 0) {
            auto bounded = tokengate::cost::with_output_limit(body, parsed.summary, 7);
            auto again = tokengate::cost::parse_request_body(bounded, cost, nullptr, path);
            if (again.error != tokengate::cost::BodyError::none || again.summary.output_per_sequence != 7)
                __builtin_trap();
        }
    }
    // The mask counters (AVX2 here, SSE2 elsewhere) count ASCII text as the run-by-run rules
    // do: with one é appended (a token of its own) it is counted run by run.
    auto tokens = tokengate::cost::estimate_tokens(body);
    if (tokens != tokengate::cost::detail::estimate_tokens_without_avx2(body)) __builtin_trap();
    bool ascii = std::all_of(body.begin(), body.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
    if (ascii && tokens + 1 != tokengate::cost::estimate_tokens(std::string(body) + "\xc3\xa9")) __builtin_trap();
    // SPEC §22: the prefix prefix_affinity hashes, read from any body of any shape.
    (void)tokengate::cost::prompt_prefix_hash(body, parsed.summary.endpoint, 1 + data[0] % 300, nullptr);
    return 0;
}
