// SPEC §11: a model's own tokenizer.json, counted as Hugging Face `tokenizers` encodes it
// (tokenizers/src/tokenizer/mod.rs: added tokens, normalizer, pre-tokenizer, model,
// post-processor).

#include "tokengate/cost/hf_tokenizer.hpp"

#include <simdjson.h>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <array>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "bpe_merge.hpp"
#include "split_regex.hpp"
#include "tokengate/cost/cost.hpp"
#include "word_cache.hpp"

namespace tokengate::cost {

namespace {

using simdjson::dom::element;

constexpr std::uint32_t k_none = std::numeric_limits<std::uint32_t>::max();

// GPT-2's pre-tokenizer, which a ByteLevel step with `use_regex` applies.
constexpr std::string_view k_gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// Byte-level BPE writes each byte as one printable character (GPT-2's bytes_to_unicode):
/// printable Latin-1 bytes as themselves, the others as U+0100 onwards in byte order.
struct ByteAlphabet {
    std::array<char32_t, 256> char_of{};
    std::array<int, 324> byte_of{};  // by code point; -1: not a byte's character

    ByteAlphabet() {
        byte_of.fill(-1);
        char32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            char_of[b] = printable ? static_cast<char32_t>(b) : next++;
            byte_of[char_of[b]] = b;
        }
    }

    /// The raw bytes a vocabulary entry stands for; nullopt if it has other characters.
    std::optional<std::string> bytes(std::string_view token) const {
        std::string out;
        const auto* s = reinterpret_cast<const std::uint8_t*>(token.data());
        std::int32_t i = 0, n = static_cast<std::int32_t>(token.size());
        while (i < n) {
            UChar32 c;
            U8_NEXT(s, i, n, c);
            if (c < 0 || c >= static_cast<UChar32>(byte_of.size()) || byte_of[c] < 0) return std::nullopt;
            out.push_back(static_cast<char>(byte_of[c]));
        }
        return out;
    }

    std::string character(std::uint8_t b) const {
        std::string out;
        char32_t c = char_of[b];
        if (c < 0x80) out.push_back(static_cast<char>(c));
        else {
            out.push_back(static_cast<char>(0xC0 | (c >> 6)));
            out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
        }
        return out;
    }
};

const ByteAlphabet& alphabet() {
    static const ByteAlphabet a;
    return a;
}

/// Merges by pair of token ids: open addressing, one probe a lookup in the common case. The
/// merge loop asks this several times for every word of a prompt.
class PairTable {
public:
    void reserve(std::size_t n) {
        std::size_t capacity = 16;
        while (capacity < n + n / 2) capacity *= 2;
        slots_.assign(capacity, Slot{});
        mask_ = capacity - 1;
        shift_ = 64 - static_cast<int>(__builtin_ctzll(capacity));
    }
    /// A pair named twice keeps the later merge, as the reference's map does.
    void insert(std::uint32_t left, std::uint32_t right, detail::Merge merge) {
        auto key = pack(left, right);
        for (auto i = slot(key);; i = (i + 1) & mask_) {
            if (slots_[i].key == k_empty || slots_[i].key == key) {
                slots_[i] = {key, merge};
                return;
            }
        }
    }
    detail::Merge find(std::uint32_t left, std::uint32_t right) const {
        auto key = pack(left, right);
        for (auto i = slot(key);; i = (i + 1) & mask_) {
            if (slots_[i].key == key) return slots_[i].merge;
            if (slots_[i].key == k_empty) return {};
        }
    }

private:
    static constexpr std::uint64_t k_empty = ~0ull;
    struct Slot {
        std::uint64_t key = k_empty;
        detail::Merge merge;
    };
    static std::uint64_t pack(std::uint32_t l, std::uint32_t r) { return (std::uint64_t{l} << 32) | r; }
    std::size_t slot(std::uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }

