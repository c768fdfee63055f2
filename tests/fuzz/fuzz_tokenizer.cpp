// The tokenizer.json reader on any text: tests/fuzz/tokenizer.json is a small byte-level BPE
// with every feature the reader supports (NFC then NFKC, raw, stripping, single-word and
// normalized added tokens, four kinds of split, digits, GPT-2's ByteLevel with a prefix space,
// a BOS template). Never a crash or a hang; the same count twice (the word cache agrees with
// the merges); bounded by the bytes even after NFKC's longest expansion.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "tokengate/cost/hf_tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const auto tokenizer = tokengate::cost::HfTokenizer::load(TOKENGATE_FUZZ_TOKENIZER);
    std::string_view text(reinterpret_cast<const char*>(data), size);
    auto first = tokenizer->count(text);
    if (tokenizer->count(text) != first) std::abort();
    // NFKC makes at most 18 characters of one (U+FDFA); each byte, and the prefix space of
    // each piece, is at most one token.
    if (first > 2 * 18 * (size + 1)) std::abort();
    return 0;
}
