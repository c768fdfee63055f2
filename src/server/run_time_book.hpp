#pragma once

// Internal to the server module: what SPEC §21's admin API makes at run time — API keys and
// tenants — held here for every request to read, and kept by a BookKeeper: the memory store's
// `auth.keys_file`, or Redis with the Redis store, where every replica sees a change.

#include <boost/asio/awaitable.hpp>

#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
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
    core::Nanos last_used = 0;  // 0: never
};

struct RunTimeTenant {
    std::string id;
    std::string tier;
    core::Nanos created = 0;
};

/// Everything made at run time, as a keeper stores it.
struct BookContents {
    std::vector<RunTimeKey> keys;
    std::vector<RunTimeTenant> tenants;
};

/// One change, as a keeper that stores changes (Redis) applies it.
struct BookChange {
    enum class Kind { make_key, revoke_key, make_tenant, remove_tenant } kind;
    std::string id;      // the key's or the tenant's
    std::string record;  // make_*: the entry, as JSON
};

/// The JSON a key or tenant is kept as (the file's entries; Redis's hash values), and back:
/// nullopt for an entry that is not one.
nlohmann::json key_record(const RunTimeKey& key);
nlohmann::json tenant_record(const RunTimeTenant& tenant);
std::optional<RunTimeKey> key_from_record(const nlohmann::json& record);
std::optional<RunTimeTenant> tenant_from_record(const nlohmann::json& record);

/// Where the book is kept. Keeps one change, `after` being the whole book once it is made;
/// answers "" or why it could not (then the change is not made).
class BookKeeper {
public:
    /// keep()'s answer when another replica made the same tenant first.
    static constexpr std::string_view k_made_elsewhere = "made elsewhere";
    virtual ~BookKeeper() = default;
    virtual boost::asio::awaitable<std::string> keep(const BookChange& change, const BookContents& after) = 0;
    /// Closes what it holds open; the event loops have stopped.
    virtual void stop() {}
};

/// `auth.keys_file`: the whole book, written atomically on every change (SPEC §21).
class FileKeeper final : public BookKeeper {
public:
    explicit FileKeeper(std::string path) : path_(std::move(path)) {}
    /// The file's contents; none if there is no file yet. Throws std::runtime_error with the reason.
    BookContents read() const;
    boost::asio::awaitable<std::string> keep(const BookChange& change, const BookContents& after) override;

private:
    std::string path_;
};

class RunTimeBook {
public:
    static constexpr std::size_t k_max_keys = 100'000, k_max_per_tenant = 1'000, k_max_name_bytes = 128;
    static constexpr std::size_t k_max_tenants = 10'000, k_max_tenant_id_bytes = 128;

    /// `where` names the keeper in errors ("auth.keys_file /var/...", "Redis").
    RunTimeBook(std::unique_ptr<BookKeeper> keeper, std::string where, BookContents contents = {});
    const std::string& where() const { return where_; }
    void stop() { keeper_->stop(); }

    struct Made {
        std::string secret;  // shown once, to whoever asked for it
        RunTimeKey key;
    };
    /// Why a change was not made: the keeper could not keep it (`unkept`), or it was refused.
    struct Refusal {
        bool unkept = false;
        std::string why;
    };

    /// A new key for `tenant`, kept before it is returned.
    boost::asio::awaitable<std::variant<Made, Refusal>> make_key(std::string tenant, std::string name,
                                                                 std::optional<core::Nanos> expires, core::Nanos now);
    std::vector<RunTimeKey> keys_of(std::string_view tenant) const;
    /// Revokes the key `id` (the key it was, nullopt if none), kept before it returns.
    boost::asio::awaitable<std::variant<std::optional<RunTimeKey>, Refusal>> revoke_key(std::string id);
    /// The tenant and key id of the key hashed to `digest` if it is a live run-time key at `now`.
    std::optional<std::pair<std::string, std::string>> authenticate(const core::Sha256Digest& digest, core::Nanos now);

    /// A tenant on `tier` (the caller has checked both), kept before it is returned.
    boost::asio::awaitable<std::variant<RunTimeTenant, Refusal>> make_tenant(std::string id, std::string tier,
                                                                             core::Nanos now);
    /// Removes the tenant `id` and revokes its keys: the tenant and its keys, nullopt if none.
    boost::asio::awaitable<std::variant<std::optional<std::pair<RunTimeTenant, std::vector<RunTimeKey>>>, Refusal>>
    remove_tenant(std::string id);
    /// A run-time tenant's tier, if `id` is one.
    std::optional<std::string> tier_of(std::string_view id) const;
    std::vector<RunTimeTenant> tenants() const;

    /// The book as a keeper read it (another replica changed it): replaces it whole, keeping
    /// what this replica knows of when each key was last used.
    void replace(BookContents contents);
    /// Keys used since the last call, with when: for a shared keeper to record.
    std::vector<std::pair<std::string, core::Nanos>> take_recently_used();

private:
    void index();  // with mutex_ held
    BookContents contents() const;

    std::unique_ptr<BookKeeper> keeper_;
    std::string where_;
    mutable std::mutex mutex_;
    std::vector<RunTimeKey> keys_;
    std::vector<RunTimeTenant> tenants_;
    std::unordered_map<std::string, std::size_t, core::DigestHash, std::equal_to<>> by_digest_;  // into keys_
    struct IdHash {
        using is_transparent = void;
        std::size_t operator()(std::string_view id) const { return std::hash<std::string_view>{}(id); }
    };
    std::unordered_map<std::string, std::string, IdHash, std::equal_to<>> tier_by_tenant_;
    std::unordered_map<std::string, core::Nanos> used_;  // key id -> last used here, since taken
};

}  // namespace tokengate::server
