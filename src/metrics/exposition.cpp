#include "tokengate/metrics/exposition.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>

namespace tokengate::metrics {

namespace {

bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }
bool blank(char c) { return c == ' ' || c == '\t'; }

void skip_blanks(std::string_view s, std::size_t& i) {
    while (i < s.size() && blank(s[i])) ++i;
}

/// A value as Prometheus writes them: a float, NaN, +Inf / -Inf (any case, as Go parses).
std::optional<double> parse_value(std::string_view s) {
    auto lower = [](std::string_view t, std::string_view want) {
        if (t.size() != want.size()) return false;
        for (std::size_t i = 0; i < t.size(); ++i)
            if ((t[i] | 0x20) != want[i]) return false;
        return true;
    };
    if (lower(s, "nan")) return std::numeric_limits<double>::quiet_NaN();
    if (lower(s, "+inf") || lower(s, "inf")) return std::numeric_limits<double>::infinity();
    if (lower(s, "-inf")) return -std::numeric_limits<double>::infinity();
    if (!s.empty() && s.front() == '+') s.remove_prefix(1);
    double v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return v;
}

/// Scans a label set "{a="x",b="y\"z"}" from s[i] == '{'; leaves i after the '}'.
bool skip_labels(std::string_view s, std::size_t& i) {
    ++i;  // '{'
    for (;;) {
        skip_blanks(s, i);
        if (i < s.size() && s[i] == '}') return ++i, true;
        if (i >= s.size() || !name_start(s[i])) return false;
        while (i < s.size() && name_char(s[i])) ++i;
        skip_blanks(s, i);
        if (i >= s.size() || s[i] != '=') return false;
        ++i;
        skip_blanks(s, i);
        if (i >= s.size() || s[i] != '"') return false;
        for (++i;; ++i) {
            if (i >= s.size()) return false;
            if (s[i] == '\\') {
                if (++i >= s.size()) return false;
            } else if (s[i] == '"') {
                ++i;
                break;
            }
        }
        skip_blanks(s, i);
        if (i < s.size() && s[i] == ',') ++i;
        else if (i < s.size() && s[i] == '}') return ++i, true;
        else return false;
    }
}

}  // namespace

std::optional<Sample> parse_sample(std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::size_t i = 0;
    skip_blanks(line, i);
    if (i >= line.size() || line[i] == '#' || !name_start(line[i])) return std::nullopt;
    Sample s;
    auto start = i;
    while (i < line.size() && name_char(line[i])) ++i;
    s.name = line.substr(start, i - start);
    skip_blanks(line, i);
    if (i < line.size() && line[i] == '{') {
        auto open = i;
        if (!skip_labels(line, i)) return std::nullopt;
        s.labels = line.substr(open + 1, i - open - 2);
    }
    skip_blanks(line, i);
    auto value_start = i;
    while (i < line.size() && !blank(line[i])) ++i;
    auto value = parse_value(line.substr(value_start, i - value_start));
    if (!value) return std::nullopt;
    s.value = *value;
    skip_blanks(line, i);
    if (i < line.size()) {
        auto rest = line.substr(i);
        std::int64_t ts = 0;
        auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), ts);
        if (ec != std::errc()) return std::nullopt;
        std::size_t after = static_cast<std::size_t>(end - line.data());
        skip_blanks(line, after);
        if (after != line.size()) return std::nullopt;
        s.timestamp_ms = ts;
    }
    return s;
}

std::optional<std::string> label_value(std::string_view labels, std::string_view name) {
    std::size_t i = 0;
    while (i < labels.size()) {
        skip_blanks(labels, i);
        auto start = i;
        while (i < labels.size() && name_char(labels[i])) ++i;
        auto key = labels.substr(start, i - start);
        skip_blanks(labels, i);
        if (key.empty() || i >= labels.size() || labels[i] != '=') return std::nullopt;
        ++i;
        skip_blanks(labels, i);
        if (i >= labels.size() || labels[i] != '"') return std::nullopt;
        std::string value;
        for (++i;; ++i) {
            if (i >= labels.size()) return std::nullopt;
            char c = labels[i];
            if (c == '"') break;
            if (c == '\\' && i + 1 < labels.size()) {
                char e = labels[++i];
                value.push_back(e == 'n' ? '\n' : e);
            } else {
                value.push_back(c);
            }
        }
        ++i;
        if (key == name) return value;
        skip_blanks(labels, i);
        if (i < labels.size() && labels[i] == ',') ++i;
    }
    return std::nullopt;
}

LoadSignals read_load_signals(std::string_view text) {
    static constexpr std::array<std::string_view, 4> k_queue = {"vllm:num_requests_waiting", "tgi_queue_size",
                                                                "sglang:num_queue_reqs", "llamacpp:requests_deferred"};
    static constexpr std::array<std::string_view, 4> k_running = {"vllm:num_requests_running", "tgi_batch_current_size",
                                                                  "sglang:num_running_reqs",
                                                                  "llamacpp:requests_processing"};
    static constexpr std::array<std::string_view, 3> k_kv_cache = {"vllm:kv_cache_usage_perc",
                                                                   "vllm:gpu_cache_usage_perc", "sglang:token_usage"};
    auto is = [](std::string_view name, const auto& names) {
        for (auto n : names)
            if (n == name) return true;
        return false;
    };
    LoadSignals out;
    while (!text.empty()) {
        auto end = text.find('\n');
        auto line = text.substr(0, end);
        text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
        ++out.lines;
        auto sample = parse_sample(line);
        if (!sample) {
            auto first = line.find_first_not_of(" \t\r");
            if (first != std::string_view::npos && line[first] != '#') ++out.malformed;
            continue;
        }
        if (!std::isfinite(sample->value)) continue;
        if (is(sample->name, k_queue)) out.queue = out.queue.value_or(0) + sample->value;
        else if (is(sample->name, k_running)) out.running = out.running.value_or(0) + sample->value;
        else if (is(sample->name, k_kv_cache))
            out.kv_cache = std::max(out.kv_cache.value_or(0), std::clamp(sample->value, 0.0, 1.0));
    }
    return out;
}

}  // namespace tokengate::metrics
