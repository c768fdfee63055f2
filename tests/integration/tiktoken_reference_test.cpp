// tokengate's BPE against a reference nobody here wrote: the npm `tiktoken` package's own
// encoder. Needs npm and node; skips, saying so, when the npm registry cannot be reached.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "harness.hpp"
#include "tokengate/cost/bpe.hpp"

namespace tokengate::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path k_repo = fs::path(TOKENGATE_SOURCE_DIR);
constexpr const char* k_package = "tiktoken@1.0.22";

int run(const std::string& command) { return std::system(command.c_str()); }

std::string slurp(const fs::path& p) { return read_file(p.string()); }

class TiktokenReference : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        // ctest runs every test in its own process, in parallel: each writes its rank file and
        // counts in its own folder.
        auto shared = fs::path(TOKENGATE_BUILD_DIR) / "tiktoken-reference";
        fs::create_directories(shared);
        dir_ = shared / ("run-" + std::to_string(::getpid()));
        fs::create_directories(dir_);
        skip_ = npm_install_once(shared.string(), k_package, "tiktoken/package.json");
        if (!skip_.empty()) return;
        pkg_ = (shared / "node_modules/tiktoken").string();
        for (const auto& corpus : {k_repo / "tests/corpus", k_repo / "tests/tiktoken"}) {
            auto out = dir_ / ("counts-" + corpus.filename().string() + ".json");
            auto cmd = "node '" + (k_repo / "tests/tiktoken/reference.js").string() + "' '" + pkg_ + "' '" +
                       corpus.string() + "' '" + (dir_ / "cl100k_base.tiktoken").string() + "' > '" + out.string() +
                       "'";
            ASSERT_EQ(run(cmd), 0) << cmd;
            auto counts = json::parse(slurp(out));
            for (auto& [file, count] : counts.items())
                reference_[(corpus / file).string()] = count.get<std::uint64_t>();
        }
        tokenizer_ = cost::BpeTokenizer::load((dir_ / "cl100k_base.tiktoken").string());
    }
    static void TearDownTestSuite() {
        std::error_code ignored;
        fs::remove_all(dir_, ignored);
    }
    void SetUp() override {
        if (!skip_.empty()) GTEST_SKIP() << "tiktoken reference skipped: " << skip_;
    }

    static inline fs::path dir_;
    static inline std::string pkg_;
    static inline std::string skip_;
    static inline std::map<std::string, std::uint64_t> reference_;
    static inline std::unique_ptr<cost::BpeTokenizer> tokenizer_;
};

TEST_F(TiktokenReference, CountsEqualTheReferenceEncoder) {
    ASSERT_TRUE(tokenizer_);
    EXPECT_EQ(tokenizer_->vocabulary_size(), 100256u);
    ASSERT_GE(reference_.size(), 5u);
    for (const auto& [file, expected] : reference_) {
        SCOPED_TRACE(file);
        EXPECT_EQ(tokenizer_->count(slurp(file)), expected);
    }
}

TEST_F(TiktokenReference, CheckedInCountsAreStillTheReferences) {
    auto checked_in = json::parse(slurp(k_repo / "tests/corpus/cl100k_counts.json"));
    for (auto& [file, count] : checked_in.items())
        EXPECT_EQ(reference_[(k_repo / "tests/corpus" / file).string()], count.get<std::uint64_t>()) << file;
}

