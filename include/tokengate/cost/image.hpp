#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "tokengate/config/config.hpp"

namespace tokengate::cost {

struct ImageSize {
    std::uint32_t width = 0;
    std::uint32_t height = 0;
};

/// What reading an image's size from a `data:` URL found.
struct ImageProbe {
    enum class Result {
        size,        // width × height read from a PNG, JPEG, GIF or WebP header
        unreadable,  // a well-formed data URL of another format: priced at the model's default
        malformed,   // not a base64 data URL, bad base64, or a header cut short: a 400
    };
    Result result = Result::unreadable;
    ImageSize size;
    std::string_view why;  // for malformed
};

/// Reads width × height from a base64 `data:` URL, decoding only the bytes the header needs
/// (a few dozen, or for JPEG the segment headers up to the frame header): a 4 MB image costs
/// microseconds, and its base64 is never counted as text.
ImageProbe probe_data_url(std::string_view url);
/// The same for an image's bare base64 (the Anthropic Messages API's `source.data`).
ImageProbe probe_base64(std::string_view data);

/// SPEC §11's tokens for one image under the model's scheme: tiles (OpenAI's high-detail rule:
/// fit in 2048×2048, shortest side to 768, then base + per_tile × 512-pixel tiles; `low`
/// detail costs the base only) or patches (Qwen-VL: scaled down to max_pixels, then
/// ⌈w/patch⌉ × ⌈h/patch⌉). Bounded for any size up to 65535×65535.
std::uint64_t image_tokens(ImageSize size, const config::ImageScheme& scheme, bool low_detail);

}  // namespace tokengate::cost
