#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokengate/config/charge.hpp"
#include "tokengate/config/config.hpp"
#include "tokengate/core/recycled.hpp"

namespace tokengate::cost {

/// SPEC §11, §17: what kind of request a body is. The path's last segment decides; on any other
/// path, `messages` is chat, `prompt` completions, `inputs` TGI native. `/generate` with `text`
/// or `input_ids` is SGLang's native API; `/infill` is llama.cpp's. `/messages` is Anthropic's
/// Messages API (SPEC §20), as is, on any other path, a body with `messages` and
/// `anthropic_version` or a `system` array; `/messages/count_tokens` counts one without running it.
enum class Endpoint {
    unknown,
    chat,
    completions,
    embeddings,
    rerank,
    responses,
    tgi,
    sglang,
    infill,
    messages,
    count_tokens
};
const char* to_string(Endpoint endpoint);
/// Anthropic's Messages API: its errors and rate-limit headers are answered in its shape.
inline bool is_anthropic(Endpoint e) { return e == Endpoint::messages || e == Endpoint::count_tokens; }
/// The endpoint a path names by its last segment ("/x/v1/chat/completions", "/generate"), or
/// unknown.
Endpoint endpoint_for_path(std::string_view path);

/// The body field that bounds a request's output: the one it priced, or for a request that
/// names none, the one its endpoint reads (`parameters.max_new_tokens` for TGI,
/// `sampling_params.max_new_tokens` for SGLang; llama.cpp's `n_predict` only when named).
enum class OutputField {
    max_completion_tokens,
    max_tokens,
    max_output_tokens,
    max_new_tokens,
    sampling_max_new_tokens,
    n_predict
};
const char* to_string(OutputField field);

/// What the gateway needs to know about a request body to price it.
struct RequestSummary {
    Endpoint endpoint = Endpoint::unknown;
    std::string model;
    bool stream = false;
    bool client_wants_usage = false;  // stream_options.include_usage was set by the client
    bool has_stream_options = false;
    std::uint64_t input_tokens = 0;  // estimated
    /// The output limit the request names (max_completion_tokens, max_tokens,
    /// max_output_tokens, parameters.max_new_tokens), else the default.
    std::uint64_t output_per_sequence = 0;
    bool output_named = false;        // the body named its limit: no model default replaces it
    bool output_key_present = false;  // the key output_field_written() writes, or its object, is there
    OutputField output_field = OutputField::max_tokens;
    std::uint64_t sequences = 1;          // n, prompts × max(n, best_of), TGI's best_of; 0: no output
    std::uint64_t max_output_tokens = 0;  // sequences × output_per_sequence, saturated
    std::uint64_t images = 0;             // image parts priced (their tokens are in input_tokens)
    std::uint64_t body_bytes = 0;         // the body's size: what bounds a reported prompt (SPEC §17)
    bool input_count_stopped = false;     // counting stopped past the count limit: the input is more

