#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokengate/config/config.hpp"

namespace tokengate::cost {

/// What the gateway needs to know about an OpenAI-style request body.
struct RequestSummary {
    std::string model;
    bool stream = false;
    bool client_wants_usage = false;  // stream_options.include_usage was set by the client
    bool has_stream_options = false;
    std::uint64_t input_tokens = 0;  // estimated
    std::uint64_t max_output_tokens = 0;
};

enum class BodyError { none, invalid_json, invalid_body };

struct ParsedBody {
    BodyError error = BodyError::none;
    std::string message;  // for invalid_json / invalid_body
    RequestSummary summary;
};

class BpeTokenizer;

/// Validates and summarises a JSON request body. An empty body is a valid empty request.
/// Input tokens come from `tokenizer` when given, else from the heuristic.
ParsedBody parse_request_body(std::string_view body, const config::CostConfig& cost,
                              const BpeTokenizer* tokenizer = nullptr);

/// The body with `stream_options.include_usage: true` added, so a stream ends with its usage.
std::string with_stream_usage(std::string_view body, bool has_stream_options);

/// Heuristic token count: about one token per CJK character, about four bytes per token else.
std::uint64_t estimate_tokens(std::string_view text);

/// Costs are clamped here: above every limit's capacity, finite for every store.
inline constexpr double k_max_cost = 1e18;

/// The cost formula of SPEC §5, at most k_max_cost.
double request_cost(const config::CostConfig& cost, double cost_factor, std::uint64_t input_tokens,
                    std::uint64_t output_tokens, bool stream);

/// The model's cost_factor: the first matching pattern, else the "*" entry, else 1.0.
double cost_factor(const std::vector<config::ModelCost>& models, std::string_view model);

}  // namespace tokengate::cost
