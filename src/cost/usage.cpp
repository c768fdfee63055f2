#include "tokengate/cost/usage.hpp"

#include <nlohmann/json.hpp>

#include "tokengate/cost/cost.hpp"

namespace tokengate::cost {

using nlohmann::json;

namespace {

bool read_usage(const json& doc, Usage& out) {
    if (!doc.is_object()) return false;
    auto it = doc.find("usage");
    if (it == doc.end() || !it->is_object()) return false;
    auto count = [&](const char* key) -> std::uint64_t {
        auto v = it->find(key);
        return v != it->end() && v->is_number_unsigned() ? v->get<std::uint64_t>() : 0;
    };
    out.known = true;
    out.prompt_tokens = count("prompt_tokens");
    out.completion_tokens = count("completion_tokens");
    return true;
}

/// Finds the end of the first complete event ("\n\n" or "\r\n\r\n"); npos if none yet.
std::pair<std::size_t, std::size_t> event_end(std::string_view s) {
    auto lf = s.find("\n\n");
    auto crlf = s.find("\r\n\r\n");
    if (crlf != std::string_view::npos && (lf == std::string_view::npos || crlf < lf)) return {crlf, 4};
    if (lf != std::string_view::npos) return {lf, 2};
    return {std::string_view::npos, 0};
}

}  // namespace

void JsonUsageReader::feed(std::string_view data) {
    if (overflowed_) return;
    if (body_.size() + data.size() > max_bytes_) {
        overflowed_ = true;
        body_.clear();
        return;
    }
    body_.append(data);
}

Usage JsonUsageReader::finish() const {
    Usage u;
    if (overflowed_) return u;
    read_usage(json::parse(body_, nullptr, false), u);
    return u;
}

std::string_view SseUsageFilter::feed(std::string_view data, bool last) {
    out_.clear();
    pending_.append(data);
    std::size_t consumed = 0;
    for (;;) {
        auto [end, delimiter] = event_end(std::string_view(pending_).substr(consumed));
        if (end == std::string_view::npos) break;
        std::string event = pending_.substr(consumed, end + delimiter);
        consumed += end + delimiter;
        if (inspect(event)) out_ += event;
    }
    pending_.erase(0, consumed);
    // An event larger than any real one is passed on unparsed rather than held without bound.
    if (last || pending_.size() > max_event_bytes_) {
        out_ += pending_;
        pending_.clear();
    }
    return out_;
}

bool SseUsageFilter::inspect(std::string& event) {
    std::size_t line_start = 0;
    while (line_start < event.size()) {
        auto line_end = event.find('\n', line_start);
        if (line_end == std::string::npos) line_end = event.size();
        std::string_view line(event.data() + line_start, line_end - line_start);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.rfind("data:", 0) == 0) {
            auto payload = line.substr(5);
            if (!payload.empty() && payload.front() == ' ') payload.remove_prefix(1);
            if (payload != "[DONE]") {
                json doc = json::parse(payload, nullptr, false);
                if (doc.is_object()) {
                    Usage u;
                    bool has_usage = read_usage(doc, u);
                    if (has_usage) usage_ = u;
                    if (auto choices = doc.find("choices"); choices != doc.end() && choices->is_array()) {
                        for (const auto& c : *choices) {
                            if (!c.is_object()) continue;
                            if (auto d = c.find("delta"); d != c.end() && d->is_object()) {
                                if (auto content = d->find("content"); content != d->end() && content->is_string())
                                    streamed_tokens_ += estimate_tokens(content->get_ref<const std::string&>());
                            } else if (auto text = c.find("text"); text != c.end() && text->is_string()) {
                                streamed_tokens_ += estimate_tokens(text->get_ref<const std::string&>());
                            }
                        }
                        if (hide_usage_ && has_usage && choices->empty()) return false;
                    }
                }
            }
        }
        line_start = line_end + 1;
    }
    if (hide_usage_) {
        static constexpr std::string_view k_null_usage = ",\"usage\":null";
        for (auto at = event.find(k_null_usage); at != std::string::npos; at = event.find(k_null_usage, at))
            event.erase(at, k_null_usage.size());
    }
    return true;
}

}  // namespace tokengate::cost
