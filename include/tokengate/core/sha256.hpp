#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tokengate::core {

using Sha256Digest = std::array<std::uint8_t, 32>;

Sha256Digest sha256(std::string_view data);
std::string to_hex(const std::uint8_t* data, std::size_t size);
inline std::string sha256_hex(std::string_view data) {
    auto d = sha256(data);
    return to_hex(d.data(), d.size());
}

/// Compares without an early exit, so timing does not reveal where two digests differ.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace tokengate::core
