#include "distributed/net_address.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "core/check.h"

namespace ranzcr {
namespace {

std::string numeric_host(const sockaddr* addr, socklen_t len) {
  char buf[NI_MAXHOST];
  const int rc = ::getnameinfo(addr, len, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST);
  RANZCR_CHECK(rc == 0, "cannot format a network address: ", ::gai_strerror(rc));
  return buf;
}

// The first non-loopback IPv4 address, preferring interfaces that are running (have a carrier).
const InterfaceAddress* first_non_loopback(const std::vector<InterfaceAddress>& all) {
  for (const bool need_running : {true, false})
    for (const auto& a : all)
      if (!a.ipv6 && !a.loopback && a.up && (a.running || !need_running)) return &a;
  return nullptr;
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  // Any port routes the same; 0 is not accepted everywhere.
  const std::string service = std::to_string(port > 0 ? port : 9);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  RANZCR_CHECK(rc == 0, "cannot resolve the master host '", host,
               "' (check MASTER_ADDR): ", rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(found, &::freeaddrinfo);
  // IPv4 first: every rank must publish the same address family, and IPv4 is what most clusters route.
  std::vector<const addrinfo*> candidates;
  for (const addrinfo* ai = found; ai; ai = ai->ai_next)
    if (ai->ai_family == AF_INET || ai->ai_family == AF_INET6) candidates.push_back(ai);
  std::stable_partition(candidates.begin(), candidates.end(),
                        [](const addrinfo* ai) { return ai->ai_family == AF_INET; });
  std::string error = "no IPv4 or IPv6 address";
  for (const addrinfo* ai : candidates) {
    const int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    // connect() on a UDP socket only picks the route and the source address: nothing is sent.
    const bool ok = ::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
    if (!ok) error = std::strerror(errno);
    ::close(fd);
    if (ok) return numeric_host(reinterpret_cast<sockaddr*>(&local), len);
  }
  RANZCR_FAIL("no route from this host to the master host '", host, "' (check MASTER_ADDR): ", error);
}

std::vector<InterfaceAddress> interface_addresses() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) RANZCR_FAIL("cannot list the network interfaces: ", std::strerror(errno));
  std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> guard(list, &::freeifaddrs);
  std::vector<InterfaceAddress> out;
  for (const ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr) continue;
    const int family = ifa->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    InterfaceAddress a;
    a.name = ifa->ifa_name;
    a.ipv6 = family == AF_INET6;
    a.address = numeric_host(ifa->ifa_addr, a.ipv6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
    a.up = (ifa->ifa_flags & IFF_UP) != 0;
    a.running = (ifa->ifa_flags & IFF_RUNNING) != 0;
    a.loopback = (ifa->ifa_flags & IFF_LOOPBACK) != 0 || is_loopback_host(a.address);
    out.push_back(std::move(a));
  }
  return out;
}

std::string first_non_loopback_address() {
  const auto all = interface_addresses();
  const InterfaceAddress* a = first_non_loopback(all);
  return a ? a->address : "127.0.0.1";
}

GlooBinding choose_gloo_binding(const std::string& interface, const std::string& master_host, int master_port,
                                bool file_store, bool single_node) {
  if (!interface.empty()) {
    // Gloo takes the interface's first IPv4 or IPv6 address in getifaddrs order: so do we.
    std::string names;
    for (const auto& a : interface_addresses()) {
      if (a.name == interface) return {a.address, interface, "GLOO_SOCKET_IFNAME=" + interface};
      if (names.find(" " + a.name + ",") == std::string::npos) names += " " + a.name + ",";
    }
    if (!names.empty()) names.pop_back();
    RANZCR_FAIL("GLOO_SOCKET_IFNAME=", interface,
                ": no network interface of that name has an address (interfaces:", names, ")");
  }
  if (is_loopback_host(master_host) || (file_store && single_node)) return {"127.0.0.1", "", "loopback"};
  if (file_store) {
    // No master to route to: take an interface the other hosts can probably reach.
    const auto all = interface_addresses();
    if (const InterfaceAddress* a = first_non_loopback(all))
      return {a->address, "", "first non-loopback interface " + a->name};
    return {"127.0.0.1", "", "loopback: no other interface is up"};
  }
  const std::string address = local_address_towards(master_host, master_port);
  return {address, "", is_loopback_host(address) ? "loopback" : "route to master"};
}

}  // namespace ranzcr
