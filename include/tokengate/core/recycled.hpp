#pragma once

// Recycled blocks for what the request path builds and drops every request (SPEC §19): Beast's
// fields, a body, a head being written. An allocator for the standard containers whose blocks,
// once freed, wait in a per-thread list of their size class (powers of two, 32 B to 64 KB) for
// the next request on that thread; a steady request path then allocates nothing. Stateless, so
// a block freed on another thread is simply kept there. Bounded per thread; larger blocks go to
// the heap and back. Under sanitizers it is operator new and delete, so they see every block.

#include <cstddef>
#include <limits>
#include <new>
#include <string>

namespace tokengate::core {

namespace recycled {
/// A block of at least `bytes`: a kept one of its class, or a new one.
void* take(std::size_t bytes);
/// Gives back a block that `take(bytes)` returned (same `bytes`).
void give(void* block, std::size_t bytes) noexcept;
/// Bytes this thread keeps now (for tests).
std::size_t kept_bytes() noexcept;
}  // namespace recycled

template <class T>
struct RecyclingAllocator {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "blocks have operator new's alignment");
    using value_type = T;

    RecyclingAllocator() noexcept = default;
    template <class U>
    RecyclingAllocator(const RecyclingAllocator<U>&) noexcept {}  // NOLINT: rebinding is implicit

    T* allocate(std::size_t n) {
        if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
        return static_cast<T*>(recycled::take(n * sizeof(T)));
    }
    void deallocate(T* block, std::size_t n) noexcept { recycled::give(block, n * sizeof(T)); }

    template <class U>
    friend bool operator==(const RecyclingAllocator&, const RecyclingAllocator<U>&) noexcept {
        return true;
    }
};

/// A string whose buffer is recycled: what a request builds and drops.
using RecycledString = std::basic_string<char, std::char_traits<char>, RecyclingAllocator<char>>;

}  // namespace tokengate::core
