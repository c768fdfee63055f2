#include "run_time_keys.hpp"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "tokengate/core/calendar.hpp"
#include "tokengate/core/sha256.hpp"
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

std::string digest_of(std::string_view key) {
    auto d = core::sha256(key);
    return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

std::string hex_of(std::string_view digest, std::size_t bytes) {
    return core::to_hex(reinterpret_cast<const std::uint8_t*>(digest.data()), bytes);
}

json time_or_null(core::Nanos t) { return t ? json(core::rfc3339(t)) : json(nullptr); }

}  // namespace

RunTimeKeys::RunTimeKeys(std::string file) : file_(std::move(file)) {
    std::optional<std::string> text;
    try {
        text = store::read_state_file(file_);
    } catch (const std::exception& e) {
        throw std::runtime_error("auth.keys_file " + file_ + ": " + e.what());
    }
    if (!text) return;  // none yet: made with the first key
    auto doc = json::parse(*text, nullptr, false);
    auto bad = [&](const std::string& why) { return std::runtime_error("auth.keys_file " + file_ + ": " + why); };
    if (!doc.is_object() || !doc.contains("keys") || !doc["keys"].is_array()) throw bad("not a keys file");
    for (const auto& k : doc["keys"]) {
        auto text_of = [&](const char* field) {
            if (!k.contains(field) || !k[field].is_string()) throw bad(std::string("a key without ") + field);
            return k[field].get<std::string>();
        };
        auto when = [&](const char* field) -> std::optional<core::Nanos> {
            if (!k.contains(field) || k[field].is_null()) return std::nullopt;
            auto t = k[field].is_string() ? core::parse_rfc3339(k[field].get<std::string>()) : std::nullopt;
            if (!t) throw bad(std::string("a key's ") + field + " is not an RFC 3339 time");
            return t;
        };
        RunTimeKey key;
        key.tenant = text_of("tenant");
        key.name = text_of("name");
        auto hex = text_of("sha256");
        if (hex.size() != 64) throw bad("a key's sha256 is not 64 hex digits");
        for (std::size_t i = 0; i < 32; ++i) {
            auto byte = hex.substr(2 * i, 2);
            if (byte.find_first_not_of("0123456789abcdef") != std::string::npos) throw bad("a key's sha256 is not hex");
            key.digest += static_cast<char>(std::stoi(byte, nullptr, 16));
        }
        key.id = hex_of(key.digest, 6);
        key.created = when("created").value_or(0);
        key.expires = when("expires");
        key.last_used = when("last_used").value_or(0);
        if (by_digest_.count(key.digest)) throw bad("a key is there twice");
        by_digest_.emplace(key.digest, keys_.size());
        keys_.push_back(std::move(key));
    }
}

bool RunTimeKeys::save(std::string& error) const {
    json keys = json::array();
    for (const auto& k : keys_)
        keys.push_back({{"id", k.id},
                        {"tenant", k.tenant},
                        {"name", k.name},
                        {"sha256", hex_of(k.digest, k.digest.size())},
                        {"created", time_or_null(k.created)},
                        {"expires", k.expires ? json(core::rfc3339(*k.expires)) : json(nullptr)},
                        {"last_used", time_or_null(k.last_used)}});
    return store::write_state_file(file_, json{{"version", 1}, {"keys", keys}}.dump(2) + "\n", error);
}

std::variant<RunTimeKeys::Made, std::string> RunTimeKeys::make(std::string_view tenant, std::string_view name,
                                                               std::optional<core::Nanos> expires, core::Nanos now) {
    std::lock_guard lock(mutex_);
    if (keys_.size() >= k_max_keys) return std::string("this gateway holds its most run-time keys already");
    std::size_t of_tenant = 0;
    for (const auto& k : keys_) of_tenant += k.tenant == tenant;
    if (of_tenant >= k_max_per_tenant)
        return "tenant has " + std::to_string(k_max_per_tenant) + " keys already; revoke one first";
    Made made;
    made.secret = new_secret();
    made.key = {"", std::string(tenant), std::string(name), digest_of(made.secret), now, expires, 0};
    made.key.id = hex_of(made.key.digest, 6);
    keys_.push_back(made.key);
    by_digest_.emplace(made.key.digest, keys_.size() - 1);
    std::string error;
    if (!save(error)) {  // not kept, so not given: a key that would vanish on restart
        by_digest_.erase(made.key.digest);
        keys_.pop_back();
        return "cannot write auth.keys_file: " + error;
    }
    return made;
}

std::vector<RunTimeKey> RunTimeKeys::list(std::string_view tenant) const {
    std::lock_guard lock(mutex_);
    std::vector<RunTimeKey> out;
    for (const auto& k : keys_)
        if (k.tenant == tenant) out.push_back(k);
    return out;
}

std::optional<RunTimeKey> RunTimeKeys::revoke(std::string_view id, std::string& error) {
    std::lock_guard lock(mutex_);
    auto it = std::find_if(keys_.begin(), keys_.end(), [&](const RunTimeKey& k) { return k.id == id; });
    if (it == keys_.end()) return std::nullopt;
    auto at = it - keys_.begin();
    RunTimeKey gone = std::move(*it);
    keys_.erase(it);
    if (!save(error)) {  // not written, so not revoked
        keys_.insert(keys_.begin() + at, std::move(gone));
        return std::nullopt;
    }
    by_digest_.clear();
    for (std::size_t i = 0; i < keys_.size(); ++i) by_digest_.emplace(keys_[i].digest, i);
    return gone;
}

std::optional<std::pair<std::string, std::string>> RunTimeKeys::authenticate(const core::Sha256Digest& hashed,
                                                                             core::Nanos now) {
    std::string digest(reinterpret_cast<const char*>(hashed.data()), hashed.size());
    std::lock_guard lock(mutex_);
    auto it = by_digest_.find(digest);
    if (it == by_digest_.end() || !core::constant_time_equal(it->first, digest)) return std::nullopt;
    auto& k = keys_[it->second];
    if (k.expires && now >= *k.expires) return std::nullopt;
    k.last_used = now;
    return std::pair{k.tenant, k.id};
}

}  // namespace tokengate::server
