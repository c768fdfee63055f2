#include "harness.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace tokengate::testing {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

const char* gateway_binary() {
    const char* other = std::getenv("TOKENGATE_TEST_BINARY");
    return other && *other ? other : TOKENGATE_BINARY;
}

Process::Process(const std::vector<std::string>& args, const std::string& output_path, const std::string& error_path) {
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
        // Dies with the test process, even one that crashed before its destructors ran.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = ::open(output_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            ::dup2(fd, 1);
            ::dup2(fd, 2);
        }
        if (!error_path.empty()) {
            int err = ::open(error_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (err >= 0) ::dup2(err, 2);
        }
        std::vector<char*> argv;
        for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
}

Process::Process(Process&& other) noexcept : pid_(other.pid_) { other.pid_ = -1; }

Process::~Process() {
    if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
    }
}

int Process::wait(std::chrono::milliseconds timeout) {
    auto deadline = clock_type::now() + timeout;
    while (pid_ > 0) {
        int status = 0;
        pid_t r = ::waitpid(pid_, &status, WNOHANG);
        if (r == pid_) {
            pid_ = -1;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        if (clock_type::now() > deadline) return -1;
        std::this_thread::sleep_for(10ms);
    }
    return -1;
}

int Process::stop(int signal, std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, signal);
    return wait(timeout);
}

unsigned short free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    return ntohs(addr.sin_port);
}

HeldPort::HeldPort() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
        throw std::runtime_error(std::string("cannot hold a loopback port: ") + std::strerror(errno));
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
}

HeldPort::~HeldPort() { ::close(fd_); }

static int connect_to(unsigned short port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        ::close(fd);
        return -1;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

bool wait_for_port(unsigned short port, std::chrono::milliseconds timeout) {
    auto deadline = clock_type::now() + timeout;
    while (clock_type::now() < deadline) {
        int fd = connect_to(port);
        if (fd >= 0) {
            ::close(fd);
            return true;
        }
        std::this_thread::sleep_for(20ms);
    }
    return false;
}

bool wait_for_output(Process& process, const std::string& path, const std::string& text,
                     std::chrono::milliseconds timeout) {
    for (auto deadline = clock_type::now() + timeout; clock_type::now() < deadline;) {
        if (read_file(path).find(text) != std::string::npos) return true;
        if (process.wait(20ms) != -1) return read_file(path).find(text) != std::string::npos;
    }
    return false;
}

std::string npm_install_once(const std::string& dir, const std::string& packages, const std::string& installed) {
    std::filesystem::create_directories(dir);
    int lock = ::open((dir + "/install.lock").c_str(), O_CREAT | O_RDWR, 0644);
    ::flock(lock, LOCK_EX);
    std::string why;
    if (!std::filesystem::exists(dir + "/node_modules/" + installed)) {
        if (std::system("command -v npm > /dev/null && command -v node > /dev/null") != 0) {
            why = "npm or node is not installed";
        } else {
            auto cmd = "cd '" + dir + "' && timeout 600 npm install --no-audit --no-fund --silent " + packages +
                       " > npm.log 2>&1";
            if (std::system(cmd.c_str()) != 0)
                why = "the npm registry is unreachable (npm install " + packages + " failed; see " + dir + "/npm.log)";
        }
    }
    ::flock(lock, LOCK_UN);
    ::close(lock);
    return why;
}

std::string capture(const std::string& command) {
    std::string out;
    if (FILE* p = ::popen(command.c_str(), "r")) {
        char buf[4096];
        while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
        ::pclose(p);
    }
    return out;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

TempDir::TempDir() {
    char tmpl[] = "/tmp/tokengate-test-XXXXXX";
    char* d = ::mkdtemp(tmpl);
    if (!d) throw std::runtime_error("mkdtemp failed");
    path_ = d;
}

TempDir::~TempDir() {
    if (const char* keep = std::getenv("TOKENGATE_KEEP_TEST_DIRS"); keep && std::string(keep) == "1") return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
}

RawClient::RawClient(unsigned short port) : fd_(connect_to(port)) {}
RawClient::~RawClient() { close(); }

void RawClient::close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

bool RawClient::send_all(const std::string& bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
        ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) return false;
        sent += static_cast<std::size_t>(n);
    }
    return true;
}

