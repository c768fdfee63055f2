#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tokengate/core/recycled.hpp"

namespace simdjson::dom {
class object;
}

namespace tokengate::cost {

class Tokenizer;

/// Token counts an upstream reported: OpenAI's `usage` (prompt/completion tokens), the
/// Responses API's (input/output tokens), SGLang's `meta_info`, or TGI's
/// `details.generated_tokens`, which carries no prompt count. Without any of them, a body's
/// output counted in every channel (prompt_known false).
struct Usage {
    bool known = false;
    bool prompt_known = true;  // false: TGI's counts; the prompt is the gateway's estimate
    std::uint64_t prompt_tokens = 0;
    std::uint64_t completion_tokens = 0;
    std::uint64_t cached_tokens = 0;  // of the prompt: usage.prompt_tokens_details.cached_tokens
};

/// Reads `usage` from a JSON response body fed in pieces (kept up to `max_bytes`).
class JsonUsageReader {
public:
    /// `tokenizer` counts a TGI generated_text that comes without its count (null: the heuristic).
    explicit JsonUsageReader(std::size_t max_bytes = 8u << 20, const Tokenizer* tokenizer = nullptr)
        : max_bytes_(max_bytes), tokenizer_(tokenizer) {}
    void feed(std::string_view data);
    Usage finish() const;

private:
    Usage body_usage(simdjson::dom::object doc) const;

    std::size_t max_bytes_;
    const Tokenizer* tokenizer_;
    core::RecycledString body_;
    bool overflowed_ = false;
};

/// Passes an SSE stream through event by event: reads the usage chunk, estimates the tokens
/// of streamed text (for upstreams that send no usage, and for streams cut short), and, when
/// the gateway asked for usage on the client's behalf, hides the usage-only chunk and the
/// `"usage":null` fields the client did not ask for.
class SseUsageFilter {
public:
    /// `tokenizer` counts the streamed text (null: the heuristic).
    explicit SseUsageFilter(bool hide_usage, std::size_t max_event_bytes = 1u << 20,
                            const Tokenizer* tokenizer = nullptr)
        : hide_usage_(hide_usage), max_event_bytes_(max_event_bytes), tokenizer_(tokenizer) {}

    /// Returns the bytes to forward now: a view of `data` when no event was changed, else of
    /// the filter's own buffer (valid until the next call). `last` flushes the tail.
    std::string_view feed(std::string_view data, bool last);

    Usage usage() const { return usage_; }
    std::uint64_t streamed_tokens() const { return streamed_tokens_; }
    bool saw_output() const { return streamed_tokens_ > 0 || usage_.completion_tokens > 0; }

    /// SPEC §17's live budget: once the streamed output passes `tokens`, the event that passed
    /// it is the last one forwarded and the rest is held until resume() or stop_now(). In the
    /// upstream's last piece there is nothing to wait for: the stream stops there.
    void pause_after(std::uint64_t tokens) { pause_after_ = tokens; }
    bool paused() const { return paused_; }
    /// Lets the held events through up to a new limit; returns the bytes to forward now (valid
    /// until the next call).
    std::string_view resume(std::uint64_t tokens);
    /// Ends the stream after what was forwarded so far (a live budget refused more).
    void stop_now() {
        stopped_ = true;
        paused_ = false;
        pending_.clear();
    }
    bool stopped() const { return stopped_; }
    /// The events that end a stopped stream cleanly in its own dialect: a final chunk per
    /// choice with `finish_reason: "length"`, the usage chunk when the client asked for usage
    /// (the relayed count), then `data: [DONE]` (chat, completions); `response.incomplete`
    /// (the Responses API); a last token with its details (TGI); the open block's
    /// `content_block_stop`, a `message_delta` with `stop_reason: "max_tokens"` and
    /// `message_stop` (Anthropic).
    std::string final_events(bool client_wants_usage, std::uint64_t prompt_tokens) const;

private:
    enum class Dialect { unknown, chat, completion, responses, tgi, anthropic };
    /// Notes what the stream is and its identity, for final_events.
    void note_dialect(simdjson::dom::object doc);
    enum class Verdict { keep, drop, strip_null_usage };
    /// Inspects one complete event: reads its usage and text, and says what to forward.
    Verdict inspect(std::string_view event);
    void append_without_null_usage(std::string_view event);
    /// The output an event adds: every channel's text; SGLang's `text` is the whole output so
    /// far, so only what it adds counts (or its meta_info's count, when larger).
    std::uint64_t stream_event_tokens(simdjson::dom::object doc);

    bool hide_usage_;
    std::size_t max_event_bytes_;
    const Tokenizer* tokenizer_;
    // Recycled, as every buffer a response needs (SPEC §19).
    core::RecycledString pending_;
    core::RecycledString out_;
    Usage usage_;
    std::uint64_t streamed_tokens_ = 0;
    std::uint64_t pause_after_ = UINT64_MAX;
    bool paused_ = false;
    bool stopped_ = false;
    Dialect dialect_ = Dialect::unknown;
    core::RecycledString id_, model_;
    std::int64_t created_ = 0;
    std::uint64_t choices_ = 1;  // the highest choice index seen, plus one
    std::uint64_t tgi_index_ = 0;
    std::optional<std::uint64_t> open_block_;  // Anthropic: the content block started and not stopped
    std::size_t sglang_text_bytes_ = 0;        // the length of SGLang's cumulative text so far
};

}  // namespace tokengate::cost
