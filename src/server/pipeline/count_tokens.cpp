#include "count_tokens.hpp"

#include "tokengate/core/json_writer.hpp"

namespace tokengate::server::pipeline {

std::optional<std::string> answer_locally(const Admitted& admitted) {
    if (admitted.summary.endpoint != cost::Endpoint::count_tokens) return std::nullopt;
    std::string out;
    core::JsonObjectWriter body(out);
    body.integer("input_tokens", admitted.summary.input_tokens);
    body.close();
    return out;
}

}  // namespace tokengate::server::pipeline
