#include "distributed/net_address.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace ranzcr {
namespace {

// The message of what `f` throws, or "" when it does not throw.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(NetAddress, LoopbackHosts) {
  EXPECT_TRUE(is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(is_loopback_host("127.0.1.1"));
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_TRUE(is_loopback_host("::1"));
  EXPECT_FALSE(is_loopback_host("10.0.0.1"));
  EXPECT_FALSE(is_loopback_host("node7"));
}

TEST(NetAddress, RouteToLoopbackIsLoopback) {
  EXPECT_EQ(local_address_towards("127.0.0.1", 29500), "127.0.0.1");
  EXPECT_TRUE(is_loopback_host(local_address_towards("localhost", 29500)));
  EXPECT_EQ(local_address_towards("127.0.0.1", 0), "127.0.0.1");  // any port routes the same
}

TEST(NetAddress, RouteToAnAddressOfThisHostIsThatAddress) {
  const std::string own = first_non_loopback_address();
  if (is_loopback_host(own)) GTEST_SKIP() << "no non-loopback IPv4 interface is up";
  EXPECT_EQ(local_address_towards(own, 29500), own);
}

TEST(NetAddress, UnresolvableMasterNamesTheHostAndMasterAddr) {
  const std::string e = error_of([] { local_address_towards("no-such-host.invalid", 29500); });
  EXPECT_NE(e.find("cannot resolve the master host 'no-such-host.invalid'"), std::string::npos) << e;
  EXPECT_NE(e.find("MASTER_ADDR"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(NetAddress, InterfaceAddressesHaveLoopback) {
  bool has_loopback = false;
  for (const auto& a : interface_addresses()) {
    EXPECT_FALSE(a.name.empty());
    EXPECT_FALSE(a.address.empty());
    has_loopback |= a.loopback && a.address == "127.0.0.1";
  }
  EXPECT_TRUE(has_loopback);
}

TEST(NetAddress, FirstNonLoopbackIsNotLoopbackWhenAnotherInterfaceIsUp) {
  bool other = false;
  for (const auto& a : interface_addresses()) other |= a.up && !a.loopback && !a.ipv6;
  const std::string first = first_non_loopback_address();
  if (!other) {
    EXPECT_EQ(first, "127.0.0.1");
    GTEST_SKIP() << "no non-loopback IPv4 interface is up here";
  }
  EXPECT_FALSE(is_loopback_host(first)) << first;
  bool listed = false;
  for (const auto& a : interface_addresses()) listed |= a.address == first && a.up && !a.ipv6;
  EXPECT_TRUE(listed) << first;
}

TEST(NetAddress, GlooSocketIfnameWins) {
  const GlooBinding b = choose_gloo_binding("lo", "10.1.2.3", 29500, false, false);
  EXPECT_EQ(b.interface, "lo");
  EXPECT_TRUE(is_loopback_host(b.address)) << b.address;
  EXPECT_EQ(b.reason, "GLOO_SOCKET_IFNAME=lo");
  EXPECT_EQ(b.describe(), "gloo address " + b.address + " (GLOO_SOCKET_IFNAME=lo)");
}

TEST(NetAddress, UnknownGlooSocketIfnameIsOneClearLine) {
  const std::string e = error_of([] { choose_gloo_binding("nosuchif9", "127.0.0.1", 29500, false, false); });
  EXPECT_NE(e.find("GLOO_SOCKET_IFNAME=nosuchif9"), std::string::npos) << e;
  EXPECT_NE(e.find(" lo"), std::string::npos) << "lists the interfaces: " << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(NetAddress, LoopbackMasterOrOneNodeFileStoreStaysOnLoopback) {
  for (const char* master : {"127.0.0.1", "localhost"}) {
    const GlooBinding b = choose_gloo_binding("", master, 29500, false, false);
    EXPECT_EQ(b.address, "127.0.0.1");
    EXPECT_TRUE(b.interface.empty());
    EXPECT_EQ(b.describe(), "gloo address 127.0.0.1 (loopback)");
  }
  EXPECT_EQ(choose_gloo_binding("", "", 0, true, true).address, "127.0.0.1");
}

TEST(NetAddress, FileStoreAcrossNodesTakesANonLoopbackInterface) {
  const GlooBinding b = choose_gloo_binding("", "", 0, true, false);
  EXPECT_EQ(b.address, first_non_loopback_address());
  if (is_loopback_host(b.address))
    EXPECT_EQ(b.reason, "loopback: no other interface is up");
  else
    EXPECT_EQ(b.reason.rfind("first non-loopback interface ", 0), 0u) << b.reason;
}

TEST(NetAddress, RemoteMasterTakesTheRoutingAddress) {
  const std::string own = first_non_loopback_address();
  if (is_loopback_host(own)) GTEST_SKIP() << "no non-loopback IPv4 interface is up";
  const GlooBinding b = choose_gloo_binding("", own, 29500, false, false);
  EXPECT_EQ(b.address, own);
  EXPECT_EQ(b.reason, "route to master");
  const std::string e =
      error_of([] { choose_gloo_binding("", "no-such-host.invalid", 29500, false, false); });
  EXPECT_NE(e.find("no-such-host.invalid"), std::string::npos) << e;
}

}  // namespace
}  // namespace ranzcr
