#include "tokengate/auth/subjects.hpp"

namespace tokengate::auth {

std::optional<std::string> SubjectDirectory::seen(std::string_view tenant, std::string_view subject,
                                                  std::size_t max_per_tenant) {
    std::lock_guard lock(mutex_);
    auto t = tenants_.find(std::string(tenant));
    if (t == tenants_.end()) t = tenants_.emplace(std::string(tenant), Tenant{}).first;
    auto& known = t->second;
    if (auto it = known.where.find(subject); it != known.where.end()) {
        known.by_recency.splice(known.by_recency.begin(), known.by_recency, it->second);
        return std::nullopt;
    }
    std::optional<std::string> pushed_out;
    if (known.by_recency.size() >= max_per_tenant && !known.by_recency.empty()) {
        known.where.erase(known.by_recency.back());
        pushed_out = std::move(known.by_recency.back());
        known.by_recency.pop_back();
    }
    known.by_recency.emplace_front(subject);
    known.where.emplace(known.by_recency.front(), known.by_recency.begin());
    return pushed_out;
}

std::size_t SubjectDirectory::kept(std::string_view tenant) const {
    std::lock_guard lock(mutex_);
    auto t = tenants_.find(std::string(tenant));
    return t == tenants_.end() ? 0 : t->second.by_recency.size();
}

}  // namespace tokengate::auth
