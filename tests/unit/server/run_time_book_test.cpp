// The book of keys and tenants made at run time: a change the keeper refuses is not made, a
// keeper's refresh replaces the book without losing when this replica last used a key, and
// a tenant goes with its keys.

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include "server/run_time_book.hpp"

namespace tokengate::server {
namespace {

namespace net = boost::asio;

/// Keeps what it is told to, or refuses with `failing`; counts the changes.
struct FakeKeeper final : BookKeeper {
    std::string failing;
    std::vector<BookChange::Kind> kept;
    BookContents last;
    net::awaitable<std::string> keep(const BookChange& change, const BookContents& after) override {
        if (failing.empty()) kept.push_back(change.kind), last = after;
        co_return failing;
    }
};

template <typename T>
T run(net::awaitable<T> task) {
    net::io_context ioc;
    auto result = net::co_spawn(ioc, std::move(task), net::use_future);
    ioc.run();
    return result.get();
}

core::Sha256Digest digest_of(const std::string& secret) { return core::sha256(secret); }

TEST(RunTimeBook, AChangeTheKeeperRefusesIsNotMade) {
    auto keeper = std::make_unique<FakeKeeper>();
    auto& k = *keeper;
    RunTimeBook book(std::move(keeper), "test");
    k.failing = "disk full";
    auto made = run(book.make_key("acme", "ci", std::nullopt, 1000));
    ASSERT_TRUE(std::holds_alternative<RunTimeBook::Refusal>(made));
    EXPECT_TRUE(std::get<RunTimeBook::Refusal>(made).unkept);
    EXPECT_TRUE(book.keys_of("acme").empty());
    EXPECT_TRUE(std::holds_alternative<RunTimeBook::Refusal>(run(book.make_tenant("initech", "pro", 1000))));
    EXPECT_FALSE(book.tier_of("initech"));

    k.failing.clear();
    auto ok = std::get<RunTimeBook::Made>(run(book.make_key("acme", "ci", std::nullopt, 1000)));
    EXPECT_EQ(k.last.keys.size(), 1u) << "the keeper was given the book with the key in it";
    k.failing = "disk full";
    auto revoked = run(book.revoke_key(ok.key.id));
    ASSERT_TRUE(std::holds_alternative<RunTimeBook::Refusal>(revoked));
    EXPECT_TRUE(book.authenticate(digest_of(ok.secret), 2000)) << "not kept, so not revoked";
}

TEST(RunTimeBook, ATenantGoesWithItsKeysAndAnotherReplicasTenantIsNotMadeTwice) {
    auto keeper = std::make_unique<FakeKeeper>();
    auto& k = *keeper;
    RunTimeBook book(std::move(keeper), "test");
    ASSERT_TRUE(std::holds_alternative<RunTimeTenant>(run(book.make_tenant("initech", "pro", 1000))));
    EXPECT_EQ(book.tier_of("initech"), "pro");
    auto mine = std::get<RunTimeBook::Made>(run(book.make_key("initech", "a", std::nullopt, 1000)));
    auto other = std::get<RunTimeBook::Made>(run(book.make_key("acme", "b", std::nullopt, 1000)));
    auto again = run(book.make_tenant("initech", "free", 1000));
    ASSERT_TRUE(std::holds_alternative<RunTimeBook::Refusal>(again));
    EXPECT_FALSE(std::get<RunTimeBook::Refusal>(again).unkept) << "the caller's mistake, a 409";
    auto removed = run(book.remove_tenant("initech"));
    auto& gone = std::get<0>(removed);
    ASSERT_TRUE(gone);
    ASSERT_EQ(gone->second.size(), 1u);
    EXPECT_EQ(gone->second[0].id, mine.key.id);
    EXPECT_FALSE(book.authenticate(digest_of(mine.secret), 2000));
    EXPECT_TRUE(book.authenticate(digest_of(other.secret), 2000));
    EXPECT_FALSE(book.tier_of("initech"));
    EXPECT_FALSE(std::get<0>(run(book.remove_tenant("initech")))) << "none left to remove";
    // A shared keeper's answer when another replica made the tenant first.
    k.failing = std::string(BookKeeper::k_made_elsewhere);
    auto raced = run(book.make_tenant("hooli", "pro", 1000));
    ASSERT_TRUE(std::holds_alternative<RunTimeBook::Refusal>(raced));
    EXPECT_FALSE(std::get<RunTimeBook::Refusal>(raced).unkept);
}

TEST(RunTimeBook, AReplaceKeepsWhenThisReplicaLastUsedAKey) {
    RunTimeBook book(std::make_unique<FakeKeeper>(), "test");
    auto made = std::get<RunTimeBook::Made>(run(book.make_key("acme", "a", 5000, 1000)));
    ASSERT_TRUE(book.authenticate(digest_of(made.secret), 3000));
    EXPECT_FALSE(book.authenticate(digest_of(made.secret), 5000)) << "expired";
    auto used = book.take_recently_used();
    ASSERT_EQ(used.size(), 1u);
    EXPECT_EQ(used[0], std::pair(made.key.id, core::Nanos(3000)));
    EXPECT_TRUE(book.take_recently_used().empty());
    // Another replica's view, as the keeper read it: the key (last used there at 2000) and a tenant.
    auto theirs = made.key;
    theirs.last_used = 2000;
    book.replace({{theirs, theirs}, {{"initech", "pro", 1}}});
    auto keys = book.keys_of("acme");
    ASSERT_EQ(keys.size(), 1u) << "a key twice in the keeper counts once";
    EXPECT_EQ(keys[0].last_used, 3000) << "the later of the two";
    EXPECT_EQ(book.tier_of("initech"), "pro");
    book.replace({});
    EXPECT_TRUE(book.keys_of("acme").empty());
    EXPECT_FALSE(book.authenticate(digest_of(made.secret), 3000));
}

}  // namespace
}  // namespace tokengate::server
