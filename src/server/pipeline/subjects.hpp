#pragma once

// Before the limits (SPEC §21): the request's end user is kept among its tenant's most recent
// `auth.subject.max_per_tenant`; the one it pushes out loses its `per: subject` buckets.

#include "admit.hpp"
#include "sequence.hpp"

namespace tokengate::server::pipeline {

void keep_subject(const StageServices& s, const Runtime& runtime, const Admitted& admitted);

}  // namespace tokengate::server::pipeline
