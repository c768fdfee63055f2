#pragma once

// store.state_file (SPEC §14): the memory store's bucket levels on disk, so that a restart
// neither hands every tenant a fresh burst nor forgets a debt.
//
// Format (little-endian): "TGSTATE\n", u32 version (2), i64 wall-clock time of the snapshot (ns
// since the epoch), u64 bucket count, u64 quota count, 32-byte SHA-256 of the records, then per
// bucket: u16 key length, the key, f64 capacity, f64 rate per second, f64 tokens; then per
// quota: u16 key length, the key, f64 used, f64 top-ups, i64 window start, i64 window end (Unix
// ns). Version 1 (no quotas, no quota count) is still read.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tokengate/store/memory_store.hpp"

namespace tokengate::store {

struct StateSnapshot {
    std::int64_t written_at_unix_ns = 0;
    Snapshot levels;
};

/// What is wrong with a state file: truncated, corrupt, another version, a value out of range.
class StateFileError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

std::string encode_state(const StateSnapshot& snapshot);
/// Throws StateFileError; every value is checked, as if the file were hostile.
StateSnapshot decode_state(std::string_view bytes);

/// The file's bytes, or nothing when there is no file (a first start). Throws StateFileError
/// when it exists but cannot be read.
std::optional<std::string> read_state_file(const std::string& path);
/// Writes `bytes` to `path` + ".tmp", fsyncs it, renames it over `path` and fsyncs the
/// directory: a crash at any point leaves the old snapshot or the new one, never a mix. False,
/// with `error`, when any step fails (the old snapshot is then untouched).
bool write_state_file(const std::string& path, std::string_view bytes, std::string& error);

}  // namespace tokengate::store
