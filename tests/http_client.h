// A small HTTP/1.1 client over plain sockets for serve's tests: GET and POST with headers, one connection per
// request or kept alive, and raw bytes for malformed requests. Answers are read by Content-Length (the server
// always sends it) or to the end of the connection.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <strings.h>

namespace ranzcr::test {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpResult {
  int status = 0;
  std::string body;
  HttpHeaders headers;
  std::string get_header_value(const std::string& name) const {
    for (const auto& [k, v] : headers)
      if (strcasecmp(k.c_str(), name.c_str()) == 0) return v;
    return "";
  }
  bool has_header(const std::string& name) const {
    for (const auto& h : headers)
      if (strcasecmp(h.first.c_str(), name.c_str()) == 0) return true;
    return false;
  }
};

/// A connected socket to 127.0.0.1:port (-1 when refused).
inline int connect_local(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

inline bool send_all(int fd, const std::string& data) {
  for (size_t at = 0; at < data.size();) {
    const ssize_t n = ::send(fd, data.data() + at, data.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

/// Reads one answer from `fd` within `timeout_s` (nullopt when the connection ends or stays silent first).
/// `rest` keeps bytes read past it.
inline std::optional<HttpResult> read_response(int fd, double timeout_s, std::string& rest,
                                               bool head = false) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string got = std::move(rest);
  rest.clear();
  const auto fill = [&]() {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    got.append(buf, static_cast<size_t>(n));
    return true;
  };
  for (;;) {
    size_t end;
    while ((end = got.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) return std::nullopt;
    if (got.compare(0, 5, "HTTP/") != 0 || got.size() < 12) return std::nullopt;
    HttpResult r;
    r.status = std::atoi(got.c_str() + 9);
    size_t at = got.find("\r\n") + 2;
    while (at < end) {
      const size_t eol = got.find("\r\n", at);
      const std::string line = got.substr(at, eol - at);
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        size_t v = colon + 1;
        while (v < line.size() && line[v] == ' ') ++v;
        r.headers.emplace_back(line.substr(0, colon), line.substr(v));
      }
      at = eol + 2;
    }
    got.erase(0, end + 4);
    if (r.status == 100) continue;  // 100 Continue: the answer follows
    const std::string length = r.get_header_value("Content-Length");
    if (head || r.status == 204 || r.status == 304) {
      rest = std::move(got);
      return r;
    }
    if (!length.empty()) {
      const size_t n = std::stoull(length);
      while (got.size() < n)
        if (!fill()) return std::nullopt;
      r.body = got.substr(0, n);
      rest = got.substr(n);
    } else {
      while (fill()) {
      }
      r.body = std::move(got);
    }
    return r;
  }
}

class HttpClient {
 public:
  HttpClient(std::string host, int port) : host_(std::move(host)), port_(port) {}
  HttpClient(const HttpClient& o)
      : host_(o.host_), port_(o.port_), timeout_s_(o.timeout_s_), keep_(o.keep_) {}
  ~HttpClient() { disconnect(); }
  void set_read_timeout(int s, int us) { timeout_s_ = s + us / 1e6; }
  void set_keep_alive(bool keep) { keep_ = keep; }

  std::optional<HttpResult> Get(const std::string& path, const HttpHeaders& headers = {}) const {
    return request("GET", path, headers, "", "");
  }
  std::optional<HttpResult> Post(const std::string& path, const std::string& body,
                                 const std::string& type) const {
    return request("POST", path, {}, body, type);
  }
  std::optional<HttpResult> Post(const std::string& path, const HttpHeaders& headers, const std::string& body,
                                 const std::string& type) const {
    return request("POST", path, headers, body, type);
  }

  std::optional<HttpResult> request(const std::string& method, const std::string& path,
                                    const HttpHeaders& headers, const std::string& body,
                                    const std::string& type) const {
    std::string head =
        method + " " + path + " HTTP/1.1\r\nHost: " + host_ + ":" + std::to_string(port_) + "\r\n";
    for (const auto& [k, v] : headers) head += k + ": " + v + "\r\n";
    if (!type.empty()) head += "Content-Type: " + type + "\r\n";
    if (method == "POST" || !body.empty()) head += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    if (!keep_) head += "Connection: close\r\n";
    head += "\r\n";
    for (int attempt = 0; attempt < 2; ++attempt) {
      const bool reused = fd_ >= 0;
      if (fd_ < 0) fd_ = connect_local(port_);
      if (fd_ < 0) return std::nullopt;
      std::optional<HttpResult> r;
      if (send_all(fd_, head + body)) r = read_response(fd_, timeout_s_, rest_, method == "HEAD");
      const bool closing =
          !r || !keep_ || strcasecmp(r->get_header_value("Connection").c_str(), "close") == 0;
      if (closing) disconnect();
      if (r || !reused) return r;  // a kept connection the server had closed: once more on a new one
    }
    return std::nullopt;
  }

 private:
  void disconnect() const {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    rest_.clear();
  }
  std::string host_;
  int port_;
  double timeout_s_ = 60;
  bool keep_ = false;
  mutable int fd_ = -1;
  mutable std::string rest_;
};

}  // namespace ranzcr::test
