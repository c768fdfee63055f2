// tokengate: wiring, subcommands, signals and reload.

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tokengate/auth/jwt.hpp"
#include "tokengate/config/loader.hpp"
#include "tokengate/core/sha256.hpp"
#include "tokengate/cost/tokenizer.hpp"
#include "tokengate/mock/mock_upstream.hpp"
#include "tokengate/server/access_log.hpp"
#include "tokengate/server/gateway.hpp"
#include "tokengate/server/simulate.hpp"
#include "tokengate/tls/context.hpp"

namespace {

namespace net = boost::asio;
using namespace tokengate;

constexpr const char* k_usage = R"(tokengate — a rate-limiting gateway for OpenAI-compatible LLM APIs

usage:
  tokengate serve -c gateway.yaml [--ignore-state]
                                         run the gateway (also: tokengate -c gateway.yaml);
                                         --ignore-state: start afresh if store.state_file is unusable
  tokengate check -c gateway.yaml        validate a config and print a summary
  tokengate hash-key KEY                 print the sha256: form of an API key for the config
  tokengate simulate -c gateway.yaml --trace FILE [--out DIR]
                                         replay a JSON-lines trace through the limits on a virtual
                                         clock; writes DIR/summary.json, decisions.csv, report.html
  tokengate mock-upstream --port N [--host H] [--tokens-per-s R] [--max-seqs N] [--tls-cert F --tls-key F [--tls-client-ca F]]
                          [--prefix-cache N [--cached-ttft MS] [--prefill-tokens-per-s R] [--prefix-tokens N]]
                                         run an OpenAI-compatible fake backend
  tokengate --version
)";

std::optional<std::string> option_value(const std::vector<std::string>& args,
                                        std::initializer_list<const char*> names) {
    for (std::size_t i = 0; i < args.size(); ++i)
        for (const char* name : names)
            if (args[i] == name) {
                if (i + 1 < args.size()) return args[i + 1];
                return std::string();
            }
    return std::nullopt;
}

std::shared_ptr<const config::GatewayConfig> load_or_report(const std::string& path) {
    try {
        auto cfg = config::load_config_file(path);
        for (const auto& w : cfg->warnings) std::cerr << w << " (warning)\n";
        return cfg;
    } catch (const config::ConfigError& e) {
        std::cerr << e.what() << "\n";
        return nullptr;
    }
}

int check(const std::string& path) {
    auto cfg = load_or_report(path);
    if (!cfg) return 1;
    std::size_t tokenizers = 0;
    try {  // a tokenizer or a certificate is only known to be good once it is loaded
        tokenizers = cost::Tokenizers::load(*cfg).files();
        tls::check_files(*cfg);
        auth::load_jwt_issuer(*cfg, nullptr);
    } catch (const config::ConfigError& e) {
        std::cerr << e.what() << "\n";
        return 1;
    }
    std::size_t limits = cfg->ip_limits.size() + cfg->global_limits.size(), keys = 0;
    for (const auto& r : cfg->routes) limits += r.limits.size();
    for (const auto& t : cfg->tenants) {
        limits += t.limits.size();
        keys += t.key_digests.size();
    }
    std::cout << path << ": OK\n"
              << "  listen     " << cfg->server.host << ":" << cfg->server.port << (cfg->server.tls ? " (https)" : "")
              << "\n"
              << "  upstreams  " << cfg->upstreams.size() << "\n"
              << "  routes     " << cfg->routes.size() << "\n"
              << "  tiers      " << cfg->tiers.size() << "\n"
              << "  tenants    " << cfg->tenants.size() << " (" << keys << " keys)\n"
              << "  limits     " << limits << "\n"
              << "  tokenizers " << tokenizers << "\n"
              << "  store      " << (cfg->store.backend == config::StoreBackend::memory ? "memory" : "redis") << "\n";
    return 0;
}

