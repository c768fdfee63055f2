#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace tokengate::core {

/// A string kept inside the object up to N bytes and on the heap only beyond: what the request
/// path builds for every request (a bucket key per charge) then costs no allocation (SPEC §19).
template <std::size_t N>
class InlineString {
    static_assert(N <= 255, "the inline size is kept in one byte");

public:
    InlineString() = default;
    // Implicit, like std::string's, from each kind of text (one conversion, so `key = "..."` works).
    InlineString(std::string_view text) { append(text); }    // NOLINT
    InlineString(const char* text) { append(text); }         // NOLINT
    InlineString(const std::string& text) { append(text); }  // NOLINT
    // Only the bytes in use are copied: the rest of the buffer is never written.
    InlineString(const InlineString& other) : inline_size_(other.inline_size_), spilled_(other.spilled_) {
        std::memcpy(inline_, other.inline_, inline_size_);
    }
    InlineString(InlineString&& other) noexcept
        : inline_size_(other.inline_size_), spilled_(std::move(other.spilled_)) {
        std::memcpy(inline_, other.inline_, inline_size_);
    }
    InlineString& operator=(const InlineString& other) {
        if (this != &other) {
            inline_size_ = other.inline_size_;
            spilled_ = other.spilled_;
            std::memcpy(inline_, other.inline_, inline_size_);
        }
        return *this;
    }
    InlineString& operator=(InlineString&& other) noexcept {
        if (this != &other) {
            inline_size_ = other.inline_size_;
            spilled_ = std::move(other.spilled_);
            std::memcpy(inline_, other.inline_, inline_size_);
        }
        return *this;
    }
    ~InlineString() = default;

    InlineString& append(std::string_view text) {
        if (!spilled_.empty()) {
            spilled_.append(text);
        } else if (inline_size_ + text.size() <= N) {
            if (!text.empty()) std::memcpy(inline_ + inline_size_, text.data(), text.size());
            inline_size_ = static_cast<std::uint8_t>(inline_size_ + text.size());
        } else {
            spilled_.reserve(inline_size_ + text.size());
            spilled_.assign(inline_, inline_size_).append(text);
            inline_size_ = 0;
        }
        return *this;
    }

    void clear() {
        spilled_.clear();
        inline_size_ = 0;
    }

    std::string_view view() const { return spilled_.empty() ? std::string_view(inline_, inline_size_) : spilled_; }
    operator std::string_view() const { return view(); }  // NOLINT: used wherever a view is
    std::string str() const { return std::string(view()); }
    const char* data() const { return view().data(); }
    std::size_t size() const { return view().size(); }
    bool empty() const { return size() == 0; }
    std::size_t find(std::string_view text, std::size_t from = 0) const { return view().find(text, from); }
    std::size_t find(char c, std::size_t from = 0) const { return view().find(c, from); }

    friend bool operator==(const InlineString& a, const InlineString& b) { return a.view() == b.view(); }
    friend bool operator==(const InlineString& a, std::string_view b) { return a.view() == b; }
    friend bool operator==(const InlineString& a, const char* b) { return a.view() == b; }
    friend bool operator==(const InlineString& a, const std::string& b) { return a.view() == b; }
    friend std::ostream& operator<<(std::ostream& out, const InlineString& s) { return out << s.view(); }

private:
    char inline_[N];
    std::uint8_t inline_size_ = 0;
    std::string spilled_;  // the whole string once it outgrew inline_
};

}  // namespace tokengate::core