TEST_F(TiktokenReference, LinesOneByOne) {
    // Each line of every file on its own exercises many more piece boundaries.
    const auto& pkg = pkg_;
    auto lines_dir = dir_ / "lines";
    fs::create_directories(lines_dir);
    int n = 0;
    for (const auto& corpus : {k_repo / "tests/corpus", k_repo / "tests/tiktoken"})
        for (const auto& entry : fs::directory_iterator(corpus)) {
            if (entry.path().extension() != ".txt") continue;
            std::istringstream in(slurp(entry.path()));
            std::string line;
            while (std::getline(in, line)) std::ofstream(lines_dir / ("line" + std::to_string(n++) + ".txt")) << line;
        }
    auto out = dir_ / "counts-lines.json";
    ASSERT_EQ(run("node '" + (k_repo / "tests/tiktoken/reference.js").string() + "' '" + pkg + "' '" +
                  lines_dir.string() + "' '" + (dir_ / "unused.tiktoken").string() + "' > '" + out.string() + "'"),
              0);
    auto counts = json::parse(slurp(out));
    EXPECT_EQ(counts.size(), static_cast<std::size_t>(n));
    for (auto& [file, count] : counts.items())
        EXPECT_EQ(tokenizer_->count(slurp(lines_dir / file)), count.get<std::uint64_t>()) << slurp(lines_dir / file);
}

}  // namespace
}  // namespace tokengate::testing

