// The tokenizer.json reader on small files written here, one rule of the reference library
// each; tests/integration/hf_tokenizer_reference_test.cpp compares real models with it.

#include "tokengate/cost/hf_tokenizer.hpp"

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "tokengate/cost/cost.hpp"

namespace tokengate::cost {
namespace {

using nlohmann::json;

/// GPT-2's byte alphabet, as tokenizer.json files write their vocabularies.
std::string byte_char(unsigned char b) {
    int next = 256;
    for (int i = 0; i < 256; ++i) {
        bool printable = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF);
        int c = printable ? i : next++;
        if (i != b) continue;
        std::string out;
        if (c < 0x80) out.push_back(static_cast<char>(c));
        else {
            out.push_back(static_cast<char>(0xC0 | (c >> 6)));
            out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
        }
        return out;
    }
    return {};
}

std::string bytes(std::string_view raw) {
    std::string out;
    for (unsigned char b : raw) out += byte_char(b);
    return out;
}

/// A byte-level BPE: every byte a token, then `merges` (raw text pairs) in rank order, each
/// result given the id in `ids` if named there, else the next free one.
struct Spec {
    std::vector<std::pair<std::string, std::string>> merges;
    std::map<std::string, int> ids;
    std::vector<std::string> extra_vocab;
    json added_tokens = json::array();
    json normalizer = nullptr;
    json pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
    json post_processor = nullptr;
    json model_extra = json::object();
};

class HfTokenizerTest : public ::testing::Test {
protected:
    std::string write(const json& document) {
        auto path = (std::filesystem::temp_directory_path() /
                     ("tokengate-hf-" + std::to_string(::getpid()) + "-" + std::to_string(files_++) + ".json"))
                        .string();
        std::ofstream(path) << document.dump();
        written_.push_back(path);
        return path;
    }
    json document(const Spec& spec) {
        json vocab = json::object();
        int next = 256;
        for (int b = 0; b < 256; ++b) vocab[byte_char(static_cast<unsigned char>(b))] = b;
        json merges = json::array();
        for (const auto& [l, r] : spec.merges) {
            merges.push_back({bytes(l), bytes(r)});
            auto joined = bytes(l + r);
            if (!vocab.contains(joined)) vocab[joined] = spec.ids.count(l + r) ? spec.ids.at(l + r) : next++;
        }
        for (const auto& v : spec.extra_vocab) vocab[bytes(v)] = next++;
        json model = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}};
        model.update(spec.model_extra);
        return {{"version", "1.0"},
                {"added_tokens", spec.added_tokens},
                {"normalizer", spec.normalizer},
                {"pre_tokenizer", spec.pre_tokenizer},
                {"post_processor", spec.post_processor},
                {"model", model}};
    }
    std::unique_ptr<HfTokenizer> load(const Spec& spec) { return HfTokenizer::load(write(document(spec))); }
    std::string load_error(const json& doc) {
        try {
            HfTokenizer::load(write(doc));
        } catch (const std::runtime_error& e) {
            return e.what();
        }
        return "loaded";
    }
    void TearDown() override {
        for (const auto& p : written_) std::filesystem::remove(p);
    }

    int files_ = 0;
    std::vector<std::string> written_;
};

json added(const std::string& content, json flags = json::object()) {
    json t = {{"id", 1000},      {"content", content},  {"single_word", false}, {"lstrip", false},
              {"rstrip", false}, {"normalized", false}, {"special", true}};
    t.update(flags);
    return t;
}

TEST_F(HfTokenizerTest, MergesFollowTheirRankNotTheIdsOfWhatTheyMake) {
    Spec spec;
    // "ab" merges first (rank 0) though "bc" has the lower id; then "ab"+"c" makes one token.
    spec.merges = {{"a", "b"}, {"b", "c"}, {"ab", "c"}};
    spec.ids = {{"ab", 400}, {"bc", 300}, {"abc", 401}};
    auto t = load(spec);
    EXPECT_EQ(t->count("abc"), 1u);
    EXPECT_EQ(t->count("bc"), 1u);
    EXPECT_EQ(t->count("cab"), 2u);
    EXPECT_EQ(t->count(""), 0u);
}

