// The image-header reader: any data URL, and any bytes behind a well-formed one, is sized,
// unreadable or malformed; never a crash, and the tokens stay within the scheme's bounds.
#include <cstdint>
#include <string>
#include <string_view>

#include "tokengate/cost/image.hpp"

namespace {

std::string base64(const std::uint8_t* data, std::size_t size) {
    static constexpr char k_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (std::size_t i = 0; i < size; i += 3) {
        std::uint32_t n = data[i] << 16 | (i + 1 < size ? data[i + 1] << 8 : 0) | (i + 2 < size ? data[i + 2] : 0);
        out += k_alphabet[n >> 18 & 63];
        out += k_alphabet[n >> 12 & 63];
        out += i + 1 < size ? k_alphabet[n >> 6 & 63] : '=';
        out += i + 2 < size ? k_alphabet[n & 63] : '=';
    }
    return out;
}

void check(const tokengate::cost::ImageProbe& probe) {
    using tokengate::cost::ImageProbe;
    if (probe.result != ImageProbe::Result::size) return;
    tokengate::config::ImageScheme tiles, patches;
    patches.kind = tokengate::config::ImageScheme::Kind::patches;
    // At most 768 × 2048 after scaling: 2 × 4 tiles. At most max_pixels, give or take a row
    // and a column of patches.
    if (tokengate::cost::image_tokens(probe.size, tiles, false) > 85 + 8 * 170) __builtin_trap();
    if (tokengate::cost::image_tokens(probe.size, patches, false) > 1003520 / (28 * 28) + 2 * 1003520 / 28 + 1)
        __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    // The bytes as the URL itself, and as the image inside a well-formed one.
    check(tokengate::cost::probe_data_url(std::string_view(reinterpret_cast<const char*>(data), size)));
    check(tokengate::cost::probe_data_url("data:image/png;base64," + base64(data, size)));
    return 0;
}
