// The SSE usage extractor and the JSON usage reader on arbitrary upstream bytes, split at
// arbitrary points: no crash; with hiding off the bytes pass through unchanged; with hiding
// on, the output does not depend on where the stream was split; paused at a live budget
// (SPEC §17) that always admits the next block, the bytes still pass unchanged.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tokengate/cost/usage.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    std::size_t piece = 1 + data[0] % 64;
    std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
    tokengate::cost::SseUsageFilter hiding(true, 4096), passing(false, 4096);
    tokengate::cost::SseUsageFilter paced(false, 4096);
    std::uint64_t block = 1 + data[0] % 7;
    paced.pause_after(block);
    tokengate::cost::JsonUsageReader json;
    std::string passed, hidden, resumed;
    for (std::size_t i = 0; i < stream.size(); i += piece) {
        auto chunk = stream.substr(i, piece);
        bool last = i + piece >= stream.size();
        hidden += hiding.feed(chunk, last);
        passed += passing.feed(chunk, last);
        resumed += paced.feed(chunk, last);
        while (!last && paced.paused()) resumed += paced.resume(paced.streamed_tokens() + block);
        json.feed(chunk);
    }
    if (stream.empty()) passed += passing.feed({}, true);
    (void)json.finish();
    (void)paced.final_events(true, 7);  // a stopped stream's ending, in whichever dialect it saw
    if (passed != stream) std::abort();
    // Held, never dropped: only a pause in the last piece (nothing left to wait for) stops it.
    if (!paced.stopped() && !stream.empty() && resumed != stream) std::abort();
    // Below the event cap nothing is flushed unparsed, so splitting must not change the result.
    if (stream.size() <= 4096) {
        tokengate::cost::SseUsageFilter whole(true, 4096);
        if (whole.feed(stream, true) != hidden) std::abort();
    }
    return 0;
}
