#include "tokengate/redis/connection.hpp"

#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <stdexcept>

#include "tokengate/tls/context.hpp"

namespace tokengate::redis {

namespace net = boost::asio;
using tcp = net::ip::tcp;

Endpoint Endpoint::parse(std::string_view url) {
    Endpoint e;
    e.tls = url.starts_with("rediss://");
    std::string_view scheme = e.tls ? "rediss://" : "redis://";
    if (url.substr(0, scheme.size()) != scheme)
        throw std::invalid_argument("the URL must start with redis:// or rediss://");
    auto rest = url.substr(scheme.size());
    if (rest.find('@') != std::string_view::npos)
        throw std::invalid_argument("put the password in TOKENGATE_REDIS_PASSWORD, not in the URL");
    auto slash = rest.find('/');
    auto authority = rest.substr(0, slash);
    if (slash != std::string_view::npos) {
        auto db = rest.substr(slash + 1);
        if (!db.empty()) {
            auto [p, ec] = std::from_chars(db.data(), db.data() + db.size(), e.db);
            if (ec != std::errc{} || p != db.data() + db.size() || e.db < 0)
                throw std::invalid_argument("the database must be a number, got '" + std::string(db) + "'");
        }
    }
    // The port follows the last colon, unless that colon is inside an [IPv6] literal.
    auto colon = authority.rfind(':');
    auto bracket = authority.rfind(']');
    if (colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket)) {
        auto port = authority.substr(colon + 1);
        unsigned value = 0;
        auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
        if (ec != std::errc{} || p != port.data() + port.size() || value == 0 || value > 65535)
            throw std::invalid_argument("bad port '" + std::string(port) + "'");
        e.port = static_cast<unsigned short>(value);
        authority = authority.substr(0, colon);
    }
    if (authority.size() >= 2 && authority.front() == '[' && authority.back() == ']')
        authority = authority.substr(1, authority.size() - 2);
    if (!authority.empty()) e.host = std::string(authority);
    return e;
}

Endpoint Endpoint::at(std::string_view host_port) const {
    auto parsed = parse((tls ? "rediss://" : "redis://") + std::string(host_port));
    parsed.db = db;
    return parsed;
}

void encode_command(std::string& out, std::span<const std::string> args) {
    // Sized once, then written in place: a decision batch is a few hundred short arguments.
    auto digits = [](std::size_t n) {
        std::size_t d = 1;
        for (; n >= 10; n /= 10) ++d;
        return d;
    };
    std::size_t size = 3 + digits(args.size());
    for (const auto& a : args) size += 5 + digits(a.size()) + a.size();
    auto at = out.size();
    out.resize(at + size);
    char* p = out.data() + at;
    auto put_count = [&p](char mark, std::size_t n) {
        *p++ = mark;
        p = std::to_chars(p, p + 20, n).ptr;
        *p++ = '\r';
        *p++ = '\n';
    };
    put_count('*', args.size());
    for (const auto& a : args) {
        put_count('$', a.size());
        std::memcpy(p, a.data(), a.size());
        p += a.size();
        *p++ = '\r';
        *p++ = '\n';
    }
}

namespace {

// hiredis's reader builds each reply straight into a Reply (its object functions), not into
// calloc'd redisReply objects copied out afterwards. The reply belongs to the reader (its
// privdata) until next() moves it out. An array's elements are added as they arrive (hiredis
// reads depth-first, so a moved sibling is always a finished one): its announced size is only
// reserved up to k_reserved, so "*1000000000" costs what its bytes do, not gigabytes at once.
constexpr std::size_t k_reserved = 1024;

Reply* place(const redisReadTask* task) {
    if (task->parent) {
        auto& siblings = static_cast<Reply*>(task->parent->obj)->elements;
        return &siblings.emplace_back();
    }
    auto* root = static_cast<Reply*>(task->privdata);
    *root = Reply{};
    return root;
}

/// `fill`s the reply's place; a failure (out of memory) is nullptr, which hiredis reports.
template <class Fill>
void* build(const redisReadTask* task, Fill fill) {
    try {
        auto* r = place(task);
        fill(*r);
        return r;
    } catch (...) {
        return nullptr;
    }
}

void* make_string(const redisReadTask* task, char* text, std::size_t length) {
    return build(task, [&](Reply& r) {
        r.type = task->type == REDIS_REPLY_ERROR    ? Reply::Type::error
                 : task->type == REDIS_REPLY_STATUS ? Reply::Type::status
                                                    : Reply::Type::string;
        r.str.assign(text, length);
    });
}

void* make_array(const redisReadTask* task, int elements) {
    return build(task, [&](Reply& r) {
        r.type = Reply::Type::array;
        r.elements.reserve(std::min(static_cast<std::size_t>(elements), k_reserved));
    });
}

void* make_integer(const redisReadTask* task, long long value) {
    return build(task, [&](Reply& r) {
        r.type = Reply::Type::integer;
        r.integer = value;
    });
}

void* make_nil(const redisReadTask* task) {
    return build(task, [](Reply&) {});
}

void leave_to_reader(void*) {}

redisReplyObjectFunctions g_into_reply{make_string, make_array, make_integer, make_nil, leave_to_reader};

redisReader* new_reader(Reply& root) {
    auto* r = redisReaderCreateWithFunctions(&g_into_reply);
    if (!r) throw std::bad_alloc();
    r->privdata = &root;
    return r;
}

}  // namespace

