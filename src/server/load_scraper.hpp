#pragma once

// Internal to the server module: SPEC §13's load signals. Each upstream with `metrics` has its
// Prometheus page read every interval, on the first worker's event loop (no thread per
// upstream; a scrape that hangs holds only itself, never a request), and the adaptive limits
// follow what the pages say.

#include <boost/asio/awaitable.hpp>

namespace tokengate::server {

struct Services;

/// Runs until the event loop stops: schedules the scrapes of the current config's upstreams
/// (a reload changes them) and adjusts the adaptive rates.
boost::asio::awaitable<void> watch_upstream_load(Services& services);

}  // namespace tokengate::server
