#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "tokengate/cost/cost.hpp"

namespace tokengate::cost {

class Tokenizer;

/// SPEC §22: a hash of the prompt's first `prefix_tokens` tokens as the template renders them
/// (the system prompt first, then each message's role and text; a completion's prompt; TGI's
/// inputs): requests that share a system prompt share it, so they can meet one upstream's prefix
/// cache. Reads the body again (only routes with `balance: prefix_affinity` ask); nullopt when
/// it holds no prompt text. Counts at most about 16 bytes a token of each text, never a whole
/// long prompt.
std::optional<std::uint64_t> prompt_prefix_hash(std::string_view body, Endpoint endpoint, std::uint64_t prefix_tokens,
                                                const Tokenizer* tokenizer);

}  // namespace tokengate::cost
