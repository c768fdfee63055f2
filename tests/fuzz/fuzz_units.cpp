// The rate, duration, size, address and CIDR parsers.
#include <cstdint>
#include <string_view>

#include "tokengate/config/loader.hpp"
#include "tokengate/config/units.hpp"
#include "tokengate/core/cidr.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    using namespace tokengate;
    (void)config::parse_duration(text);
    (void)config::parse_rate(text);
    (void)config::parse_size(text);
    (void)config::parse_quantity(text);
    (void)config::parse_host_port(text);
    if (auto cidr = core::Cidr::parse(text)) (void)cidr->contains(cidr->network);
    (void)core::parse_ip(text);
    auto half = text.substr(0, size / 2);
    (void)config::glob_match(half, text.substr(size / 2));
    return 0;
}
