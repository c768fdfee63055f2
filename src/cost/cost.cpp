#include "tokengate/cost/cost.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

#include "tokengate/config/config.hpp"

namespace tokengate::cost {

using nlohmann::json;

core::RecycledString with_stream_usage(std::string_view body, bool has_stream_options) {
    if (!has_stream_options) {
        // Insert after the opening brace: cheap, and the client's bytes stay as they were.
        static constexpr std::string_view k_member = R"("stream_options":{"include_usage":true})";
        auto brace = body.find('{');
        auto rest = body.substr(brace + 1);
        auto first = rest.find_first_not_of(" \t\r\n");
        bool empty_object = first == std::string_view::npos || rest[first] == '}';
        core::RecycledString out;
        out.reserve(body.size() + k_member.size() + 1);
        out.append(body.substr(0, brace + 1)).append(k_member);
        if (!empty_object) out.push_back(',');
        out.append(rest);
        return out;
    }
    // Never throws (data plane): a body that is not an object is passed on unchanged, and a
    // stream_options that is not an object is replaced.
    json doc = json::parse(body, nullptr, false);
    if (!doc.is_object()) return core::RecycledString(body);
    auto& options = doc["stream_options"];
    if (!options.is_object()) options = json::object();
    options["include_usage"] = true;
    return core::RecycledString(doc.dump(-1, ' ', false, json::error_handler_t::replace));
}

std::optional<std::uint64_t> largest_output_within(const config::CostConfig& cost, double cost_factor,
                                                   std::uint64_t input_tokens, bool stream, double budget,
                                                   std::uint64_t at_least, std::uint64_t at_most) {
    auto fits = [&](std::uint64_t output) {
        return request_cost(cost, cost_factor, input_tokens, output, stream) <= budget;
    };
    if (at_least > at_most || !fits(at_least)) return std::nullopt;
    if (fits(at_most)) return at_most;
    std::uint64_t low = at_least, high = at_most;  // low fits, high does not
    while (high - low > 1) {
        auto mid = low + (high - low) / 2;
        (fits(mid) ? low : high) = mid;
    }
    return low;
}

const char* to_string(OutputField field) {
    switch (field) {
        case OutputField::max_completion_tokens: return "max_completion_tokens";
        case OutputField::max_tokens: return "max_tokens";
        case OutputField::max_output_tokens: return "max_output_tokens";
        case OutputField::max_new_tokens: return "parameters.max_new_tokens";
        case OutputField::sampling_max_new_tokens: return "sampling_params.max_new_tokens";
        case OutputField::n_predict: return "n_predict";
    }
    return "max_tokens";
}

OutputField output_field_written(const RequestSummary& summary) {
    if (summary.output_named) return summary.output_field;
    switch (summary.endpoint) {
        case Endpoint::tgi: return OutputField::max_new_tokens;
        case Endpoint::sglang: return OutputField::sampling_max_new_tokens;
        case Endpoint::responses: return OutputField::max_output_tokens;
        default: return OutputField::max_tokens;
    }
}

core::RecycledString with_output_limit(std::string_view body, const RequestSummary& summary,
                                       std::uint64_t per_sequence) {
    auto field = output_field_written(summary);
    char digits[20];
    auto number = std::string_view(digits, std::to_chars(digits, digits + sizeof digits, per_sequence).ptr - digits);
    if (!summary.output_key_present) {
        // The usual case (no output field, nor the object holding it): one field written in
        // front of the others, with no parse, and no spelling of the client's changed.
        auto open = body.find('{');
        if (open == std::string_view::npos) return core::RecycledString(body);
        auto next = body.find_first_not_of(" \t\r\n", open + 1);
        bool empty = next != std::string_view::npos && body[next] == '}';
        core::RecycledString out;
        out.reserve(body.size() + 64);
        out.append(body.substr(0, open + 1));
        if (field == OutputField::max_new_tokens)
            out.append(R"("parameters":{"max_new_tokens":)").append(number) += '}';
        else if (field == OutputField::sampling_max_new_tokens)
            out.append(R"("sampling_params":{"max_new_tokens":)").append(number) += '}';
        else out.append("\"").append(to_string(field)).append("\":").append(number);
        if (!empty) out += ',';
        out.append(body.substr(open + 1));
        return out;
    }
    // Never throws (data plane): the field or its object is there (perhaps null): a whole parse.
    json doc = json::parse(body, nullptr, false);
    if (!doc.is_object()) return core::RecycledString(body);
    if (field == OutputField::max_new_tokens || field == OutputField::sampling_max_new_tokens) {
        auto& holder = doc[field == OutputField::max_new_tokens ? "parameters" : "sampling_params"];
        if (!holder.is_object()) holder = json::object();
        holder["max_new_tokens"] = per_sequence;
    } else {
        doc[to_string(field)] = per_sequence;
    }
    return core::RecycledString(doc.dump(-1, ' ', false, json::error_handler_t::replace));
}

const config::ModelCost* find_model(const std::vector<config::ModelCost>& models, std::string_view model) {
    const config::ModelCost* fallback = nullptr;
    for (const auto& m : models) {
        if (m.pattern == "*") fallback = &m;
        else if (config::glob_match(m.pattern, model)) return &m;
    }
    return fallback;
}

double cost_factor(const std::vector<config::ModelCost>& models, std::string_view model) {
    const auto* m = find_model(models, model);
    return m ? m->cost_factor : 1.0;
}

double request_cost(const config::CostConfig& c, double factor, std::uint64_t input_tokens, std::uint64_t output_tokens,
                    bool stream, std::uint64_t cached_tokens) {
    auto round = [&](double x) { return c.rounding == config::Rounding::ceil ? std::ceil(x) : std::floor(x); };
    auto cached = static_cast<double>(std::min(cached_tokens, input_tokens));
    double priced_input = static_cast<double>(input_tokens) - cached + cached * c.cached_input_factor;
    double in = std::max(c.input_min, round(priced_input / c.input_per));
    double out = std::max(c.output_min, round(static_cast<double>(output_tokens) / c.output_per));
    // Token counts come from clients (max_tokens: 2^64-1) and upstreams: past every limit's
    // capacity (at most 1e15) a cost only needs to stay finite to be refused as never.
    return std::min((in + out) * factor + (stream ? c.stream_surcharge : 0.0), k_max_cost);
}

double usd_cost(const config::ModelPrice* price, std::uint64_t prompt_tokens, std::uint64_t cached_tokens,
                std::uint64_t completion_tokens) {
    if (!price) return 0;
    auto cached = static_cast<double>(std::min(cached_tokens, prompt_tokens));
    auto uncached = static_cast<double>(prompt_tokens) - cached;
    double usd = (uncached * price->input + cached * price->cached_input +
                  static_cast<double>(completion_tokens) * price->output) /
                 1e6;
    return std::min(usd, k_max_cost);
}

config::Amounts request_amounts(const config::CostConfig& cost, double cost_factor, const config::ModelPrice* price,
                                std::uint64_t input_tokens, std::uint64_t output_tokens, bool stream) {
    config::Amounts a;
    a.cost = request_cost(cost, cost_factor, input_tokens, output_tokens, stream);
    // Client numbers (max_tokens: 2^64-1) in a double: finite, and refused as never past any limit.
    a.tokens = std::min(static_cast<double>(input_tokens) + static_cast<double>(output_tokens), k_max_cost);
    a.usd = usd_cost(price, input_tokens, 0, output_tokens);
    return a;
}

}  // namespace tokengate::cost
