#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "tokengate/config/config.hpp"

namespace tokengate::config {

/// A configuration error located in its file; what() is "file:line:col: message" (1-based).
class ConfigError : public std::runtime_error {
public:
    ConfigError(std::string file, int line, int column, std::string message);
    const std::string& file() const { return file_; }
    int line() const { return line_; }
    int column() const { return column_; }
    const std::string& message() const { return message_; }

private:
    std::string file_;
    int line_;
    int column_;
    std::string message_;
};

/// Loads and validates a config file; throws ConfigError (start-up only, never on the data plane).
std::shared_ptr<const GatewayConfig> load_config_file(const std::string& path);

/// Same, from text; `file_name` is used in error positions.
std::shared_ptr<const GatewayConfig> load_config_text(const std::string& text, const std::string& file_name);

}  // namespace tokengate::config
