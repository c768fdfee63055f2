// Image sizes from the first bytes of a base64 data URL, and SPEC §11's tokens per image.

#include "tokengate/cost/image.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace tokengate::cost {

namespace {

constexpr int k_bad = -1;

int base64_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;  // standard and URL-safe alphabets
    if (c == '/' || c == '_') return 63;
    return k_bad;
}

/// Random access into the bytes a base64 text encodes: byte k lives in the quad at 4·⌊k/3⌋,
/// so any window is decoded without the bytes before it.
class Base64Bytes {
public:
    explicit Base64Bytes(std::string_view text) : text_(text) {
        while (!text_.empty() && text_.back() == '=') text_.remove_suffix(1);
    }
    std::size_t size() const { return text_.size() * 3 / 4; }
    /// Decodes [offset, offset + n) into out; false if it is past the end or not base64.
    bool read(std::size_t offset, std::size_t n, std::uint8_t* out) const {
        if (n == 0) return true;
        if (offset > size() || n > size() - offset) return false;
        for (std::size_t k = 0; k < n; ++k) {
            std::size_t byte = offset + k;
            std::size_t quad = byte / 3 * 4;
            std::uint32_t bits = 0;
            for (std::size_t i = 0; i < 4; ++i) {
                int v = quad + i < text_.size() ? base64_value(text_[quad + i]) : 0;
                if (v == k_bad) return false;
                bits = bits << 6 | static_cast<std::uint32_t>(v);
            }
            out[k] = static_cast<std::uint8_t>(bits >> (16 - 8 * (byte % 3)));
        }
        return true;
    }

private:
    std::string_view text_;
};

std::uint32_t be16(const std::uint8_t* p) { return static_cast<std::uint32_t>(p[0] << 8 | p[1]); }
std::uint32_t le16(const std::uint8_t* p) { return static_cast<std::uint32_t>(p[1] << 8 | p[0]); }
std::uint32_t be32(const std::uint8_t* p) {
    return static_cast<std::uint32_t>(p[0]) << 24 | static_cast<std::uint32_t>(p[1]) << 16 |
           static_cast<std::uint32_t>(p[2]) << 8 | p[3];
}
std::uint32_t le24(const std::uint8_t* p) {
    return static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[1]) << 8 | p[0];
}

ImageProbe sized(std::uint32_t w, std::uint32_t h) {
    ImageProbe p;
    if (w == 0 || h == 0) {
        p.result = ImageProbe::Result::malformed;
        p.why = "an image of zero width or height";
        return p;
    }
    p.result = ImageProbe::Result::size;
    p.size = {w, h};
    return p;
}

ImageProbe malformed(std::string_view why) {
    ImageProbe p;
    p.result = ImageProbe::Result::malformed;
    p.why = why;
    return p;
}

constexpr std::string_view k_truncated = "an image header cut short";

