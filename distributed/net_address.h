// Which local address a rank's Gloo device listens on and publishes to its peers. Gloo's own default
// resolves this machine's hostname, which is often 127.0.0.1 (VMs, containers): peers on other hosts then
// get "Connection refused". Here: GLOO_SOCKET_IFNAME when set, else the address that routes to the
// master (env://, tcp://), else (file://) the first non-loopback interface; loopback for one host.
#pragma once

#include <string>
#include <vector>

namespace ranzcr {

/// Whether `host` names this machine's loopback: "localhost", 127.x.x.x or ::1.
bool is_loopback_host(const std::string& host);

/// The numeric local address the kernel would send from to reach `host`:`port` (resolved with
/// getaddrinfo, IPv4 preferred; a UDP socket is connect()ed, which sends nothing, then getsockname()).
/// Throws std::runtime_error with one line when `host` does not resolve (naming it: check MASTER_ADDR)
/// or no route leads to it.
std::string local_address_towards(const std::string& host, int port);

/// One address of a network interface that is up.
struct InterfaceAddress {
  std::string name;     // "eth0"
  std::string address;  // numeric: "10.0.0.2", "fe80::1"
  bool ipv6 = false;
  bool loopback = false;
  bool up = false;       // IFF_UP
  bool running = false;  // IFF_RUNNING: has a carrier
};

/// Every IPv4 and IPv6 address of every interface, in getifaddrs order.
std::vector<InterfaceAddress> interface_addresses();

/// The first non-loopback IPv4 address of an interface that is up (running ones first); "127.0.0.1"
/// when there is none.
std::string first_non_loopback_address();

/// Where Gloo binds: `address` is what it publishes to its peers.
struct GlooBinding {
  std::string address;  // numeric address
  std::string
      interface;       // set: create the device for this interface (GLOO_SOCKET_IFNAME), else for `address`
  std::string reason;  // "route to master", "GLOO_SOCKET_IFNAME=eth1", "loopback", ...
  /// "gloo address 10.0.0.2 (route to master)", for the start-up line and errors.
  std::string describe() const { return "gloo address " + address + " (" + reason + ")"; }
};

/// The binding for a rank: `interface` (GLOO_SOCKET_IFNAME) wins; then a loopback master, or a file
/// store with every rank on this node, gives 127.0.0.1; a file store across nodes gives
/// first_non_loopback_address(); else local_address_towards(master_host, master_port).
/// Throws std::runtime_error with one line for an interface without an address or an unresolvable master.
GlooBinding choose_gloo_binding(const std::string& interface, const std::string& master_host, int master_port,
                                bool file_store, bool single_node);

}  // namespace ranzcr
