// The Prometheus text reader on any bytes (an upstream's /metrics is not ours): never a crash,
// signals finite and a kv_cache ratio in [0, 1].
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tokengate/metrics/exposition.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    auto s = tokengate::metrics::read_load_signals(text);
    if (s.queue && !std::isfinite(*s.queue)) std::abort();
    if (s.running && !std::isfinite(*s.running)) std::abort();
    if (s.kv_cache && !(*s.kv_cache >= 0 && *s.kv_cache <= 1)) std::abort();
    if (s.malformed > s.lines) std::abort();
    for (std::size_t at = 0; at < text.size();) {
        auto end = text.find('\n', at);
        auto line = text.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
        if (auto sample = tokengate::metrics::parse_sample(line))
            tokengate::metrics::label_value(sample->labels, "model_name");
        if (end == std::string_view::npos) break;
        at = end + 1;
    }
    return 0;
}
