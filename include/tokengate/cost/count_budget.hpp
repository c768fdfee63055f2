#pragma once

// SPEC §17: counting stops as soon as the count passes what the request's tightest cost limit
// could ever admit, so a body larger than any limit costs no more tokenizer time than that.

#include <cstdint>
#include <string>
#include <string_view>

#include "tokengate/cost/tokenizer.hpp"

namespace tokengate::cost {

/// Counts through `inner` (null: the heuristic) until the running total passes `limit`; then
/// every further text counts 0. A text longer than a slice is counted slice by slice (cut
/// before a space), so even one 4 MiB string stops near the limit. Used for one body, by one
/// thread.
class CountBudget final : public Tokenizer {
public:
    CountBudget(const Tokenizer* inner, std::uint64_t limit) : inner_(inner), limit_(limit) {}
    std::uint64_t count(std::string_view text) const override;
    std::uint64_t added_per_sequence() const override { return inner_ ? inner_->added_per_sequence() : 0; }
    const std::string& name() const override;
    /// The total passed the limit: the body's input is more than limit() tokens.
    bool stopped() const { return total_ > limit_; }
    std::uint64_t limit() const { return limit_; }

private:
    const Tokenizer* inner_;
    std::uint64_t limit_;
    mutable std::uint64_t total_ = 0;
};

}  // namespace tokengate::cost
