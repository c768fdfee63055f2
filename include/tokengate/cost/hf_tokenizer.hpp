#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tokengate/cost/tokenizer.hpp"

namespace tokengate::cost {

/// A Hugging Face `tokenizer.json` with a byte-level BPE model (Llama 3, Qwen 2/2.5/3,
/// DeepSeek V3, Mistral tekken, GPT-2 style files), counted as the `tokenizers` library
/// encodes: added and special tokens first (leftmost-longest, before and after the
/// normalizer), the Unicode normalizer (ICU), every pre-tokenizer split (PCRE2), the BPE merges
/// by their rank, and the post-processor's tokens around a sequence. Thread-safe.
class HfTokenizer final : public Tokenizer {
public:
    /// Throws std::runtime_error naming the file and what it has that is not supported.
    static std::unique_ptr<HfTokenizer> load(const std::string& path);
    ~HfTokenizer() override;
    HfTokenizer(const HfTokenizer&) = delete;
    HfTokenizer& operator=(const HfTokenizer&) = delete;

    std::uint64_t count(std::string_view text) const override;
    std::uint64_t added_per_sequence() const override;
    const std::string& name() const override;
    std::size_t vocabulary_size() const;

private:
    HfTokenizer();
    struct Model;
    std::unique_ptr<Model> model_;
};

}  // namespace tokengate::cost
