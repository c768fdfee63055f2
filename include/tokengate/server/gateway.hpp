#pragma once

#include <memory>
#include <string>

#include "tokengate/config/config.hpp"
#include "tokengate/core/clock.hpp"

namespace tokengate::server {

class AccessLog;

/// The gateway: one event loop and one listening socket (SO_REUSEPORT) per thread.
class Gateway {
public:
    virtual ~Gateway() = default;
    /// Serves until stop() or the end of a drain; returns when every thread has finished.
    virtual void run() = 0;
    /// Graceful: stop accepting, close idle connections, let in-flight requests finish within
    /// server.drain_timeout, then stop. Thread-safe.
    virtual void drain() = 0;
    /// Immediate stop. Thread-safe.
    virtual void stop() = 0;
    /// Swaps in a validated config; bucket state of limits that still exist is kept.
    virtual void reload(std::shared_ptr<const config::GatewayConfig> config) = 0;
    /// Reloads the config file the gateway started from (SIGHUP, POST /admin/reload). An
    /// invalid file is refused and counted; the previous config keeps serving.
    virtual bool reload_from_file(std::string& error) = 0;
    /// The ports listened on (useful when the config says port 0); admin 0 when disabled.
    virtual unsigned short port() const = 0;
    virtual unsigned short admin_port() const = 0;
    /// The plain-HTTP port beside a TLS listener (server.tls.plain_listen); 0 without one.
    virtual unsigned short plain_port() const = 0;
};

/// `ignore_state`: a store.state_file that cannot be used is set aside (logged) instead of
/// stopping the start (`serve --ignore-state`).
std::unique_ptr<Gateway> make_gateway(std::shared_ptr<const config::GatewayConfig> config, std::string config_path,
                                      std::shared_ptr<AccessLog> access_log, const core::Clock& clock,
                                      bool ignore_state = false);

}  // namespace tokengate::server
