#pragma once

// Internal to the server module: SPEC §21's API keys made at run time (the admin key API),
// kept in `auth.keys_file` as hashes only, written whole (atomically) on every change, so a
// key made or revoked survives SIGTERM, SIGKILL and SIGHUP alike.

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "tokengate/core/clock.hpp"
#include "tokengate/core/sha256.hpp"

namespace tokengate::server {

struct RunTimeKey {
    std::string id;  // the first 12 hex digits of its SHA-256: how the access log names any key
    std::string tenant;
    std::string name;
    std::string digest;  // its SHA-256, raw: the key itself is never kept
    core::Nanos created = 0;
    std::optional<core::Nanos> expires;
    core::Nanos last_used = 0;  // 0: never (in the file as of the last change)
};

class RunTimeKeys {
public:
    static constexpr std::size_t k_max_keys = 100'000, k_max_per_tenant = 1'000, k_max_name_bytes = 128;

    /// Reads `file` if it exists; throws std::runtime_error when it cannot be read or is not one.
    explicit RunTimeKeys(std::string file);
    const std::string& file() const { return file_; }

    struct Made {
        std::string secret;  // shown once, to whoever asked for it
        RunTimeKey key;
    };
    /// A new key for `tenant`, written to the file before it is returned; or why not.
    std::variant<Made, std::string> make(std::string_view tenant, std::string_view name,
                                         std::optional<core::Nanos> expires, core::Nanos now);
    std::vector<RunTimeKey> list(std::string_view tenant) const;
    /// Revokes (forgets) the key `id`: the key it was, or nullopt if there was none. Written to
    /// the file before it returns; `error` says why not, and then nothing changed.
    std::optional<RunTimeKey> revoke(std::string_view id, std::string& error);
    /// The tenant and key id of the key hashed to `digest` if it is a live run-time key at `now`.
    std::optional<std::pair<std::string, std::string>> authenticate(const core::Sha256Digest& digest, core::Nanos now);

private:
    bool save(std::string& error) const;  // with mutex_ held

    mutable std::mutex mutex_;
    std::string file_;
    std::vector<RunTimeKey> keys_;
    std::unordered_map<std::string, std::size_t> by_digest_;  // into keys_
};

}  // namespace tokengate::server
