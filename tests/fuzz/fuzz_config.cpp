// The config loader on arbitrary text: it must answer with a ConfigError, never crash or hang.
#include <cstdint>
#include <string>

#include "tokengate/config/loader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    try {
        tokengate::config::load_config_text(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
    } catch (const tokengate::config::ConfigError&) {}
    return 0;
}
