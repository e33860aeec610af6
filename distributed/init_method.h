// distributed.init_method: how the ranks of a job find each other. Parsed once when the config is read
// (parse_init_method); the process group (process_group.h) and the launcher receive the typed value.
#pragma once

#include <string>

namespace ranzcr {

struct InitMethod {
  enum class Kind {
    kEnv,   // env://: the store at MASTER_ADDR:MASTER_PORT (a launcher's, or rank 0's)
    kTcp,   // tcp://host:port: rank 0 hosts the store there
    kFile,  // file:///path: a FileStore on a shared file system
  };
  Kind kind = Kind::kEnv;
  std::string host;  // tcp
  int port = 0;      // tcp
  std::string path;  // file
};

/// The one parser of distributed.init_method: env:// (or env), tcp://host:port (port 1 to 65535) or
/// file:///path. Throws std::runtime_error "distributed.init_method '<text>': expected ...".
InitMethod parse_init_method(const std::string& text);

/// The setting as written in a config: "env://", "tcp://host:port" or "file:///path".
std::string setting_text(const InitMethod& method);

}  // namespace ranzcr
