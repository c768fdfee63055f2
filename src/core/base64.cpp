#include "tokengate/core/base64.hpp"

#include <openssl/evp.h>

#include <limits>

namespace tokengate::core {

std::optional<std::string> base64_decode(std::string_view text) {
    // OpenSSL's decoder: it wants whole quanta, and counts the padding as zero bytes.
    if (text.size() % 4 != 0 || text.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
        return std::nullopt;
    std::string out(text.size() / 4 * 3, '\0');
    int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                            reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
    if (n < 0) return std::nullopt;
    std::size_t padding = 0;
    for (std::size_t i = text.size(); i > 0 && text[i - 1] == '=' && padding < 2; --i) ++padding;
    out.resize(static_cast<std::size_t>(n) - padding);
    return out;
}

std::optional<std::string> base64url_decode(std::string_view text) {
    if (text.size() % 4 == 1) return std::nullopt;  // no whole byte ends there
    std::string standard;
    standard.reserve(text.size() + 3);
    for (char c : text) {
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) standard += c;
        else if (c == '-') standard += '+';
        else if (c == '_') standard += '/';
        else return std::nullopt;  // padding, the standard alphabet's + and /, anything else
    }
    // The last character's unused low bits must be zero: one token, one spelling (RFC 4648 §3.5).
    if (auto tail = text.size() % 4; tail != 0) {
        char last = standard.back();
        int value = last >= 'A' && last <= 'Z'   ? last - 'A'
                    : last >= 'a' && last <= 'z' ? last - 'a' + 26
                    : last >= '0' && last <= '9' ? last - '0' + 52
                    : last == '+'                ? 62
                                                 : 63;
        if ((value & (tail == 2 ? 0x0F : 0x03)) != 0) return std::nullopt;
    }
    while (standard.size() % 4 != 0) standard += '=';
    return base64_decode(standard);
}

}  // namespace tokengate::core