TEST_F(HfTokenizerTest, ShortAndLongWordsMergeAlike) {
    Spec spec;
    spec.merges = {{"a", "b"}, {"ab", "ab"}};
    auto t = load(spec);
    std::string word;
    for (int i = 0; i < 10; ++i) word += "ab";
    EXPECT_EQ(t->count(word), 5u);  // 20 symbols: the scanning merge
    for (int i = 0; i < 90; ++i) word += "ab";
    EXPECT_EQ(t->count(word), 50u);  // 200 symbols: the heap
    EXPECT_EQ(t->count(std::string(1 << 20, 'a')), 1u << 20) << "a 1 MiB word with no merge";
}

TEST_F(HfTokenizerTest, IgnoreMergesTakesAWordThatIsAToken) {
    Spec spec;
    spec.extra_vocab = {"xyz"};
    EXPECT_EQ(load(spec)->count("xyz"), 3u) << "no merge makes it";
    spec.model_extra = {{"ignore_merges", true}};
    EXPECT_EQ(load(spec)->count("xyz"), 1u);
}

TEST_F(HfTokenizerTest, AddedTokensAreFoundLeftmostLongestAndCountOne) {
    Spec spec;
    spec.added_tokens = {added("<|x"), added("<|x|>"), added("<|y|>")};
    auto t = load(spec);
    EXPECT_EQ(t->count("hi<|x|>there"), 2u + 1 + 5);
    EXPECT_EQ(t->count("<|x|><|y|>"), 2u);
    EXPECT_EQ(t->count("<|x|"), 1u + 1) << "the shorter token, then '|'";
    EXPECT_EQ(t->count(std::string(1 << 20, '<')), 1u << 20) << "a million '<': each a byte, none a token";
}

TEST_F(HfTokenizerTest, AddedTokensStripAndSingleWordAsFlagged) {
    Spec spec;
    spec.added_tokens = {added("<m>", {{"lstrip", true}}), added("<n>", {{"rstrip", true}}),
                         added("<w>", {{"single_word", true}})};
    auto t = load(spec);
    EXPECT_EQ(t->count("a   <m>b"), 3u) << "the spaces before <m> are its own";
    EXPECT_EQ(t->count("a<n>   b"), 3u) << "the spaces after <n> are its own";
    EXPECT_EQ(t->count("a <w> b"), 2u + 1 + 2);
    EXPECT_EQ(t->count("a<w>b"), 5u) << "inside a word, <w> is text";
}

TEST_F(HfTokenizerTest, NormalizersRunBetweenRawAndNormalizedAddedTokens) {
    Spec spec;
    spec.normalizer = {{"type", "NFC"}};
    auto t = load(spec);
    EXPECT_EQ(t->count("e\xCC\x81"), 2u) << "e + U+0301 is é (two bytes) under NFC";
    spec.normalizer = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFKC"}}}}};
    spec.added_tokens = {added("\xEF\xAC\x81", {{"normalized", true}, {"special", false}})};  // U+FB01 "ﬁ"
    t = load(spec);
    EXPECT_EQ(t->count("fi"), 1u) << "the token is looked for as its normalized self";
    EXPECT_EQ(t->count("\xEF\xAC\x81"), 1u);
}

