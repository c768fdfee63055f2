// SPEC §22's routing without sockets: the consistent-hash ring, bounded load, the upstreams a
// retry may not go back to, and the prompt prefix that is hashed.
#include "tokengate/proxy/balance.hpp"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "tokengate/cost/prompt_prefix.hpp"

namespace tokengate::proxy {
namespace {

struct Fleet {
    std::vector<config::UpstreamConfig> upstreams;
    config::RouteConfig route;
    std::vector<std::shared_ptr<UpstreamHealth>> health;
    std::vector<std::shared_ptr<UpstreamLoad>> load;

    explicit Fleet(const std::vector<std::string>& names, const std::vector<unsigned>& weights = {}) {
        route.balance = config::Balance::prefix_affinity;
        for (std::size_t i = 0; i < names.size(); ++i) {
            config::UpstreamConfig u;
            u.name = names[i];
            upstreams.push_back(u);
            route.upstreams.push_back({i, weights.empty() ? 1u : weights[i]});
            health.push_back(std::make_shared<UpstreamHealth>());
            load.push_back(std::make_shared<UpstreamLoad>());
        }
    }
    /// The name of the upstream `prefix` goes to.
    std::string pick(std::uint64_t prefix, std::span<const std::size_t> tried = {}, std::string* why = nullptr) const {
        AffinityRing ring(route, upstreams);
        auto i = pick_upstream(route, health, load, 0, {&ring, prefix}, tried, why);
        return i ? upstreams[*i].name : "(none)";
    }
};

std::uint64_t prefix_number(int i) { return std::hash<std::string>{}("prefix-" + std::to_string(i)) * 0x9E37u + i; }

TEST(PrefixAffinity, ARemovedOrAddedReplicaMovesOnlyItsOwnShare) {
    constexpr int k_prefixes = 20000;
    Fleet three({"a", "b", "c"}), two({"a", "b"}), four({"a", "b", "c", "d"});
    std::map<std::string, int> homes;
    int moved_on_removal = 0, moved_on_addition = 0, to_d = 0;
    for (int i = 0; i < k_prefixes; ++i) {
        auto p = prefix_number(i);
        auto home = three.pick(p);
        ++homes[home];
        auto without_c = two.pick(p);
        if (home != "c" && without_c != home) ++moved_on_removal;
        auto with_d = four.pick(p);
        if (with_d == "d") ++to_d;
        else if (with_d != home) ++moved_on_addition;
    }
    EXPECT_EQ(moved_on_removal, 0) << "only c's prefixes move when c goes";
    EXPECT_EQ(moved_on_addition, 0) << "a new replica takes prefixes, none move between the others";
    for (const auto& [name, n] : homes) EXPECT_NEAR(n, k_prefixes / 3.0, k_prefixes * 0.06) << name;
    EXPECT_NEAR(to_d, k_prefixes / 4.0, k_prefixes * 0.06) << "d takes about its share";
}

TEST(PrefixAffinity, WeightsShareTheRing) {
    Fleet fleet({"big", "small"}, {3, 1});
    int big = 0;
    for (int i = 0; i < 10000; ++i) big += fleet.pick(prefix_number(i)) == "big";
    EXPECT_NEAR(big, 7500, 400);
}

TEST(PrefixAffinity, AHotHomeIsPassedOverForTheNextOnTheRing) {
    Fleet fleet({"a", "b", "c"});
    auto p = prefix_number(7);
    auto home = fleet.pick(p);
    std::size_t home_index = home == "a" ? 0 : home == "b" ? 1 : 2;
    // One in flight everywhere: 1 is within 1.25 × the average 1.
    for (auto& l : fleet.load) l->started();
    std::string why;
    EXPECT_EQ(fleet.pick(p, {}, &why), home) << why;
    EXPECT_NE(why.find("is the prefix's home"), std::string::npos) << why;
    // Two more at home: 3 is above 1.25 × the average 5/3.
    fleet.load[home_index]->started();
    fleet.load[home_index]->started();
    auto chosen = fleet.pick(p, {}, &why);
    EXPECT_NE(chosen, home);
    EXPECT_NE(why.find("'" + home + "' (load 3) is over the bound 2.08333"), std::string::npos) << why;
    EXPECT_NE(why.find("is next on the ring"), std::string::npos) << why;
    fleet.load[home_index]->finished();
    fleet.load[home_index]->finished();
    EXPECT_EQ(fleet.pick(p), home) << "back within the bound";
    // A scraped queue counts as load too (another gateway's requests, waiting there).
    fleet.load[home_index]->scraped({5.0, 0.0, std::nullopt});
    EXPECT_NE(fleet.pick(p), home);
}

TEST(PrefixAffinity, TheBoundIsSharedByWeight) {
    // big has 3 of the 4 weight units, so its share of the load is three quarters of it.
    Fleet fleet({"big", "small"}, {3, 1});
    std::optional<std::uint64_t> big_prefix, small_prefix;
    for (int i = 0; !big_prefix || !small_prefix; ++i)
        (fleet.pick(prefix_number(i)) == "big" ? big_prefix : small_prefix) = prefix_number(i);
    for (int i = 0; i < 3; ++i) fleet.load[0]->started();
    fleet.load[1]->started();
    // 3 of 4 in flight at big: within 1.25 × its share 3 (equal weights would bound it at 2.5).
    std::string why;
    EXPECT_EQ(fleet.pick(*big_prefix, {}, &why), "big") << why;
    EXPECT_NE(why.find("(load 3, bound 3.75)"), std::string::npos) << why;
    // 2 of 5 at small: above 1.25 × its share 1.25 (equal weights would have kept it at home).
    fleet.load[1]->started();
    EXPECT_EQ(fleet.pick(*small_prefix, {}, &why), "big") << why;
    EXPECT_NE(why.find("'small' (load 2) is over the bound 1.5625"), std::string::npos) << why;
    // All 4 at big: above 1.25 × its share 3.
    fleet.load[1]->finished();
    fleet.load[1]->finished();
    fleet.load[0]->started();
    EXPECT_EQ(fleet.pick(*big_prefix, {}, &why), "small") << why;
    EXPECT_NE(why.find("'big' (load 4) is over the bound 3.75"), std::string::npos) << why;
}

TEST(PrefixAffinity, ARetryNeverGoesBackToAnUpstreamAlreadyTried) {
    Fleet fleet({"a", "b", "c"});
    for (int i = 0; i < 200; ++i) {
        auto p = prefix_number(i);
        auto home = fleet.pick(p);
        std::size_t first = home == "a" ? 0 : home == "b" ? 1 : 2;
        std::vector<std::size_t> tried{first};
        auto second = fleet.pick(p, tried);
        EXPECT_NE(second, home);
        EXPECT_NE(second, "(none)");
        tried.push_back(second == "a" ? 0 : second == "b" ? 1 : 2);
        auto third = fleet.pick(p, tried);
        tried.push_back(third == "a" ? 0 : third == "b" ? 1 : 2);
        EXPECT_NE(third, home);
        EXPECT_NE(third, second);
        EXPECT_EQ(fleet.pick(p, tried), "(none)") << "every upstream tried";
    }
    // Weighted and least_loaded routes exclude the tried ones too.
    fleet.route.balance = config::Balance::weighted;
    std::vector<std::size_t> tried{0, 2};
    for (int i = 0; i < 50; ++i)
        EXPECT_EQ(pick_upstream(fleet.route, fleet.health, fleet.load, 0, {}, tried), std::optional<std::size_t>(1));
}

std::uint64_t prefix_of(const std::string& body, std::uint64_t tokens = 64) {
    return cost::prompt_prefix_hash(body, cost::Endpoint::chat, tokens, nullptr).value_or(0);
}

std::string chat(const std::string& system, const std::string& user) {
    return R"({"messages":[{"role":"system","content":")" + system + R"("},{"role":"user","content":")" + user +
           R"("}]})";
}