    std::vector<Slot> slots_;
    std::size_t mask_ = 0;
    int shift_ = 64;
};

struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct AddedToken {
    std::string content;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
};

/// Added tokens found as the reference finds them: leftmost first, the longest there. A byte
/// trie, so a text of a million '<' costs a step a byte, not a comparison with every token
/// that starts with '<'.
class AddedMatcher {
public:
    void add(AddedToken token) {
        if (token.content.empty()) return;
        if (nodes_.empty()) nodes_.emplace_back();
        std::uint32_t node = 0;
        for (char c : token.content) {
            auto b = static_cast<std::uint8_t>(c);
            auto& children = nodes_[node].children;
            auto it = std::lower_bound(children.begin(), children.end(), b,
                                       [](const auto& child, std::uint8_t key) { return child.first < key; });
            if (it == children.end() || it->first != b) {
                auto next = static_cast<std::uint32_t>(nodes_.size());
                children.insert(it, {b, next});
                nodes_.emplace_back();
                node = next;
            } else {
                node = it->second;
            }
        }
        if (nodes_[node].token == k_none) {
            nodes_[node].token = static_cast<std::uint32_t>(tokens_.size());
            tokens_.push_back(std::move(token));
        } else {
            tokens_[nodes_[node].token] = std::move(token);  // named twice: the later one's flags
        }
    }
    bool empty() const { return tokens_.empty(); }

    struct Found {
        std::size_t at;
        const AddedToken* token;
    };
    std::optional<Found> find(std::string_view text, std::size_t from) const {
        const auto& root = nodes_[0].children;
        for (std::size_t i = from; i < text.size(); ++i) {
            if (!has_child(root, static_cast<std::uint8_t>(text[i]))) continue;
            std::uint32_t node = 0, longest = k_none;
            for (std::size_t j = i; j < text.size(); ++j) {
                node = child(nodes_[node].children, static_cast<std::uint8_t>(text[j]));
                if (node == k_none) break;
                if (nodes_[node].token != k_none) longest = nodes_[node].token;
            }
            if (longest != k_none) return Found{i, &tokens_[longest]};
        }
        return std::nullopt;
    }

private:
    using Children = std::vector<std::pair<std::uint8_t, std::uint32_t>>;
    struct Node {
        Children children;  // sorted by byte
        std::uint32_t token = k_none;
    };
    static std::uint32_t child(const Children& children, std::uint8_t b) {
        auto it = std::lower_bound(children.begin(), children.end(), b,
                                   [](const auto& c, std::uint8_t key) { return c.first < key; });
        return it != children.end() && it->first == b ? it->second : k_none;
    }
    static bool has_child(const Children& children, std::uint8_t b) { return child(children, b) != k_none; }

    std::vector<AddedToken> tokens_;
    std::vector<Node> nodes_;
};

// \s and \w as the reference's `regex` crate reads them (Unicode).
bool is_space(UChar32 c) { return u_isUWhiteSpace(c); }
bool is_word(UChar32 c) {
    if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL)) return true;
    switch (u_charType(c)) {
        case U_NON_SPACING_MARK:
        case U_ENCLOSING_MARK:
        case U_COMBINING_SPACING_MARK:
        case U_DECIMAL_DIGIT_NUMBER:
        case U_CONNECTOR_PUNCTUATION: return true;
        default: return false;
    }
}
UChar32 first_char(std::string_view s) {
    std::int32_t i = 0;
    UChar32 c;
    U8_NEXT(reinterpret_cast<const std::uint8_t*>(s.data()), i, static_cast<std::int32_t>(s.size()), c);
    return c;
}
UChar32 last_char(std::string_view s) {
    auto i = static_cast<std::int32_t>(s.size());
    UChar32 c;
    U8_PREV(reinterpret_cast<const std::uint8_t*>(s.data()), 0, i, c);
    return c;
}
/// Where the run of whitespace that ends `s` begins.
std::size_t trailing_space_start(std::string_view s) {
    auto i = static_cast<std::int32_t>(s.size());
    while (i > 0) {
        auto before = i;
        UChar32 c;
        U8_PREV(reinterpret_cast<const std::uint8_t*>(s.data()), 0, i, c);
        if (!is_space(c)) return static_cast<std::size_t>(before);
    }
    return 0;
}
/// How many bytes of whitespace start `s`.
std::size_t leading_space_length(std::string_view s) {
    std::int32_t i = 0, n = static_cast<std::int32_t>(s.size());
    while (i < n) {
        auto before = i;
        UChar32 c;
        U8_NEXT(reinterpret_cast<const std::uint8_t*>(s.data()), i, n, c);
        if (!is_space(c)) return static_cast<std::size_t>(before);
    }
    return s.size();
}

