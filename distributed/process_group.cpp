#include "distributed/process_group.h"

#include "core/check.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <stdexcept>
#include <thread>

#include "core/text.h"
#include "distributed/net_address.h"

namespace ranzcr {

// Defined in nccl_backend.cpp (a stub that throws when LibTorch has no NCCL).
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int size, std::chrono::milliseconds timeout,
                                                    const torch::Device& device);

namespace {

using Clock = std::chrono::steady_clock;

std::string seconds(std::chrono::milliseconds t) {
  return std::to_string(t.count() / 1000) + " s";
}

class ProcessGroupCollectives final : public Collectives {
 public:
  ProcessGroupCollectives(c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<c10d::Backend> backend,
                          int rank, int world, std::string name, std::chrono::milliseconds timeout,
                          torch::Device device, std::string transport)
      : store_(std::move(store)),
        backend_(std::move(backend)),
        rank_(rank),
        world_(world),
        name_(std::move(name)),
        timeout_(timeout),
        device_(device),
        transport_(std::move(transport)) {}
  ~ProcessGroupCollectives() override = default;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return name_; }
  std::string transport() const override { return transport_; }

  void all_reduce_sum(torch::Tensor& tensor) override { all_reduce_sum_async(tensor)->wait(); }

  std::unique_ptr<Pending> all_reduce_sum_async(torch::Tensor& tensor) override {
    struct Work final : Pending {
      c10::intrusive_ptr<c10d::Work> work;
      torch::Tensor user, on_device;
      void wait() override {
        work->wait();
        if (!user.is_same(on_device)) user.copy_(on_device);
      }
    };
    auto w = std::make_unique<Work>();
    w->user = tensor;
    w->on_device = on_device(tensor);
    std::vector<torch::Tensor> v{w->on_device};
    w->work = backend_->allreduce(v);
    return w;
  }

  torch::Tensor all_gather_cat(const torch::Tensor& tensor) override {
    const torch::Tensor local = on_device(tensor.contiguous());
    // Sizes along dim 0 may differ: gather them (read on the host once), pad to the largest, gather, trim.
    const torch::Tensor sizes = all_gather_stack(torch::tensor({local.size(0)}, torch::kLong)).cpu();
    std::vector<int64_t> shape = local.sizes().vec();
    shape[0] = sizes.max().item<int64_t>();
    torch::Tensor padded = torch::zeros(shape, local.options());
    if (local.size(0) > 0) padded.narrow(0, 0, local.size(0)).copy_(local);
    const torch::Tensor all = all_gather_stack(padded);  // (ranks, largest, ...)
    std::vector<torch::Tensor> parts;
    for (int r = 0; r < world_; ++r) parts.push_back(all[r].narrow(0, 0, sizes[r][0].item<int64_t>()));
    return torch::cat(parts, 0).to(tensor.device());
  }

  torch::Tensor all_gather_stack(const torch::Tensor& tensor) override {
    std::vector<torch::Tensor> in{on_device(tensor.contiguous())};
    std::vector<std::vector<torch::Tensor>> out(1);
    for (int r = 0; r < world_; ++r) out[0].push_back(torch::empty_like(in[0]));
    backend_->allgather(out, in)->wait();
    return torch::stack(out[0]).to(tensor.device());
  }

