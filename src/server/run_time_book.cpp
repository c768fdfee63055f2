#include "run_time_book.hpp"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "tokengate/core/calendar.hpp"
#include "tokengate/store/state_file.hpp"

namespace tokengate::server {

namespace {

using json = nlohmann::json;

/// "tg-" + 32 random bytes in base64url (SPEC §21).
std::string new_secret() {
    unsigned char random[32];
    if (RAND_bytes(random, sizeof random) != 1) throw std::runtime_error("no randomness for a new key");
    unsigned char text[48];
    int n = EVP_EncodeBlock(text, random, sizeof random);
    std::string key = "tg-";
    for (int i = 0; i < n; ++i) {
        char c = static_cast<char>(text[i]);
        if (c == '=') break;
        key += c == '+' ? '-' : c == '/' ? '_' : c;
    }
    return key;
}

std::string hex_of(std::string_view digest, std::size_t bytes) {
    return core::to_hex(reinterpret_cast<const std::uint8_t*>(digest.data()), bytes);
}

json time_or_null(core::Nanos t) { return t ? json(core::rfc3339(t)) : json(nullptr); }

/// A record's string member, if it is one.
std::optional<std::string> text_of(const json& record, const char* field) {
    auto it = record.find(field);
    if (it == record.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
}

/// A record's time: absent or null is 0 (none); anything but an RFC 3339 string is nullopt.
std::optional<core::Nanos> time_of(const json& record, const char* field) {
    auto it = record.find(field);
    if (it == record.end() || it->is_null()) return 0;
    return it->is_string() ? core::parse_rfc3339(it->get_ref<const std::string&>()) : std::nullopt;
}

}  // namespace

json key_record(const RunTimeKey& k) {
    return {{"id", k.id},
            {"tenant", k.tenant},
            {"name", k.name},
            {"sha256", hex_of(k.digest, k.digest.size())},
            {"created", time_or_null(k.created)},
            {"expires", k.expires ? json(core::rfc3339(*k.expires)) : json(nullptr)},
            {"last_used", time_or_null(k.last_used)}};
}

json tenant_record(const RunTimeTenant& t) {
    return {{"id", t.id}, {"tier", t.tier}, {"created", time_or_null(t.created)}};
}

std::optional<RunTimeKey> key_from_record(const json& record) {
    if (!record.is_object()) return std::nullopt;
    auto tenant = text_of(record, "tenant"), name = text_of(record, "name"), hex = text_of(record, "sha256");
    auto created = time_of(record, "created"), expires = time_of(record, "expires"),
         last_used = time_of(record, "last_used");
    auto digest = hex ? core::digest_from_hex(*hex) : std::nullopt;
    if (!tenant || !name || !digest || !created || !expires || !last_used) return std::nullopt;
    RunTimeKey key;
    key.digest = std::move(*digest);
    key.id = hex_of(key.digest, 6);
    key.tenant = std::move(*tenant);
    key.name = std::move(*name);
    key.created = *created;
    if (*expires) key.expires = *expires;
    key.last_used = *last_used;
    return key;
}

std::optional<RunTimeTenant> tenant_from_record(const json& record) {
    if (!record.is_object()) return std::nullopt;
    auto id = text_of(record, "id"), tier = text_of(record, "tier");
    auto created = time_of(record, "created");
    if (!id || id->empty() || !tier || !created) return std::nullopt;
    return RunTimeTenant{std::move(*id), std::move(*tier), *created};
}

BookContents FileKeeper::read() const {
    std::optional<std::string> text;
    try {
        text = store::read_state_file(path_);
    } catch (const std::exception& e) {
        throw std::runtime_error("auth.keys_file " + path_ + ": " + e.what());
    }
    BookContents book;
    if (!text) return book;  // none yet: made with the first change
    auto doc = json::parse(*text, nullptr, false);
    auto bad = [&](const std::string& why) { return std::runtime_error("auth.keys_file " + path_ + ": " + why); };
    if (!doc.is_object() || !doc.contains("keys") || !doc["keys"].is_array()) throw bad("not a keys file");
    for (const auto& k : doc["keys"]) {
        auto key = key_from_record(k);
        if (!key) throw bad("a key that is not one: " + k.dump().substr(0, 200));
        book.keys.push_back(std::move(*key));
    }
    if (doc.contains("tenants")) {  // version 1's files have none
        if (!doc["tenants"].is_array()) throw bad("tenants is not a list");
        for (const auto& t : doc["tenants"]) {
            auto tenant = tenant_from_record(t);
            if (!tenant) throw bad("a tenant that is not one: " + t.dump().substr(0, 200));
            book.tenants.push_back(std::move(*tenant));
        }
    }
    return book;
}

boost::asio::awaitable<std::string> FileKeeper::keep(const BookChange&, const BookContents& after) {
    json keys = json::array(), tenants = json::array();
    for (const auto& k : after.keys) keys.push_back(key_record(k));
    for (const auto& t : after.tenants) tenants.push_back(tenant_record(t));
    std::string error;
    if (!store::write_state_file(path_, json{{"version", 2}, {"keys", keys}, {"tenants", tenants}}.dump(2) + "\n",
                                 error))
        co_return "cannot write auth.keys_file: " + error;
    co_return "";
}

RunTimeBook::RunTimeBook(std::unique_ptr<BookKeeper> keeper, std::string where, BookContents contents)
    : keeper_(std::move(keeper)), where_(std::move(where)) {
    replace(std::move(contents));
}

void RunTimeBook::index() {
    by_digest_.clear();
    for (std::size_t i = 0; i < keys_.size(); ++i) by_digest_.emplace(keys_[i].digest, i);
    tier_by_tenant_.clear();
    for (const auto& t : tenants_) tier_by_tenant_.emplace(t.id, t.tier);
}

BookContents RunTimeBook::contents() const { return {keys_, tenants_}; }

void RunTimeBook::replace(BookContents contents) {
    std::lock_guard lock(mutex_);
    std::unordered_map<std::string, core::Nanos> known;
    for (const auto& k : keys_) known.emplace(k.id, k.last_used);
    keys_.clear();
    by_digest_.clear();
    for (auto& k : contents.keys) {
        if (by_digest_.count(k.digest)) continue;  // twice in the keeper: the first counts
        if (auto it = known.find(k.id); it != known.end()) k.last_used = std::max(k.last_used, it->second);
        by_digest_.emplace(k.digest, keys_.size());
        keys_.push_back(std::move(k));
    }
    tenants_ = std::move(contents.tenants);
    index();
}

boost::asio::awaitable<std::variant<RunTimeBook::Made, RunTimeBook::Refusal>> RunTimeBook::make_key(
    std::string tenant, std::string name, std::optional<core::Nanos> expires, core::Nanos now) {
    Made made;
    BookContents after;
    {
        std::lock_guard lock(mutex_);
        if (keys_.size() >= k_max_keys) co_return Refusal{false, "this gateway holds its most run-time keys already"};
        auto of_tenant =
            std::count_if(keys_.begin(), keys_.end(), [&](const RunTimeKey& k) { return k.tenant == tenant; });
        if (of_tenant >= static_cast<std::ptrdiff_t>(k_max_per_tenant))
            co_return Refusal{false,
                              "tenant has " + std::to_string(k_max_per_tenant) + " keys already; revoke one first"};
        made.secret = new_secret();
        auto digest = core::sha256(made.secret);
        made.key = {"",
                    std::move(tenant),
                    std::move(name),
                    std::string(reinterpret_cast<const char*>(digest.data()), digest.size()),
                    now,
                    expires,
                    0};
        made.key.id = hex_of(made.key.digest, 6);
        after = contents();
        after.keys.push_back(made.key);
    }
    // Not kept, so not given: a key that would vanish on restart, or on another replica.
    // (Named, not a temporary in co_await's operand: GCC 12 destroyed such a temporary twice.)
    BookChange change{BookChange::Kind::make_key, made.key.id, key_record(made.key).dump()};
    auto error = co_await keeper_->keep(change, after);
    if (!error.empty()) co_return Refusal{true, error};
    std::lock_guard lock(mutex_);
    if (!by_digest_.count(made.key.digest)) {  // a keeper's refresh may have brought it already
        by_digest_.emplace(made.key.digest, keys_.size());
        keys_.push_back(made.key);
    }
    co_return made;
}

std::vector<RunTimeKey> RunTimeBook::keys_of(std::string_view tenant) const {
    std::lock_guard lock(mutex_);
    std::vector<RunTimeKey> out;
    for (const auto& k : keys_)
        if (k.tenant == tenant) out.push_back(k);
    return out;
}

boost::asio::awaitable<std::variant<std::optional<RunTimeKey>, RunTimeBook::Refusal>> RunTimeBook::revoke_key(
    std::string id) {
    RunTimeKey gone;
    BookContents after;
    {
        std::lock_guard lock(mutex_);
        auto it = std::find_if(keys_.begin(), keys_.end(), [&](const RunTimeKey& k) { return k.id == id; });
        if (it == keys_.end()) co_return std::optional<RunTimeKey>();
        gone = *it;
        after = contents();
        after.keys.erase(after.keys.begin() + (it - keys_.begin()));
    }
    BookChange change{BookChange::Kind::revoke_key, id, {}};
    auto error = co_await keeper_->keep(change, after);
    if (!error.empty()) co_return Refusal{true, error};  // not kept, so not revoked
    std::lock_guard lock(mutex_);
    std::erase_if(keys_, [&](const RunTimeKey& k) { return k.id == id; });
    index();
    co_return std::optional(std::move(gone));
}

std::optional<std::pair<std::string, std::string>> RunTimeBook::authenticate(const core::Sha256Digest& hashed,
                                                                             core::Nanos now) {
    std::string_view digest(reinterpret_cast<const char*>(hashed.data()), hashed.size());
    std::lock_guard lock(mutex_);
    auto it = by_digest_.find(digest);
    if (it == by_digest_.end() || !core::constant_time_equal(it->first, digest)) return std::nullopt;
    auto& k = keys_[it->second];
    if (k.expires && now >= *k.expires) return std::nullopt;
    k.last_used = now;
    used_[k.id] = now;
    return std::pair{k.tenant, k.id};
}

boost::asio::awaitable<std::variant<RunTimeTenant, RunTimeBook::Refusal>> RunTimeBook::make_tenant(std::string id,
                                                                                                   std::string tier,
                                                                                                   core::Nanos now) {
    RunTimeTenant made{std::move(id), std::move(tier), now};
    BookContents after;
    {
        std::lock_guard lock(mutex_);
        if (tier_by_tenant_.count(made.id)) co_return Refusal{false, "tenant '" + made.id + "' exists already"};
        if (tenants_.size() >= k_max_tenants)
            co_return Refusal{false, "this gateway holds its most run-time tenants already"};
        after = contents();
        after.tenants.push_back(made);
    }
    BookChange change{BookChange::Kind::make_tenant, made.id, tenant_record(made).dump()};
    auto error = co_await keeper_->keep(change, after);
    if (error == BookKeeper::k_made_elsewhere) co_return Refusal{false, "tenant '" + made.id + "' exists already"};
    if (!error.empty()) co_return Refusal{true, error};
    std::lock_guard lock(mutex_);
    if (tier_by_tenant_.emplace(made.id, made.tier).second) tenants_.push_back(made);
    co_return made;
}

boost::asio::awaitable<
    std::variant<std::optional<std::pair<RunTimeTenant, std::vector<RunTimeKey>>>, RunTimeBook::Refusal>>
RunTimeBook::remove_tenant(std::string id) {
    std::pair<RunTimeTenant, std::vector<RunTimeKey>> gone;
    BookContents after;
    BookChange change{BookChange::Kind::remove_tenant, id, {}};
    {
        std::lock_guard lock(mutex_);
        auto it = std::find_if(tenants_.begin(), tenants_.end(), [&](const RunTimeTenant& t) { return t.id == id; });
        if (it == tenants_.end()) co_return std::nullopt;
        gone.first = *it;
        after = contents();
        after.tenants.erase(after.tenants.begin() + (it - tenants_.begin()));
        std::erase_if(after.keys, [&](const RunTimeKey& k) {
            if (k.tenant != id) return false;
            gone.second.push_back(k);
            return true;
        });
    }
    auto error = co_await keeper_->keep(change, after);
    if (!error.empty()) co_return Refusal{true, error};
    std::lock_guard lock(mutex_);
    std::erase_if(tenants_, [&](const RunTimeTenant& t) { return t.id == id; });
    std::erase_if(keys_, [&](const RunTimeKey& k) { return k.tenant == id; });
    index();
    co_return std::optional(std::move(gone));
}

std::optional<std::string> RunTimeBook::tier_of(std::string_view id) const {
    std::lock_guard lock(mutex_);
    auto it = tier_by_tenant_.find(id);
    if (it == tier_by_tenant_.end()) return std::nullopt;
    return it->second;
}

std::vector<RunTimeTenant> RunTimeBook::tenants() const {
    std::lock_guard lock(mutex_);
    return tenants_;
}

std::vector<std::pair<std::string, core::Nanos>> RunTimeBook::take_recently_used() {
    std::lock_guard lock(mutex_);
    std::vector<std::pair<std::string, core::Nanos>> out(used_.begin(), used_.end());
    used_.clear();
    return out;
}

}  // namespace tokengate::server
