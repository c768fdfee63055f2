#pragma once

// The stage that answers a request without an upstream: Anthropic's
// `POST /v1/messages/count_tokens` (SPEC §20), from the gateway's own count, charged nothing.

#include <optional>
#include <string>

#include "admit.hpp"

namespace tokengate::server::pipeline {

/// The JSON body the gateway answers `admitted` with itself ({"input_tokens": N}), or nullopt
/// when the request goes on to the limits and an upstream.
std::optional<std::string> answer_locally(const Admitted& admitted);

}  // namespace tokengate::server::pipeline
