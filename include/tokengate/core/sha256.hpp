#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace tokengate::core {

using Sha256Digest = std::array<std::uint8_t, 32>;

Sha256Digest sha256(std::string_view data);
/// Appends `size` bytes as lowercase hex digits to a std::string or a core::RecycledString.
template <class Out>
void append_hex(Out& out, const std::uint8_t* data, std::size_t size) {
    static constexpr char k_digits[] = "0123456789abcdef";
    char pair[64];  // 32 bytes a step, one append each (push_back per digit was ~20 instructions)
    for (std::size_t i = 0; i < size;) {
        std::size_t n = 0;
        for (; i < size && n < sizeof pair; ++i) {
            pair[n++] = k_digits[data[i] >> 4];
            pair[n++] = k_digits[data[i] & 15];
        }
        out.append(pair, n);
    }
}
std::string to_hex(const std::uint8_t* data, std::size_t size);
/// A digest written as 64 lowercase hex digits (a config's sha256: key, a keys file's entry),
/// raw; nullopt for anything else.
std::optional<std::string> digest_from_hex(std::string_view hex);
inline std::string sha256_hex(std::string_view data) {
    auto d = sha256(data);
    return to_hex(d.data(), d.size());
}

/// Hashes a raw digest for a map keyed by digests: a digest is already uniform, so its first
/// bytes are its hash. Transparent, so a lookup by string_view builds no string. (Only for
/// digests: a table keyed by anything a client chooses would invite flooding.)
struct DigestHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view digest) const {
        std::size_t h = 0;
        std::memcpy(&h, digest.data(), std::min(sizeof h, digest.size()));
        return h;
    }
};

/// Compares without an early exit, so timing does not reveal where two digests differ.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace tokengate::core
