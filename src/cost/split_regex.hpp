#pragma once

// A pre-tokenizer pattern compiled once with PCRE2 (UTF, Unicode properties, JIT), shared by
// both tokenizers.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tokengate::cost::detail {

/// A byte range of the text a split produced.
struct Span {
    std::uint32_t begin;
    std::uint32_t end;
};

class SplitRegex {
public:
    /// Null with `error` set when the pattern does not compile.
    static std::unique_ptr<SplitRegex> compile(std::string_view pattern, std::string& error);
    ~SplitRegex();
    SplitRegex(const SplitRegex&) = delete;
    SplitRegex& operator=(const SplitRegex&) = delete;

    /// The non-overlapping matches in `text`, left to right, into `out` (cleared first).
    /// `trusted_utf8` skips PCRE2's UTF-8 check (the caller already validated the text).
    /// False when the text is not valid UTF-8: `out` then holds the matches before it.
    bool matches(std::string_view text, std::vector<Span>& out, bool trusted_utf8 = false) const;

private:
    SplitRegex() = default;
    struct Code;
    std::unique_ptr<Code> code_;
};

}  // namespace tokengate::cost::detail
