#pragma once

// Recycled coroutine frames (SPEC §19). Asio recycles an awaitable's frame only up to 1,020
// bytes and two per thread; the request path's frames are 300 B to 15 KB, eleven a request, so
// each was a fresh aligned allocation. Here every frame is kept after use in a per-thread list
// of its exact size (a coroutine's frame size never changes), and the next frame of that size
// takes it back: no allocation once a thread has seen its working set.
//
// It replaces Asio's allocator for awaitable frames by an explicit specialization, first in the
// precompiled header of every target that links Asio (CMakeLists.txt, tokengate_asio). A block is
// made exactly as Asio makes its own (its size rounded to 4-byte chunks, plus Asio's trailing
// count byte), and a list holds only blocks at least as large as its size: so a frame made by
// one side and freed by the other, in a translation unit that does not see this file (a test),
// is still freed or recycled correctly. Not under sanitizers, which must see each frame freed.

#include <cstddef>

#include <boost/asio/detail/memory.hpp>
#include <boost/asio/detail/thread_info_base.hpp>

namespace tokengate::frames {

/// A kept block for a frame of exactly `size` bytes aligned to `align`, or null.
void* take(std::size_t size, std::size_t align) noexcept;
/// Keeps `block` (a frame of `size` bytes) for the next frame of that size; false when the
/// thread's lists are full (the caller frees it).
bool keep(void* block, std::size_t size) noexcept;

/// A new block, laid out as Asio's recycling allocator lays out its own.
inline void* make(std::size_t size, std::size_t align) {
    constexpr std::size_t k_chunk = 4;  // thread_info_base::chunk_size without io_uring
    std::size_t chunks = (size + k_chunk - 1) / k_chunk;
    auto* block = static_cast<unsigned char*>(boost::asio::aligned_new(align, chunks * k_chunk + 1));
    block[size] = chunks <= 255 ? static_cast<unsigned char>(chunks) : 0;
    return block;
}

}  // namespace tokengate::frames

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TOKENGATE_NO_FRAME_POOL
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TOKENGATE_NO_FRAME_POOL
#endif
#endif

#if !defined(TOKENGATE_NO_FRAME_POOL) && !defined(BOOST_ASIO_HAS_IO_URING)
namespace boost::asio::detail {

template <>
inline void* thread_info_base::allocate(awaitable_frame_tag, thread_info_base*, std::size_t size, std::size_t align) {
    if (void* block = tokengate::frames::take(size, align)) return block;
    return tokengate::frames::make(size, align);
}

template <>
inline void thread_info_base::deallocate(awaitable_frame_tag, thread_info_base*, void* pointer, std::size_t size) {
    if (!tokengate::frames::keep(pointer, size)) aligned_delete(pointer);
}

}  // namespace boost::asio::detail
#endif
