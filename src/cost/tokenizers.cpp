#include <sys/stat.h>

#include "tokengate/config/loader.hpp"
#include "tokengate/cost/bpe.hpp"
#include "tokengate/cost/cost.hpp"
#include "tokengate/cost/hf_tokenizer.hpp"
#include "tokengate/cost/tokenizer.hpp"

namespace tokengate::cost {

std::uint64_t count_text(std::string_view text, const Tokenizer* tokenizer) {
    return tokenizer ? tokenizer->count(text) : estimate_tokens(text);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
    if (path.ends_with(".json")) return HfTokenizer::load(path);
    return BpeTokenizer::load(path);
}

namespace {

/// A file's size and modification time: a reload re-reads a tokenizer only when these moved.
bool identity(const std::string& path, std::int64_t& size, std::int64_t& modified) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return false;
    size = st.st_size;
    modified = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    return true;
}

}  // namespace

Tokenizers Tokenizers::load(const config::GatewayConfig& config, const Tokenizers* previous) {
    Tokenizers out;
    auto get = [&](const std::string& path, const std::string& pattern,
                   config::KeyPosition at) -> std::shared_ptr<const Tokenizer> {
        if (auto it = out.loaded_.find(path); it != out.loaded_.end() && it->second.pattern == pattern)
            return it->second.tokenizer;
        Loaded file;
        file.pattern = pattern;
        try {
            if (!identity(path, file.size, file.modified)) throw std::runtime_error("cannot read " + path);
            if (const auto* kept = previous ? previous->unchanged(path, file) : nullptr) {
                out.loaded_[path] = *kept;
                return kept->tokenizer;
            }
            if (pattern.empty()) file.tokenizer = load_tokenizer(path);
            else
                file.tokenizer = BpeTokenizer::load(
                    path, pattern == "o200k" ? BpeTokenizer::Pattern::o200k : BpeTokenizer::Pattern::cl100k);
        } catch (const std::exception& e) {
            throw config::ConfigError(config.source_path, at.line, at.column, e.what());
        }
        out.loaded_[path] = file;
        return file.tokenizer;
    };
    const auto& cost = config.cost;
    if (!cost.tiktoken_path.empty()) out.estimator_ = get(cost.tiktoken_path, cost.tiktoken_pattern, cost.tiktoken_at);
    for (const auto& model : config.models)
        out.by_model_.push_back(model.tokenizer.empty() ? nullptr : get(model.tokenizer, {}, model.tokenizer_at));
    return out;
}

const Tokenizers::Loaded* Tokenizers::unchanged(const std::string& path, const Loaded& now) const {
    auto it = loaded_.find(path);
    if (it == loaded_.end()) return nullptr;
    const auto& was = it->second;
    return was.size == now.size && was.modified == now.modified && was.pattern == now.pattern ? &was : nullptr;
}

const Tokenizer* Tokenizers::for_model(std::size_t model_index) const {
    if (model_index < by_model_.size() && by_model_[model_index]) return by_model_[model_index].get();
    return estimator_.get();
}

}  // namespace tokengate::cost
