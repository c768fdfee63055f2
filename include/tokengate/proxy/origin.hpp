#pragma once

#include <boost/asio/ip/address.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "tokengate/core/cidr.hpp"
#include "tokengate/core/recycled.hpp"

namespace tokengate::proxy {

/// One spelling per address: an IPv4-mapped IPv6 address is written as IPv4.
std::string address_text(const boost::asio::ip::address& address);

/// Whether `address` is one of the trusted proxies (false when none are configured).
bool is_trusted_proxy(const std::vector<core::Cidr>& proxies, std::string_view address);

/// The client: the peer, or, when the peer is a trusted proxy, the rightmost address of
/// X-Forwarded-For that is not a trusted proxy.
std::string client_address(const std::vector<core::Cidr>& trusted_proxies, const std::string& peer,
                           std::string_view forwarded_for);

/// The request's id: the client's own X-Request-Id when it is short and plain, else a new one.
core::RecycledString request_id_for(std::string_view given);

}  // namespace tokengate::proxy
