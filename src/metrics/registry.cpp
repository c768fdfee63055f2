#include "tokengate/metrics/registry.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tokengate::metrics {

namespace {

/// The series key of a label set, built in a per-thread buffer: updates run on every request.
std::string_view join(std::initializer_list<std::string_view> labels) {
    thread_local std::string key;
    key.clear();
    for (auto l : labels) key.append(l).push_back('\x1f');
    return key;
}

std::string number(double v) {
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
}

}  // namespace

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
    : name_(std::move(name)),
      help_(std::move(help)),
      kind_(kind),
      label_names_(std::move(label_names)),
      buckets_(std::move(buckets)),
      max_series_(max_series) {}

Family::Series& Family::series(std::initializer_list<std::string_view> labels) {
    auto key = join(labels);
    auto it = series_.find(key);
    if (it != series_.end()) return it->second;
    Series s;
    std::string stored(key);
    if (series_.size() >= max_series_) {
        s.labels.assign(label_names_.size(), "_other");
        stored = "\x1e_other";
        if (auto other = series_.find(stored); other != series_.end()) return other->second;
    } else {
        for (auto l : labels) s.labels.emplace_back(l);
    }
    s.bucket_counts.assign(buckets_.size(), 0);
    return series_.emplace(std::move(stored), std::move(s)).first->second;
}

void Family::add(std::initializer_list<std::string_view> labels, double value) {
    std::lock_guard lock(mutex_);
    series(labels).value += value;
}

void Family::set(std::initializer_list<std::string_view> labels, double value) {
    std::lock_guard lock(mutex_);
    series(labels).value = value;
}

void Family::observe(std::initializer_list<std::string_view> labels, double value) {
    std::lock_guard lock(mutex_);
    auto& s = series(labels);
    for (std::size_t i = 0; i < buckets_.size(); ++i)
        if (value <= buckets_[i]) ++s.bucket_counts[i];
    s.sum += value;
    ++s.count;
}

void Family::clear() {
    std::lock_guard lock(mutex_);
    series_.clear();
}

double Family::value(std::initializer_list<std::string_view> labels) const {
    std::lock_guard lock(mutex_);
    auto it = series_.find(join(labels));
    return it == series_.end() ? 0 : (kind_ == Kind::histogram ? static_cast<double>(it->second.count) : it->second.value);
}

void Family::render(std::string& out) const {
    static constexpr const char* k_types[] = {"counter", "gauge", "histogram"};
    out += "# HELP " + name_ + " " + help_ + "\n# TYPE " + name_ + " " + k_types[static_cast<int>(kind_)] + "\n";
    std::lock_guard lock(mutex_);
    std::vector<const Series*> sorted;
    for (const auto& [k, s] : series_) sorted.push_back(&s);
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
            out += name_ + labels_text(*s) + " " + number(s->value) + "\n";
            continue;
        }
        for (std::size_t i = 0; i < buckets_.size(); ++i)
            out += name_ + "_bucket" + labels_text(*s, "le", number(buckets_[i])) + " " + std::to_string(s->bucket_counts[i]) + "\n";
        out += name_ + "_bucket" + labels_text(*s, "le", "+Inf") + " " + std::to_string(s->count) + "\n";
        out += name_ + "_sum" + labels_text(*s) + " " + number(s->sum) + "\n";
        out += name_ + "_count" + labels_text(*s) + " " + std::to_string(s->count) + "\n";
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
