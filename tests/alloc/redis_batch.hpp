#pragma once

// The gateway's own side of Redis decisions taken together (SPEC §18), without a Redis: for a
// turn of the loop's decisions, each request's arguments, the one call's RESP, the reply read
// back, taken apart and turned into each request's Decision. The bench's realistic tier: a
// tenant's requests and tokens in Redis (the route, IP and global limits leased). Used by
// alloc_tests (a ceiling) and bench/redis_client_bench.cpp (the figures).

#include <string>
#include <vector>

#include "tokengate/redis/script.hpp"

namespace tokengate::testing {

class RedisBatch {
public:
    explicit RedisBatch(int decisions) : reply_(reply_bytes(decisions)) {
        requests_ = limit("requests", 1e6, config::Unit::requests);
        tokens_ = limit("tokens", 1e7, config::Unit::cost);
        for (int i = 0; i < decisions; ++i) {
            auto tenant = "t" + std::to_string(i * 7 % 100);
            charges_.push_back({{&requests_, config::Level::tenant, "tenant:requests:" + tenant, 1, {}},
                                {&tokens_, config::Level::tenant, "tenant:tokens:" + tenant, 463.5, {}}});
        }
    }
    std::size_t size() const { return charges_.size(); }

    /// One call's worth, start to end; false if a step failed.
    bool run() {
        std::vector<std::vector<std::string>> args;
        for (const auto& charges : charges_) {
            auto windows = redis::quota_windows(charges, 0);
            // Rate limits hold nothing under a lease: the gateway sends none (RedisStore::ask_redis).
            args.push_back(redis::decide_call("", keys_, charges, windows, 0, true, "", 600000, -1).args);
        }
        auto call = redis::decide_many_call("sha", args).args;
        wire_.clear();
        redis::encode_command(wire_, call);
        redis::ReplyReader reader;
        reader.feed(reply_.data(), reply_.size());
        redis::Reply flat;
        if (reader.next(flat) != redis::ReplyReader::Next::reply) return false;
        auto each = redis::split_decisions(flat, args);
        if (!each) return false;
        std::string error;
        for (std::size_t i = 0; i < charges_.size(); ++i) {
            auto d = redis::parse_decision((*each)[i], charges_[i], error);
            if (!d || !d->allowed) return false;
        }
        return true;
    }

private:
    static config::LimitSpec limit(std::string name, double capacity, config::Unit unit) {
        config::LimitSpec s;
        s.name = std::move(name);
        s.capacity = capacity;
        s.rate_per_s = capacity;
        s.unit = unit;
        return s;
    }
    /// What Redis answers: per limit admitted, remaining (the tokens' as text: not a whole
    /// number) and until full.
    static std::string reply_bytes(int decisions) {
        std::string r = "*" + std::to_string(decisions * 6) + "\r\n";
        for (int i = 0; i < decisions; ++i) {
            r += ":1\r\n:999999\r\n:1\r\n";
            r += ":1\r\n$17\r\n9999536.499999999\r\n:46\r\n";
        }
        return r;
    }

    config::LimitSpec requests_, tokens_;
    std::vector<config::Charges> charges_;
    const redis::KeySpace keys_{"tg:"};
    const std::string reply_;
    std::string wire_;
};

}  // namespace tokengate::testing
