#include "tokengate/cost/count_budget.hpp"

#include "tokengate/core/saturate.hpp"

namespace tokengate::cost {

namespace {
constexpr std::size_t k_slice = 64 * 1024;
}  // namespace

std::uint64_t CountBudget::count(std::string_view text) const {
    std::uint64_t n = 0;
    while (!text.empty() && !stopped()) {
        auto take = text.size();
        if (take > k_slice) {
            // Cut before a space, where pre-tokenizers split anyway; a text without one is cut
            // where it must be.
            auto space = text.rfind(' ', k_slice);
            take = space == std::string_view::npos || space < k_slice / 2 ? k_slice : space;
        }
        auto counted = count_text(text.substr(0, take), inner_);
        n = core::saturating_add(n, counted);
        total_ = core::saturating_add(total_, counted);
        text.remove_prefix(take);
    }
    return n;
}

const std::string& CountBudget::name() const {
    static const std::string k_heuristic = "heuristic";
    return inner_ ? inner_->name() : k_heuristic;
}

}  // namespace tokengate::cost
