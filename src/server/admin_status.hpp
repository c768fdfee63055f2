#pragma once

// SPEC §15's status page: GET /admin/status (the JSON the page polls every second) and the
// page itself, /ui, whose files are compiled into the binary (ui_assets.cpp).

#include <boost/asio/awaitable.hpp>

#include <optional>
#include <string_view>

#include "admin_http.hpp"

namespace tokengate::server {

struct Services;
struct Runtime;

/// GET /admin/status?offset=&limit=&sort=tokens|rejections|id&q=: a page of tenants (each
/// limit's remaining against its capacity, rates over the last 10 s, 5-minute sparklines), the
/// heat map's top tenants by tokens over the last hour, upstreams, global limits and queues.
boost::asio::awaitable<AdminResponse> status(Services& services, const Runtime& runtime, std::string_view query);

/// GET /ui and its files; nullopt for a path that is not one of them.
std::optional<AdminResponse> ui_asset(std::string_view path);

}  // namespace tokengate::server
