#include "tokengate/cost/bpe.hpp"

#include <fstream>
#include <limits>
#include <stdexcept>
#include <vector>

#include "bpe_merge.hpp"
#include "split_regex.hpp"
#include "tokengate/cost/cost.hpp"
#include "word_cache.hpp"

namespace tokengate::cost {

namespace {

// The pre-tokenizer patterns of tiktoken's cl100k_base and o200k_base encodings.
constexpr const char* k_cl100k =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* k_o200k =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

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
    t->cache_owner_ = detail::WordCache::new_owner();
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
    for (int b = 0; b < 256; ++b) {
        auto it = t->ranks_.find(std::string(1, static_cast<char>(b)));
        if (it == t->ranks_.end()) throw std::runtime_error(path + ": not a byte-level rank file (a byte has no rank)");
        t->byte_rank_[b] = it->second;
    }
    std::string error;
    t->regex_ = detail::SplitRegex::compile(pattern == Pattern::o200k ? k_o200k : k_cl100k, error);
    if (!t->regex_) throw std::runtime_error("cannot compile the pre-tokenizer pattern: " + error);
    t->name_ = std::string("tiktoken ") + (pattern == Pattern::o200k ? "o200k " : "cl100k ") + path;
    return t;
}

std::uint64_t BpeTokenizer::count_piece(std::string_view piece) const {
    if (auto cached = detail::WordCache::find(cache_owner_, piece)) return *cached;
    auto tokens = merge_piece(piece);
    detail::WordCache::put(cache_owner_, piece, tokens);
    return tokens;
}

std::uint64_t BpeTokenizer::merge_piece(std::string_view piece) const {
    if (ranks_.find(piece) != ranks_.end()) return 1;
    thread_local std::vector<detail::Symbol> symbols;
    symbols.clear();
    for (std::uint32_t i = 0; i < piece.size(); ++i)
        symbols.push_back({byte_rank_[static_cast<unsigned char>(piece[i])], i, i + 1});
    // tiktoken's rule: the pair whose bytes together are the lowest-ranked token merges first.
    return detail::merge_symbols(symbols, [&](const detail::Symbol& left, const detail::Symbol& right) {
        auto it = ranks_.find(piece.substr(left.begin, right.end - left.begin));
        return it == ranks_.end() ? detail::Merge{} : detail::Merge{it->second, it->second};
    });
}

std::uint64_t BpeTokenizer::count(std::string_view text) const {
    thread_local std::vector<detail::Span> pieces;
    bool valid = regex_->matches(text, pieces);
    std::uint64_t tokens = 0;
    for (auto p : pieces) tokens += count_piece(text.substr(p.begin, p.end - p.begin));
    // Past invalid UTF-8 the pattern cannot run: the rest is estimated.
    if (!valid) tokens += estimate_tokens(text.substr(pieces.empty() ? 0 : pieces.back().end));
    return tokens;
}

}  // namespace tokengate::cost