namespace tokengate::testing {
namespace {

TEST_F(TiktokenReference, TheGatewayPricesPromptsWithTheRankFile) {
    auto rank_file = (dir_ / "cl100k_base.tiktoken").string();
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
        "cost:\n  estimator: { tiktoken: \"" +
        rank_file +
        "\" }\n"
        "tenants:\n  - { id: acme, keys: [\"k1\"] }\n");
    auto english = k_repo / "tests/corpus/english.txt";
    json body = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", slurp(english)}}}}};
    json in = {{"key", "k1"}, {"body", body}};
    auto r = gw.admin(Request{"POST", "/admin/explain", {}, in.dump()});
    ASSERT_EQ(r.status, 200) << r.body << gw.log();
    // Message framing (4), the role "user" (1, SPEC §17) and reply priming (3) around the
    // content's exact BPE count.
    EXPECT_EQ(json::parse(r.body)["input_tokens"].get<std::uint64_t>(), 4 + 1 + reference_[english.string()] + 3);
    EXPECT_EQ(json::parse(r.body)["tokenizer"], "tiktoken cl100k " + rank_file);
}

/// A random chat body and the text a ChatML-like template renders for it: per message its
/// role, name, tool_call_id, content (strings or text parts) and tool calls (function name and
/// arguments), each message's fixed tokens left to message_overhead.
struct RandomChat {
    json body;
    std::vector<std::string> rendered;  // one per message
};

RandomChat random_chat(std::mt19937_64& rng, const std::vector<std::string>& words) {
    auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
    auto text = [&](std::size_t most) {
        std::string t;
        for (auto n = 1 + pick(most); n > 0; --n) {
            t += words[pick(words.size())];
            static const char* k_glue[] = {
                " ", " ", " ", "\n", ", ", ". ", "\t", "", " 42 ", " \u00e9t\u00e9 ", "\u6f22\u5b57"};
            t += k_glue[pick(std::size(k_glue))];
        }
        return t;
    };
    static const char* k_roles[] = {"system", "user", "assistant", "tool", "developer"};
    RandomChat chat;
    json messages = json::array();
    for (auto n = 1 + pick(6); n > 0; --n) {
        json m;
        std::string rendered;
        std::string role = pick(8) == 0 ? text(40) : k_roles[pick(std::size(k_roles))];  // a role may carry the prompt
        m["role"] = role;
        rendered += role + "\n";
        if (pick(4) == 0) {
            auto name = text(3);
            m["name"] = name;
            rendered += name + "\n";
        }
        if (role == "tool") {
            auto id = "call_" + std::to_string(rng() % 100000);
            m["tool_call_id"] = id;
            rendered += id + "\n";
        }
        if (pick(3) == 0) {
            json parts = json::array();
            for (auto k = 1 + pick(3); k > 0; --k) {
                auto t = text(30);
                parts.push_back({{"type", "text"}, {"text", t}});
                rendered += t;
            }
            m["content"] = parts;
        } else {
            auto t = text(60);
            m["content"] = t;
            rendered += t;
        }
        if (role == "assistant" && pick(2) == 0) {
            json calls = json::array();
            for (auto k = 1 + pick(2); k > 0; --k) {
                auto name = words[pick(words.size())] + "_" + words[pick(words.size())];
                auto arguments = json{{"query", text(10)}, {"limit", pick(100)}}.dump();
                calls.push_back({{"id", "call_" + std::to_string(rng() % 100000)},
                                 {"type", "function"},
                                 {"function", {{"name", name}, {"arguments", arguments}}}});
                rendered += "\n" + name + " " + arguments;
            }
            m["tool_calls"] = calls;
        }
        messages.push_back(m);
        chat.rendered.push_back(rendered);
    }
    chat.body = {{"model", "m"}, {"messages", messages}};
    return chat;
}

// SPEC §17's property: for random bodies, the gateway's input count is at least what the
// reference encoder gives for the text a chat template renders from them, plus that
// template's fixed tokens (3 a message, 3 to open the reply).
TEST_F(TiktokenReference, TheInputCountIsAtLeastWhatTheTemplateRenders) {
    auto rank_file = (dir_ / "cl100k_base.tiktoken").string();
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
        "cost:\n  estimator: { tiktoken: \"" +
        rank_file + "\" }\ntenants:\n  - { id: acme, keys: [\"k1\"] }\n");
    std::vector<std::string> words;
    std::istringstream corpus(slurp(k_repo / "tests/corpus/english.txt") + slurp(k_repo / "tests/corpus/code.txt"));
    for (std::string w; corpus >> w;) words.push_back(w);
    ASSERT_GT(words.size(), 100u);
    std::mt19937_64 rng(2026);
    constexpr int k_bodies = 150;
    auto rendered_dir = dir_ / "rendered";
    fs::create_directories(rendered_dir);
    std::vector<RandomChat> chats;
    for (int i = 0; i < k_bodies; ++i) {
        chats.push_back(random_chat(rng, words));
        for (std::size_t m = 0; m < chats.back().rendered.size(); ++m) {
            char name[32];
            std::snprintf(name, sizeof name, "%03d-%zu.txt", i, m);
            std::ofstream(rendered_dir / name, std::ios::binary) << chats.back().rendered[m];
        }
    }
    auto out = dir_ / "rendered.json";
    ASSERT_EQ(run("node '" + (k_repo / "tests/tiktoken/reference.js").string() + "' '" + pkg_ + "' '" +
                  rendered_dir.string() + "' '" + (dir_ / "unused.tiktoken").string() + "' > '" + out.string() + "'"),
              0);
    auto counts = json::parse(slurp(out));
    std::uint64_t total_gateway = 0, total_reference = 0;
    for (int i = 0; i < k_bodies; ++i) {
        std::uint64_t reference = 3;
        for (std::size_t m = 0; m < chats[i].rendered.size(); ++m) {
            char name[32];
            std::snprintf(name, sizeof name, "%03d-%zu.txt", i, m);
            reference += 3 + counts[name].get<std::uint64_t>();
        }
        auto r = gw.admin(Request{"POST", "/admin/explain", {}, json{{"key", "k1"}, {"body", chats[i].body}}.dump()});
        ASSERT_EQ(r.status, 200) << r.body;
        auto gateway = json::parse(r.body)["input_tokens"].get<std::uint64_t>();
        EXPECT_GE(gateway, reference) << chats[i].body.dump();
        total_gateway += gateway;
        total_reference += reference;
    }
    std::printf("%d random chat bodies: the gateway counted %llu input tokens, the template's text %llu (%.3fx)\n",
                k_bodies, static_cast<unsigned long long>(total_gateway),
                static_cast<unsigned long long>(total_reference),
                static_cast<double>(total_gateway) / static_cast<double>(total_reference));
}

