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

}  // namespace tokengate::core