enum class Behavior { isolated, removed, merged_with_previous, merged_with_next, contiguous };

struct PreTokenizerStep {
    bool byte_level = false;
    std::unique_ptr<detail::SplitRegex> regex;  // a split's, or GPT-2's for ByteLevel with use_regex
    Behavior behavior = Behavior::isolated;
    bool invert = false;
    bool add_prefix_space = false;
};

[[noreturn]] void unsupported(const std::string& what) { throw std::runtime_error(what); }

std::string_view string_or(element o, std::string_view key, std::string_view fallback) {
    std::string_view s;
    return o[key].get_string().get(s) == simdjson::SUCCESS ? s : fallback;
}
bool bool_or(element o, std::string_view key, bool fallback) {
    bool b = fallback;
    return o[key].get_bool().get(b) == simdjson::SUCCESS ? b : fallback;
}
bool is_null_or_absent(element o, std::string_view key) {
    element v;
    return o[key].get(v) != simdjson::SUCCESS || v.is_null();
}

}  // namespace

struct HfTokenizer::Model {
    std::string name;
    std::vector<const icu::Normalizer2*> normalizers;  // applied in order
    AddedMatcher added_raw;                            // matched before normalizing
    AddedMatcher added_normalized;                     // matched in the normalized text
    std::vector<PreTokenizerStep> steps;
    std::array<std::uint32_t, 256> byte_id{};  // the token of each single byte, k_none if absent
    PairTable merges;
    bool ignore_merges = false;  // a word that is itself a token is one token
    std::unordered_map<std::string, std::uint32_t, StringHash, std::equal_to<>> vocabulary;  // raw bytes
    std::size_t vocabulary_entries = 0;
    std::uint64_t added_per_sequence = 0;
    std::uint64_t cache_owner = detail::WordCache::new_owner();

    /// `text` normalized: itself when no form changes it, else a view of `storage`.
    std::string_view normalize(std::string_view text, std::string& storage) const;
    std::uint64_t count_added(const AddedMatcher& matcher, std::string_view text, bool normalized) const;
    std::uint64_t count_pre_tokenized(std::size_t step, std::string_view piece) const;
    std::uint64_t count_word(std::string_view word) const;  // through the word cache
    std::uint64_t merge_word(std::string_view word) const;

    void load_normalizer(element n);
    void load_pre_tokenizer(element p);
    void load_post_processor(element p);
    void load_model(element m);
    void load_added_tokens(element tokens);
};

std::string_view HfTokenizer::Model::normalize(std::string_view text, std::string& storage) const {
    // Every Unicode normal form leaves ASCII as it is: most text comes back as it was, uncopied.
    if (normalizers.empty() ||
        std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
        return text;
    std::string_view current = text;
    for (const auto* form : normalizers) {
        UErrorCode status = U_ZERO_ERROR;
        icu::StringPiece piece(current.data(), static_cast<std::int32_t>(current.size()));
        if (form->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) continue;
        std::string next;
        icu::StringByteSink<std::string> sink(&next);
        status = U_ZERO_ERROR;
        form->normalizeUTF8(0, piece, sink, nullptr, status);
        if (U_SUCCESS(status)) {
            storage = std::move(next);
            current = storage;
        }
    }
    return current;
}

std::uint64_t HfTokenizer::Model::count_added(const AddedMatcher& matcher, std::string_view text,
                                              bool normalized) const {
    auto rest = [&](std::string_view gap) -> std::uint64_t {
        if (gap.empty()) return 0;
        if (normalized) return count_pre_tokenized(0, gap);
        std::string storage;
        return count_added(added_normalized, normalize(gap, storage), true);
    };
    if (matcher.empty()) return rest(text);
    std::uint64_t tokens = 0;
    std::size_t offset = 0, from = 0;
    while (auto found = matcher.find(text, from)) {
        auto start = found->at, stop = start + found->token->content.size();
        from = stop;
        const auto& t = *found->token;
        if (t.single_word && ((start > 0 && is_word(last_char(text.substr(0, start)))) ||
                              (stop < text.size() && is_word(first_char(text.substr(stop))))))
            continue;
        if (t.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), offset);
        if (t.rstrip) stop += leading_space_length(text.substr(stop));
        if (offset < start) tokens += rest(text.substr(offset, start - offset));
        ++tokens;
        offset = stop;
    }
    if (offset < text.size()) tokens += rest(text.substr(offset));
    return tokens;
}