TEST(PromptPrefix, ASharedSystemPromptIsOnePrefix) {
    std::string system;
    for (int i = 0; i < 200; ++i) system += "rule" + std::to_string(i) + " ";
    EXPECT_EQ(prefix_of(chat(system, "question one")), prefix_of(chat(system, "a different question")));
    EXPECT_NE(prefix_of(chat(system, "q")), prefix_of(chat("other " + system, "q")));
    // Short prompts are their whole text: different users, different prefixes.
    EXPECT_NE(prefix_of(chat("be brief", "one")), prefix_of(chat("be brief", "two")));
    // Anthropic's top-level system prompt is the same rendered text's start.
    auto messages = R"({"system":")" + system + R"(","messages":[{"role":"user","content":"x"}]})";
    EXPECT_EQ(cost::prompt_prefix_hash(messages, cost::Endpoint::messages, 64, nullptr),
              cost::prompt_prefix_hash(R"({"system":")" + system + R"(","messages":[{"role":"user","content":"y"}]})",
                                       cost::Endpoint::messages, 64, nullptr));
    EXPECT_FALSE(cost::prompt_prefix_hash(R"({"model":"m"})", cost::Endpoint::chat, 64, nullptr).has_value())
        << "no prompt text: no prefix (by weight)";
    EXPECT_FALSE(cost::prompt_prefix_hash("not json", cost::Endpoint::chat, 64, nullptr).has_value());
}

TEST(PromptPrefix, ALongPromptIsReadOnlyAsFarAsItsPrefix) {
    std::string huge(4u << 20, 'x');
    auto body = R"({"prompt":"head )" + huge + R"("})";
    auto other = R"({"prompt":"head )" + huge.substr(0, 1u << 20) + R"(y"})";
    EXPECT_EQ(cost::prompt_prefix_hash(body, cost::Endpoint::completions, 16, nullptr),
              cost::prompt_prefix_hash(other, cost::Endpoint::completions, 16, nullptr));
}

}  // namespace
}  // namespace tokengate::proxy
