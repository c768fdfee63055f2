#pragma once

// SPEC §21's bound on end users: at most `auth.subject.max_per_tenant` subjects a tenant are
// kept; a new one past it pushes out the one seen least recently, whose `per: subject` buckets
// its caller then drops. Their number stays bounded whatever a header or a body names.

#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tokengate::auth {

class SubjectDirectory {
public:
    /// Notes that `tenant`'s end user `subject` was seen; the subject pushed out, if one was.
    std::optional<std::string> seen(std::string_view tenant, std::string_view subject, std::size_t max_per_tenant);
    /// How many subjects `tenant` has kept.
    std::size_t kept(std::string_view tenant) const;

private:
    struct Tenant {
        std::list<std::string> by_recency;                                             // most recent first
        std::unordered_map<std::string_view, std::list<std::string>::iterator> where;  // views into by_recency
    };
    mutable std::mutex mutex_;
    std::unordered_map<std::string, Tenant> tenants_;
};

}  // namespace tokengate::auth