TEST_F(TiktokenReference, AModelCanCountWithARankFileOfItsOwn) {
    auto rank_file = (dir_ / "cl100k_base.tiktoken").string();
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/completions, upstreams: [mock] }\n"
        "models:\n  gpt-4: { tokenizer: \"" +
        rank_file +
        "\" }\n"
        "tenants:\n  - { id: acme, keys: [\"k1\"] }\n");
    auto english = k_repo / "tests/corpus/english.txt";
    for (const auto& [model, tokenizer] :
         {std::pair{"gpt-4", "tiktoken cl100k " + rank_file}, std::pair{"llama", std::string("heuristic")}}) {
        json in = {
            {"key", "k1"}, {"path", "/v1/completions"}, {"body", {{"model", model}, {"prompt", slurp(english)}}}};
        auto r = gw.admin(Request{"POST", "/admin/explain", {}, in.dump()});
        ASSERT_EQ(r.status, 200) << r.body << gw.log();
        auto out = json::parse(r.body);
        EXPECT_EQ(out["tokenizer"], tokenizer);
        if (std::string(model) == "gpt-4") {
            EXPECT_EQ(out["input_tokens"].get<std::uint64_t>(), reference_[english.string()]) << "no BOS in tiktoken";
        }
    }
}

}  // namespace
}  // namespace tokengate::testing

