#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokengate/cost/cost.hpp"

namespace tokengate::cost {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

/// tests/corpus/cl100k_counts.json holds the npm tiktoken encoder's counts for each corpus file
/// (the BPE reference test re-derives them when npm is reachable).
TEST(EstimatorAccuracy, HeuristicWithin25PercentOfBpe) {
    fs::path corpus = fs::path(TOKENGATE_FIXTURES).parent_path() / "corpus";
    auto expected = nlohmann::json::parse(slurp(corpus / "cl100k_counts.json"));
    ASSERT_GE(expected.size(), 4u);
    for (auto it = expected.begin(); it != expected.end(); ++it) {
        auto reference = it.value().get<double>();
        auto estimate = static_cast<double>(estimate_tokens(slurp(corpus / it.key())));
        double error = estimate / reference - 1;
        std::printf("  %-16s bpe %5.0f  heuristic %5.0f  %+5.1f%%\n", it.key().c_str(), reference, estimate,
                    error * 100);
        EXPECT_LE(std::abs(error), 0.25) << it.key();
    }
}

}  // namespace
}  // namespace tokengate::cost
