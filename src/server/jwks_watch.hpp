#pragma once

// Internal to the server module: SPEC §21's `auth.jwt.jwks_url`. The issuer's keys are fetched
// at start and every `jwks_refresh` on the first worker's event loop; a fetch that fails, or
// brings no usable key, keeps the keys there are and is tried again sooner.

#include <boost/asio/awaitable.hpp>

namespace tokengate::server {

struct Services;

/// Runs until the event loop stops, following the current config's jwks_url (a reload may
/// change it).
boost::asio::awaitable<void> watch_jwks(Services& services);

}  // namespace tokengate::server