/// One JSON line per request, written by a background thread so a slow disk or pipe never
/// stalls an event loop; `block` rather than drop, so no line is lost under load.
std::shared_ptr<server::AccessLog> make_access_log(const config::LogConfig& log) {
    spdlog::sink_ptr sink;
    if (log.access == "stdout") sink = std::make_shared<spdlog::sinks::stdout_sink_mt>();
    else if (log.access == "off") return nullptr;
    else if (log.rotate_max_bytes > 0)
        sink =
            std::make_shared<spdlog::sinks::rotating_file_sink_mt>(log.access, log.rotate_max_bytes, log.rotate_files);
    else sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(log.access);
    return std::make_shared<server::AccessLog>(std::move(sink));
}

int serve(const std::string& path, bool ignore_state) {
    auto cfg = load_or_report(path);
    if (!cfg) return 1;
    spdlog::set_level(spdlog::level::from_str(cfg->log.level));
    core::SteadyClock clock;
    std::unique_ptr<server::Gateway> gateway;
    try {
        gateway = server::make_gateway(cfg, path, make_access_log(cfg->log), clock, ignore_state);
    } catch (const std::exception& e) {
        spdlog::critical("cannot start: {}", e.what());
        return 1;
    }
    if (cfg->server.tls) spdlog::info("the listener speaks HTTPS, with {}", cfg->server.tls->cert.path);
    spdlog::info("tokengate listening on {}:{}", cfg->server.host, gateway->port());
    if (gateway->plain_port())
        spdlog::info("plain http listening on {}:{}", cfg->server.tls->plain_host, gateway->plain_port());
    if (gateway->admin_port()) spdlog::info("admin listening on {}:{}", cfg->admin.host, gateway->admin_port());

    // Signals are taken on their own loop so that a busy worker never delays a drain.
    net::io_context signal_loop(1);
    net::signal_set signals(signal_loop, SIGINT, SIGTERM, SIGHUP);
    int terminations = 0;
    std::function<void(const boost::system::error_code&, int)> on_signal = [&](const boost::system::error_code& ec,
                                                                               int sig) {
        if (ec) return;
        if (sig == SIGHUP) {
            std::string error;
            gateway->reload_from_file(error);
        } else if (++terminations == 1) {
            spdlog::info("draining (signal {}); a second signal stops at once", sig);
            gateway->drain();
        } else {
            gateway->stop();
        }
        signals.async_wait(on_signal);
    };
    signals.async_wait(on_signal);
    std::thread signal_thread([&] { signal_loop.run(); });
    gateway->run();
    signal_loop.stop();
    signal_thread.join();
    gateway.reset();  // its access log writes every line handed over before it goes
    spdlog::info("tokengate stopped");
    spdlog::shutdown();
    return 0;
}

int mock_upstream(const std::vector<std::string>& args) {
    mock::MockOptions options;
    try {
        if (auto v = option_value(args, {"--port", "-p"})) options.port = static_cast<std::uint16_t>(std::stoul(*v));
        if (auto v = option_value(args, {"--host"})) options.host = *v;
        if (auto v = option_value(args, {"--tokens-per-s"})) options.tokens_per_s = std::stod(*v);
        if (auto v = option_value(args, {"--tls-cert"})) options.tls_cert = *v;
        if (auto v = option_value(args, {"--tls-key"})) options.tls_key = *v;
        if (auto v = option_value(args, {"--tls-client-ca"})) options.tls_client_ca = *v;
        if (auto v = option_value(args, {"--max-seqs"})) options.max_seqs = std::stoull(*v);
        if (auto v = option_value(args, {"--prefix-cache"})) options.prefix_cache = std::stoull(*v);
        if (auto v = option_value(args, {"--cached-ttft"})) options.cached_ttft_ms = std::stod(*v);
        if (auto v = option_value(args, {"--prefill-tokens-per-s"})) options.prefill_tokens_per_s = std::stod(*v);
        if (auto v = option_value(args, {"--prefix-tokens"})) options.prefix_tokens = std::stoull(*v);
        if (!(options.cached_ttft_ms >= 0) || !(options.prefill_tokens_per_s > 0) || options.prefix_tokens == 0)
            throw std::invalid_argument("mock option");
    } catch (const std::exception&) {
        std::cerr << "mock-upstream: invalid option value\n" << k_usage;
        return 2;
    }
    try {
        return mock::run_mock_upstream(options);
    } catch (const std::exception& e) {
        std::cerr << "mock-upstream: " << e.what() << "\n";
        return 1;
    }
}

