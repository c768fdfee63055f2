#pragma once

// Stage 1, admit: who is asking, for which route, at what price. Nothing is charged.

#include <optional>
#include <string_view>
#include <variant>
#include <vector>

#include "estimate.hpp"
#include "rejection.hpp"
#include "tokengate/auth/key_table.hpp"
#include "tokengate/cost/cost.hpp"
#include "tokengate/limiter/decision.hpp"
#include "tokengate/proxy/target.hpp"
#include "tokengate/server/runtime.hpp"

namespace tokengate::server::pipeline {

/// The longest end-user id taken (a header or a body field can carry anything).
inline constexpr std::size_t k_max_subject_bytes = 256;

struct Admitted {
    auth::Principal principal;  // as authenticated (also in `who`)
    cost::RequestSummary summary;
    std::size_t route = 0;
    double cost_factor = 1.0;                    // the model's, for the reservation and the settlement
    const config::ModelPrice* price = nullptr;   // the model's (SPEC §14); null: it costs 0 USD
    const cost::Tokenizer* tokenizer = nullptr;  // what counted its input; null: the heuristic
    OutputReservation output;                    // the output the pre-charge holds (SPEC §12)
    config::Amounts reserved;                    // the pre-charge: estimated input, reserved output
    config::Charges charges;
};

/// What admission reads from the request.
struct Incoming {
    std::string_view key;  // as auth::extract_key found it
    const proxy::NormalizedTarget& target;
    std::string_view client_ip;
    std::string_view body;
    core::Nanos unix_now = 0;              // when it came: a JWT's exp and nbf are read against it
    std::string_view subject_header = {};  // auth.subject.header's value, if any (SPEC §21)
};

/// Target → key → body → route → output estimate → price → every applicable limit (SPEC §1
/// steps 2–5, §12).
/// A refusal is 400 invalid_path, identify's 401 or 403, 400 invalid_json / invalid_body or
/// 404 not_found. `who` is set as soon as the key is known, so a later refusal is still
/// logged under its tenant.
/// Counting the input stops past `count_limit` (precheck.hpp).
Result<Admitted> admit(const Runtime& runtime, const Incoming& in, const cost::OutputHistory& history,
                       std::optional<auth::Principal>& who, std::uint64_t count_limit = UINT64_MAX);

/// A request as read: who sent it, its summary, and its model's settings and tokenizer (null:
/// none matched, the heuristic).
struct Read {
    auth::Principal principal;
    cost::RequestSummary summary;
    const config::ModelCost* model = nullptr;
    const cost::Tokenizer* tokenizer = nullptr;
};

/// Admission's last steps, once the body is read (or, in simulate, a logged request's summary
/// is): route → output estimate → price → every applicable limit; 404 not_found without a route.
Result<Admitted> price_request(const Runtime& runtime, Read read, std::string_view path, std::string_view client_ip,
                               const cost::OutputHistory& history);

}  // namespace tokengate::server::pipeline