std::string RawClient::read_some(std::chrono::milliseconds timeout, const std::string& until) {
    std::string out;
    auto deadline = clock_type::now() + timeout;
    while (fd_ >= 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
        if (left.count() <= 0) break;
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
        char buf[16384];
        ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
        if (n <= 0) {
            peer_closed_ = true;
            break;
        }
        out.append(buf, static_cast<std::size_t>(n));
        if (!until.empty() && out.find(until) != std::string::npos) break;
    }
    return out;
}

std::string RawClient::read_once(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (fd_ < 0 || ::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return {};
    char buf[65536];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
        peer_closed_ = true;
        return {};
    }
    return std::string(buf, static_cast<std::size_t>(n));
}

bool RawClient::wait_closed(std::chrono::milliseconds timeout) {
    auto deadline = clock_type::now() + timeout;
    while (clock_type::now() < deadline) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 50) > 0) {
            char buf[4096];
            ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n <= 0) return true;
        }
    }
    return false;
}

/// Parses one HTTP/1.1 response (Content-Length or chunked) out of `raw`; false if incomplete.
static bool parse_response(const std::string& raw, Response& out) {
    auto head_end = raw.find("\r\n\r\n");
    if (head_end == std::string::npos) return false;
    std::istringstream head(raw.substr(0, head_end));
    std::string line;
    std::getline(head, line);
    if (line.size() < 12) return false;
    out.status = std::stoi(line.substr(9, 3));
    out.headers.clear();
    while (std::getline(head, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string name = line.substr(0, colon);
        for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::string value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.erase(0, 1);
        out.headers[name] = value;
    }
    std::string rest = raw.substr(head_end + 4);
    if (out.headers.count("content-length")) {
        auto len = std::stoul(out.headers["content-length"]);
        if (rest.size() < len) return false;
        out.body = rest.substr(0, len);
        return true;
    }
    if (out.headers["transfer-encoding"].find("chunked") != std::string::npos) {
        out.body.clear();
        std::size_t pos = 0;
        for (;;) {
            auto eol = rest.find("\r\n", pos);
            if (eol == std::string::npos) return false;
            auto size = std::stoul(rest.substr(pos, eol - pos), nullptr, 16);
            if (size == 0) return rest.find("\r\n", eol + 2) != std::string::npos;
            if (rest.size() < eol + 2 + size + 2) return false;
            out.body += rest.substr(eol + 2, size);
            pos = eol + 2 + size + 2;
        }
    }
    out.body = rest;
    return out.status == 204 || out.status == 304;
}

Response send_request(unsigned short port, const Request& request, std::chrono::milliseconds timeout) {
    Response response;
    RawClient client(port);
    if (!client.connected()) return response;
    std::string raw = request.method + " " + request.target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    bool has_type = false;
    for (const auto& [k, v] : request.headers) {
        raw += k + ": " + v + "\r\n";
        if (k == "Content-Type") has_type = true;
    }
    if (!request.body.empty() && !has_type) raw += "Content-Type: application/json\r\n";
    if (!request.body.empty() || request.method == "POST")
        raw += "Content-Length: " + std::to_string(request.body.size()) + "\r\n";
    raw += "\r\n" + request.body;
    if (!client.send_all(raw)) return response;
    std::string got;
    auto deadline = clock_type::now() + timeout;
    while (clock_type::now() < deadline) {
        auto chunk = client.read_once(200ms);  // at once when bytes arrive: parse, then read on
        got += chunk;
        if (parse_response(got, response)) return response;
        if (client.peer_closed()) break;
    }
    if (!parse_response(got, response)) {
        Response partial;
        partial.body = got;
        return partial;
    }
    return response;
}

std::string raw_post(const std::string& path, const std::string& key, const std::string& body,
                     const std::string& extra_headers) {
    return "POST " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + "\r\n" + extra_headers +
           "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

int listen_loopback(unsigned short port, int backlog) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, backlog) != 0)
        throw std::runtime_error("cannot listen on port " + std::to_string(port));
    return fd;
}

std::string chat_body(const std::string& model, const std::string& content, int max_tokens, bool stream,
                      bool include_usage) {
    std::string body = R"({"model":")" + model + R"(","messages":[{"role":"user","content":")" + content + R"("}])";
    if (max_tokens >= 0) body += ",\"max_tokens\":" + std::to_string(max_tokens);
    if (stream) body += ",\"stream\":true";
    if (include_usage) body += R"(,"stream_options":{"include_usage":true})";
    return body + "}";
}

