#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokengate/config/config.hpp"

namespace tokengate::cost {

/// Counts a model's tokens. Implementations are immutable once loaded and thread-safe.
class Tokenizer {
public:
    virtual ~Tokenizer() = default;
    /// Tokens of `text` as content: special-token text inside it counts as those tokens, and
    /// nothing is added around it.
    virtual std::uint64_t count(std::string_view text) const = 0;
    /// Tokens the tokenizer adds around one sequence when asked to (`add_special_tokens`,
    /// as vLLM encodes a completions prompt): a BOS, say.
    virtual std::uint64_t added_per_sequence() const { return 0; }
    /// What counted, for /admin/explain: "tokenizer.json /models/qwen3/tokenizer.json".
    virtual const std::string& name() const = 0;
};

/// `text`'s tokens by `tokenizer`, or by the heuristic estimator when there is none.
std::uint64_t count_text(std::string_view text, const Tokenizer* tokenizer);

/// A `.json` file is a Hugging Face tokenizer.json; anything else a tiktoken rank file.
/// Throws std::runtime_error saying what is wrong with the file.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

/// The tokenizers one config names: `cost.estimator`'s and each model's. Shared by every
/// request of one Runtime.
class Tokenizers {
public:
    Tokenizers() = default;
    /// Loads every file `config` names, keeping `previous`'s copy of a file that has not
    /// changed since (a reload does not re-read an 11 MB tokenizer). Throws
    /// config::ConfigError at the key of a file that cannot be loaded.
    static Tokenizers load(const config::GatewayConfig& config, const Tokenizers* previous = nullptr);

    /// The tokenizer for models[model_index] (its own, else the estimator's), or the
    /// estimator's for npos; null means the heuristic.
    const Tokenizer* for_model(std::size_t model_index) const;
    const Tokenizer* estimator() const { return estimator_.get(); }
    std::size_t files() const { return loaded_.size(); }

private:
    struct Loaded {
        std::int64_t size = 0;
        std::int64_t modified = 0;
        std::string pattern;  // the tiktoken pattern it was loaded with
        std::shared_ptr<const Tokenizer> tokenizer;
    };
    /// This set's copy of `path` if the file is still the one it loaded.
    const Loaded* unchanged(const std::string& path, const Loaded& now) const;
    std::shared_ptr<const Tokenizer> estimator_;
    std::vector<std::shared_ptr<const Tokenizer>> by_model_;
    std::map<std::string, Loaded> loaded_;
};

}  // namespace tokengate::cost