std::uint64_t HfTokenizer::Model::count_pre_tokenized(std::size_t step, std::string_view piece) const {
    if (step == steps.size()) return count_word(piece);
    const auto& s = steps[step];
    std::string prefixed;
    if (s.byte_level && s.add_prefix_space && piece.front() != ' ') {
        prefixed = " " + std::string(piece);
        piece = prefixed;
    }
    if (!s.regex) return count_pre_tokenized(step + 1, piece);
    // One buffer per depth and thread: the matches of this step stay put while the next
    // step splits each piece.
    thread_local std::vector<std::vector<detail::Span>> by_depth;
    if (by_depth.size() < steps.size()) by_depth.resize(steps.size());  // never while a step holds one
    auto& matches = by_depth[step];
    s.regex->matches(piece, matches, true);
    std::uint64_t tokens = 0;
    auto emit = [&](std::size_t begin, std::size_t end) {
        if (end > begin) tokens += count_pre_tokenized(step + 1, piece.substr(begin, end - begin));
    };
    if (s.behavior == Behavior::isolated) {  // the usual case, without building the pieces
        std::size_t previous = 0;
        for (auto m : matches) {
            emit(previous, m.begin);
            emit(m.begin, m.end);
            previous = m.end;
        }
        emit(previous, piece.size());
        return tokens;
    }
    // The reference's other behaviours, over the pieces and whether each matched.
    struct Piece {
        std::size_t begin, end;
        bool matched;
    };
    std::vector<Piece> all;
    std::size_t previous = 0;
    for (auto m : matches) {
        if (previous < m.begin) all.push_back({previous, m.begin, s.invert});
        all.push_back({m.begin, m.end, !s.invert});
        previous = m.end;
    }
    if (previous < piece.size()) all.push_back({previous, piece.size(), s.invert});
    std::vector<Piece> out;
    bool previous_matched = false;
    switch (s.behavior) {
        case Behavior::isolated: break;
        case Behavior::removed:
            for (auto p : all)
                if (!p.matched) out.push_back(p);
            break;
        case Behavior::contiguous:
            for (auto p : all) {
                if (p.matched == previous_matched && !out.empty()) out.back().end = p.end;
                else out.push_back(p);
                previous_matched = p.matched;
            }
            break;
        case Behavior::merged_with_previous:
            for (auto p : all) {
                if (p.matched && !previous_matched && !out.empty()) out.back().end = p.end;
                else out.push_back(p);
                previous_matched = p.matched;
            }
            break;
        case Behavior::merged_with_next:
            for (auto it = all.rbegin(); it != all.rend(); ++it) {
                if (it->matched && !previous_matched && !out.empty()) out.back().begin = it->begin;
                else out.push_back(*it);
                previous_matched = it->matched;
            }
            std::reverse(out.begin(), out.end());
            break;
    }
    for (auto p : out) emit(p.begin, p.end);
    return tokens;
}

