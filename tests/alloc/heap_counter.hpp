#pragma once

// Counts the heap allocations of the threads that ask for it (count_this_thread()): malloc and
// its family are defined here over glibc's own (__libc_*), so operator new, Asio's aligned
// frames and OpenSSL's allocations all pass through them. free stays glibc's. Include it in
// exactly one translation unit of a program that runs without a sanitizer.

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace tokengate::testing {
inline std::atomic<std::uint64_t> heap_allocations{0};
inline thread_local bool heap_counted_here = false;
inline void count_this_thread() { heap_counted_here = true; }
inline void count_allocation() {
    if (heap_counted_here) heap_allocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace tokengate::testing

extern "C" {
void* __libc_malloc(std::size_t) noexcept;
void* __libc_calloc(std::size_t, std::size_t) noexcept;
void* __libc_realloc(void*, std::size_t) noexcept;
void* __libc_memalign(std::size_t, std::size_t) noexcept;

void* malloc(std::size_t size) noexcept {
    tokengate::testing::count_allocation();
    return __libc_malloc(size);
}
void* calloc(std::size_t count, std::size_t size) noexcept {
    tokengate::testing::count_allocation();
    return __libc_calloc(count, size);
}
void* realloc(void* p, std::size_t size) noexcept {
    tokengate::testing::count_allocation();
    return __libc_realloc(p, size);
}
void* memalign(std::size_t alignment, std::size_t size) noexcept {
    tokengate::testing::count_allocation();
    return __libc_memalign(alignment, size);
}
void* aligned_alloc(std::size_t alignment, std::size_t size) noexcept { return memalign(alignment, size); }
int posix_memalign(void** out, std::size_t alignment, std::size_t size) noexcept {
    void* p = memalign(alignment, size);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
}