  void broadcast(torch::Tensor& tensor, int root) override {
    torch::Tensor t = on_device(tensor);
    std::vector<torch::Tensor> v{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    backend_->broadcast(v, o)->wait();
    if (!t.is_same(tensor)) tensor.copy_(t);
  }

  void barrier() override { backend_->barrier()->wait(); }

  void shutdown() override {
    if (shut_down_) return;
    shut_down_ = true;
    // Rank 0 hosts the store: it leaves only once every rank has said goodbye through it.
    try {
      store_->add("ranzcr/exit", 1);
      if (rank_ == 0) {
        const auto deadline = Clock::now() + timeout_;
        while (store_->add("ranzcr/exit", 0) < world_ && Clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    } catch (const std::exception&) {
      // A peer or the store is gone: nothing left to wait for.
    }
    backend_->shutdown();
  }

 private:
  torch::Tensor on_device(const torch::Tensor& t) const { return t.device() == device_ ? t : t.to(device_); }

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  int rank_, world_;
  std::string name_;
  std::chrono::milliseconds timeout_;
  torch::Device device_;
  std::string transport_;
  bool shut_down_ = false;
};

// Where the ranks meet: a file (file://) or the master's host and port (env://, tcp://).
struct Rendezvous {
  std::string file;  // set for file://
  std::string host;
  int port = 0;
};

// Where the store is: the init method's file or tcp:// address, else the launcher's MASTER_ADDR:MASTER_PORT.
Rendezvous rendezvous_of(const WorldInfo& w, const InitMethod& init) {
  Rendezvous r;
  r.file = init.kind == InitMethod::Kind::kFile ? init.path : "";
  r.host = init.kind == InitMethod::Kind::kTcp ? init.host : w.master_addr;
  r.port = init.kind == InitMethod::Kind::kTcp ? init.port : w.master_port;
  return r;
}

c10::intrusive_ptr<c10d::Store> make_store(const WorldInfo& w, const ProcessGroupOptions& o,
                                           const Rendezvous& r, std::string* where) {
  if (!r.file.empty()) {
    *where = "file store " + r.file;
    try {
      return c10::make_intrusive<c10d::FileStore>(r.file, w.world_size);
    } catch (const std::exception& e) {
      RANZCR_FAIL("cannot open the rendezvous file ", r.file, ": ", first_line(e.what()));
    }
  }
  const std::string& host = r.host;
  const int port = r.port;
  *where = host + ":" + std::to_string(port);
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(port);
  // A launcher's store (torchrun's agent, ours) is the env:// one; a tcp:// address is rank 0's to host.
  so.isServer = w.rank == 0 && (!w.external_store || o.init_method.kind == InitMethod::Kind::kTcp);
  so.numWorkers = w.world_size;
  so.waitWorkers = false;  // we count arrivals ourselves, to say how many came
  so.timeout = o.timeout;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(host, so);
  } catch (const std::exception& e) {
    if (so.isServer)
      RANZCR_FAIL("cannot host the rendezvous store on port ", port,
                  " (port in use? set MASTER_PORT): ", first_line(e.what()));
    RANZCR_FAIL("cannot reach the rendezvous store at ", *where, " within ", seconds(o.timeout),
                " (is rank 0 running? check MASTER_ADDR/MASTER_PORT): ", first_line(e.what()));
  }
  if (!w.store_prefix.empty()) store = c10::make_intrusive<c10d::PrefixStore>(w.store_prefix, store);
  return store;
}

}  // namespace

const char* backend_name(Backend backend) {
  return backend == Backend::kNccl ? "nccl" : "gloo";
}

std::shared_ptr<Collectives> init_process_group(const WorldInfo& w, const ProcessGroupOptions& o) {
  const Rendezvous rendezvous = rendezvous_of(w, o.init_method);
  const std::string name = backend_name(o.backend);
  // Chosen before the rendezvous, so that an unresolvable master fails at once on every rank.
  GlooBinding gloo;
  if (o.backend == Backend::kGloo)
    gloo = choose_gloo_binding(w.gloo_interface, rendezvous.host, rendezvous.port, !rendezvous.file.empty(),
                               w.local_world_size >= w.world_size);
  std::string where;
  c10::intrusive_ptr<c10d::Store> store = make_store(w, o, rendezvous, &where);
  // Count arrivals, so a peer that never comes is named, not a silent hang.
  const auto deadline = Clock::now() + o.timeout;
  int64_t joined = 0;
  try {
    store->add("ranzcr/joined", 1);
    while ((joined = store->add("ranzcr/joined", 0)) < w.world_size) {
      RANZCR_CHECK(Clock::now() <= deadline, "rendezvous timed out after ", seconds(o.timeout), ": ", joined,
                   " of ", w.world_size, " ranks joined (store ", where, ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const c10::Error& e) {
    RANZCR_FAIL("rendezvous store ", where, " failed: ", first_line(e.what_without_backtrace()));
  }
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("ranzcr/" + name, store);
  c10::intrusive_ptr<c10d::Backend> backend;
  try {
    if (o.backend == Backend::kNccl) {
      backend = make_nccl_backend(prefixed, w.rank, w.world_size, o.timeout, o.device);
    } else {
      auto opts = c10d::ProcessGroupGloo::Options::create(o.timeout);
      opts->devices.push_back(gloo.interface.empty()
                                  ? c10d::ProcessGroupGloo::createDeviceForHostname(gloo.address)
                                  : c10d::ProcessGroupGloo::createDeviceForInterface(gloo.interface));
      backend = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, w.rank, w.world_size, opts);
    }
  } catch (const c10::Error& e) {
    // Name the address this rank offered: a wrong one is the usual cause of a failed Gloo mesh.
    const std::string mine = gloo.address.empty()
                                 ? ""
                                 : " (this rank's " + gloo.describe() + "; GLOO_SOCKET_IFNAME picks another)";
    RANZCR_FAIL("cannot create the ", name, " process group", mine, ": ",
                first_line(e.what_without_backtrace()));
  }
  return std::make_shared<ProcessGroupCollectives>(
      store, backend, w.rank, w.world_size, name, o.timeout,
      o.backend == Backend::kNccl ? o.device : torch::Device(torch::kCPU),
      gloo.address.empty() ? "" : gloo.describe());
}

}  // namespace ranzcr
