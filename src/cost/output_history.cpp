#include "tokengate/cost/output_history.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tokengate/core/hash.hpp"

namespace tokengate::cost {

namespace {

std::string key_of(std::string_view tenant, std::string_view model) {
    std::string key;
    key.reserve(tenant.size() + 1 + model.size());
    key.append(tenant).push_back('\0');
    key.append(model);
    return key;
}

}  // namespace

/// One (tenant, model): a ring of byte-coded samples and the quantile of them as of the last
/// sample, so that an admission only reads a number.
struct OutputHistory::Series {
    std::string key;
    std::unique_ptr<std::uint8_t[]> ring;
    std::uint32_t capacity = 0;
    std::uint32_t size = 0;
    std::uint32_t next = 0;  // where the next sample goes
    std::uint64_t quantile = 0;
};

struct OutputHistory::Shard {
    mutable std::mutex mutex;
    std::list<Series> recent;                                                 // most recently recorded first
    std::unordered_map<std::string_view, std::list<Series>::iterator> index;  // views of Series::key
};

OutputHistory::OutputHistory() : shards_(std::make_unique<std::array<Shard, k_shards>>()) {}
OutputHistory::~OutputHistory() = default;

std::uint8_t OutputHistory::encode(std::uint64_t tokens) {
    // ceil(16 log2(tokens + 1)): 16 codes an octave; code 255 holds everything from 62,755 up.
    auto code = std::ceil(16.0 * std::log2(static_cast<double>(tokens) + 1.0) - 1e-9);
    return static_cast<std::uint8_t>(std::clamp(code, 0.0, 255.0));
}

std::uint64_t OutputHistory::decode(std::uint8_t code) {
    return static_cast<std::uint64_t>(std::floor(std::exp2(code / 16.0) - 1.0 + 1e-9));
}

OutputHistory::Shard& OutputHistory::shard_for(std::string_view key) const {
    return (*shards_)[core::hash_bytes(key) % k_shards];
}

void OutputHistory::record(std::string_view tenant, std::string_view model, std::uint64_t tokens_per_sequence,
                           const Settings& settings) {
    if (model.size() > k_max_model || settings.window == 0) return;
    auto key = key_of(tenant, model);
    auto& shard = shard_for(key);
    std::lock_guard lock(shard.mutex);
    auto found = shard.index.find(key);
    Series* s;
    if (found != shard.index.end()) {
        shard.recent.splice(shard.recent.begin(), shard.recent, found->second);
        s = &*found->second;
    } else {
        auto per_shard = std::max<std::size_t>(1, settings.max_series / k_shards);
        while (shard.recent.size() >= per_shard) {
            shard.index.erase(shard.recent.back().key);
            shard.recent.pop_back();
        }
        shard.recent.emplace_front();
        s = &shard.recent.front();
        s->key = std::move(key);
        shard.index.emplace(s->key, shard.recent.begin());
    }
    if (s->capacity != settings.window) {  // new, or the window changed with a reload: keep the newest
        auto ring = std::make_unique<std::uint8_t[]>(settings.window);
        std::uint32_t keep = std::min(s->size, settings.window);
        for (std::uint32_t i = 0; i < keep; ++i)
            ring[keep - 1 - i] = s->ring[(s->next + s->capacity - 1 - i) % s->capacity];
        s->ring = std::move(ring);
        s->capacity = settings.window;
        s->size = keep;
        s->next = keep % settings.window;
    }
    s->ring[s->next] = encode(tokens_per_sequence);
    s->next = (s->next + 1) % s->capacity;
    s->size = std::min(s->size + 1, s->capacity);
    // The nearest-rank quantile: the smallest sample that at least `quantile` of them do not exceed.
    thread_local std::vector<std::uint8_t> sorted;
    sorted.assign(s->ring.get(), s->ring.get() + s->size);
    auto rank = static_cast<std::size_t>(std::ceil(settings.quantile * static_cast<double>(s->size) - 1e-9));
    rank = std::clamp<std::size_t>(rank, 1, s->size) - 1;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(rank), sorted.end());
    s->quantile = decode(sorted[rank]);
}

OutputHistory::Estimate OutputHistory::estimate(std::string_view tenant, std::string_view model,
                                                const Settings& settings) const {
    if (model.size() > k_max_model) return {};
    auto key = key_of(tenant, model);
    auto& shard = shard_for(key);
    std::lock_guard lock(shard.mutex);
    auto found = shard.index.find(key);
    if (found == shard.index.end()) return {};
    const auto& s = *found->second;
    Estimate e;
    e.samples = s.size;
    if (s.size >= settings.min_samples) e.tokens = s.quantile;
    return e;
}

std::size_t OutputHistory::series() const {
    std::size_t n = 0;
    for (const auto& shard : *shards_) {
        std::lock_guard lock(shard.mutex);
        n += shard.recent.size();
    }
    return n;
}

}  // namespace tokengate::cost
