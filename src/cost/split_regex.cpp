#include "split_regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace tokengate::cost::detail {

struct SplitRegex::Code {
    pcre2_code* code = nullptr;
    ~Code() { pcre2_code_free(code); }
};

SplitRegex::~SplitRegex() = default;

std::unique_ptr<SplitRegex> SplitRegex::compile(std::string_view pattern, std::string& error) {
    int status = 0;
    PCRE2_SIZE offset = 0;
    auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                               &status, &offset, nullptr);
    if (!code) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(status, message, sizeof message);
        error = "the pattern does not compile at offset " + std::to_string(offset) + ": " +
                reinterpret_cast<const char*>(message);
        return nullptr;
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter
    std::unique_ptr<SplitRegex> regex(new SplitRegex());
    regex->code_ = std::make_unique<Code>();
    regex->code_->code = code;
    return regex;
}

bool SplitRegex::matches(std::string_view text, std::vector<Span>& out, bool trusted_utf8) const {
    out.clear();
    // One match block per thread, sized for any pattern's captures: a count of a short
    // string must not cost an allocation.
    struct MatchData {
        pcre2_match_data* data = pcre2_match_data_create(16, nullptr);
        ~MatchData() { pcre2_match_data_free(data); }
    };
    thread_local MatchData block;
    auto* match = block.data;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    // The first match validates the UTF-8 of the whole text; the others skip that check,
    // which would otherwise rescan the text at every match and make splitting quadratic.
    std::uint32_t options = trusted_utf8 ? PCRE2_NO_UTF_CHECK : 0;
    PCRE2_SIZE start = 0;
    while (start < text.size()) {
        int rc = pcre2_match(code_->code, subject, text.size(), start, options, match, nullptr);
        options = PCRE2_NO_UTF_CHECK;
        if (rc == PCRE2_ERROR_NOMATCH) return true;
        if (rc < 0) return false;  // invalid UTF-8 (or a match limit): the caller estimates the rest
        auto* ovector = pcre2_get_ovector_pointer(match);
        if (ovector[1] == ovector[0]) {  // an empty match splits nothing: step over one character
            ++start;
            while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
            continue;
        }
        out.push_back({static_cast<std::uint32_t>(ovector[0]), static_cast<std::uint32_t>(ovector[1])});
        start = ovector[1];
    }
    return true;
}

}  // namespace tokengate::cost::detail
