#pragma once

// A raw TCP upstream that answers each request it reads with whatever a test scripts: bytes
// after a complete response, interim responses, anything. It records every request head it
// received, so a test can see exactly what the gateway forwarded.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"

namespace tokengate::testing {

class ScriptedUpstream {
public:
    struct Reply {
        Reply(std::string now_bytes = {}, std::string later_bytes = {}, int ms = 0, bool one_byte_at_a_time = false)
            : now(std::move(now_bytes)), later(std::move(later_bytes)), later_ms(ms), drip(one_byte_at_a_time) {}
        std::string now;    // sent at once (or a byte at a time, with `drip`)
        std::string later;  // sent `later_ms` after, unasked for
        int later_ms = 0;
        bool drip = false;
    };
    /// `script(head, body)` answers one request: its head (request line and fields) and body.
    using Script = std::function<Reply(const std::string& head, const std::string& body)>;

    explicit ScriptedUpstream(Script script) : port_(free_port()), script_(std::move(script)) {
        fd_ = listen_loopback(port_, 64);
        acceptor_ = std::thread([this] {
            for (;;) {
                int c = ::accept(fd_, nullptr, nullptr);
                if (c < 0) return;
                std::lock_guard lock(mutex_);
                connections_.emplace_back([this, c] { serve(c); });
            }
        });
    }
    ~ScriptedUpstream() {
        stop_ = true;
        ::shutdown(fd_, SHUT_RDWR);
        ::close(fd_);
        acceptor_.join();
        std::lock_guard lock(mutex_);
        for (auto& t : connections_) t.join();
    }
    std::string yaml(const std::string& name = "scripted") const {
        return "  - name: " + name + "\n    url: http://127.0.0.1:" + std::to_string(port_) +
               "\n    timeouts: { first_byte: 2s, stream_idle: 2s }\n";
    }
    std::vector<std::string> heads() const {
        std::lock_guard lock(mutex_);
        return heads_;
    }
    int connections() const { return accepted_.load(); }

private:
    void serve(int c) {
        ++accepted_;
        timeval tv{0, 200'000};
        ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        std::string in;
        char buf[65536];
        while (!stop_) {
            auto end = in.find("\r\n\r\n");
            if (end == std::string::npos) {
                ssize_t n = ::recv(c, buf, sizeof buf, 0);
                if (n == 0) break;
                if (n < 0) continue;  // the receive timeout: look at stop_ again
                in.append(buf, static_cast<std::size_t>(n));
                continue;
            }
            std::string head = in.substr(0, end + 2);
            std::size_t length = 0;
            auto lower = head;
            for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
            if (auto cl = lower.find("\r\ncontent-length:"); cl != std::string::npos)
                length = std::stoul(head.substr(cl + 17));
            while (in.size() < end + 4 + length && !stop_) {
                ssize_t n = ::recv(c, buf, sizeof buf, 0);
                if (n == 0) break;
                if (n > 0) in.append(buf, static_cast<std::size_t>(n));
            }
            std::string body = in.substr(end + 4, length);
            in.erase(0, end + 4 + length);
            {
                std::lock_guard lock(mutex_);
                heads_.push_back(head);
            }
            auto reply = script_(head, body);
            if (reply.drip) {
                int one = 1;
                ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                for (char byte : reply.now) {
                    ::send(c, &byte, 1, MSG_NOSIGNAL);
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                }
            } else {
                ::send(c, reply.now.data(), reply.now.size(), MSG_NOSIGNAL);
            }
            if (!reply.later.empty()) {
                std::this_thread::sleep_for(std::chrono::milliseconds(reply.later_ms));
                ::send(c, reply.later.data(), reply.later.size(), MSG_NOSIGNAL);
            }
        }
        ::close(c);
    }

    unsigned short port_;
    Script script_;
    int fd_ = -1;
    std::atomic<bool> stop_{false};
    std::atomic<int> accepted_{0};
    mutable std::mutex mutex_;
    std::vector<std::string> heads_;
    std::vector<std::thread> connections_;
    std::thread acceptor_;
};

/// "HTTP/1.1 200 OK" with a Content-Length body.
inline std::string http_ok(const std::string& body, const std::string& type = "text/plain") {
    return "HTTP/1.1 200 OK\r\nContent-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body;
}

/// The request target of a recorded head ("POST /x HTTP/1.1" → "/x").
inline std::string target_of(const std::string& head) {
    auto sp = head.find(' ');
    return head.substr(sp + 1, head.find(' ', sp + 1) - sp - 1);
}

}  // namespace tokengate::testing
