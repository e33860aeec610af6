// Two "hosts" as two network namespaces joined by a veth pair, each running a real `ranzcr train` node
// (Gloo, CPU, no GLOO_SOCKET_IFNAME). In both, the hostname resolves to 127.0.0.1, so a Gloo device made
// from the hostname (PyTorch's default) publishes 127.0.0.1 and the mesh fails with "Connection refused":
// each rank must bind the address that routes to the master (env://) or a non-loopback one (file://).
// Needs root and network namespaces; skipped otherwise.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>

#include "tests/build_paths.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

// Namespaces "ranzcr-t<pid>-a" and "-b" joined by a veth pair (rz0 in a, rz1 in b) with
// 10.213.<n>.1/24 and .2/24, loopback up in each; both deleted with the object, whatever happened.
class TwoHostNetwork {
 public:
  TwoHostNetwork() {
    const std::string tag = "ranzcr-t" + std::to_string(::getpid());
    ns_[0] = tag + "-a";
    ns_[1] = tag + "-b";
    const std::string subnet = "10.213." + std::to_string(::getpid() % 250 + 1) + ".";
    address_[0] = subnet + "1";
    address_[1] = subnet + "2";
    if (::geteuid() != 0) {
      error_ = "needs root to create network namespaces";
      return;
    }
    if (test::run_command("command -v ip").status != 0) {
      error_ = "needs the ip command (iproute2)";
      return;
    }
    for (int i = 0; i < 2; ++i) {
      test::run_command("ip netns del " + ns_[i]);  // a leftover of a crashed run with the same pid
      if (!run("ip netns add " + ns_[i])) return;
      created_[i] = true;
    }
    run("ip -n " + ns_[0] + " link add rz0 type veth peer name rz1 netns " + ns_[1]) &&
        run("ip -n " + ns_[0] + " addr add " + address_[0] + "/24 dev rz0") &&
        run("ip -n " + ns_[1] + " addr add " + address_[1] + "/24 dev rz1") &&
        run("ip -n " + ns_[0] + " link set lo up") && run("ip -n " + ns_[1] + " link set lo up") &&
        run("ip -n " + ns_[0] + " link set rz0 up") && run("ip -n " + ns_[1] + " link set rz1 up");
  }
  ~TwoHostNetwork() {
    for (int i = 0; i < 2; ++i)
      if (created_[i]) test::run_command("ip netns del " + ns_[i]);
  }
  TwoHostNetwork(const TwoHostNetwork&) = delete;
  TwoHostNetwork& operator=(const TwoHostNetwork&) = delete;

  /// Empty when the network is ready; else why not (the test then skips).
  const std::string& error() const { return error_; }
  const std::string& ns(int i) const { return ns_[i]; }
  const std::string& address(int i) const { return address_[i]; }

 private:
  bool run(const std::string& command) {
    const test::CommandResult r = test::run_command(command);
    if (r.status != 0)
      error_ = "cannot set up network namespaces: `" + command +
               "` failed: " + r.output.substr(0, r.output.find_last_not_of(" \n") + 1);
    return r.status == 0;
  }

  std::string ns_[2], address_[2], error_;
  bool created_[2] = {false, false};
};

class TwoHostsTest : public test::CliSuite<TwoHostsTest> {
 public:
  static test::CliSetup setup() {
    return test::CliSetup{64,
                          64,
                          0,
                          {{"data.image_size", "32"},
                           {"train.epochs", "1"},
                           {"train.batch_size", "8"},
                           {"distributed.nproc_per_node", "1"},
                           {"distributed.timeout_seconds", "60"},
                           {"distributed.grace_seconds", "5"}}};
  }

 protected:
  void SetUp() override {
    net_ = std::make_unique<TwoHostNetwork>();
    if (!net_->error().empty()) RANZCR_SKIP_WITHOUT_REFERENCE(net_->error());
  }
  void TearDown() override { net_.reset(); }

  // Runs node 0 in the first namespace and node 1 in the second (master: node 0's address) with run
  // folder `name`, `env` (per node) and `sets`; returns node 0's log after checking both exit 0.
  std::string train_two_nodes(const std::string& name, const std::vector<std::string> env[2],
                              const std::vector<std::string>& sets) {
    pid_t pids[2];
    for (int n = 0; n < 2; ++n) {
      std::vector<std::string> a = {"ip",
                                    "netns",
                                    "exec",
                                    net_->ns(n),
                                    "env",
                                    "-u",
                                    "GLOO_SOCKET_IFNAME",
                                    "NNODES=2",
                                    "NODE_RANK=" + std::to_string(n),
                                    "MASTER_ADDR=" + net_->address(0),
                                    "MASTER_PORT=29500"};
      a.insert(a.end(), env[n].begin(), env[n].end());
      a.insert(a.end(),
               {test::ranzcr_binary(), "train", "--config", cfg(), "--set", "output.dir=" + *dir_ / name});
      for (const auto& s : sets) a.insert(a.end(), {"--set", s});
      const std::vector<std::string> rest(a.begin() + 1, a.end());
      pids[n] = test::spawn(rest, {}, log_path(name, n), a[0]);
    }
    int status[2];
    for (int n = 0; n < 2; ++n) status[n] = test::wait_exit(pids[n], 180);
    for (int n = 0; n < 2; ++n)
      EXPECT_EQ(status[n], 0) << "node " << n << " log:\n"
                              << test::read_file(log_path(name, n)) << "\nnode " << 1 - n << " log:\n"
                              << test::read_file(log_path(name, 1 - n));
    const auto metrics = test::read_metrics(*dir_ / name);
    EXPECT_EQ(metrics.size(), 1u);
    if (!metrics.empty()) EXPECT_EQ(metrics.back()["epoch"].get<int64_t>(), 1);
    return test::read_file(log_path(name, 0));
  }
  static std::string log_path(const std::string& name, int node) {
    return *dir_ / (name + ".node" + std::to_string(node) + ".log");
  }

  std::unique_ptr<TwoHostNetwork> net_;
};

TEST_F(TwoHostsTest, EnvInitBindsGlooToTheAddressThatRoutesToTheMaster) {
  const std::vector<std::string> env[2];
  const std::string log = train_two_nodes("env", env, {});
  EXPECT_NE(log.find("world size 2, 1 ranks per node, backend gloo"), std::string::npos) << log;
  // Not 127.0.0.1 (what the hostname resolves to): the address the other namespace can reach.
  EXPECT_NE(log.find("gloo address " + net_->address(0) + " (route to master)"), std::string::npos) << log;
}

TEST_F(TwoHostsTest, FileInitBindsGlooToANonLoopbackAddress) {
  // Both namespaces see the same file system, so a file store works across the two "hosts".
  const std::vector<std::string> env[2];
  const std::string log =
      train_two_nodes("file", env, {"distributed.init_method=file://" + *dir_ / "file-store"});
  EXPECT_NE(log.find("gloo address " + net_->address(0) + " (first non-loopback interface rz0)"),
            std::string::npos)
      << log;
}

TEST_F(TwoHostsTest, GlooSocketIfnameStillWins) {
  const std::vector<std::string> env[2] = {{"GLOO_SOCKET_IFNAME=rz0"}, {"GLOO_SOCKET_IFNAME=rz1"}};
  const std::string log = train_two_nodes("ifname", env, {});
  EXPECT_NE(log.find("gloo address " + net_->address(0) + " (GLOO_SOCKET_IFNAME=rz0)"), std::string::npos)
      << log;
}

}  // namespace
}  // namespace ranzcr
