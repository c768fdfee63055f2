#include "tokengate/core/sha256.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <stdexcept>

namespace tokengate::core {

// OpenSSL's SHA-256 (with its SHA-NI / AVX2 code paths) rather than one of our own.
Sha256Digest sha256(std::string_view data) {
    Sha256Digest out;
    unsigned size = 0;
    if (EVP_Digest(data.data(), data.size(), out.data(), &size, EVP_sha256(), nullptr) != 1 || size != out.size())
        throw std::runtime_error("SHA-256 failed");
    return out;
}

std::string to_hex(const std::uint8_t* data, std::size_t size) {
    static constexpr char k_digits[] = "0123456789abcdef";
    std::string out(size * 2, '0');
    for (std::size_t i = 0; i < size; ++i) {
        out[2 * i] = k_digits[data[i] >> 4];
        out[2 * i + 1] = k_digits[data[i] & 15];
    }
    return out;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace tokengate::core