std::uint64_t HfTokenizer::Model::count_word(std::string_view word) const {
    if (auto cached = detail::WordCache::find(cache_owner, word)) return *cached;
    auto tokens = merge_word(word);
    detail::WordCache::put(cache_owner, word, tokens);
    return tokens;
}

std::uint64_t HfTokenizer::Model::merge_word(std::string_view word) const {
    if (ignore_merges && vocabulary.find(word) != vocabulary.end()) return 1;
    thread_local std::vector<detail::Symbol> symbols;
    symbols.clear();
    for (std::uint32_t i = 0; i < word.size(); ++i) {
        auto id = byte_id[static_cast<std::uint8_t>(word[i])];
        if (id != k_none) symbols.push_back({id, i, i + 1});  // no unknown token: the byte is dropped
    }
    return detail::merge_symbols(symbols, [&](const detail::Symbol& left, const detail::Symbol& right) {
        return merges.find(left.id, right.id);
    });
}

void HfTokenizer::Model::load_normalizer(element n) {
    if (n.is_null()) return;
    auto type = string_or(n, "type", "");
    if (type == "Sequence") {
        simdjson::dom::array list;
        if (n["normalizers"].get_array().get(list) != simdjson::SUCCESS)
            unsupported("a Sequence normalizer without its list");
        for (element each : list) load_normalizer(each);
        return;
    }
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* form = nullptr;
    if (type == "NFC") form = icu::Normalizer2::getNFCInstance(status);
    else if (type == "NFD") form = icu::Normalizer2::getNFDInstance(status);
    else if (type == "NFKC") form = icu::Normalizer2::getNFKCInstance(status);
    else if (type == "NFKD") form = icu::Normalizer2::getNFKDInstance(status);
    else unsupported("its normalizer '" + std::string(type) + "' is not supported (NFC, NFD, NFKC, NFKD are)");
    if (!form || U_FAILURE(status)) unsupported("ICU has no " + std::string(type) + " data");
    normalizers.push_back(form);
}

void HfTokenizer::Model::load_pre_tokenizer(element p) {
    if (p.is_null()) return;
    auto type = string_or(p, "type", "");
    auto compile = [&](std::string_view pattern) {
        std::string error;
        auto regex = detail::SplitRegex::compile(pattern, error);
        if (!regex) unsupported("its pre-tokenizer pattern " + std::string(pattern) + ": " + error);
        return regex;
    };
    PreTokenizerStep step;
    if (type == "Sequence") {
        simdjson::dom::array list;
        if (p["pretokenizers"].get_array().get(list) != simdjson::SUCCESS)
            unsupported("a Sequence pre-tokenizer without its list");
        for (element each : list) load_pre_tokenizer(each);
        return;
    } else if (type == "ByteLevel") {
        step.byte_level = true;
        step.add_prefix_space = bool_or(p, "add_prefix_space", true);
        if (bool_or(p, "use_regex", true)) step.regex = compile(k_gpt2_pattern);
    } else if (type == "Split") {
        std::string_view pattern;
        if (p["pattern"]["Regex"].get_string().get(pattern) == simdjson::SUCCESS) step.regex = compile(pattern);
        else if (p["pattern"]["String"].get_string().get(pattern) == simdjson::SUCCESS)
            step.regex = compile("\\Q" + std::string(pattern) + "\\E");
        else unsupported("a Split pre-tokenizer without a Regex or String pattern");
        auto behavior = string_or(p, "behavior", "Isolated");
        if (behavior == "Isolated") step.behavior = Behavior::isolated;
        else if (behavior == "Removed") step.behavior = Behavior::removed;
        else if (behavior == "MergedWithPrevious") step.behavior = Behavior::merged_with_previous;
        else if (behavior == "MergedWithNext") step.behavior = Behavior::merged_with_next;
        else if (behavior == "Contiguous") step.behavior = Behavior::contiguous;
        else unsupported("its Split behavior '" + std::string(behavior) + "' is unknown");
        step.invert = bool_or(p, "invert", false);
    } else if (type == "Digits") {  // a split on numeric characters, each alone or in runs
        step.regex = compile(bool_or(p, "individual_digits", false) ? "\\p{N}" : "\\p{N}+");
    } else {
        unsupported("its pre-tokenizer '" + std::string(type) +
                    "' is not byte-level BPE's (Sequence, Split, ByteLevel, Digits are supported)");
    }
    steps.push_back(std::move(step));
}

