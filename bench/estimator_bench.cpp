// Input-token estimation throughput on a 1 MB prompt built from tests/corpus (English,
// Chinese, code, chat). BPE needs a rank file: TOKENGATE_TIKTOKEN=/path/cl100k_base.tiktoken. Make
// one with tests/tiktoken/reference.js from the npm package the reference test installs in
// <build>/tiktoken-reference/node_modules/tiktoken (arguments: package, corpus dir, output file).

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokengate/cost/bpe.hpp"
#include "tokengate/cost/cost.hpp"
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

}  // namespace

BENCHMARK_MAIN();
