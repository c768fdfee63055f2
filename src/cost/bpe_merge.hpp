#pragma once

// The BPE merge loop both tokenizers share (tiktoken's rank files and Hugging Face's
// tokenizer.json): merge the adjacent pair with the lowest rank, the leftmost on a tie, until
// no pair merges. Short words are scanned, long ones go through a heap, so a 4 MiB "word" in
// a request costs O(n log n) and is still counted exactly.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

namespace tokengate::cost::detail {

inline constexpr std::uint32_t k_no_rank = std::numeric_limits<std::uint32_t>::max();

/// A symbol of a word being merged: its token id and its bytes [begin, end) in the word.
struct Symbol {
    std::uint32_t id;
    std::uint32_t begin;
    std::uint32_t end;
};

/// What merging a pair gives: its priority (lower merges first) and the merged token's id.
struct Merge {
    std::uint32_t rank = k_no_rank;
    std::uint32_t id = 0;
};

/// Merges `symbols` in place and returns how many tokens remain. `pair(left, right)` gives
/// the Merge of two adjacent symbols (rank k_no_rank: they do not merge).
template <class PairMerge>
std::size_t merge_symbols(std::vector<Symbol>& symbols, PairMerge&& pair) {
    constexpr std::size_t k_scan_limit = 16;  // measured: from here on the heap is faster
    if (symbols.size() < 2) return symbols.size();
    if (symbols.size() <= k_scan_limit) {
        Merge merges[k_scan_limit];
        std::size_t n = symbols.size();
        for (std::size_t i = 0; i + 1 < n; ++i) merges[i] = pair(symbols[i], symbols[i + 1]);
        while (n > 1) {
            std::size_t best = 0;
            for (std::size_t i = 1; i + 1 < n; ++i)
                if (merges[i].rank < merges[best].rank) best = i;
            if (merges[best].rank == k_no_rank) break;
            symbols[best] = {merges[best].id, symbols[best].begin, symbols[best + 1].end};
            for (std::size_t i = best + 1; i + 1 < n; ++i) symbols[i] = symbols[i + 1];
            for (std::size_t i = best + 1; i + 2 < n; ++i) merges[i] = merges[i + 1];
            --n;
            if (best + 1 < n) merges[best] = pair(symbols[best], symbols[best + 1]);
            if (best > 0) merges[best - 1] = pair(symbols[best - 1], symbols[best]);
        }
        return n;
    }
    // A doubly linked list over the symbols and a heap of candidate merges. An entry whose
    // two symbols are no longer the ones it was pushed for is stale and skipped: the same two
    // tokens always make the same merge, so comparing their ids needs no second lookup.
    struct Candidate {
        std::uint32_t rank;
        std::uint32_t pos;
        std::uint32_t id;
        std::uint32_t left;
        std::uint32_t right;
        bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    constexpr std::uint32_t k_end = std::numeric_limits<std::uint32_t>::max();
    const auto n = static_cast<std::uint32_t>(symbols.size());
    // Per-thread buffers: a long word costs no allocation once the thread has seen one.
    thread_local std::vector<std::uint32_t> prev, next;
    thread_local std::vector<bool> alive;
    thread_local std::vector<Candidate> heap_storage;
    prev.resize(n);
    next.resize(n);
    alive.assign(n, true);
    heap_storage.clear();
    auto& heap = heap_storage;
    auto push = [&](Candidate c) {
        heap.push_back(c);
        std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    };
    for (std::uint32_t i = 0; i < n; ++i) {
        prev[i] = i == 0 ? k_end : i - 1;
        next[i] = i + 1 == n ? k_end : i + 1;
        if (i + 1 < n)
            if (auto m = pair(symbols[i], symbols[i + 1]); m.rank != k_no_rank)
                heap.push_back({m.rank, i, m.id, symbols[i].id, symbols[i + 1].id});
    }
    std::make_heap(heap.begin(), heap.end(), std::greater<>{});
    std::size_t remaining = n;
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
        auto top = heap.back();
        heap.pop_back();
        if (!alive[top.pos] || next[top.pos] == k_end) continue;
        auto right = next[top.pos];
        if (symbols[top.pos].id != top.left || symbols[right].id != top.right) continue;
        symbols[top.pos] = {top.id, symbols[top.pos].begin, symbols[right].end};
        alive[right] = false;
        next[top.pos] = next[right];
        if (next[right] != k_end) prev[next[right]] = top.pos;
        --remaining;
        if (auto p = prev[top.pos]; p != k_end)
            if (auto m = pair(symbols[p], symbols[top.pos]); m.rank != k_no_rank)
                push({m.rank, p, m.id, symbols[p].id, symbols[top.pos].id});
        if (auto q = next[top.pos]; q != k_end)
            if (auto m = pair(symbols[top.pos], symbols[q]); m.rank != k_no_rank)
                push({m.rank, top.pos, m.id, symbols[top.pos].id, symbols[q].id});
    }
    return remaining;
}

}  // namespace tokengate::cost::detail
