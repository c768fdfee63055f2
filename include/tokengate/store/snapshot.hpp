#pragma once

#include <string>
#include <vector>

#include "tokengate/core/calendar.hpp"

namespace tokengate::store {

/// What a store keeps in this process and a restart should not forget (store.state_file): the
/// levels of the buckets that are not full, and the quotas' counts in their windows.
struct SavedBucket {
    std::string key;
    double capacity = 0;
    double rate_per_s = 0;
    double tokens = 0;  // at the snapshot; below zero: a debt
};

/// A quota's count in its window, as a state file keeps it.
struct SavedQuota {
    std::string key;
    double used = 0;
    double added = 0;
    core::CalendarWindow window;  // Unix nanoseconds
};

struct Snapshot {
    std::vector<SavedBucket> buckets;
    std::vector<SavedQuota> quotas;
};

}  // namespace tokengate::store
