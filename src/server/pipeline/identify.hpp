#pragma once

// Admission's first question: who is asking (SPEC §4's API keys, §21's JWTs).

#include <string_view>

#include "rejection.hpp"
#include "tokengate/auth/key_table.hpp"
#include "tokengate/core/clock.hpp"
#include "tokengate/server/runtime.hpp"

namespace tokengate::server::pipeline {

/// The caller's tenant from an API key, or from a JWT (a Bearer value of three base64url
/// parts, when `auth.jwt` is set) verified at `unix_now`. A refusal is 401 invalid_api_key, 401
/// invalid_token with the reason (never the token), or 403 unknown_tenant.
Result<auth::Principal> identify(const Runtime& runtime, std::string_view key, core::Nanos unix_now);

}  // namespace tokengate::server::pipeline
