#include "tokengate/metrics/registry.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "tokengate/core/hash.hpp"

namespace tokengate::metrics {

namespace {

/// One label value's part of a series key (the index's and the per-thread caches' alike).
void append_key_part(std::string& key, std::string_view value) { key.append(bounded_label(value)).push_back('\x1f'); }

/// The index's key of a label set, built in a per-thread buffer: for a series' first update on
/// a thread and for reads, not for every update.
std::string_view join(std::initializer_list<std::string_view> labels) {
    thread_local std::string key;
    key.clear();
    for (auto l : labels) append_key_part(key, l);
    return key;
}

std::string key_of(const std::vector<std::string>& values) {
    std::string key;
    for (const auto& v : values) append_key_part(key, v);
    return key;
}

std::atomic<std::uint64_t> next_family_id{1};

std::string number(double v) {
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
}

}  // namespace

std::string_view bounded_label(std::string_view value) {
    if (value.size() <= k_max_label_bytes) return value;
    std::size_t end = k_max_label_bytes;
    while (end > 0 && (static_cast<unsigned char>(value[end]) & 0xC0) == 0x80) --end;  // a continuation byte
    return value.substr(0, end);
}

std::string escape_label(std::string_view value) {
    std::string out;
    out.reserve(value.size());
    for (char c : value) {
        if (c == '\\') out += "\\\\";
        else if (c == '"') out += "\\\"";
        else if (c == '\n') out += "\\n";
        else out.push_back(c);
    }
    return out;
}

Family::Family(std::string name, std::string help, Kind kind, std::vector<std::string> label_names,
               std::vector<double> buckets, std::size_t max_series)
    : id_(next_family_id.fetch_add(1)),
      name_(std::move(name)),
      help_(std::move(help)),
      kind_(kind),
      label_names_(std::move(label_names)),
      buckets_(std::move(buckets)),
      max_series_(max_series) {}

namespace {

/// The per-thread index from a family and a label set to its series: open addressing over one
/// flat array. A lookup hashes and compares the label values where they are, so an update
/// builds no key (a request makes a dozen).
class SeriesCache {
public:
    using Labels = std::initializer_list<std::string_view>;
    static std::uint64_t hash(std::uint64_t family, Labels labels) {
        std::uint64_t h = family;
        for (auto l : labels) h = core::hash_bytes(bounded_label(l), h);
        return h;
    }
    void* find(std::uint64_t family, Labels labels, std::uint64_t hash) const {
        if (slots_.empty()) return nullptr;
        for (std::size_t i = hash & mask();; i = (i + 1) & mask()) {
            const auto& slot = slots_[i];
            if (!slot.target) return nullptr;
            if (slot.hash == hash && slot.family == family && same_labels(slot.key, labels)) return slot.target;
        }
    }
    /// `key`: the labels joined as the family's index joins them.
    void insert(std::uint64_t family, std::string_view key, std::uint64_t hash, void* target) {
        // Entries of families that are gone stay until the cache is dropped (tests build many).
        if (used_ >= (1u << 16)) {
            slots_.clear();
            used_ = 0;
        }
        if ((used_ + 1) * 2 > slots_.size()) grow();
        place(Slot{hash, family, std::string(key), target});
        ++used_;
    }

private:
    struct Slot {
        std::uint64_t hash = 0;
        std::uint64_t family = 0;
        std::string key;
        void* target = nullptr;
    };
    /// Whether `key` is `labels` joined (each bounded, each followed by the separator).
    static bool same_labels(std::string_view key, Labels labels) {
        std::size_t at = 0;
        for (auto l : labels) {
            auto part = bounded_label(l);
            if (key.size() - at < part.size() + 1 || key.compare(at, part.size(), part) != 0 ||
                key[at + part.size()] != '\x1f')
                return false;
            at += part.size() + 1;
        }
        return at == key.size();
    }
    std::size_t mask() const { return slots_.size() - 1; }
    void place(Slot slot) {
        std::size_t i = slot.hash & mask();
        while (slots_[i].target) i = (i + 1) & mask();
        slots_[i] = std::move(slot);
    }
    void grow() {
        auto old = std::move(slots_);
        slots_.assign(std::max<std::size_t>(64, old.size() * 2), Slot{});
        for (auto& slot : old)
            if (slot.target) place(std::move(slot));
    }
    std::vector<Slot> slots_;  // a power of two, at most half full
    std::size_t used_ = 0;
};

}  // namespace

/// An update brings a cleared series back; the store is skipped when it is already shown, so
/// the line stays shared between the workers' caches.
void Family::show(Series& s) {
    if (!s.visible.load(std::memory_order_relaxed)) s.visible.store(true, std::memory_order_relaxed);
}

Family::Series& Family::series(std::initializer_list<std::string_view> labels) {
    thread_local SeriesCache cache;
    auto hash = SeriesCache::hash(id_, labels);
    if (auto* found = cache.find(id_, labels, hash)) return *static_cast<Series*>(found);
    auto key = join(labels);
    auto& s = find_or_create(key, labels);
    cache.insert(id_, key, hash, &s);
    return s;
}

Family::Series& Family::find_or_create(std::string_view key, std::initializer_list<std::string_view> labels) {
    std::lock_guard lock(mutex_);
    if (auto it = index_.find(key); it != index_.end()) return *it->second;
    std::string stored(key);
    std::vector<std::string> values;
    if (index_.size() >= max_series_) {
        stored = "\x1e_other";
        if (auto other = index_.find(stored); other != index_.end()) return *other->second;
        values.assign(label_names_.size(), "_other");
    } else {
        for (auto l : labels) values.emplace_back(bounded_label(l));
        if (auto& limit = value_limit_; limit.max > 0 && values.size() > std::max(limit.parent, limit.child)) {
            auto& seen = limit.seen[values[limit.parent]];
            const auto& child = values[limit.child];
            if (std::find(seen.begin(), seen.end(), child) == seen.end()) {
                if (seen.size() < limit.max) {
                    seen.push_back(child);
                } else {
                    values[limit.child] = "_other";
                    stored = key_of(values);
                    if (auto other = index_.find(stored); other != index_.end()) return *other->second;
                }
            }
        }
    }
    auto& s = storage_.emplace_back();
    s.labels = std::move(values);
    s.bucket_counts = std::make_unique<std::atomic<std::uint64_t>[]>(buckets_.size());
    index_.emplace(std::move(stored), &s);
    return s;
}

void Family::limit_values_per(std::size_t parent, std::size_t child, std::size_t max) {
    std::lock_guard lock(mutex_);
    value_limit_.parent = parent;
    value_limit_.child = child;
    value_limit_.max = max;
}

void Family::Ref::add(double value) const {
    series_->value.fetch_add(value, std::memory_order_relaxed);
    show(*series_);
}

void Family::Ref::set(double value) const {
    series_->value.store(value, std::memory_order_relaxed);
    show(*series_);
}

void Family::Ref::observe(double value) const {
    const auto& buckets = family_->buckets_;
    auto bucket = std::lower_bound(buckets.begin(), buckets.end(), value) - buckets.begin();
    if (static_cast<std::size_t>(bucket) < buckets.size())
        series_->bucket_counts[bucket].fetch_add(1, std::memory_order_relaxed);
    series_->sum.fetch_add(value, std::memory_order_relaxed);
    series_->count.fetch_add(1, std::memory_order_relaxed);
    show(*series_);
}

void Family::add(std::initializer_list<std::string_view> labels, double value) { at(labels).add(value); }

void Family::set(std::initializer_list<std::string_view> labels, double value) { at(labels).set(value); }

void Family::observe(std::initializer_list<std::string_view> labels, double value) { at(labels).observe(value); }

void Family::clear() {
    std::lock_guard lock(mutex_);
    for (auto& s : storage_) {
        s.visible.store(false, std::memory_order_relaxed);
        s.value.store(0, std::memory_order_relaxed);
        for (std::size_t i = 0; i < buckets_.size(); ++i) s.bucket_counts[i].store(0, std::memory_order_relaxed);
        s.sum.store(0, std::memory_order_relaxed);
        s.count.store(0, std::memory_order_relaxed);
    }
}

double Family::value(std::initializer_list<std::string_view> labels) const {
    auto key = join(labels);
    std::lock_guard lock(mutex_);
    auto it = index_.find(key);
    if (it == index_.end() || !it->second->visible.load(std::memory_order_relaxed)) return 0;
    const auto& s = *it->second;
    return kind_ == Kind::histogram ? static_cast<double>(s.count.load(std::memory_order_relaxed))
                                    : s.value.load(std::memory_order_relaxed);
}

void Family::render(std::string& out) const {
    static constexpr const char* k_types[] = {"counter", "gauge", "histogram"};
    out += "# HELP " + name_ + " " + help_ + "\n# TYPE " + name_ + " " + k_types[static_cast<int>(kind_)] + "\n";
    std::lock_guard lock(mutex_);
    std::vector<const Series*> sorted;
    for (const auto& s : storage_)
        if (s.visible.load(std::memory_order_relaxed)) sorted.push_back(&s);
    std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->labels < b->labels; });
    auto labels_text = [&](const Series& s, std::string_view extra_name = {}, std::string_view extra_value = {}) {
        std::string t;
        for (std::size_t i = 0; i < label_names_.size(); ++i) {
            t += t.empty() ? "{" : ",";
            t += label_names_[i] + "=\"" + escape_label(s.labels[i]) + "\"";
        }
        if (!extra_name.empty()) {
            t += t.empty() ? "{" : ",";
            t += std::string(extra_name) + "=\"" + std::string(extra_value) + "\"";
        }
        return t.empty() ? t : t + "}";
    };
    for (const auto* s : sorted) {
        if (kind_ != Kind::histogram) {
            out += name_ + labels_text(*s) + " " + number(s->value.load(std::memory_order_relaxed)) + "\n";
            continue;
        }
        // Read the count first: observations landing meanwhile can only make the buckets
        // larger, never leave le="+Inf" below a finite bucket.
        std::uint64_t count = s->count.load(std::memory_order_relaxed), cumulative = 0;
        for (std::size_t i = 0; i < buckets_.size(); ++i) {
            cumulative += s->bucket_counts[i].load(std::memory_order_relaxed);
            out += name_ + "_bucket" + labels_text(*s, "le", number(buckets_[i])) + " " +
                   std::to_string(std::min(cumulative, count)) + "\n";
        }
        out += name_ + "_bucket" + labels_text(*s, "le", "+Inf") + " " + std::to_string(count) + "\n";
        out += name_ + "_sum" + labels_text(*s) + " " + number(s->sum.load(std::memory_order_relaxed)) + "\n";
        out += name_ + "_count" + labels_text(*s) + " " + std::to_string(count) + "\n";
    }
}

Family& Registry::counter(std::string name, std::string help, std::vector<std::string> labels) {
    std::lock_guard lock(mutex_);
    return families_.emplace_back(std::move(name), std::move(help), Kind::counter, std::move(labels),
                                  std::vector<double>{}, max_series_);
}

Family& Registry::gauge(std::string name, std::string help, std::vector<std::string> labels) {
    std::lock_guard lock(mutex_);
    return families_.emplace_back(std::move(name), std::move(help), Kind::gauge, std::move(labels),
                                  std::vector<double>{}, max_series_);
}

Family& Registry::histogram(std::string name, std::string help, std::vector<std::string> labels,
                            std::vector<double> buckets) {
    std::lock_guard lock(mutex_);
    return families_.emplace_back(std::move(name), std::move(help), Kind::histogram, std::move(labels),
                                  std::move(buckets), max_series_);
}

std::string Registry::render() const {
    std::string out;
    std::lock_guard lock(mutex_);
    for (const auto& f : families_) f.render(out);
    return out;
}

}  // namespace tokengate::metrics