ReplyReader::ReplyReader() : reader_(new_reader(root_)) {}
ReplyReader::~ReplyReader() {
    if (reader_) redisReaderFree(static_cast<redisReader*>(reader_));
}

void ReplyReader::reset() {
    redisReaderFree(static_cast<redisReader*>(reader_));
    reader_ = nullptr;
    reader_ = new_reader(root_);
}

bool ReplyReader::feed(const char* data, std::size_t size) {
    return redisReaderFeed(static_cast<redisReader*>(reader_), data, size) == REDIS_OK;
}

ReplyReader::Next ReplyReader::next(Reply& out) {
    void* done = nullptr;
    if (redisReaderGetReply(static_cast<redisReader*>(reader_), &done) != REDIS_OK) return Next::protocol_error;
    if (!done) return Next::incomplete;
    out = std::move(root_);
    return Next::reply;
}

std::string_view ReplyReader::error() const { return static_cast<const redisReader*>(reader_)->errstr; }

struct Connection::TlsSession {
    TlsSession(tcp::socket& socket, tls::ClientContext& context) : stream(socket, context.context()) {}
    net::ssl::stream<tcp::socket&> stream;
};

Connection::Connection(net::any_io_executor ex, Endpoint endpoint, std::vector<std::vector<std::string>> handshake,
                       StateHandler on_state, std::shared_ptr<tls::ClientContext> tls)
    : ex_(ex),
      endpoint_(std::move(endpoint)),
      handshake_(std::move(handshake)),
      on_state_(std::move(on_state)),
      resolver_(ex),
      socket_(ex),
      tls_context_(std::move(tls)),
      retry_timer_(ex),
      read_buffer_(16 * 1024) {}

void Connection::start() {
    net::post(ex_, [self = shared_from_this()] {
        self->started_ = true;
        self->connect();
    });
}

void Connection::retarget(Endpoint endpoint) {
    if (stopped_) return;
    bool moved = !endpoint.same_server(endpoint_);
    auto was = endpoint_.host + ":" + std::to_string(endpoint_.port);
    endpoint_ = std::move(endpoint);
    if (!started_) {
        started_ = true;
        connect();
    } else if (moved) {
        retry_timer_.cancel();
        backoff_ = std::chrono::milliseconds(1);  // the new server is there now: no waiting
        fail("the master moved here from " + was);
    }
}

void Connection::stop() {
    stopped_ = true;
    retry_timer_.cancel();
    resolver_.cancel();
    fail("stopped");
}

void Connection::connect() {
    if (stopped_) return;
    auto gen = ++generation_;
    resolver_.async_resolve(
        endpoint_.host, std::to_string(endpoint_.port),
        [self = shared_from_this(), gen](boost::system::error_code ec, tcp::resolver::results_type results) {
            if (gen != self->generation_ || self->stopped_) return;
            if (ec) {
                self->fail("resolve " + self->endpoint_.host + ": " + ec.message());
                return;
            }
            net::async_connect(self->socket_, results, [self, gen](boost::system::error_code ec, const tcp::endpoint&) {
                if (gen != self->generation_ || self->stopped_) return;
                if (ec) {
                    self->fail("connect: " + ec.message());
                    return;
                }
                if (self->tls_context_) return self->start_tls();
                self->on_connected();
            });
        });
}

/// rediss://: the handshake, bounded like a command (a server that accepts the TCP
/// connection and then says nothing must not hold the connection forever).
void Connection::start_tls() {
    auto gen = generation_;
    tls_ = std::make_shared<TlsSession>(socket_, *tls_context_);
    tls_context_->prepare(tls_->stream.native_handle(), endpoint_.host);
    retry_timer_.expires_after(std::chrono::seconds(5));
    retry_timer_.async_wait([self = shared_from_this(), gen](boost::system::error_code ec) {
        if (!ec && gen == self->generation_ && !self->connected_) {
            boost::system::error_code ignored;
            self->socket_.close(ignored);  // the handshake ends with an error, reported below
        }
    });
    tls_->stream.async_handshake(net::ssl::stream_base::client,
                                 [self = shared_from_this(), gen, keep = tls_](boost::system::error_code ec) {
                                     if (gen != self->generation_ || self->stopped_) return;
                                     self->retry_timer_.cancel();
                                     if (ec) {
                                         auto why = tls::failure_reason(ec, keep->stream.native_handle());
                                         self->fail("TLS handshake: " + why);
                                         return;
                                     }
                                     self->on_connected();
                                 });
}

