#include "subjects.hpp"

#include "tokengate/classify/classify.hpp"

namespace tokengate::server::pipeline {

void keep_subject(const StageServices& s, const Runtime& runtime, const Admitted& admitted) {
    const auto& cfg = *runtime.config;
    const auto& tenant = *admitted.principal.tenant;
    bool per_subject = false;
    for (const auto& spec : tenant.limits) per_subject |= spec.per_subject;
    if (!per_subject) return;  // no bucket to bound: nothing to remember
    auto pushed_out = s.subjects.seen(tenant.id, admitted.principal.subject, cfg.auth.subject.max_per_tenant);
    if (!pushed_out) return;
    std::vector<std::string> keys;
    for (const auto& spec : tenant.limits)
        if (spec.per_subject)
            keys.emplace_back(
                classify::bucket_key(config::Level::tenant, spec.name, classify::subject_of(tenant.id, *pushed_out)));
    s.store.forget(keys);
}

}  // namespace tokengate::server::pipeline
