// Which tokenizer counts for which model, loaded once, kept across a reload while its file is
// unchanged, and refused with the position of the key that names a bad file.

#include "tokengate/cost/tokenizer.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tokengate/config/loader.hpp"

namespace tokengate::cost {
namespace {

namespace fs = std::filesystem;

class TokenizersTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("tokengate-tokenizers-" + std::to_string(::getpid()));
        fs::create_directories(dir_);
        // The fuzz target's tokenizer: small, and every feature of the format.
        fs::copy_file(fs::path(TOKENGATE_FIXTURES).parent_path() / "fuzz/tokenizer.json", dir_ / "small.json",
                      fs::copy_options::overwrite_existing);
    }
    void TearDown() override { fs::remove_all(dir_); }

    std::shared_ptr<const config::GatewayConfig> config(const std::string& models) {
        return config::load_config_text(
            "upstreams:\n  - { name: up, url: \"http://127.0.0.1:8000\" }\n"
            "routes:\n  - { path: /v1/completions, upstreams: [up] }\n"
            "tenants:\n  - { id: t, keys: [k] }\n"
            "models:\n" +
                models,
            (dir_ / "gateway.yaml").string());
    }

    fs::path dir_;
};

TEST_F(TokenizersTest, EachModelCountsWithItsOwnFileLoadedOnce) {
    auto cfg = config("  qwen: { tokenizer: small.json }\n  qwen-chat: { tokenizer: small.json }\n  other: {}\n");
    auto set = Tokenizers::load(*cfg);
    EXPECT_EQ(set.files(), 1u);
    ASSERT_NE(set.for_model(0), nullptr);
    EXPECT_EQ(set.for_model(0), set.for_model(1)) << "one file, one tokenizer";
    EXPECT_EQ(set.for_model(0)->name(), "tokenizer.json " + (dir_ / "small.json").string());
    EXPECT_EQ(set.for_model(2), nullptr) << "no tokenizer, no estimator: the heuristic";
    EXPECT_EQ(set.for_model(std::string::npos), nullptr);
    EXPECT_EQ(set.for_model(0)->added_per_sequence(), 1u) << "its template's BOS";
}

TEST_F(TokenizersTest, AReloadKeepsAnUnchangedFileAndRereadsAChangedOne) {
    auto cfg = config("  qwen: { tokenizer: small.json }\n");
    auto first = Tokenizers::load(*cfg);
    auto again = Tokenizers::load(*cfg, &first);
    EXPECT_EQ(again.for_model(0), first.for_model(0));
    // A newer file of another size: the reload reads it.
    std::ofstream(dir_ / "small.json", std::ios::app) << "\n\n";
    auto changed = Tokenizers::load(*cfg, &again);
    EXPECT_NE(changed.for_model(0), again.for_model(0));
}

TEST_F(TokenizersTest, AFileThatDoesNotLoadIsAnErrorAtItsKey) {
    std::ofstream(dir_ / "bert.json") << R"({"model": {"type": "WordPiece"}, "pre_tokenizer": {"type": "ByteLevel"}})";
    auto cfg = config("  ok: { tokenizer: small.json }\n  bert:\n    tokenizer: bert.json\n");
    try {
        Tokenizers::load(*cfg);
        FAIL() << "loaded";
    } catch (const config::ConfigError& e) {
        EXPECT_EQ(e.line(), 10);
        EXPECT_EQ(e.column(), 16);
        EXPECT_NE(e.message().find((dir_ / "bert.json").string()), std::string::npos) << e.what();
        EXPECT_NE(e.message().find("its model is WordPiece, not BPE"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace tokengate::cost