    /// Whether the gateway asks a stream for its usage (chat and completions only: the
    /// Responses API and TGI report it in their final events unasked).
    bool injects_stream_usage() const { return endpoint == Endpoint::chat || endpoint == Endpoint::completions; }
    bool anthropic() const { return is_anthropic(endpoint); }
};

/// The most sequences one request may ask for (`n`, `best_of`): OpenAI's bound for `n`.
inline constexpr std::uint64_t k_max_sequences = 128;

enum class BodyError { none, invalid_json, invalid_body, duplicate_key };

class Tokenizer;
class Tokenizers;

struct ParsedBody {
    BodyError error = BodyError::none;
    std::string message;  // for invalid_json / invalid_body
    RequestSummary summary;
    /// The body's model's settings, when `models` was given and one matched (its default
    /// output is already applied).
    const config::ModelCost* model = nullptr;
    /// What counted the input tokens; null: the heuristic.
    const Tokenizer* tokenizer = nullptr;
    /// The top-level string field `subject_field` named (the end user, SPEC §21); empty: none.
    std::string subject;
};

/// Validates and summarises a JSON request body sent to `path` (SPEC §11's table). An empty
/// body is a valid empty request. Input tokens come from the body's model's tokenizer in
/// `tokenizers` (else its estimator), else from the heuristic. Output without a named limit is
/// `cost.default_max_tokens` per sequence. `models` prices images and other media by the body's model (else SPEC §11's
/// defaults) and gives its default output (apply_model_default).
/// Counting stops once the input passes `count_limit` (SPEC §17; input_count_stopped).
ParsedBody parse_request_body(std::string_view body, const config::CostConfig& cost,
                              const Tokenizers* tokenizers = nullptr, std::string_view path = {},
                              const std::vector<config::ModelCost>* models = nullptr,
                              std::uint64_t count_limit = UINT64_MAX, std::string_view subject_field = {});

/// The body's `model` ("" when it names none), read without pricing anything; nullopt when the
/// body is not a JSON object (parse_request_body says why).
std::optional<std::string> sniff_model(std::string_view body);

/// The body with `stream_options.include_usage: true` added, so a stream ends with its usage.
/// (This and with_output_limit write the body that goes upstream: a recycled string, SPEC §19.)
core::RecycledString with_stream_usage(std::string_view body, bool has_stream_options);

/// The field the output bound is written to: the one the request named, else its endpoint's.
OutputField output_field_written(const RequestSummary& summary);

/// The body with its output field (`summary.output_field`, or the endpoint's when none was named)
/// set to `per_sequence`: SPEC §12's cap_output and §17's output bound. The body was validated by
/// parse_request_body (no key appears twice).
core::RecycledString with_output_limit(std::string_view body, const RequestSummary& summary,
                                       std::uint64_t per_sequence);

/// Heuristic token count: about one token per CJK character, about four bytes per token else.
std::uint64_t estimate_tokens(std::string_view text);
namespace detail {
/// The same count on a machine without AVX2: for tests on one that has it.
std::uint64_t estimate_tokens_without_avx2(std::string_view text);
}  // namespace detail

/// Costs are clamped here: above every limit's capacity, finite for every store.
inline constexpr double k_max_cost = 1e18;

/// The cost formula of SPEC §5, at most k_max_cost; `cached_tokens` of the input count
/// `cost.cached_input_factor` each (SPEC §20).
double request_cost(const config::CostConfig& cost, double cost_factor, std::uint64_t input_tokens,
                    std::uint64_t output_tokens, bool stream, std::uint64_t cached_tokens = 0);

/// US dollars for these tokens at `price` (per million; cached prompt tokens at cached_input).
/// No price: 0 (SPEC §14). At most k_max_cost.
double usd_cost(const config::ModelPrice* price, std::uint64_t prompt_tokens, std::uint64_t cached_tokens,
                std::uint64_t completion_tokens);

/// What a request reserves in every unit: its cost, its tokens (input + reserved output) and
/// their price, the prompt priced as if nothing were cached.
config::Amounts request_amounts(const config::CostConfig& cost, double cost_factor, const config::ModelPrice* price,
                                std::uint64_t input_tokens, std::uint64_t output_tokens, bool stream);

/// The most output tokens in [at_least, at_most] whose request_cost stays within `budget`
/// (cost grows with output; any rounding), or nullopt if not even `at_least` fits. What
/// cap_output lowers a request to, and how far stop_at_budget lets a stream run.
std::optional<std::uint64_t> largest_output_within(const config::CostConfig& cost, double cost_factor,
                                                   std::uint64_t input_tokens, bool stream, double budget,
                                                   std::uint64_t at_least, std::uint64_t at_most);

/// The model's settings: the first matching pattern, else the "*" entry; null if neither.
const config::ModelCost* find_model(const std::vector<config::ModelCost>& models, std::string_view model);

/// The model's cost_factor: the first matching pattern, else the "*" entry, else 1.0.
double cost_factor(const std::vector<config::ModelCost>& models, std::string_view model);

/// A request that names no output limit reserves the model's own default
/// (models.<m>.max_output_tokens) per sequence, when it has one.
void apply_model_default(RequestSummary& summary, const config::ModelCost* model);

}  // namespace tokengate::cost