void HfTokenizer::Model::load_post_processor(element p) {
    if (p.is_null()) return;
    auto type = string_or(p, "type", "");
    if (type == "ByteLevel") return;  // offsets only
    if (type == "Sequence") {
        simdjson::dom::array list;
        if (p["processors"].get_array().get(list) != simdjson::SUCCESS)
            unsupported("a Sequence post-processor without its list");
        for (element each : list) load_post_processor(each);
        return;
    }
    if (type == "BertProcessing" || type == "RobertaProcessing") {  // [CLS] A [SEP]
        added_per_sequence += 2;
        return;
    }
    if (type != "TemplateProcessing") unsupported("its post-processor '" + std::string(type) + "' is not supported");
    simdjson::dom::array single;
    if (p["single"].get_array().get(single) != simdjson::SUCCESS)
        unsupported("a TemplateProcessing post-processor without its 'single' template");
    for (element item : single) {
        std::string_view id;
        if (item["SpecialToken"]["id"].get_string().get(id) != simdjson::SUCCESS) continue;  // the sequence itself
        simdjson::dom::array ids;
        if (p["special_tokens"][id]["ids"].get_array().get(ids) != simdjson::SUCCESS)
            unsupported("its post-processor adds '" + std::string(id) + "', which its special_tokens do not define");
        added_per_sequence += ids.size();
    }
}

void HfTokenizer::Model::load_model(element m) {
    auto type = string_or(m, "type", "BPE");
    if (type != "BPE") unsupported("its model is " + std::string(type) + ", not BPE");
    double dropout = 0;
    if (!is_null_or_absent(m, "dropout") &&
        (m["dropout"].get_double().get(dropout) != simdjson::SUCCESS || dropout > 0))
        unsupported("BPE dropout is random: its counts cannot be priced");
    for (auto key : {"continuing_subword_prefix", "end_of_word_suffix"})
        if (!string_or(m, key, "").empty()) unsupported(std::string("a BPE with a ") + key + " is not byte-level");
    ignore_merges = bool_or(m, "ignore_merges", false);
    simdjson::dom::object vocab;
    if (m["vocab"].get_object().get(vocab) != simdjson::SUCCESS) unsupported("its BPE model has no vocab");
    const auto& bytes = alphabet();
    std::unordered_map<std::string_view, std::uint32_t> ids;  // as written, in the byte alphabet
    ids.reserve(vocab.size());
    for (auto [token, value] : vocab) {
        std::uint64_t id = 0;
        if (value.get_uint64().get(id) != simdjson::SUCCESS || id >= k_none)
            unsupported("its vocab gives '" + std::string(token) + "' an id that is not a token id");
        ids[token] = static_cast<std::uint32_t>(id);
        if (ignore_merges)
            if (auto raw = bytes.bytes(token)) vocabulary.emplace(std::move(*raw), static_cast<std::uint32_t>(id));
    }
    vocabulary_entries = ids.size();
    for (int b = 0; b < 256; ++b) {
        auto it = ids.find(bytes.character(static_cast<std::uint8_t>(b)));
        byte_id[b] = it == ids.end() ? k_none : it->second;
    }
    simdjson::dom::array merges_list;
    if (m["merges"].get_array().get(merges_list) != simdjson::SUCCESS) unsupported("its BPE model has no merges");
    merges.reserve(merges_list.size());
    std::uint32_t rank = 0;
    std::string joined;
    for (element merge : merges_list) {
        std::string_view left, right, line;
        if (merge.get_string().get(line) == simdjson::SUCCESS) {  // "a b", the older form
            auto space = line.find(' ');
            if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
                unsupported("merge " + std::to_string(rank) + " '" + std::string(line) + "' is not two tokens");
            left = line.substr(0, space);
            right = line.substr(space + 1);
        } else {
            simdjson::dom::array pair;
            if (merge.get_array().get(pair) != simdjson::SUCCESS || pair.size() != 2 ||
                pair.at(0).get_string().get(left) != simdjson::SUCCESS ||
                pair.at(1).get_string().get(right) != simdjson::SUCCESS)
                unsupported("merge " + std::to_string(rank) + " is not a pair of tokens");
        }
        joined.assign(left).append(right);
        auto l = ids.find(left), r = ids.find(right), j = ids.find(joined);
        if (l == ids.end() || r == ids.end() || j == ids.end())
            unsupported("merge " + std::to_string(rank) + " '" + std::string(left) + " " + std::string(right) +
                        "' names a token its vocab does not have");
        merges.insert(l->second, r->second, {rank, j->second});
        ++rank;
    }
}

