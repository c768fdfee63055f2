#pragma once

// A small per-thread cache of word → token count for the BPE tokenizers. Prose repeats its
// words (the Hugging Face library keeps such a cache too), and a hit saves every merge lookup
// of the word. Direct-mapped, short words only, so its cost and size are fixed: 256 KiB a
// thread, no locks, no allocation.

#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "tokengate/core/hash.hpp"

namespace tokengate::cost::detail {

class WordCache {
public:
    static constexpr std::size_t k_max_word = 19;

    /// A number no other tokenizer has, for the life of the process: entries are tagged with
    /// it, so a tokenizer loaded at a freed one's address never reads the other's counts.
    static std::uint64_t new_owner() {
        static std::atomic<std::uint64_t> next{1};
        return next.fetch_add(1, std::memory_order_relaxed);
    }

    static std::optional<std::uint32_t> find(std::uint64_t owner, std::string_view word) {
        if (word.size() > k_max_word) return std::nullopt;
        const auto& e = slots()[slot(owner, word)];
        if (e.owner != owner || e.length != word.size() || std::memcmp(e.bytes, word.data(), word.size()) != 0)
            return std::nullopt;
        return e.count;
    }

    static void put(std::uint64_t owner, std::string_view word, std::uint64_t count) {
        if (word.size() > k_max_word || count > UINT32_MAX) return;
        auto& e = slots()[slot(owner, word)];
        e.owner = owner;
        e.count = static_cast<std::uint32_t>(count);
        e.length = static_cast<std::uint8_t>(word.size());
        std::memcpy(e.bytes, word.data(), word.size());
    }

private:
    struct Entry {
        std::uint64_t owner = 0;
        std::uint32_t count = 0;
        std::uint8_t length = 0;
        char bytes[k_max_word];
    };
    static constexpr std::size_t k_slots = 8192;
    static_assert(sizeof(Entry) == 32);

    static Entry* slots() {
        thread_local Entry entries[k_slots];
        return entries;
    }
    static std::size_t slot(std::uint64_t owner, std::string_view word) {
        return (core::hash_bytes(word, owner) >> 32) & (k_slots - 1);
    }
};

}  // namespace tokengate::cost::detail