static void replace_all(std::string& s, const std::string& from, const std::string& to) {
    for (std::size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
        s.replace(pos, from.size(), to);
}

GatewayUnderTest::GatewayUnderTest(const std::string& config_body, const std::string& server_extra,
                                   double mock_tokens_per_s, const std::string& upstream_extra,
                                   const std::vector<std::string>& launcher,
                                   const std::optional<std::pair<std::string, std::string>>& mock_tls,
                                   const std::vector<std::string>& mock_args)
    : port_(free_port()), mock_port_(free_port()), admin_port_(free_port()) {
    ::setenv("TOKENGATE_TEST_ADMIN_TOKEN", admin_token, 1);
    // A port from free_port() is free only when it is asked for: another test's process (or
    // its client sockets, from the same ephemeral range) may take it before our process binds
    // it. Each start waits for its own "listening on <port>" line and, when the bind lost that
    // race, tries again on fresh ports.
    auto lost_the_port = [](const std::string& log) { return log.find("Address already in use") != std::string::npos; };
    for (int attempt = 1;; ++attempt) {
        std::vector<std::string> mock_command{gateway_binary(), "mock-upstream",
                                              "--port",         std::to_string(mock_port_),
                                              "--tokens-per-s", std::to_string(mock_tokens_per_s)};
        if (mock_tls)
            for (const auto& a : {"--tls-cert", mock_tls->first.c_str(), "--tls-key", mock_tls->second.c_str()})
                mock_command.push_back(a);
        mock_command.insert(mock_command.end(), mock_args.begin(), mock_args.end());
        mock_.emplace(mock_command, dir_.path() + "/mock.log");
        if (wait_for_output(*mock_, dir_.path() + "/mock.log",
                            "listening on 127.0.0.1:" + std::to_string(mock_port_) + " "))
            break;
        auto log = read_file(dir_.path() + "/mock.log");
        if (attempt == 5 || !lost_the_port(log)) throw std::runtime_error("mock upstream did not start: " + log);
        mock_port_ = free_port();
    }
    std::string dead = "http://127.0.0.1:" + std::to_string(free_port());
    for (int attempt = 1;; ++attempt) {
        // Two workers unless the test names its own count.
        auto threads = server_extra.find("threads:") == std::string::npos ? "  threads: 2\n" : "";
        config_head_ = "server:\n  listen: 127.0.0.1:" + std::to_string(port_) + "\n" + threads + server_extra +
                       "admin:\n  listen: 127.0.0.1:" + std::to_string(admin_port_) +
                       "\n  token_env: TOKENGATE_TEST_ADMIN_TOKEN\n"
                       "upstreams:\n"
                       "  - name: mock\n    url: {UPSTREAM}\n" +
                       upstream_extra + "  - name: dead\n    url: {DEAD}\n    timeouts: { connect: 1s }\n";
        replace_all(config_head_, "{UPSTREAM}",
                    (mock_tls ? "https://localhost:" : "http://127.0.0.1:") + std::to_string(mock_port_));
        replace_all(config_head_, "{DEAD}", dead);
        rewrite_config(config_body);
        std::vector<std::string> command = launcher;
        for (std::string a : {gateway_binary(), "serve", "-c"}) command.push_back(a);
        command.push_back(dir_.path() + "/gateway.yaml");
        command_ = command;
        gateway_.emplace(command, dir_.path() + "/gateway.log");
        if (wait_for_output(*gateway_, dir_.path() + "/gateway.log",
                            "tokengate listening on 127.0.0.1:" + std::to_string(port_) + "\n"))
            break;
        if (attempt == 5 || !lost_the_port(log())) throw std::runtime_error("gateway did not start: " + log());
        port_ = free_port();
        admin_port_ = free_port();
    }
}

bool GatewayUnderTest::restart(int signal, const std::vector<std::string>& extra, int* exit_code) {
    int code = gateway_->stop(signal);
    if (exit_code) *exit_code = code;
    gateway_.reset();
    auto log_path = dir_.path() + "/gateway.log";
    std::filesystem::rename(log_path, log_path + ".1");
    auto command = command_;
    command.insert(command.end(), extra.begin(), extra.end());
    gateway_.emplace(command, log_path);
    return wait_for_output(*gateway_, log_path, "tokengate listening on 127.0.0.1:" + std::to_string(port_) + "\n");
}

bool GatewayUnderTest::log_contains(const std::string& text, std::chrono::milliseconds timeout) const {
    auto deadline = clock_type::now() + timeout;
    for (;;) {
        if (log().find(text) != std::string::npos) return true;
        if (clock_type::now() > deadline) return false;
        std::this_thread::sleep_for(20ms);
    }
}

std::vector<std::string> GatewayUnderTest::access_lines(const std::string& path, std::size_t expected) const {
    std::vector<std::string> out;
    auto marker = "\"path\":\"" + path + "\"";
    for (int attempt = 0; attempt < 200 && out.size() < expected; ++attempt) {
        if (attempt) std::this_thread::sleep_for(50ms);
        out.clear();
        std::istringstream in(log());
        std::string line;
        while (std::getline(in, line))
            if (line.starts_with("{\"ts\":") && line.find(marker) != std::string::npos) out.push_back(line);
    }
    return out;
}

double metric_total(const std::string& metrics, const std::string& name) {
    double total = 0;
    std::istringstream in(metrics);
    std::string line;
    while (std::getline(in, line))
        if (line.rfind(name + "{", 0) == 0 || line.rfind(name + " ", 0) == 0)
            total += std::stod(line.substr(line.rfind(' ') + 1));
    return total;
}

namespace {
const char* k_redis_server = "/usr/bin/redis-server";
}

bool RedisServer::available() { return ::access(k_redis_server, X_OK) == 0; }

RedisServer::RedisServer(std::vector<std::string> extra, std::optional<Tls> tls)
    : port_(free_port()), plain_port_(free_port()), extra_(std::move(extra)), tls_(std::move(tls)) {
    // As for the gateway: a port from free_port() can be taken before redis-server binds it.
    for (int attempt = 1;; ++attempt) {
        try {
            start();
            return;
        } catch (const std::runtime_error& e) {
            if (attempt == 5 || std::string(e.what()).find("Address already in use") == std::string::npos) throw;
            port_ = free_port();
            plain_port_ = free_port();
        }
    }
}

RedisServer::~RedisServer() {
    if (process_) resume();
}

void RedisServer::start() {
    std::vector<std::string> args{
        k_redis_server, "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save",   "",
        "--appendonly", "no",     "--daemonize",         "no",     "--dir",     dir_.path()};
    if (tls_) {  // TLS on port(): a plain connection must not reach it
        // A plain port of its own, for the test's own questions (commands()).
        args[2] = std::to_string(plain_port_);
        std::vector<std::string> tls{
            "--tls-port", std::to_string(port_), "--tls-cert-file", tls_->cert,           "--tls-key-file",
            tls_->key,    "--tls-ca-cert-file",  tls_->ca,          "--tls-auth-clients", "no"};
        args.insert(args.end(), tls.begin(), tls.end());
    }
    args.insert(args.end(), extra_.begin(), extra_.end());
    process_.emplace(args, dir_.path() + "/redis.log");
    // Printed only once it listens (a port another process took makes it exit instead).
    if (!wait_for_output(*process_, dir_.path() + "/redis.log", "Ready to accept connections") || !wait_for_port(port_))
        throw std::runtime_error("redis-server did not start: " + read_file(dir_.path() + "/redis.log"));
}

void RedisServer::kill() {
    resume();
    process_.reset();  // SIGKILL and reap
}

void RedisServer::pause() {
    if (process_) ::kill(process_->pid(), SIGSTOP);
}

void RedisServer::resume() {
    if (process_) ::kill(process_->pid(), SIGCONT);
}

namespace {

/// Sends `list` on one connection to `port` and reads until each has a reply line.
std::string resp_commands(unsigned short port, const std::vector<std::vector<std::string>>& list) {
    RawClient c(port);
    if (!c.connected()) return "";
    std::string out;
    // Appended piece by piece: GCC 12 at -O3 misreports "*" + to_string(...) as an overlapping copy.
    auto length_line = [&](char kind, std::size_t n) {
        out.push_back(kind);
        out.append(std::to_string(n)).append("\r\n");
    };
    for (const auto& args : list) {
        length_line('*', args.size());
        for (const auto& a : args) {
            length_line('$', a.size());
            out.append(a).append("\r\n");
        }
    }
    c.send_all(out);
    // Replies used here are one line each (status, integer, error): wait for all of them.
    std::string in;
    auto deadline = clock_type::now() + 5s;
    while (static_cast<std::size_t>(std::count(in.begin(), in.end(), '\n')) < list.size() &&
           clock_type::now() < deadline)
        in += c.read_some(200ms);
    return in;
}

}  // namespace

std::string RedisServer::commands(const std::vector<std::vector<std::string>>& list) const {
    return resp_commands(tls_ ? plain_port_ : port_, list);
}

RedisSentinel::RedisSentinel(const std::string& name, unsigned short master_port, std::optional<RedisServer::Tls> tls)
    : port_(free_port()) {
    // Sentinel rewrites its file as it learns (replicas, the other sentinels, a failover).
    auto conf = dir_.path() + "/sentinel.conf";
    std::ofstream out(conf);
    out << "port " << port_ << "\nbind 127.0.0.1\ndir " << dir_.path() << "\nsentinel monitor " << name << " 127.0.0.1 "
        << master_port << " 2\nsentinel down-after-milliseconds " << name << " 1000\nsentinel failover-timeout " << name
        << " 5000\n";
    if (tls) {
        // The plain port stays, for the test's own questions.
        tls_port_ = free_port();
        out << "tls-port " << tls_port_ << "\ntls-cert-file " << tls->cert << "\ntls-key-file " << tls->key
            << "\ntls-ca-cert-file " << tls->ca << "\ntls-auth-clients no\ntls-replication yes\n";
    }
    out.close();
    process_.emplace(std::vector<std::string>{k_redis_server, conf, "--sentinel"}, dir_.path() + "/sentinel.log");
    if (!wait_for_port(port_) || (tls && !wait_for_port(tls_port_)))
        throw std::runtime_error("redis sentinel did not start: " + read_file(dir_.path() + "/sentinel.log"));
}

std::string RedisSentinel::command(const std::vector<std::string>& args) const { return resp_commands(port_, {args}); }

unsigned short RedisSentinel::master_port(const std::string& name) const {
    // *2\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n: the port is the last line.
    RawClient c(port_);
    if (!c.connected()) return 0;
    auto request = "*3\r\n$8\r\nSENTINEL\r\n$23\r\nget-master-addr-by-name\r\n$" + std::to_string(name.size()) +
                   "\r\n" + name + "\r\n";
    c.send_all(request);
    std::string in;
    auto deadline = clock_type::now() + 2s;
    while (std::count(in.begin(), in.end(), '\n') < 5 && !(in.starts_with("*-1")) && clock_type::now() < deadline)
        in += c.read_some(100ms);
    if (std::count(in.begin(), in.end(), '\n') < 5) return 0;
    auto end = in.rfind("\r\n");
    auto start = in.rfind('\n', end - 1) + 1;
    return static_cast<unsigned short>(std::atoi(in.substr(start, end - start).c_str()));
}

namespace {

std::vector<std::string> cluster_node_args(bool tls) {
    std::vector<std::string> extra{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                   "--cluster-node-timeout", "2000",
                                   // Its bus port, which would otherwise be port + 10000 (past 65535 for some).
                                   "--cluster-port", std::to_string(free_port()),
                                   // A master lost is its slots' outage only, not every slot's.
                                   "--cluster-require-full-coverage", "no"};
    if (tls) extra.insert(extra.end(), {"--tls-cluster", "yes"});
    return extra;
}

}  // namespace

RedisCluster::RedisCluster(unsigned masters, std::optional<RedisServer::Tls> tls) : tls_(std::move(tls)) {
    for (unsigned i = 0; i < masters; ++i)
        nodes_.push_back(std::make_unique<RedisServer>(cluster_node_args(tls_.has_value()), tls_));
    std::string addresses;
    for (const auto& n : nodes_) addresses += " 127.0.0.1:" + std::to_string(n->port());
    auto created = cli("--cluster create" + addresses + " --cluster-replicas 0 --cluster-yes");
    if (!ready()) throw std::runtime_error("the redis cluster did not come up: " + created);
}

std::string RedisCluster::cli(const std::string& arguments) const {
    std::string tls;
    if (tls_) tls = " --tls --cacert " + tls_->ca;
    return capture("redis-cli" + tls + " " + arguments + " 2>&1");
}

std::string RedisCluster::seeds() const {
    std::string list;
    for (const auto& n : nodes_)
        list += (list.empty() ? "\"127.0.0.1:" : ", \"127.0.0.1:") + std::to_string(n->port()) + "\"";
    return "[" + list + "]";
}

bool RedisCluster::ready() const {
    auto deadline = clock_type::now() + 30s;
    for (;;) {
        bool all = true;
        std::string first;
        for (const auto& n : nodes_) {
            auto info = n->command({"CLUSTER", "INFO"});
            auto slots = n->command({"CLUSTER", "SLOTS"});
            // Every node knows every other (a node just added joins by gossip).
            auto known = "cluster_known_nodes:" + std::to_string(nodes_.size()) + "\r\n";
            if (info.find("cluster_state:ok") == std::string::npos || info.find(known) == std::string::npos ||
                (!first.empty() && slots != first))
                all = false;
            if (first.empty()) first = slots;
        }
        if (all) return true;
        if (clock_type::now() > deadline) return false;
        std::this_thread::sleep_for(100ms);
    }
}

std::size_t RedisCluster::owner_of(const std::string& key) const {
    // Only its master answers a read of it; the others redirect (MOVED).
    for (std::size_t i = 0; i < nodes_.size(); ++i)
        if (nodes_[i]->command({"EXISTS", key}).starts_with(":")) return i;
    return nodes_.size();
}

std::string RedisCluster::id(std::size_t i) const {
    auto reply = nodes_[i]->command({"CLUSTER", "MYID"});  // $40\r\n<id>\r\n
    auto start = reply.find("\r\n") + 2;
    return reply.substr(start, reply.find("\r\n", start) - start);
}

std::size_t RedisCluster::add_master() {
    nodes_.push_back(std::make_unique<RedisServer>(cluster_node_args(tls_.has_value()), tls_));
    auto added = cli("--cluster add-node 127.0.0.1:" + std::to_string(nodes_.back()->port()) +
                     " 127.0.0.1:" + std::to_string(nodes_.front()->port()));
    if (!ready()) throw std::runtime_error("the new master did not join: " + added);
    return nodes_.size() - 1;
}

std::string RedisCluster::reshard(std::size_t from, std::size_t to, unsigned slots) const {
    return cli("--cluster reshard 127.0.0.1:" + std::to_string(nodes_[from]->port()) + " --cluster-from " + id(from) +
               " --cluster-to " + id(to) + " --cluster-slots " + std::to_string(slots) + " --cluster-yes");
}

bool GatewayUnderTest::wait_settled(double admitted, std::chrono::milliseconds timeout) const {
    auto deadline = clock_type::now() + timeout;
    for (;;) {
        auto m = send_request(admin_port_, Request{"GET", "/metrics", {}, ""}).body;
        double a = metric_total(m, "tokengate_admitted_total"), s = metric_total(m, "tokengate_settled_total");
        // And written: a shared store sends its settlements in batches.
        if (a >= admitted && a == s && metric_total(m, "tokengate_store_settlements_pending") == 0) return true;
        if (clock_type::now() > deadline) return false;
        std::this_thread::sleep_for(20ms);
    }
}

std::string GatewayUnderTest::metrics_after(double answered, std::chrono::milliseconds timeout) const {
    auto deadline = clock_type::now() + timeout;
    for (;;) {
        auto m = send_request(admin_port_, Request{"GET", "/metrics", {}, ""}).body;
        if (metric_total(m, "tokengate_requests_total") >= answered || clock_type::now() > deadline) return m;
        std::this_thread::sleep_for(20ms);
    }
}

void GatewayUnderTest::rewrite_config(const std::string& config_body) const {
    std::string tmp = dir_.path() + "/gateway.yaml.tmp";
    std::ofstream(tmp) << config_head_ << config_body;
    std::rename(tmp.c_str(), (dir_.path() + "/gateway.yaml").c_str());
}

Response GatewayUnderTest::admin(Request r) const {
    std::string bearer = "Bearer ";
    bearer.append(admin_token);
    r.headers.emplace_back("Authorization", std::move(bearer));
    return send_request(admin_port_, r);
}

}  // namespace tokengate::testing