TEST_F(HfTokenizerTest, SplitBehavioursAsTheReferenceDefinesThem) {
    Spec spec;
    spec.merges = {{"a", "-"}, {"-", "b"}, {"-", "-"}};
    auto with = [&](const std::string& behavior, bool invert = false) {
        spec.pre_tokenizer = {
            {"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
        return load(spec);
    };
    EXPECT_EQ(with("Isolated")->count("a-b"), 3u);
    EXPECT_EQ(with("Removed")->count("a-b"), 2u);
    EXPECT_EQ(with("MergedWithPrevious")->count("a-b"), 2u) << "a- b";
    EXPECT_EQ(with("MergedWithNext")->count("a-b"), 2u) << "a -b";
    EXPECT_EQ(with("Isolated")->count("a--b"), 4u);
    EXPECT_EQ(with("Contiguous")->count("a--b"), 3u) << "a -- b";
    EXPECT_EQ(with("Removed", true)->count("a-b-"), 2u) << "inverted: the dashes are kept";
}

TEST_F(HfTokenizerTest, ByteLevelCanAddAPrefixSpaceAndSplitLikeGpt2) {
    Spec spec;
    spec.pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
    spec.merges = {{" ", "h"}, {" h", "i"}};
    auto t = load(spec);
    EXPECT_EQ(t->count("hi"), 1u) << "' hi'";
    EXPECT_EQ(t->count("hi hi"), 2u);
}

TEST_F(HfTokenizerTest, PostProcessorsSayWhatASequenceGains) {
    Spec spec;
    EXPECT_EQ(load(spec)->added_per_sequence(), 0u);
    spec.post_processor = {
        {"type", "Sequence"},
        {"processors",
         {{{"type", "ByteLevel"}},
          {{"type", "TemplateProcessing"},
           {"single",
            {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
             {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
           {"special_tokens",
            {{"<s>", {{"id", "<s>"}, {"ids", json::array({1})}, {"tokens", json::array({"<s>"})}}},
             {"</s>", {{"id", "</s>"}, {"ids", json::array({2})}, {"tokens", json::array({"</s>"})}}}}}}}}};
    EXPECT_EQ(load(spec)->added_per_sequence(), 2u);
    spec.post_processor = {{"type", "RobertaProcessing"}};
    EXPECT_EQ(load(spec)->added_per_sequence(), 2u);
}

TEST_F(HfTokenizerTest, UnsupportedFilesAreRefusedSayingWhy) {
    Spec spec;
    auto doc = document(spec);
    auto with = [&](const char* key, json value) {
        auto d = doc;
        d[key] = std::move(value);
        return load_error(d);
    };
    EXPECT_NE(with("model", {{"type", "WordPiece"}, {"vocab", json::object()}}).find("its model is WordPiece, not BPE"),
              std::string::npos);
    EXPECT_NE(with("pre_tokenizer", {{"type", "Metaspace"}}).find("pre-tokenizer 'Metaspace'"), std::string::npos);
    EXPECT_NE(with("pre_tokenizer", nullptr).find("not a byte-level BPE"), std::string::npos);
    EXPECT_NE(with("normalizer", {{"type", "Lowercase"}}).find("normalizer 'Lowercase' is not supported"),
              std::string::npos);
    EXPECT_NE(with("post_processor", {{"type", "Mystery"}}).find("post-processor 'Mystery'"), std::string::npos);
    EXPECT_NE(
        with("pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}})
            .find("does not compile"),
        std::string::npos);
    auto d = doc;
    d["model"]["merges"] = json::array({json::array({"q", "nope"})});
    EXPECT_NE(load_error(d).find("names a token its vocab does not have"), std::string::npos);
    d = doc;
    d["model"]["dropout"] = 0.1;
    EXPECT_NE(load_error(d).find("dropout"), std::string::npos);
    std::string path = write(doc);
    std::ofstream(path) << "{\"model\": ";
    EXPECT_THROW(HfTokenizer::load(path), std::runtime_error);
    EXPECT_THROW(HfTokenizer::load("/nonexistent/tokenizer.json"), std::runtime_error);
}

TEST_F(HfTokenizerTest, TextThatIsNotUtf8IsEstimatedNotRejected) {
    auto t = load(Spec{});
    std::string bad = "abc\xFF\xFE def";
    EXPECT_EQ(t->count(bad), estimate_tokens(bad));
}

}  // namespace
}  // namespace tokengate::cost
