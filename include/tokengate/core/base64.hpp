#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tokengate::core {

/// RFC 4648 base64 (padded), as HTTP Basic credentials carry it; nullopt if it is not.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace tokengate::core