/// JPEG: walk the segments from SOI to the first start-of-frame marker.
ImageProbe jpeg_size(const Base64Bytes& b) {
    std::size_t at = 2;
    std::array<std::uint8_t, 9> seg{};
    for (int hops = 0; hops < 256; ++hops) {
        if (!b.read(at, 4, seg.data())) return malformed(k_truncated);
        if (seg[0] != 0xFF) return malformed("a JPEG segment without its marker");
        std::uint8_t marker = seg[1];
        if (marker == 0xFF) {  // fill byte
            ++at;
            continue;
        }
        if (marker == 0xD8 || (marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) {
            at += 2;  // markers without a length
            continue;
        }
        bool frame = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
        if (frame) {
            if (!b.read(at, 9, seg.data())) return malformed(k_truncated);
            return sized(be16(seg.data() + 7), be16(seg.data() + 5));
        }
        if (marker == 0xD9 || marker == 0xDA) return malformed("a JPEG without a frame header");
        std::size_t length = be16(seg.data() + 2);
        if (length < 2) return malformed("a JPEG segment of impossible length");
        at += 2 + length;
    }
    return malformed("a JPEG whose frame header is out of reach");
}

ImageProbe webp_size(const Base64Bytes& b) {
    std::array<std::uint8_t, 30> h{};
    if (!b.read(0, h.size(), h.data())) return malformed(k_truncated);
    std::string_view chunk(reinterpret_cast<const char*>(h.data() + 12), 4);
    if (chunk == "VP8 ") return sized(le16(h.data() + 26) & 0x3FFF, le16(h.data() + 28) & 0x3FFF);
    if (chunk == "VP8L") {
        if (h[20] != 0x2F) return malformed("a lossless WebP without its signature");
        std::uint32_t bits = h[21] | h[22] << 8 | h[23] << 16 | static_cast<std::uint32_t>(h[24]) << 24;
        return sized((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1);
    }
    if (chunk == "VP8X") return sized(le24(h.data() + 24) + 1, le24(h.data() + 27) + 1);
    return malformed("a WebP of unknown kind");
}

std::uint64_t ceil_div(double a, double b) { return static_cast<std::uint64_t>(std::ceil(a / b)); }

}  // namespace

ImageProbe probe_data_url(std::string_view url) {
    if (url.substr(0, 5) != "data:") return malformed("not a data URL");
    auto comma = url.find(',');
    if (comma == std::string_view::npos) return malformed("a data URL without its data");
    auto meta = url.substr(5, comma - 5);
    if (meta.size() < 7 || meta.substr(meta.size() - 7) != ";base64") return malformed("a data URL that is not base64");
    return probe_base64(url.substr(comma + 1));
}

ImageProbe probe_base64(std::string_view data) {
    Base64Bytes bytes(data);
    std::array<std::uint8_t, 24> h{};
    auto have = std::min<std::size_t>(h.size(), bytes.size());
    if (!bytes.read(0, have, h.data())) return malformed("bad base64");
    auto starts = [&](std::string_view magic) {
        return have >= magic.size() && std::equal(magic.begin(), magic.end(), h.begin(), [](char m, std::uint8_t c) {
                   return static_cast<std::uint8_t>(m) == c;
               });
    };
    if (starts("\x89PNG\r\n\x1a\n")) {
        if (have < 24) return malformed(k_truncated);
        return sized(be32(h.data() + 16), be32(h.data() + 20));
    }
    if (starts("GIF87a") || starts("GIF89a")) {
        if (have < 10) return malformed(k_truncated);
        return sized(le16(h.data() + 6), le16(h.data() + 8));
    }
    if (have >= 3 && h[0] == 0xFF && h[1] == 0xD8 && h[2] == 0xFF) return jpeg_size(bytes);
    if (starts("RIFF") && have >= 12 && std::string_view(reinterpret_cast<const char*>(h.data() + 8), 4) == "WEBP")
        return webp_size(bytes);
    if (have < 4) return malformed(k_truncated);
    return {};  // another format: its size is unknown
}

std::uint64_t image_tokens(ImageSize size, const config::ImageScheme& scheme, bool low_detail) {
    double w = size.width, h = size.height;
    if (w <= 0 || h <= 0) return 0;
    if (scheme.kind == config::ImageScheme::Kind::patches) {
        double pixels = w * h;
        if (pixels > static_cast<double>(scheme.max_pixels)) {
            double scale = std::sqrt(static_cast<double>(scheme.max_pixels) / pixels);
            w = std::max(1.0, std::floor(w * scale));
            h = std::max(1.0, std::floor(h * scale));
            // A side that rounded up to one pixel must not carry the other past max_pixels (a
            // 13 × 1.2e9 PNG header, found by fuzzing).
            auto max_pixels = static_cast<double>(scheme.max_pixels);
            if (w * h > max_pixels) (w < h ? h : w) = std::max(1.0, std::floor(max_pixels / std::min(w, h)));
        }
        return ceil_div(w, scheme.patch) * ceil_div(h, scheme.patch);
    }
    if (low_detail) return scheme.base;
    if (w > 2048 || h > 2048) {  // fit in a 2048 square
        double scale = 2048 / std::max(w, h);
        w = std::floor(w * scale);
        h = std::floor(h * scale);
    }
    if (std::min(w, h) > 768) {  // the shortest side to 768
        double scale = 768 / std::min(w, h);
        w = std::floor(w * scale);
        h = std::floor(h * scale);
    }
    return scheme.base +
           scheme.per_tile * ceil_div(std::max(w, 1.0), scheme.tile) * ceil_div(std::max(h, 1.0), scheme.tile);
}

}  // namespace tokengate::cost
