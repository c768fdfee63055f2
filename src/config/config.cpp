#include "tokengate/config/config.hpp"

namespace tokengate::config {

const char* to_string(Level level) {
    switch (level) {
        case Level::tenant: return "tenant";
        case Level::ip: return "ip";
        case Level::route: return "route";
        case Level::global: return "global";
    }
    return "?";
}

const char* to_string(Algorithm algorithm) {
    switch (algorithm) {
        case Algorithm::token_bucket: return "token_bucket";
        case Algorithm::leaky_bucket: return "leaky_bucket";
        case Algorithm::concurrency: return "concurrency";
        case Algorithm::quota: return "quota";
    }
    return "?";
}

const char* to_string(Unit unit) {
    switch (unit) {
        case Unit::requests: return "requests";
        case Unit::cost: return "cost";
        case Unit::tokens: return "tokens";
        case Unit::usd: return "usd";
    }
    return "requests";
}

const char* to_string(LoadSignal signal) {
    switch (signal) {
        case LoadSignal::queue: return "queue";
        case LoadSignal::kv_cache: return "kv_cache";
        case LoadSignal::ttft: return "ttft";
    }
    return "queue";
}

bool glob_match(std::string_view pattern, std::string_view text) {
    std::size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
    while (t < text.size()) {
        if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
            ++p;
            ++t;
        } else if (p < pattern.size() && pattern[p] == '*') {
            star = p++;
            mark = t;
        } else if (star != std::string_view::npos) {
            p = star + 1;
            t = ++mark;
        } else {
            return false;
        }
    }
    while (p < pattern.size() && pattern[p] == '*') ++p;
    return p == pattern.size();
}

}  // namespace tokengate::config
