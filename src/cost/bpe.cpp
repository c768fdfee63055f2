#include "tokengate/cost/bpe.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fstream>
#include <limits>
#include <stdexcept>
#include <vector>

#include "tokengate/cost/cost.hpp"

namespace tokengate::cost {

namespace {

// The pre-tokenizer patterns of tiktoken's cl100k_base and o200k_base encodings.
constexpr const char* k_cl100k =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* k_o200k =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A piece longer than this is merged in windows: BPE merging is quadratic in the piece, and a
// request body must not be able to buy seconds of CPU with one 4 MiB "word".
constexpr std::size_t k_max_piece = 512;

std::string base64_decode(std::string_view in) {
    static const auto table = [] {
        std::array<int, 256> t{};
        t.fill(-1);
        const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(alphabet[i])] = i;
        return t;
    }();
    std::string out;
    int value = 0, bits = -8;
    for (char c : in) {
        if (c == '=') break;
        int d = table[static_cast<unsigned char>(c)];
        if (d < 0) throw std::runtime_error("invalid base64");
        value = (value << 6) | d;
        bits += 6;
        if (bits >= 0) {
            out.push_back(static_cast<char>((value >> bits) & 0xFF));
            bits -= 8;
        }
    }
    return out;
}

}  // namespace

struct BpeTokenizer::Regex {
    pcre2_code* code = nullptr;
    ~Regex() { pcre2_code_free(code); }
};

BpeTokenizer::~BpeTokenizer() = default;

std::unique_ptr<BpeTokenizer> BpeTokenizer::load(const std::string& path) {
    auto t = load(path, Pattern::cl100k);
    if (t->ranks_.size() > 150000) return load(path, Pattern::o200k);
    return t;
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::load(const std::string& path, Pattern pattern) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open tiktoken file " + path);
    std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
    t->pattern_ = pattern;
    std::string line;
    std::size_t line_no = 0;
    while (std::getline(in, line)) {
        ++line_no;
        if (line.empty()) continue;
        auto space = line.find(' ');
        try {
            if (space == std::string::npos) throw std::runtime_error("no rank");
            auto rank = std::stoul(line.substr(space + 1));
            t->ranks_.emplace(base64_decode(std::string_view(line).substr(0, space)), static_cast<std::uint32_t>(rank));
        } catch (const std::exception&) {
            throw std::runtime_error(path + ":" + std::to_string(line_no) + ": expected '<base64 token> <rank>'");
        }
    }
    if (t->ranks_.size() < 256) throw std::runtime_error(path + ": not a tiktoken rank file (under 256 tokens)");
    int error = 0;
    PCRE2_SIZE offset = 0;
    const char* source = pattern == Pattern::o200k ? k_o200k : k_cl100k;
    t->regex_ = std::make_unique<Regex>();
    t->regex_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                    &error, &offset, nullptr);
    if (!t->regex_->code) throw std::runtime_error("cannot compile the pre-tokenizer pattern");
    pcre2_jit_compile(t->regex_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter
    return t;
}

std::uint32_t BpeTokenizer::rank(std::string_view bytes) const {
    auto it = ranks_.find(bytes);
    return it == ranks_.end() ? std::numeric_limits<std::uint32_t>::max() : it->second;
}

std::uint64_t BpeTokenizer::count_piece(std::string_view piece) const {
    if (piece.size() > k_max_piece) {
        std::uint64_t n = 0;
        for (std::size_t i = 0; i < piece.size(); i += k_max_piece) n += count_piece(piece.substr(i, k_max_piece));
        return n;
    }
    if (ranks_.find(piece) != ranks_.end()) return 1;
    // Merge the adjacent pair with the lowest rank until no pair is a token.
    constexpr auto k_none = std::numeric_limits<std::uint32_t>::max();
    std::vector<std::size_t> starts(piece.size() + 1);
    for (std::size_t i = 0; i <= piece.size(); ++i) starts[i] = i;
    std::vector<std::uint32_t> pair_rank(piece.size());
    auto rank_at = [&](std::size_t i) {
        return i + 2 < starts.size() ? rank(piece.substr(starts[i], starts[i + 2] - starts[i])) : k_none;
    };
    for (std::size_t i = 0; i + 1 < starts.size(); ++i) pair_rank[i] = rank_at(i);
    while (starts.size() > 2) {
        std::size_t best = 0;
        std::uint32_t best_rank = k_none;
        for (std::size_t i = 0; i + 2 < starts.size(); ++i)
            if (pair_rank[i] < best_rank) {
                best_rank = pair_rank[i];
                best = i;
            }
        if (best_rank == k_none) break;
        starts.erase(starts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
        pair_rank.erase(pair_rank.begin() + static_cast<std::ptrdiff_t>(best) + 1);
        pair_rank[best] = rank_at(best);
        if (best > 0) pair_rank[best - 1] = rank_at(best - 1);
    }
    return starts.size() - 1;
}

std::uint64_t BpeTokenizer::count(std::string_view text) const {
    auto* match = pcre2_match_data_create_from_pattern(regex_->code, nullptr);
    std::uint64_t tokens = 0;
    PCRE2_SIZE start = 0;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    // The first match validates the UTF-8 of the whole text; the others skip that check,
    // which would otherwise rescan the text at every match and make counting quadratic.
    std::uint32_t options = 0;
    while (start < text.size()) {
        int rc = pcre2_match(regex_->code, subject, text.size(), start, options, match, nullptr);
        options = PCRE2_NO_UTF_CHECK;
        if (rc < 0) {
            if (rc != PCRE2_ERROR_NOMATCH) tokens += estimate_tokens(text.substr(start));  // e.g. invalid UTF-8
            break;
        }
        auto* ovector = pcre2_get_ovector_pointer(match);
        if (ovector[1] == ovector[0]) break;
        tokens += count_piece(text.substr(ovector[0], ovector[1] - ovector[0]));
        start = ovector[1];
    }
    pcre2_match_data_free(match);
    return tokens;
}

}  // namespace tokengate::cost
