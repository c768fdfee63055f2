#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "tokengate/cost/tokenizer.hpp"

namespace tokengate::cost {

namespace detail {
class SplitRegex;
}

/// Byte-level BPE as OpenAI's tiktoken does it: a standard `.tiktoken` rank file (one
/// "<base64 token> <rank>" per line) and the cl100k or o200k pre-tokenizer regex (PCRE2 with
/// Unicode properties, JIT-compiled). Counts tokens; thread-safe.
class BpeTokenizer final : public Tokenizer {
public:
    enum class Pattern { cl100k, o200k };

    /// Loads a rank file; the pattern defaults by vocabulary size (over 150k ranks: o200k).
    /// Throws std::runtime_error with a clear message (config load time only).
    static std::unique_ptr<BpeTokenizer> load(const std::string& path);
    static std::unique_ptr<BpeTokenizer> load(const std::string& path, Pattern pattern);
    ~BpeTokenizer() override;
    BpeTokenizer(const BpeTokenizer&) = delete;
    BpeTokenizer& operator=(const BpeTokenizer&) = delete;

    std::uint64_t count(std::string_view text) const override;
    const std::string& name() const override { return name_; }
    std::size_t vocabulary_size() const { return ranks_.size(); }
    Pattern pattern() const { return pattern_; }

private:
    struct Hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    BpeTokenizer() = default;
    std::uint64_t count_piece(std::string_view piece) const;  // through the word cache
    std::uint64_t merge_piece(std::string_view piece) const;

    std::unordered_map<std::string, std::uint32_t, Hash, std::equal_to<>> ranks_;
    Pattern pattern_ = Pattern::cl100k;
    std::string name_;
    std::uint64_t cache_owner_ = 0;
    std::array<std::uint32_t, 256> byte_rank_{};  // each byte's own token: the merge's starting symbols
    std::unique_ptr<detail::SplitRegex> regex_;
};

}  // namespace tokengate::cost
