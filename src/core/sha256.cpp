#include "tokengate/core/sha256.hpp"

// SHA256_Init and its kin are deprecated in OpenSSL 3.0 in favour of EVP: see below why they are
// the ones used.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <stdexcept>

namespace tokengate::core {

// OpenSSL's SHA-256 (with its SHA-NI / AVX2 code paths) rather than one of our own. Every
// request hashes its key, through SHA256_Init/Update/Final on a context on the stack: in OpenSSL
// 3.0 EVP_DigestInit_ex2 frees and allocates its provider's context (112 bytes) on every init,
// even on a context reused for the same digest, and the one-shot SHA256() fetches the algorithm
// and makes a context each call (three allocations), where the request path allocates nothing
// (SPEC §19). The provider's SHA-256 is this same code behind a dispatch table.
Sha256Digest sha256(std::string_view data) {
    SHA256_CTX ctx;
    Sha256Digest out;
    if (SHA256_Init(&ctx) != 1 || SHA256_Update(&ctx, data.data(), data.size()) != 1 ||
        SHA256_Final(out.data(), &ctx) != 1)
        throw std::runtime_error("SHA-256 failed");
    return out;
}

std::string to_hex(const std::uint8_t* data, std::size_t size) {
    std::string out;
    out.reserve(size * 2);
    append_hex(out, data, size);
    return out;
}

std::optional<std::string> digest_from_hex(std::string_view hex) {
    if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string_view::npos) return std::nullopt;
    auto value = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
    std::string digest;
    for (std::size_t i = 0; i < hex.size(); i += 2)
        digest.push_back(static_cast<char>(value(hex[i]) * 16 + value(hex[i + 1])));
    return digest;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace tokengate::core
