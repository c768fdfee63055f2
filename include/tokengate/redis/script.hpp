#pragma once

#include <boost/container/small_vector.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokengate/limiter/decision.hpp"
#include "tokengate/limiter/quota.hpp"
#include "tokengate/redis/connection.hpp"

namespace tokengate::redis {

/// The one Lua script that decides and settles on Redis. Entry points (ARGV[1]):
/// `decide`, `peek`, `settle`, `quota`, `heartbeat`. Time is Redis's own TIME unless ARGV[2] gives
/// microseconds (tests that replay a fake clock).
std::string_view limiter_script();

/// Shortest text that reads back as the same double (Lua's tonumber).
std::string number_text(double value);

/// Where a charge's state lives in Redis: `<prefix><bucket key>` (SPEC §10), or in mode cluster
/// under a hash tag (SPEC §18): a tenant's keys `{<prefix>t:<tenant>}<bucket key>`, so its whole
/// decision is one slot; a limit shared by tenants (leased) `{<prefix><bucket key>}`, a slot of
/// its own. Keys the script derives from one (a queue's ":t") keep its tag.
struct KeySpace {
    std::string_view prefix;
    bool cluster = false;
    /// A quota's key also names its window.
    std::string key(const limiter::Charge& charge, const core::CalendarWindow& window = {}) const;
    /// The marker that applies a settlement once, in the slot of `charge`'s key: unsealed
    /// (it ends in k_marker) until seal_markers names the batch that first carries it.
    std::string marker(const limiter::Charge& charge) const;
    std::string replicas() const;

private:
    std::string tag(const limiter::Charge& charge) const;
};

/// How a settlement's marker ends until seal_markers gives it its batch.
inline constexpr std::string_view k_marker = "settled:";

/// The arguments of one EVALSHA (or EVAL) call: name is the script's SHA1 or its text.
struct ScriptCall {
    std::vector<std::string> args;  // EVALSHA sha numkeys keys... argv...
};

/// The calendar window each quota charge falls in at `unix_now` (other charges: empty).
using QuotaWindows = boost::container::small_vector<core::CalendarWindow, 6>;  // inline, as config::Charges
QuotaWindows quota_windows(std::span<const limiter::Charge> charges, core::Nanos unix_now);

/// Whether a decision over `charges` holds something in Redis under its lease (a concurrency
/// slot, a place in a shaping queue): only such a decision needs a lease id.
bool holds_under_lease(std::span<const limiter::Charge> charges);

/// EVALSHA for a decision over `charges` (op "decide" or "peek"). `now_us` < 0: Redis TIME.
/// Quotas are decided in `windows` (quota_windows at the gateway's `unix_now`). An empty `lease`
/// (nothing held under it) goes without its length.
ScriptCall decide_call(std::string_view sha, const KeySpace& keys, std::span<const limiter::Charge> charges,
                       std::span<const core::CalendarWindow> windows, core::Nanos unix_now, bool commit,
                       std::string_view lease, double lease_ms, double now_us);
/// One EVALSHA deciding `decisions` (each a committing decide_call's arguments) in order, each
/// on its own as if it were its own call: its reply is their replies' elements one after
/// another (split_decisions parts them). Mode standalone and sentinel only (their keys are many
/// tenants', so many slots). A limit's items but its amount go once a call, and so does each
/// shape (a decision's limits, by their places among those); each decision sends its shape's
/// index and its limits' amounts, the index negated when the lease and its length follow (it
/// holds something under them). Their keys and items move into the call; each one's key count
/// stays, for split_decisions.
ScriptCall decide_many_call(std::string_view sha, std::span<std::vector<std::string>> decisions);
/// The reply to a decide_many_call as each decision's limits' verdicts (3 elements a limit, or 6
/// when its first is 2 or 3; views into `reply`), in order; nullopt if it is not exactly their
/// verdicts together.
std::optional<std::vector<std::span<const Reply>>> split_decisions(const Reply& reply,
                                                                   std::span<const std::vector<std::string>> decisions);
/// EVALSHA settling the charges that need it (none: no call, empty args); a quota in the
/// window it was charged in. Its marker is unsealed: it goes to Redis in a batch
/// (seal_markers, settle_batch_call).
ScriptCall settle_call(std::string_view sha, const KeySpace& keys, std::span<const limiter::Charge> charged,
                       const config::Amounts& actual, std::string_view lease, double now_us);
/// One EVALSHA applying `settlements` (each a settle_call's arguments) in order: what a
/// replica sends every store.redis.flush_interval instead of a call each.
/// `declared` false (mode cluster): the keys go as arguments, since declared keys must share a
/// slot and a batch holds one shard's many; Redis checks each as the script touches it.
ScriptCall settle_batch_call(std::string_view sha, std::span<const std::vector<std::string>> settlements,
                             bool declared = true);
/// Gives the settlements a batch first carries that batch's marker (`batch`, unique to this
/// replica), so that the batch costs Redis one marker per hash tag, not one per settlement;
/// those sent again keep the marker of their first batch, which is how the script knows they
/// landed. `group` (mode cluster) puts each marker's settlements together, in their order: a
/// batch that a moved slot stops has applied each marker's settlements all or none.
void seal_markers(std::vector<std::vector<std::string>>& settlements, std::string_view batch, bool group);
/// EVALSHA taking a lease of `charge`'s shared rate bucket (SPEC §18): up to charge.amount,
/// nothing unless `least` is there. Its reply: parse_lease.
ScriptCall lease_call(std::string_view sha, const KeySpace& keys, const limiter::Charge& charge, double least,
                      double now_us);
/// {granted, the shared bucket's level after}, or nothing if malformed.
std::optional<std::pair<double, double>> parse_lease(const Reply& reply);
/// A settlement giving `unused.amount` back to the shared bucket (a debt when below zero),
/// applied once under `marker`.
ScriptCall lease_return_call(std::string_view sha, const KeySpace& keys, const limiter::Charge& unused,
                             std::string_view marker, double now_us);
/// EVALSHA for the admin API: a quota's top-up (`add`), `reset`, and its state after them.
ScriptCall quota_call(std::string_view sha, const KeySpace& keys, const limiter::Charge& charge,
                      const core::CalendarWindow& window, core::Nanos unix_now, double add, bool reset);
/// The reply of quota_call (the window is the caller's).
std::optional<limiter::QuotaState> parse_quota(const Reply& reply);
/// EVALSHA announcing this replica; the reply is the number of live replicas.
ScriptCall heartbeat_call(std::string_view sha, const KeySpace& keys, std::string_view replica, double ttl_ms,
                          double now_us);

/// Reads a decide/peek reply into a Decision parallel to `charges` (resolve() applied); on a
/// malformed reply, nothing, and `error` says what was wrong.
std::optional<limiter::Decision> parse_decision(const Reply& reply, std::span<const limiter::Charge> charges,
                                                std::string& error);
/// The same from a decision's limits' verdicts alone (one of split_decisions's): the time and
/// whether all admit are decide/peek's, not decide_many's.
std::optional<limiter::Decision> parse_decision(std::span<const Reply> verdict,
                                                std::span<const limiter::Charge> charges, std::string& error);

/// EVALSHA for a waiter in a ranked shaping queue ('p'): whether its place (`ticket` of the
/// decision's `lease`) has come, or (`leave`) giving it back.
ScriptCall turn_call(std::string_view sha, const KeySpace& keys, const limiter::Charge& charge, std::string_view lease,
                     std::uint64_t ticket, bool leave, double now_us);
/// The reply of turn_call, with `now` the gateway's clock for wait_until; nothing if malformed.
std::optional<limiter::ShapeQueue::StartCheck> parse_turn(const Reply& reply, core::Nanos now);

/// Replaces the script's SHA1 (args[1]) by its text, turning EVALSHA into EVAL (after NOSCRIPT).
void as_eval(std::vector<std::string>& args);

}  // namespace tokengate::redis
