#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string_view>

namespace tokengate::core {

/// A fast hash of a short byte string (8 bytes a step) for in-memory tables on the hot path;
/// `seed` separates tables that share keys. Not collision-resistant: only for tables where a
/// collision costs a probe or a cache miss, never a wrong answer.
inline std::uint64_t hash_bytes(std::string_view key, std::uint64_t seed = 0) {
    std::uint64_t h = (0x9E3779B97F4A7C15ull + seed * 0xD6E8FEB86659FD93ull) ^ key.size();
    std::size_t i = 0;
    for (; i + 8 <= key.size(); i += 8) {
        std::uint64_t word;
        std::memcpy(&word, key.data() + i, 8);
        h = (h ^ word) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    std::uint64_t tail = 0;
    std::memcpy(&tail, key.data() + i, key.size() - i);
    h = (h ^ tail) * 0x94D049BB133111EBull;
    return h ^ (h >> 29);
}

/// std::hash of a string view, marked transparent: a std::string-keyed table (with
/// std::equal_to<>) is looked up by a view or an InlineString without building a std::string.
struct StringViewHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view key) const { return std::hash<std::string_view>{}(key); }
};

}  // namespace tokengate::core
