#pragma once

// Integration test support: start the real tokengate binary on free loopback ports and talk
// to it over plain sockets.

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tokengate::testing {

/// The tokengate binary under test: this build's, or TOKENGATE_TEST_BINARY's (to show that a
/// regression test fails on an older build).
const char* gateway_binary();

/// A child process, killed (SIGKILL) when this goes out of scope unless it already exited.
class Process {
public:
    /// stdout and stderr go to `output_path`, or stderr to `error_path` when one is given.
    Process(const std::vector<std::string>& args, const std::string& output_path, const std::string& error_path = "");
    Process(Process&& other) noexcept;
    Process(const Process&) = delete;
    ~Process();
    /// Sends `signal` and waits up to `timeout` for the exit; returns the exit code, or -1.
    int stop(int signal, std::chrono::milliseconds timeout = std::chrono::seconds(15));
    /// Waits for the exit without signalling; returns the exit code or -1 on timeout.
    int wait(std::chrono::milliseconds timeout);
    int pid() const { return pid_; }

private:
    int pid_ = -1;
};

unsigned short free_port();

/// A loopback port kept for a server that comes and goes: bound, never listening, so connects
/// to it are refused while the server is down, and neither another test's free_port() nor a
/// client socket's ephemeral port can take it meanwhile. The server binds it beside the hold
/// (SO_REUSEADDR on both: node and Asio's acceptor set it).
class HeldPort {
public:
    HeldPort();
    HeldPort(const HeldPort&) = delete;
    ~HeldPort();
    unsigned short port() const { return port_; }

private:
    int fd_ = -1;
    unsigned short port_ = 0;
};

bool wait_for_port(unsigned short port, std::chrono::milliseconds timeout = std::chrono::seconds(10));
std::string read_file(const std::string& path);
/// What a shell command writes to stdout (curl, node, openssl).
std::string capture(const std::string& command);
/// Installs npm `packages` into `dir` unless `dir`/node_modules/`installed` is there already;
/// the processes ctest runs in parallel share it, serialised by a lock. Returns why it could
/// not (no npm, or the registry unreachable), or "" when the packages are there.
std::string npm_install_once(const std::string& dir, const std::string& packages, const std::string& installed);
/// Waits until `process` has written `text` to its output file; false if it exited first or
/// `timeout` passed.
bool wait_for_output(Process& process, const std::string& path, const std::string& text,
                     std::chrono::milliseconds timeout = std::chrono::seconds(10));
/// A directory of the test's own under /tmp, removed with it, so repeated runs do not fill
/// /tmp (TOKENGATE_KEEP_TEST_DIRS=1 keeps it for a post-mortem).
class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

struct Response {
    int status = 0;
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;
    std::string header(const std::string& name) const {
        auto it = headers.find(name);
        return it == headers.end() ? std::string() : it->second;
    }
};

struct Request {
    std::string method = "GET";
    std::string target = "/";
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
};

/// One request on a new connection; status 0 if the connection failed.
Response send_request(unsigned short port, const Request& request,
                      std::chrono::milliseconds timeout = std::chrono::seconds(20));

/// A raw client connection for tests that need byte-level control.
class RawClient {
public:
    explicit RawClient(unsigned short port);
    ~RawClient();
    bool connected() const { return fd_ >= 0; }
    bool send_all(const std::string& bytes);
    /// Reads what arrives within `timeout` (returns early once `until` is seen, if given).
    std::string read_some(std::chrono::milliseconds timeout, const std::string& until = "");
    /// What one read returns, waiting at most `timeout` for something to arrive.
    std::string read_once(std::chrono::milliseconds timeout);
    /// True once the peer has closed (read returns 0) within `timeout`; discards data meanwhile.
    bool wait_closed(std::chrono::milliseconds timeout);
    void close();
    /// True once a read found the peer closed.
    bool peer_closed() const { return peer_closed_; }

private:
    int fd_ = -1;
    bool peer_closed_ = false;
};

/// The bytes of a POST with a Bearer key and a body, for RawClient (extra: "Name: value\r\n"...).
std::string raw_post(const std::string& path, const std::string& key, const std::string& body,
                     const std::string& extra_headers = "");

/// A listening TCP socket on 127.0.0.1:port (SO_REUSEADDR); returns the descriptor.
int listen_loopback(unsigned short port, int backlog);

/// The sum of every series of a metric in Prometheus text (labelled or not).
double metric_total(const std::string& metrics, const std::string& name);

/// Skips the test without redis-server, or fails it when TOKENGATE_REQUIRE_REDIS is set (CI).
#define REQUIRE_REDIS()                                                                     \
    do {                                                                                    \
        if (!::tokengate::testing::RedisServer::available()) {                              \
            if (std::getenv("TOKENGATE_REQUIRE_REDIS")) FAIL() << "redis-server missing";   \
            GTEST_SKIP() << "redis-server is not installed (apt-get install redis-server)"; \
        }                                                                                   \
    } while (0)

/// A redis-server of the test's own on a free loopback port (no persistence). Tests skip when
/// redis-server is not installed, unless TOKENGATE_REQUIRE_REDIS=1 (CI) makes that a failure.
class RedisServer {
public:
    /// TLS only (rediss://), with these files; clients are not asked for certificates.
    struct Tls {
        std::string cert, key, ca;
    };
    /// `extra` goes on redis-server's command line (e.g. --requirepass).
    explicit RedisServer(std::vector<std::string> extra = {}, std::optional<Tls> tls = {});
    ~RedisServer();
    static bool available();
    unsigned short port() const { return port_; }
    std::string url() const {
        return (tls_ ? "rediss://localhost:" : "redis://127.0.0.1:") + std::to_string(port_) + "/0";
    }
    /// Kills it (SIGKILL) / starts it again on the same port, empty.
    void kill();
    void start();
    /// SIGSTOP / SIGCONT: connections stay open, nothing is answered.
    void pause();
    void resume();
    /// Commands on one connection (plain TCP, on a port of their own for a TLS server); returns
    /// the raw RESP replies ("" if it could not connect).
    std::string command(const std::vector<std::string>& args) const { return commands({args}); }
    std::string commands(const std::vector<std::vector<std::string>>& list) const;

private:
    TempDir dir_;  // declared first: removed only after the process has stopped
    unsigned short port_;
    unsigned short plain_port_;  // with TLS: the test's own way in
    std::vector<std::string> extra_;
    std::optional<Tls> tls_;
    std::optional<Process> process_;
};

/// A Sentinel (`redis-server --sentinel`, the program Debian's redis-sentinel runs) of the
/// test's own on a free loopback port, watching `master_port` as `name` with a quorum of 2, and
/// quick to decide (down after 1 s) so a failover takes a few seconds.
class RedisSentinel {
public:
    /// With `tls`, it also listens for TLS on tls_port() and speaks TLS to the servers it watches.
    RedisSentinel(const std::string& name, unsigned short master_port, std::optional<RedisServer::Tls> tls = {});
    unsigned short port() const { return port_; }
    unsigned short tls_port() const { return tls_port_; }
    /// Raw RESP replies, as RedisServer::commands.
    std::string command(const std::vector<std::string>& args) const;
    /// The port of the server it names master of `name` now (0: none, or no answer).
    unsigned short master_port(const std::string& name) const;

private:
    TempDir dir_;
    unsigned short port_;
    unsigned short tls_port_ = 0;
    std::optional<Process> process_;
};

/// A Redis Cluster of the test's own: `masters` cluster-enabled redis-servers (no replicas) on
/// free loopback ports, the 16384 slots shared out by `redis-cli --cluster create`; a master
/// lost stops only its own slots (cluster-require-full-coverage no).
class RedisCluster {
public:
    explicit RedisCluster(unsigned masters = 3, std::optional<RedisServer::Tls> tls = {});
    RedisServer& node(std::size_t i) { return *nodes_[i]; }
    std::size_t size() const { return nodes_.size(); }
    /// store.redis.nodes as YAML: ["127.0.0.1:p1", ...].
    std::string seeds() const;
    /// Every node says cluster_state:ok and agrees on who serves each slot.
    bool ready() const;
    /// The node that serves `key` now (its slot's master), or size() if none says so.
    std::size_t owner_of(const std::string& key) const;
    /// `redis-cli --cluster reshard`: moves `slots` slots (the lowest first) from node `from`
    /// to node `to`; redis-cli's output.
    std::string reshard(std::size_t from, std::size_t to, unsigned slots) const;
    /// A new master with no slots (`redis-cli --cluster add-node`); its index.
    std::size_t add_master();
    std::string id(std::size_t i) const;

private:
    std::optional<RedisServer::Tls> tls_;
    std::vector<std::unique_ptr<RedisServer>> nodes_;
    std::string cli(const std::string& arguments) const;
};

std::string chat_body(const std::string& model, const std::string& content, int max_tokens, bool stream,
                      bool include_usage = false);

/// mock-upstream + gateway on free ports with a config built around them.
class GatewayUnderTest {
public:
    /// `config_body` may use {UPSTREAM} (the mock's URL) and {DEAD} (a URL nothing listens on);
    /// it is everything after `server:`/`upstreams:` — i.e. routes, tiers, tenants, limits.
    /// `launcher` is put before the binary's path (e.g. faketime to skew its clocks).
    /// `mock_tls`: the mock speaks HTTPS with this certificate and key, and {UPSTREAM} is
    /// https://localhost:port.
    explicit GatewayUnderTest(const std::string& config_body, const std::string& server_extra = "",
                              double mock_tokens_per_s = 1000, const std::string& upstream_extra = "",
                              const std::vector<std::string>& launcher = {},
                              const std::optional<std::pair<std::string, std::string>>& mock_tls = {},
                              const std::vector<std::string>& mock_args = {});
    unsigned short port() const { return port_; }
    unsigned short mock_port() const { return mock_port_; }
    unsigned short admin_port() const { return admin_port_; }
    /// The admin token the gateway was started with.
    static constexpr const char* admin_token = "test-admin-token";
    Response admin(Request r) const;
    /// Waits until every admitted request has been settled (tokengate_admitted_total equals
    /// tokengate_settled_total, with at least `admitted` admissions) and the store has every
    /// settlement written (tokengate_store_settlements_pending 0): no guessing with sleeps.
    bool wait_settled(double admitted, std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
    /// /metrics once at least `answered` requests are counted in it: a request's access line
    /// and metrics are recorded just after its last byte reached the client.
    std::string metrics_after(double answered, std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
    /// Rewrites the config file (same listeners) for reload tests.
    void rewrite_config(const std::string& config_body) const;
    std::string log() const { return read_file(dir_.path() + "/gateway.log"); }
    /// The access log is written asynchronously: waits until `text` appears in it.
    bool log_contains(const std::string& text, std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;
    /// The access lines of requests to `path` (in the order written: workers write in any
    /// order), once there are `expected` of them or 10 s passed.
    std::vector<std::string> access_lines(const std::string& path, std::size_t expected) const;
    Process& gateway() { return *gateway_; }
    Process& mock() { return *mock_; }
    /// Stops the gateway with `signal` (its exit code, or -1, in `exit_code`), then starts it
    /// again on the same config and ports with `extra` arguments. False if it did not come up:
    /// log() says why (the previous run's log is kept as gateway.log.1).
    bool restart(int signal, const std::vector<std::string>& extra = {}, int* exit_code = nullptr);
    const std::string& dir() const { return dir_.path(); }
    Response request(const Request& r) const { return send_request(port_, r); }

private:
    TempDir dir_;  // declared first: removed only after the processes have stopped
    unsigned short port_ = 0;
    unsigned short mock_port_ = 0;
    unsigned short admin_port_ = 0;
    std::string config_head_;
    std::optional<Process> mock_;
    std::optional<Process> gateway_;
    std::vector<std::string> command_;
};

}  // namespace tokengate::testing
