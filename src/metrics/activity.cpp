#include "tokengate/metrics/activity.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tokengate::metrics {

namespace {

// A client's usage can claim 2^64 tokens: every sum saturates instead of wrapping to a small number.
std::uint64_t saturated_sum(std::uint64_t a, std::uint64_t b) {
    return b > std::numeric_limits<std::uint64_t>::max() - a ? std::numeric_limits<std::uint64_t>::max() : a + b;
}

std::uint32_t add_capped(std::uint32_t a, std::uint64_t b) {
    return static_cast<std::uint32_t>(
        std::min<std::uint64_t>(std::numeric_limits<std::uint32_t>::max(), saturated_sum(a, b)));
}

}  // namespace

Activity::Activity(std::size_t max_tenants, std::size_t max_upstreams)
    : max_tenants_(std::max<std::size_t>(1, max_tenants)), max_upstreams_(max_upstreams) {}

Activity::Ring& Activity::ring_for(std::string_view tenant, std::int64_t now_s) {
    if (auto it = tenants_.find(tenant); it != tenants_.end()) return *it->second;
    if (tenants_.size() >= max_tenants_) {
        auto idle = std::min_element(tenants_.begin(), tenants_.end(), [](const auto& a, const auto& b) {
            return a.second->last_second < b.second->last_second;
        });
        tenants_.erase(idle);
    }
    auto& ring = *tenants_.emplace(std::string(tenant), std::make_unique<Ring>()).first->second;
    ring.last_second = now_s;
    return ring;
}

void Activity::request(std::string_view tenant, core::Nanos unix_now, bool rejected, std::uint64_t prompt_tokens,
                       std::uint64_t completion_tokens) {
    if (tenant.empty()) return;  // no key: nobody's
    auto now_s = unix_now / core::k_nanos_per_second;
    auto minute = now_s / 60;
    std::lock_guard lock(mutex_);
    auto& r = ring_for(tenant, now_s);
    r.last_second = std::max(r.last_second, now_s);
    auto s = static_cast<std::size_t>(now_s % static_cast<std::int64_t>(k_seconds));
    if (r.second[s] != now_s) r.second[s] = now_s, r.rejections[s] = r.prompt[s] = r.completion[s] = 0;
    r.rejections[s] = add_capped(r.rejections[s], rejected ? 1 : 0);
    r.prompt[s] = add_capped(r.prompt[s], prompt_tokens);
    r.completion[s] = add_capped(r.completion[s], completion_tokens);
    auto m = static_cast<std::size_t>(minute % static_cast<std::int64_t>(k_minutes));
    if (r.minute[m] != minute) r.minute[m] = minute, r.tokens[m] = 0;
    r.tokens[m] = saturated_sum(r.tokens[m], saturated_sum(prompt_tokens, completion_tokens));
}

void Activity::first_byte(std::string_view upstream, double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) return;
    std::lock_guard lock(mutex_);
    auto it = upstreams_.find(upstream);
    if (it == upstreams_.end()) {
        if (upstreams_.size() >= max_upstreams_) return;
        it = upstreams_.emplace(std::string(upstream), Samples{}).first;
    }
    auto& samples = it->second;
    samples.seconds[samples.next] = static_cast<float>(seconds);
    samples.next = (samples.next + 1) % k_ttfb_samples;
    samples.count = std::min(samples.count + 1, k_ttfb_samples);
}

std::vector<Activity::TenantHistory> Activity::tenants(core::Nanos unix_now) const {
    auto now_s = unix_now / core::k_nanos_per_second;
    auto now_m = now_s / 60;
    std::vector<TenantHistory> out;
    std::lock_guard lock(mutex_);
    out.reserve(tenants_.size());
    for (const auto& [name, ring] : tenants_) {
        if (ring->last_second <= now_s - static_cast<std::int64_t>(k_minutes * 60)) continue;
        TenantHistory h;
        h.tenant = name;
        h.rejections.resize(k_seconds), h.prompt.resize(k_seconds), h.completion.resize(k_seconds);
        for (std::size_t i = 0; i < k_seconds; ++i) {
            auto second = now_s - static_cast<std::int64_t>(k_seconds - 1 - i);
            auto slot = static_cast<std::size_t>(second % static_cast<std::int64_t>(k_seconds));
            if (ring->second[slot] != second) continue;  // nothing that second
            h.rejections[i] = ring->rejections[slot];
            h.prompt[i] = ring->prompt[slot];
            h.completion[i] = ring->completion[slot];
            h.rejections_last_5m += ring->rejections[slot];
        }
        h.tokens_per_minute.resize(k_minutes);
        for (std::size_t i = 0; i < k_minutes; ++i) {
            auto minute = now_m - static_cast<std::int64_t>(k_minutes - 1 - i);
            auto slot = static_cast<std::size_t>(minute % static_cast<std::int64_t>(k_minutes));
            if (ring->minute[slot] != minute) continue;
            h.tokens_per_minute[i] = ring->tokens[slot];
            h.tokens_last_hour = saturated_sum(h.tokens_last_hour, ring->tokens[slot]);
        }
        out.push_back(std::move(h));
    }
    return out;
}

Activity::Latency Activity::first_byte_latency(std::string_view upstream) const {
    std::vector<float> v;
    {
        std::lock_guard lock(mutex_);
        auto it = upstreams_.find(upstream);
        if (it == upstreams_.end()) return {};
        v.assign(it->second.seconds.begin(), it->second.seconds.begin() + static_cast<long>(it->second.count));
    }
    if (v.empty()) return {};
    auto at = [&](double q) {
        auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
        i = std::min(i, v.size() - 1);
        std::nth_element(v.begin(), v.begin() + static_cast<long>(i), v.end());
        return static_cast<double>(v[i]);
    };
    double p50 = at(0.5);
    double p90 = at(0.9);
    double p99 = at(0.99);
    return {v.size(), p50, p90, p99};
}

}  // namespace tokengate::metrics
