// store.state_file's decoder: any bytes are refused with a reason or decoded into values the
// config allows, and what decodes encodes back to bytes that decode the same.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tokengate/store/state_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tokengate::store;
    std::string_view bytes(reinterpret_cast<const char*>(data), size);
    StateSnapshot decoded;
    try {
        decoded = decode_state(bytes);
    } catch (const StateFileError&) {
        return 0;
    }
    auto again = decode_state(encode_state(decoded));
    if (again.written_at_unix_ns != decoded.written_at_unix_ns ||
        again.levels.buckets.size() != decoded.levels.buckets.size() ||
        again.levels.quotas.size() != decoded.levels.quotas.size())
        std::abort();
    for (std::size_t i = 0; i < decoded.levels.quotas.size(); ++i)
        if (again.levels.quotas[i].key != decoded.levels.quotas[i].key ||
            again.levels.quotas[i].used != decoded.levels.quotas[i].used ||
            !(again.levels.quotas[i].window == decoded.levels.quotas[i].window))
            std::abort();
    return 0;
}
