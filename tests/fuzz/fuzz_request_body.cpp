// The request-body cost scanner: any bytes a client sends are either priced or refused.
#include <cstdint>
#include <string_view>

#include "tokengate/cost/cost.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view body(reinterpret_cast<const char*>(data), size);
    tokengate::config::CostConfig cost;
    auto parsed = tokengate::cost::parse_request_body(body, cost);
    if (parsed.error == tokengate::cost::BodyError::none) {
        auto s = parsed.summary;
        (void)tokengate::cost::request_cost(cost, 3.5, s.input_tokens, s.max_output_tokens, s.stream);
        if (s.stream) (void)tokengate::cost::with_stream_usage(body, s.has_stream_options);
    }
    (void)tokengate::cost::estimate_tokens(body);
    return 0;
}
