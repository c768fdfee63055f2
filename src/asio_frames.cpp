#include "asio_frames.hpp"

#include <array>
#include <cstdint>

namespace tokengate::frames {

namespace {

/// One thread's kept frames: a list per frame size, found by open addressing on the size (a
/// program has a few dozen coroutine frame sizes). Bounded in bytes: past k_max_bytes a freed
/// frame goes back to the heap.
class Pool {
public:
    ~Pool() {
        gone = true;
        for (auto& list : lists_)
            while (list.head) {
                void* block = list.head;
                list.head = next_of(block);
                boost::asio::aligned_delete(block);
            }
    }
    void* take(std::size_t size, std::size_t align) {
        auto* list = find(size, false);
        if (!list || !list->head) return nullptr;
        void* block = list->head;
        if (reinterpret_cast<std::uintptr_t>(block) % align != 0) return nullptr;
        list->head = next_of(block);
        bytes_ -= size;
        return block;
    }
    bool keep(void* block, std::size_t size) {
        if (size < sizeof(void*) || size > k_max_frame || bytes_ + size > k_max_bytes) return false;
        auto* list = find(size, true);
        if (!list) return false;
        next_of(block) = list->head;
        list->head = block;
        bytes_ += size;
        return true;
    }
    /// Set once this thread's pool is destroyed: frames freed after that (a thread's last
    /// coroutines, torn down with its other thread_locals) go back to the heap.
    static thread_local bool gone;

private:
    static constexpr std::size_t k_lists = 128;                  // a power of two
    static constexpr std::size_t k_max_frame = 64 * 1024;        // larger frames are not kept
    static constexpr std::size_t k_max_bytes = 4 * 1024 * 1024;  // per thread
    struct List {
        std::size_t size = 0;  // 0: unused
        void* head = nullptr;
    };
    static void*& next_of(void* block) { return *static_cast<void**>(block); }
    List* find(std::size_t size, bool claim) {
        std::size_t i = (size * 0x9E3779B97F4A7C15ull) >> 57;  // 7 bits: k_lists
        for (std::size_t probes = 0; probes < k_lists; ++probes, i = (i + 1) & (k_lists - 1)) {
            if (lists_[i].size == size) return &lists_[i];
            if (lists_[i].size == 0) {
                if (!claim) return nullptr;
                lists_[i].size = size;
                return &lists_[i];
            }
        }
        return nullptr;
    }
    std::array<List, k_lists> lists_{};
    std::size_t bytes_ = 0;
};

thread_local bool Pool::gone = false;

Pool& this_thread_pool() {
    thread_local Pool pool;
    return pool;
}

}  // namespace

void* take(std::size_t size, std::size_t align) noexcept {
    return Pool::gone ? nullptr : this_thread_pool().take(size, align);
}

bool keep(void* block, std::size_t size) noexcept { return !Pool::gone && this_thread_pool().keep(block, size); }

}  // namespace tokengate::frames
