#pragma once

#include <cstdint>
#include <string>

namespace tokengate::mock {

struct MockOptions {
    std::string host = "127.0.0.1";
    std::uint16_t port = 8000;
    double tokens_per_s = 200;  // 0 = generate instantly
    std::string tls_cert;       // both set: the mock speaks HTTPS (an https upstream for the tests)
    std::string tls_key;
    std::string tls_client_ca;  // set: every client must present a certificate this CA signed
    /// A GPU's batch: at most this many requests generate at once, the rest wait in FIFO order
    /// (vLLM's max_num_seqs); 0 = no limit.
    std::uint64_t max_seqs = 0;
    /// SPEC §22: a prefix cache of this many prompt prefixes (least recently used go first); 0 =
    /// none, and no prefill time either. A request whose prefix (its first `prefix_tokens`
    /// tokens) is cached starts generating after `cached_ttft_ms`, any other after its prompt's
    /// prefill at `prefill_tokens_per_s`.
    std::uint64_t prefix_cache = 0;
    double cached_ttft_ms = 5;
    double prefill_tokens_per_s = 10000;
    std::uint64_t prefix_tokens = 256;
};

/// An OpenAI-compatible fake inference server: /v1/chat/completions, /v1/completions (JSON and
/// SSE, `usage` filled in), /v1/models, /health and vLLM-style /metrics (waiting, running and
/// KV cache = running / max_seqs). Per request,
/// `x-mock-completion-tokens`, `x-mock-delay-ms` and `x-mock-status` override its behaviour.
/// Blocks until SIGINT/SIGTERM; returns the exit code.
int run_mock_upstream(const MockOptions& options);

}  // namespace tokengate::mock
