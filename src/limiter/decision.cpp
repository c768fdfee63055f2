#include "tokengate/limiter/decision.hpp"

namespace tokengate::limiter {

void resolve(Decision& decision) {
    decision.allowed = true;
    decision.rejected = -1;
    decision.retry_after = 0;
    for (std::size_t i = 0; i < decision.statuses.size(); ++i) {
        const auto& s = decision.statuses[i];
        if (s.verdict.admitted || !s.spec->enforce) continue;
        // The request can pass only once every refusing limit would admit it: name the longest.
        bool longer = decision.allowed || s.verdict.retry_after < 0 ||
                      (decision.retry_after >= 0 && s.verdict.retry_after > decision.retry_after);
        decision.allowed = false;
        if (longer) {
            decision.rejected = static_cast<int>(i);
            decision.retry_after = s.verdict.retry_after;
        }
    }
    for (auto& s : decision.statuses) s.charged = decision.allowed && s.verdict.admitted;
}

}  // namespace tokengate::limiter