int simulate(const std::vector<std::string>& args) {
    auto path = option_value(args, {"-c", "--config"});
    auto trace_path = option_value(args, {"--trace"});
    if (!path || path->empty() || !trace_path || trace_path->empty()) {
        std::cerr << "usage: tokengate simulate -c gateway.yaml --trace FILE [--out DIR]\n";
        return 2;
    }
    auto cfg = load_or_report(*path);
    if (!cfg) return 1;
    std::ifstream in(*trace_path);
    if (!in) {
        std::cerr << "tokengate simulate: cannot read " << *trace_path << "\n";
        return 1;
    }
    std::vector<server::TraceEntry> trace;
    server::TraceStats stats;
    try {
        trace = server::read_trace(in, stats);
    } catch (const server::TraceError& e) {
        std::cerr << *trace_path << ":" << e.what() << "\n";
        return 1;
    }
    if (stats.access_log)
        std::cerr << *trace_path << ": tokengate's access log, " << trace.size() << " requests (" << stats.skipped
                  << " other lines skipped), replayed from its first; keys are known by key_id, else tenant\n";
    if (stats.reordered)
        std::cerr << *trace_path << ": " << stats.reordered << " lines were out of time order; replayed sorted by t\n";
    auto result = server::simulate(cfg, trace);
    auto out = option_value(args, {"--out"}).value_or("simulation");
    std::string error;
    if (!server::write_simulation(result, out, error)) {
        std::cerr << "tokengate simulate: " << error << "\n";
        return 1;
    }
    std::size_t admitted = 0;
    for (const auto& d : result.decisions) admitted += d.status == 200;
    std::cout << result.decisions.size() << " requests: " << admitted << " admitted, "
              << result.decisions.size() - admitted << " not; " << out << "/summary.json, " << out << "/decisions.csv, "
              << out << "/report.html\n";
    return 0;
}
}  // namespace

int main(int argc, char** argv) {
    std::signal(SIGPIPE, SIG_IGN);
    // Diagnostics go to stderr (SPEC §10): stdout is the default access log, one JSON line
    // per request, and a "reload refused" line there would break whoever parses it.
    spdlog::set_default_logger(spdlog::stderr_color_mt("tokengate"));
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
        std::cout << k_usage;
        return args.empty() ? 2 : 0;
    }
    if (args[0] == "--version") {
        std::cout << "tokengate 0.1.0\n";
        return 0;
    }
    std::string command = args[0].rfind("-", 0) == 0 ? "serve" : args[0];
    if (command == "hash-key") {
        if (args.size() != 2) {
            std::cerr << "usage: tokengate hash-key KEY\n";
            return 2;
        }
        std::cout << "sha256:" << core::sha256_hex(args[1]) << "\n";
        return 0;
    }
    if (command == "mock-upstream") return mock_upstream(args);
    if (command == "simulate") return simulate(args);
    if (command == "serve" || command == "check") {
        auto path = option_value(args, {"-c", "--config"});
        if (!path || path->empty()) {
            std::cerr << "tokengate " << command << ": missing -c <config file>\n";
            return 2;
        }
        bool ignore_state = std::find(args.begin(), args.end(), "--ignore-state") != args.end();
        return command == "check" ? check(*path) : serve(*path, ignore_state);
    }
    std::cerr << "tokengate: unknown command '" << command << "'\n" << k_usage;
    return 2;
}
