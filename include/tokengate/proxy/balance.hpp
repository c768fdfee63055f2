#pragma once

#include <memory>
#include <optional>
#include <span>

#include "tokengate/config/config.hpp"
#include "tokengate/proxy/pool.hpp"

namespace tokengate::proxy {

/// A route's upstream, at random by weight among those not ejected; none if every one is.
/// `health` is indexed like the config's upstreams.
std::optional<std::size_t> pick_upstream(const config::RouteConfig& route,
                                         std::span<const std::shared_ptr<UpstreamHealth>> health, core::Nanos now);

}  // namespace tokengate::proxy
