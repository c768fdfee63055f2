#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tokengate::cost {

/// Byte-level BPE as OpenAI's tiktoken does it: a standard `.tiktoken` rank file (one
/// "<base64 token> <rank>" per line) and the cl100k or o200k pre-tokenizer regex (PCRE2 with
/// Unicode properties, JIT-compiled). Counts tokens; thread-safe.
class BpeTokenizer {
public:
    enum class Pattern { cl100k, o200k };

    /// Loads a rank file; the pattern defaults by vocabulary size (over 150k ranks: o200k).
    /// Throws std::runtime_error with a clear message (config load time only).
    static std::unique_ptr<BpeTokenizer> load(const std::string& path);
    static std::unique_ptr<BpeTokenizer> load(const std::string& path, Pattern pattern);
    ~BpeTokenizer();
    BpeTokenizer(const BpeTokenizer&) = delete;
    BpeTokenizer& operator=(const BpeTokenizer&) = delete;

    std::uint64_t count(std::string_view text) const;
    std::size_t vocabulary_size() const { return ranks_.size(); }
    Pattern pattern() const { return pattern_; }

private:
    struct Hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    BpeTokenizer() = default;
    std::uint64_t count_piece(std::string_view piece) const;
    std::uint32_t rank(std::string_view bytes) const;

    std::unordered_map<std::string, std::uint32_t, Hash, std::equal_to<>> ranks_;
    Pattern pattern_ = Pattern::cl100k;
    struct Regex;
    std::unique_ptr<Regex> regex_;
};

}  // namespace tokengate::cost
