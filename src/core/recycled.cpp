#include "tokengate/core/recycled.hpp"

#include <array>
#include <bit>

namespace tokengate::core::recycled {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TOKENGATE_NO_RECYCLING
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TOKENGATE_NO_RECYCLING
#endif
#endif

#ifdef TOKENGATE_NO_RECYCLING
void* take(std::size_t bytes) { return ::operator new(bytes); }
void give(void* block, std::size_t) noexcept { ::operator delete(block); }
std::size_t kept_bytes() noexcept { return 0; }
#else
namespace {

constexpr unsigned k_min_shift = 5;                  // 32 B: a pointer to the next block fits, and small strings
constexpr unsigned k_max_shift = 16;                 // 64 KB; larger blocks are not kept
constexpr std::size_t k_max_kept = 4 * 1024 * 1024;  // per thread

/// The class of a block of `bytes`: its size is 1 << shift.
unsigned shift_for(std::size_t bytes) {
    return bytes <= (std::size_t{1} << k_min_shift) ? k_min_shift : static_cast<unsigned>(std::bit_width(bytes - 1));
}

/// One thread's kept blocks, a list per class.
class Lists {
public:
    ~Lists() {
        gone = true;
        for (auto& head : heads_)
            while (head) {
                void* block = head;
                head = next_of(block);
                ::operator delete(block);
            }
    }
    void* take(unsigned shift) {
        auto& head = heads_[shift - k_min_shift];
        if (!head) return nullptr;
        void* block = head;
        head = next_of(block);
        kept_ -= std::size_t{1} << shift;
        return block;
    }
    bool keep(void* block, unsigned shift) {
        auto size = std::size_t{1} << shift;
        if (kept_ + size > k_max_kept) return false;
        auto& head = heads_[shift - k_min_shift];
        next_of(block) = head;
        head = block;
        kept_ += size;
        return true;
    }
    std::size_t kept() const { return kept_; }
    /// Set once this thread's lists are destroyed: blocks freed after that go to the heap.
    static thread_local bool gone;

private:
    static void*& next_of(void* block) { return *static_cast<void**>(block); }
    std::array<void*, k_max_shift - k_min_shift + 1> heads_{};
    std::size_t kept_ = 0;
};

thread_local bool Lists::gone = false;

Lists& this_thread() {
    thread_local Lists lists;
    return lists;
}

}  // namespace

void* take(std::size_t bytes) {
    auto shift = shift_for(bytes);
    if (shift > k_max_shift) return ::operator new(bytes);
    if (!Lists::gone)
        if (void* block = this_thread().take(shift)) return block;
    return ::operator new (std::size_t{1} << shift);
}

void give(void* block, std::size_t bytes) noexcept {
    if (!block) return;
    auto shift = shift_for(bytes);
    if (shift <= k_max_shift && !Lists::gone && this_thread().keep(block, shift)) return;
    ::operator delete(block);
}

std::size_t kept_bytes() noexcept { return Lists::gone ? 0 : this_thread().kept(); }
#endif

}  // namespace tokengate::core::recycled