namespace tokengate::testing {
namespace {

// SPEC §20, a table per block type: a Messages body costs the reference encoder's count of the
// text it carries, exactly as the same text in a chat message does, plus the documented
// overhead (docs/how-it-works.md): 1 token for a block other than text, the system prompt as a
// message of its own (4 + the role "system").
TEST_F(TiktokenReference, MessagesBlocksCostTheirTextAsChatDoesPlusTheirOverhead) {
    auto rank_file = (dir_ / "cl100k_base.tiktoken").string();
    GatewayUnderTest gw(
        "routes:\n  - { path_prefix: /v1/, upstreams: [mock] }\n"
        "cost:\n  estimator: { tiktoken: \"" +
        rank_file + "\" }\ntenants:\n  - { id: acme, keys: [\"k1\"] }\n");
    // The texts, counted by the reference encoder.
    const std::map<std::string, std::string> texts = {
        {"prose", slurp(k_repo / "tests/corpus/english.txt").substr(0, 3000)},
        {"code", slurp(k_repo / "tests/corpus/code.txt").substr(0, 2000)},
        {"name", "web_search"},
        {"title", "Quarterly report \u00e9t\u00e9 2026"},
        {"key", "query"},
        {"system", "system"},
        {"user", "user"},
    };
    auto texts_dir = dir_ / "messages-texts";
    fs::create_directories(texts_dir);
    for (const auto& [name, text] : texts) std::ofstream(texts_dir / (name + ".txt"), std::ios::binary) << text;
    auto out = dir_ / "messages-texts.json";
    ASSERT_EQ(run("node '" + (k_repo / "tests/tiktoken/reference.js").string() + "' '" + pkg_ + "' '" +
                  texts_dir.string() + "' '" + (dir_ / "unused.tiktoken").string() + "' > '" + out.string() + "'"),
              0);
    auto counts = json::parse(slurp(out));
    auto ref = [&](const std::string& name) { return counts[name + ".txt"].get<std::uint64_t>(); };
    auto input = [&](const std::string& path, const json& body) {
        auto r =
            gw.admin(Request{"POST", "/admin/explain", {}, json{{"key", "k1"}, {"path", path}, {"body", body}}.dump()});
        EXPECT_EQ(r.status, 200) << r.body;
        return json::parse(r.body)["input_tokens"].get<std::uint64_t>();
    };
    auto messages = [&](const json& content) {
        return input("/v1/messages",
                     {{"model", "m"}, {"max_tokens", 1}, {"messages", {{{"role", "user"}, {"content", content}}}}});
    };
    auto chat = [&](const json& content) {
        return input("/v1/chat/completions",
                     {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", content}}}}});
    };
    const auto& prose = texts.at("prose");
    const auto& code = texts.at("code");
    // The frame around one user message: its overhead, its role, the reply's priming.
    const std::uint64_t frame = 4 + ref("user") + 3;
    ASSERT_EQ(chat(prose), frame + ref("prose")) << "the reference itself";

    struct Row {
        const char* block;
        json content;            // the Messages content
        json chat_content;       // the same text as chat content
        std::uint64_t expected;  // by the reference encoder
    };
    const std::vector<Row> rows = {
        {"string", prose, prose, frame + ref("prose")},
        {"text", {{{"type", "text"}, {"text", prose}}}, {{{"type", "text"}, {"text", prose}}}, frame + ref("prose")},
        {"thinking",
         {{{"type", "thinking"}, {"thinking", prose}, {"signature", "sig"}}},
         prose,
         frame + 1 + ref("prose")},
        {"tool_result",
         {{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", code}}},
         code,
         frame + 1 + ref("code")},
        {"tool_result blocks",
         {{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", {{{"type", "text"}, {"text", code}}}}}},
         code,
         frame + 1 + ref("code")},
        {"tool_use",
         {{{"type", "tool_use"}, {"id", "toolu_1"}, {"name", texts.at("name")}, {"input", {{"query", prose}}}}},
         texts.at("name") + "query" + prose,
         frame + 1 + ref("name") + ref("key") + ref("prose")},
        {"document text",
         {{{"type", "document"},
           {"title", texts.at("title")},
           {"source", {{"type", "text"}, {"media_type", "text/plain"}, {"data", prose}}}}},
         {{{"type", "text"}, {"text", texts.at("title")}}, {{"type", "text"}, {"text", prose}}},
         frame + 1 + ref("title") + ref("prose")},
        {"image url",
         {{{"type", "image"}, {"source", {{"type", "url"}, {"url", "https://example.com/a.png"}}}}},
         {{{"type", "image_url"}, {"image_url", {{"url", "https://example.com/a.png"}}}}},
         frame + 1 + 1000},
    };
    for (const auto& row : rows) {
        SCOPED_TRACE(row.block);
        auto priced = messages(row.content);
        EXPECT_EQ(priced, row.expected);
        auto overhead = std::string(row.block) == "string" || std::string(row.block) == "text" ? 0u : 1u;
        // tool_use's chat text above is one string: the reference counts its parts apart.
        if (std::string(row.block) != "tool_use") {
            EXPECT_EQ(priced, chat(row.chat_content) + overhead);
        }
    }
    // The system prompt is a message of its own, as chat's system message is.
    json with_system = {
        {"model", "m"}, {"max_tokens", 1}, {"system", code}, {"messages", {{{"role", "user"}, {"content", prose}}}}};
    json chat_system = {
        {"model", "m"},
        {"messages", {{{"role", "system"}, {"content", code}}, {{"role", "user"}, {"content", prose}}}}};
    EXPECT_EQ(input("/v1/messages", with_system), frame + ref("prose") + 4 + ref("system") + ref("code"));
    EXPECT_EQ(input("/v1/messages", with_system), input("/v1/chat/completions", chat_system));
    with_system["system"] = {{{"type", "text"}, {"text", code}, {"cache_control", {{"type", "ephemeral"}}}}};
    EXPECT_EQ(input("/v1/messages", with_system), input("/v1/chat/completions", chat_system)) << "as text blocks";
    // count_tokens answers what the same body is priced at.
    auto counted = gw.request({"POST", "/v1/messages/count_tokens", {{"x-api-key", "k1"}}, with_system.dump()});
    ASSERT_EQ(counted.status, 200) << counted.body;
    EXPECT_EQ(json::parse(counted.body)["input_tokens"], input("/v1/messages", with_system));
}

}  // namespace
}  // namespace tokengate::testing
