#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tokengate::core {

/// RFC 4648 base64 (padded), as HTTP Basic credentials carry it; nullopt if it is not.
std::optional<std::string> base64_decode(std::string_view text);

/// RFC 4648 §5 base64url without padding, as JOSE writes it (RFC 7515 §2); nullopt if it is not.
std::optional<std::string> base64url_decode(std::string_view text);

}  // namespace tokengate::core
