#include "distributed/init_method.h"

#include "core/check.h"
#include "core/digits.h"

namespace ranzcr {

InitMethod parse_init_method(const std::string& text) {
  InitMethod m;
  if (text == "env://" || text == "env") return m;
  if (text.rfind("file://", 0) == 0 && text.size() > 7) {
    m.kind = InitMethod::Kind::kFile;
    m.path = text.substr(7);
    return m;
  }
  RANZCR_CHECK(text.rfind("tcp://", 0) == 0, "distributed.init_method '", text,
               "': expected env://, tcp://host:port or file:///path");
  const std::string host_port = text.substr(6);
  const size_t colon = host_port.rfind(':');
  const std::optional<int> port = colon == std::string::npos
                                      ? std::nullopt
                                      : parse_digits(std::string_view(host_port).substr(colon + 1), 5);
  RANZCR_CHECK(colon != std::string::npos && colon > 0 && port && *port >= 1 && *port <= 65535,
               "distributed.init_method '", text, "': expected tcp://host:port (port 1 to 65535)");
  m.kind = InitMethod::Kind::kTcp;
  m.host = host_port.substr(0, colon);
  if (m.host.size() > 2 && m.host.front() == '[' && m.host.back() == ']')  // an IPv6 address: [::1]
    m.host = m.host.substr(1, m.host.size() - 2);
  m.port = *port;
  return m;
}

std::string setting_text(const InitMethod& method) {
  switch (method.kind) {
    case InitMethod::Kind::kTcp:
      return "tcp://" + (method.host.find(':') == std::string::npos ? method.host : "[" + method.host + "]") +
             ":" + std::to_string(method.port);
    case InitMethod::Kind::kFile:
      return "file://" + method.path;
    case InitMethod::Kind::kEnv:
      break;
  }
  return "env://";
}

}  // namespace ranzcr