void Connection::on_connected() {
    boost::system::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
    connected_ = true;
    reader_.reset();
    read();
    handshake_replies_.clear();
    if (handshake_.empty()) {
        set_ready(true);
        return;
    }
    auto gen = generation_;
    for (std::size_t i = 0; i < handshake_.size(); ++i) {
        bool last = i + 1 == handshake_.size();
        encode_command(outgoing_, handshake_[i]);
        callbacks_.push_back([this, gen, last, self = shared_from_this()](Result r) {
            if (gen != generation_ || !connected_) return;
            if (r.error != CallError::none) return;  // the connection failed; fail() reports it
            if (r.reply.is_error()) {
                fail("handshake refused: " + r.reply.str);
                return;
            }
            handshake_replies_.push_back(std::move(r.reply));
            if (!last) return;
            if (vet_)
                if (auto why = vet_(handshake_replies_); !why.empty()) {
                    fail(why);
                    return;
                }
            set_ready(true);
        });
    }
    flush();
}

void Connection::set_ready(bool ready) {
    if (ready == ready_) return;
    ready_ = ready;
    if (ready) {
        backoff_ = std::chrono::milliseconds(50);
        spdlog::info("redis {}:{} connected{}", endpoint_.host, endpoint_.port, tls_ ? " (TLS)" : "");
    }
    if (on_state_) on_state_(ready, handshake_replies_);
}

void Connection::send(std::span<const std::string> args, Callback done) {
    if (!ready_) {
        done(Result{CallError::unavailable, {}});  // never sent: nothing can have happened
        return;
    }
    encode_command(outgoing_, args);
    callbacks_.push_back(std::move(done));
    flush();
}

void Connection::flush() {
    if (write_in_flight_ || outgoing_.empty() || !connected_) return;
    write_in_flight_ = true;
    writing_.swap(outgoing_);
    outgoing_.clear();
    auto done = [self = shared_from_this(), gen = generation_, keep = tls_](boost::system::error_code ec, std::size_t) {
        if (gen != self->generation_) return;
        self->write_in_flight_ = false;
        self->writing_.clear();
        if (ec) {
            self->fail("write: " + ec.message());
            return;
        }
        self->flush();
    };
    if (tls_) net::async_write(tls_->stream, net::buffer(writing_), std::move(done));
    else net::async_write(socket_, net::buffer(writing_), std::move(done));
}

void Connection::read() {
    auto done = [self = shared_from_this(), gen = generation_, keep = tls_](boost::system::error_code ec,
                                                                            std::size_t n) {
        if (gen != self->generation_) return;
        if (ec) {
            self->fail(ec == net::error::eof ? "closed by the server" : "read: " + ec.message());
            return;
        }
        if (!self->reader_.feed(self->read_buffer_.data(), n)) return self->fail("redis reader: out of memory");
        Reply reply;
        for (;;) {
            auto next = self->reader_.next(reply);
            if (next == ReplyReader::Next::incomplete) break;
            if (next == ReplyReader::Next::protocol_error)
                return self->fail("redis protocol error: " + std::string(self->reader_.error()));
            if (self->callbacks_.empty()) return self->fail("a reply nobody asked for");
            auto cb = std::move(self->callbacks_.front());
            self->callbacks_.pop_front();
            cb(Result{CallError::none, std::move(reply)});
            if (gen != self->generation_) return;  // the callback failed the connection
        }
        self->read();
    };
    if (tls_) tls_->stream.async_read_some(net::buffer(read_buffer_), std::move(done));
    else socket_.async_read_some(net::buffer(read_buffer_), std::move(done));
}

void Connection::fail(const std::string& why) {
    ++generation_;  // every handler of the old socket stands down
    bool was_ready = ready_;
    connected_ = false;
    write_in_flight_ = false;
    outgoing_.clear();
    writing_.clear();
    boost::system::error_code ignored;
    socket_.close(ignored);
    auto callbacks = std::move(callbacks_);
    callbacks_.clear();
    if (was_ready) set_ready(false);
    for (auto& cb : callbacks) cb(Result{CallError::disconnected, {}});
    if (why != last_error_ && !stopped_) {
        spdlog::warn("redis {}:{}: {}; reconnecting", endpoint_.host, endpoint_.port, why);
        last_error_ = why;
    }
    schedule_reconnect();
}

void Connection::schedule_reconnect() {
    if (stopped_) return;
    retry_timer_.expires_after(backoff_);
    backoff_ = std::min(backoff_ * 2, std::chrono::milliseconds(2000));
    retry_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
        if (!ec) self->connect();
    });
}

net::awaitable<Result> round_trip(Connection& connection, std::span<const std::string> args,
                                  std::chrono::nanoseconds timeout) {
    struct Pending {
        explicit Pending(const net::any_io_executor& ex) : timer(ex) {}
        std::optional<Result> result;
        net::steady_timer timer;
    };
    auto pending = std::make_shared<Pending>(co_await net::this_coro::executor);
    pending->timer.expires_after(timeout);
    connection.send(args, [pending](Result r) {
        if (pending->result) return;  // too late: the caller has moved on
        pending->result = std::move(r);
        pending->timer.cancel();
    });
    if (!pending->result) co_await pending->timer.async_wait(net::as_tuple(net::use_awaitable));
    if (!pending->result) pending->result = Result{CallError::timeout, {}};
    co_return std::move(*pending->result);
}

}  // namespace tokengate::redis