void HfTokenizer::Model::load_added_tokens(element tokens) {
    if (tokens.is_null()) return;
    simdjson::dom::array list;
    if (tokens.get_array().get(list) != simdjson::SUCCESS) unsupported("its added_tokens is not a list");
    for (element t : list) {
        std::string_view content;
        if (t["content"].get_string().get(content) != simdjson::SUCCESS) unsupported("an added token without content");
        AddedToken token{std::string(content), bool_or(t, "single_word", false), bool_or(t, "lstrip", false),
                         bool_or(t, "rstrip", false)};
        // A normalized token is looked for in the normalized text, as its normalized self.
        if (bool_or(t, "normalized", !bool_or(t, "special", false))) {
            std::string storage;
            token.content = std::string(normalize(token.content, storage));
            added_normalized.add(std::move(token));
        } else {
            added_raw.add(std::move(token));
        }
    }
}

HfTokenizer::HfTokenizer() : model_(std::make_unique<Model>()) {}
HfTokenizer::~HfTokenizer() = default;

std::unique_ptr<HfTokenizer> HfTokenizer::load(const std::string& path) {
    simdjson::dom::parser parser;
    element root;
    if (auto error = parser.load(path).get(root); error)
        throw std::runtime_error("cannot read tokenizer " + path + ": " + simdjson::error_message(error));
    std::unique_ptr<HfTokenizer> t(new HfTokenizer());
    auto& m = *t->model_;
    try {
        if (!root.is_object()) unsupported("it is not a JSON object");
        element model;
        if (root["model"].get(model) != simdjson::SUCCESS) unsupported("it has no 'model'");
        auto part = [&](std::string_view key) -> std::optional<element> {
            element v;
            if (root[key].get(v) != simdjson::SUCCESS || v.is_null()) return std::nullopt;
            return v;
        };
        if (auto n = part("normalizer")) m.load_normalizer(*n);
        if (auto p = part("pre_tokenizer")) m.load_pre_tokenizer(*p);
        if (std::none_of(m.steps.begin(), m.steps.end(), [](const auto& s) { return s.byte_level; }))
            unsupported("its pre-tokenizer has no ByteLevel step: it is not a byte-level BPE");
        m.load_model(model);
        if (auto a = part("added_tokens")) m.load_added_tokens(*a);
        if (auto p = part("post_processor")) m.load_post_processor(*p);
    } catch (const std::runtime_error& e) {
        throw std::runtime_error("tokenizer " + path + ": " + e.what());
    }
    m.name = "tokenizer.json " + path;
    return t;
}

std::uint64_t HfTokenizer::count(std::string_view text) const {
    // Validated once here, so that every split below can skip PCRE2's own check.
    if (!simdjson::validate_utf8(text.data(), text.size())) return estimate_tokens(text);
    return model_->count_added(model_->added_raw, text, false);
}

std::uint64_t HfTokenizer::added_per_sequence() const { return model_->added_per_sequence; }
const std::string& HfTokenizer::name() const { return model_->name; }
std::size_t HfTokenizer::vocabulary_size() const { return model_->vocabulary_entries; }

}  // namespace tokengate::cost
