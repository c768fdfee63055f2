#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tokengate::tls {
class ClientContext;
}

namespace tokengate::redis {

/// A RESP reply, built by hiredis's reader and owning its memory.
struct Reply {
    enum class Type { nil, string, status, error, integer, array };
    Type type = Type::nil;
    long long integer = 0;
    std::string str;  // string, status and error text
    std::vector<Reply> elements;

    bool is_error() const { return type == Type::error; }
};

/// skipped: not sent, the master's circuit breaker is open.
enum class CallError { none, disconnected, timeout, unavailable, skipped };

struct Result {
    CallError error = CallError::none;
    Reply reply;
    bool ok() const { return error == CallError::none && !reply.is_error(); }
};

/// `redis://[host][:port][/db]`. Throws std::invalid_argument with the reason.
struct Endpoint {
    std::string host = "127.0.0.1";
    unsigned short port = 6379;
    int db = 0;
    bool tls = false;  // rediss://
    static Endpoint parse(std::string_view url);
    /// `host:port` (a sentinel, or the master a sentinel names), with this one's tls and db.
    Endpoint at(std::string_view host_port) const;
    bool same_server(const Endpoint& other) const { return host == other.host && port == other.port; }
};

/// Appends one command in RESP (an array of bulk strings) to `out`.
void encode_command(std::string& out, std::span<const std::string> args);

/// Incremental RESP parser (hiredis's reader).
class ReplyReader {
public:
    ReplyReader();
    ~ReplyReader();
    ReplyReader(const ReplyReader&) = delete;
    ReplyReader& operator=(const ReplyReader&) = delete;
    /// False if the reader could not take the bytes (out of memory).
    bool feed(const char* data, std::size_t size);
    enum class Next { reply, incomplete, protocol_error };
    /// The next complete reply into `out`, if one is buffered; no exception on the data plane.
    Next next(Reply& out);
    /// What was wrong, after protocol_error.
    std::string_view error() const;
    void reset();

private:
    Reply root_;  // the reply being read (before reader_: hiredis points at it)
    void* reader_;
};

/// One pipelined connection to Redis, living on one event loop (every member must be called
/// from it). Commands are written as they come, coalesced while a write is in flight, and
/// their replies are matched in order. While it is not connected, send() fails at once
/// rather than queueing: a request must never wait on a Redis that is not there. It
/// reconnects by itself with exponential backoff, running `handshake` (AUTH, SELECT, SCRIPT
/// LOAD...) before it reports ready. With `tls` (rediss://) a TLS handshake comes first.
class Connection : public std::enable_shared_from_this<Connection> {
public:
    using Callback = std::function<void(Result)>;
    /// `on_state` hears of each change: ready with the handshake's replies, or lost.
    using StateHandler = std::function<void(bool ready, const std::vector<Reply>& handshake_replies)>;
    Connection(boost::asio::any_io_executor ex, Endpoint endpoint, std::vector<std::vector<std::string>> handshake,
               StateHandler on_state, std::shared_ptr<tls::ClientContext> tls = nullptr);

    void start();
    void stop();
    /// Connects to `endpoint` from now on (a failover moved the master): a connection to
    /// another server is dropped at once and made again there; one never started starts.
    void retarget(Endpoint endpoint);
    /// `vet` reads the handshake's replies before the connection is called ready; a non-empty
    /// answer is why it is not (e.g. ROLE says the server is a replica), and it reconnects.
    void set_vetting(std::function<std::string(const std::vector<Reply>&)> vet) { vet_ = std::move(vet); }
    const boost::asio::any_io_executor& executor() const { return ex_; }
    const Endpoint& endpoint() const { return endpoint_; }
    bool ready() const { return ready_; }
    std::size_t pending() const { return callbacks_.size(); }
    void send(std::span<const std::string> args, Callback done);

private:
    void connect();
    void start_tls();
    void on_connected();
    void set_ready(bool ready);
    void schedule_reconnect();
    void fail(const std::string& why);
    void flush();
    void read();

    boost::asio::any_io_executor ex_;
    Endpoint endpoint_;
    std::vector<std::vector<std::string>> handshake_;
    StateHandler on_state_;
    std::function<std::string(const std::vector<Reply>&)> vet_;
    std::vector<Reply> handshake_replies_;
    boost::asio::ip::tcp::resolver resolver_;
    boost::asio::ip::tcp::socket socket_;
    std::shared_ptr<tls::ClientContext> tls_context_;
    struct TlsSession;
    // Shared with the operations pending on it: a reconnect replaces it while the old one's
    // aborted operations may still be on their way back.
    std::shared_ptr<TlsSession> tls_;
    boost::asio::steady_timer retry_timer_;
    std::chrono::milliseconds backoff_{50};
    ReplyReader reader_;
    std::string outgoing_;  // commands waiting for the current write to finish
    std::string writing_;
    bool write_in_flight_ = false;
    std::deque<Callback> callbacks_;  // one per command sent, in order
    std::vector<char> read_buffer_;
    std::uint64_t generation_ = 0;  // bumps on every (re)connect so stale handlers stand down
    bool connected_ = false;
    bool ready_ = false;
    bool stopped_ = false;
    bool started_ = false;
    std::string last_error_;
};

/// Sends one command on `connection` (from its event loop) and waits for its reply, or for
/// `timeout` (real time, as any socket's): CallError::timeout, the reply left to nobody.
boost::asio::awaitable<Result> round_trip(Connection& connection, std::span<const std::string> args,
                                          std::chrono::nanoseconds timeout);

}  // namespace tokengate::redis
