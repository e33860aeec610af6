// Multi-process tests: the test binary re-executes itself as Gloo workers on localhost through the
// self-launcher. Worker bodies are DISABLED_ tests, run only inside those workers.
#include <signal.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <thread>

#include "distributed/ddp.h"
#include "distributed/launcher.h"
#include "distributed/process_group.h"
#include "engine/infer/inference.h"
#include "engine/train/aux_seg.h"
#include "engine/train/fused_optimizer.h"
#include "engine/train/train_step.h"
#include "models/registry.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

std::string worker_dir() {
  return std::getenv("RANZCR_TEST_DIR");
}

int run_test_workers(const std::string& worker, int nproc, const std::string& dir, EnvMap env = {}) {
  LaunchOptions lo;
  lo.args = {"--gtest_also_run_disabled_tests", "--gtest_filter=DistributedWorker.DISABLED_" + worker};
  lo.nproc = nproc;
  lo.grace_seconds = 3;
  env["RANZCR_TEST_DIR"] = dir;
  lo.extra_env = env;
  return launch_workers(lo);
}

// Joins the workers' process group: Gloo on the CPU, or NCCL with this rank's GPU (cuda:local_rank).
std::shared_ptr<Collectives> join(Backend backend = Backend::kGloo) {
  const auto world = worker_from_env(current_environment(), false);
  EXPECT_TRUE(world.has_value()) << "not started as a worker";
  ProcessGroupOptions o;
  o.backend = backend;
  o.timeout = std::chrono::seconds(30);
  if (backend == Backend::kNccl)
    o.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(world->local_rank));
  return init_process_group(*world, o);
}

// Two CUDA GPUs and NCCL, or why not (the reason a GPU test is skipped with).
std::string why_not_two_gpus() {
  if (!nccl_available()) return "this LibTorch has no NCCL";
  const int64_t gpus = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  return gpus >= 2 ? "" : "needs 2 CUDA GPUs, this host shows " + std::to_string(gpus);
}

// The GPU tests' convolutions and matmuls without TF32, so that their sums compare closely.
void no_tf32() {
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
}

// Convolutions and a linear layer, no BatchNorm: N ranks x batch B must equal 1 rank x batch N*B.
struct SmallNet : torch::nn::Module {
  SmallNet() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 8, 3)));
    fc = register_module("fc", torch::nn::Linear(8 * 4 * 4, 11));
    unused = register_module("unused", torch::nn::Linear(3, 3));  // never in forward: it keeps no gradient
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv1->forward(x));
    x = torch::relu(conv2->forward(x));
    return fc->forward(x.flatten(1));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc{nullptr}, unused{nullptr};
};

constexpr int kSteps = 5, kBatch = 8, kAccum = 2;

// kSteps SGD steps; each rank takes its kBatch-slice of the global batch, in kAccum micro-batches.
void run_steps(SmallNet& net, int rank, int world, DistributedDataParallel* ddp,
               const torch::Device& device = torch::kCPU) {
  torch::manual_seed(123);
  const torch::Tensor x = torch::rand({kSteps, 2 * kBatch, 1, 8, 8}).to(device);
  const torch::Tensor y = (torch::rand({kSteps, 2 * kBatch, 11}) > 0.7).to(torch::kFloat).to(device);
  torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const int64_t per_rank = 2 * kBatch / world, micro = per_rank / kAccum;
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    for (int m = 0; m < kAccum; ++m) {
      if (ddp) ddp->set_require_sync(m == kAccum - 1);
      const int64_t start = rank * per_rank + m * micro;
      const torch::Tensor xb = x[s].narrow(0, start, micro), yb = y[s].narrow(0, start, micro);
      const torch::Tensor loss = torch::binary_cross_entropy_with_logits(net.forward(xb), yb) / kAccum;
      if (ddp && m == kAccum - 1) ddp->prepare_backward(loss);
      loss.backward();
    }
    if (ddp) ddp->finish_gradient_sync();
    opt.step();
  }
}

TEST(DistributedWorker, DISABLED_Equivalence) {
  auto coll = join();
  torch::manual_seed(coll->rank() == 0 ? 0 : 99);  // rank 1 starts elsewhere: the broadcast must fix it
  SmallNet net;
  DdpOptions o;
  o.bucket_bytes = 1024;  // several buckets
  DistributedDataParallel ddp(net, *coll, o);
  run_steps(net, coll->rank(), coll->world_size(), &ddp);
  const std::string d = worker_dir();
  torch::save(net.parameters(), d + "/params_" + std::to_string(coll->rank()) + ".pt");
  const int64_t unused_has_grad = net.unused->weight.grad().defined() || net.unused->bias.grad().defined();
  torch::save(std::vector<torch::Tensor>{torch::tensor(
                  {ddp.num_buckets(), ddp.launched_during_backward(), unused_has_grad})},
              d + "/ddp_stats_" + std::to_string(coll->rank()) + ".pt");
  coll->shutdown();
}

// The same steps over NCCL, each rank on its own GPU (no TF32, so that sums compare closely):
// buckets all-reduced from the autograd thread, the NCCL barrier and shutdown.
TEST(DistributedWorker, DISABLED_EquivalenceNccl) {
  no_tf32();
  auto coll = join(Backend::kNccl);
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(coll->rank()));
  torch::manual_seed(coll->rank() == 0 ? 0 : 99);
  SmallNet net;
  net.to(device);
  DdpOptions o;
  o.bucket_bytes = 1024;
  DistributedDataParallel ddp(net, *coll, o);
  run_steps(net, coll->rank(), coll->world_size(), &ddp, device);
  coll->barrier();
  std::vector<torch::Tensor> params;
  for (const auto& p : net.parameters()) params.push_back(p.detach().cpu());
  torch::save(params, worker_dir() + "/params_" + std::to_string(coll->rank()) + ".pt");
  coll->shutdown();
}

TEST(DistributedWorker, DISABLED_Evaluation) {
  auto coll = join();
  const std::string d = worker_dir();
  const DatasetIndex index = load_index(d + "/ds/train.csv", d + "/ds/train", IndexOptions{});
  torch::manual_seed(5);
  auto model = create_model("tiny_cnn", ModelSpec{});
  InferenceOptions io;
  io.image_size = 32;
  io.batch_size = 4;
  const std::vector<int64_t> rows = {12, 3, 7, 0, 19, 5, 8};  // 7 rows on 2 ranks
  const InferenceResult r = run_inference(*model, index, rows, io, *coll);
  torch::save(std::vector<torch::Tensor>{r.logits, r.labels, r.rows},
              d + "/eval_" + std::to_string(coll->rank()) + ".pt");
  coll->shutdown();
}

TEST(DistributedWorker, DISABLED_FailFast) {
  auto coll = join();
  test::write_file(worker_dir() + "/pid_" + std::to_string(coll->rank()), std::to_string(getpid()));
  for (int i = 0;; ++i) {  // "training": a collective every few milliseconds
    torch::Tensor t = torch::ones({1000});
    coll->all_reduce_sum(t);
    if (coll->rank() == 1 && i == 20) std::exit(3);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// data.skip_bad_images with every image of a batch unreadable on rank 1: its batch is empty. It must
// still take part in the step's collectives (the BatchNorm buffer broadcast, the gradient buckets), or
// the ranks' collectives stop pairing up. Afterwards both ranks still agree and still communicate.
TEST(DistributedWorker, DISABLED_EmptyBatchOnOneRank) {
  const auto world = worker_from_env(current_environment(), false);
  ProcessGroupOptions po;
  po.timeout = std::chrono::seconds(10);  // a mismatch fails within seconds instead of hanging
  auto coll = init_process_group(*world, po);
  torch::manual_seed(1);
  auto model = create_model("tiny_cnn", ModelSpec{});  // has BatchNorm: buffers are broadcast
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  DistributedDataParallel ddp(*model, *coll, DdpOptions{});
  TrainStep step(*model, opt, ddp, torch::kCPU, StepOptions{});
  model->train();
  for (int s = 0; s < 3; ++s) {
    const int64_t n = coll->rank() == 1 && s == 1 ? 0 : 4;
    step.forward_backward(torch::rand({n, 1, 32, 32}), (torch::rand({n, 11}) > 0.5).to(torch::kFloat), true);
    step.optimizer_step(0.1);
  }
  torch::Tensor check = torch::tensor({coll->rank() + 1.0});
  coll->all_reduce_sum(check);
  std::vector<torch::Tensor> state = model->parameters();  // (buffers differ: each rank's last batch)
  state.push_back(check);
  torch::save(state, worker_dir() + "/state_" + std::to_string(coll->rank()) + ".pt");
  coll->shutdown();
}

// The auxiliary segmentation loss (model.aux_seg_weight) over ranks: kAuxSteps SGD steps of tiny_cnn and
// its head (eval mode, so BatchNorm does not see each rank's half apart), each rank on its slice of the
// global batch, whose annotated images are spread unevenly (3 on rank 0, 1 on rank 1).
constexpr int kAuxSteps = 3, kAuxBatch = 8;

std::vector<torch::Tensor> run_aux_steps(Collectives& coll) {
  torch::manual_seed(7);
  auto model = create_model("tiny_cnn", ModelSpec{});
  AuxSegHead head(model->feature_channels());
  torch::manual_seed(321);
  const torch::Tensor x = torch::rand({kAuxSteps, kAuxBatch, 1, 32, 32});
  const torch::Tensor y = (torch::rand({kAuxSteps, kAuxBatch, 11}) > 0.7).to(torch::kFloat);
  const torch::Tensor masks = (torch::rand({kAuxSteps, kAuxBatch, 1, 32, 32}) > 0.8).to(torch::kUInt8);
  const torch::Tensor has = torch::tensor({1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1.0f, 0.0f});
  auto synced = std::make_shared<torch::nn::Module>();
  synced->register_module("model", model);
  synced->register_module("aux_head", head.ptr());
  torch::optim::SGD opt(synced->parameters(), torch::optim::SGDOptions(0.1));
  DistributedDataParallel ddp(*synced, coll, DdpOptions{});
  AuxSegLoss aux(head, 0.7, &coll);
  TrainStep step(*model, opt, ddp, torch::kCPU, StepOptions{}, &aux);
  synced->eval();
  const int64_t per_rank = kAuxBatch / coll.world_size(), start = coll.rank() * per_rank;
  for (int s = 0; s < kAuxSteps; ++s) {
    DeviceBatch b;
    b.masks = masks[s].narrow(0, start, per_rank), b.has_annotation = has.narrow(0, start, per_rank);
    aux.begin(b);
    step.forward_backward(x[s].narrow(0, start, per_rank), y[s].narrow(0, start, per_rank), true);
    step.optimizer_step(0.1);
  }
  return synced->parameters();
}

TEST(DistributedWorker, DISABLED_AuxSeg) {
  auto coll = join();
  torch::save(run_aux_steps(*coll), worker_dir() + "/aux_" + std::to_string(coll->rank()) + ".pt");
  coll->shutdown();
}

// distributed.bn_sync through the trainer's own step (TrainStep: its loss, optim.name sgd (Nesterov momentum)
// with clipping, two micro-batches per step, DDP) on resnet18, whose BatchNorms see 2 images per rank and
// micro-batch. Micro-batch m of a step is the m-th slice of each rank's share, so that the ranks'
// micro-batches m together are the reference's (one process, both shares). Returns the parameters, the
// buffers and the momentum buffers. (AdamW divides by the root of each gradient's square: float32's rounding
// in gradients near zero then moves single weights by a sizeable part of the learning rate, 2e-4 relative
// after one step here, so the exact claim is shown with SGD.)
constexpr int kBnSteps = 3, kBnBatch = 8, kBnAccum = 2;

Config bn_sync_config(BnSync bn_sync) {
  Config c;
  c.model.name = "resnet18";
  c.optim.name = OptimizerName::kSgd;
  c.optim.grad_clip = 1.0;
  c.train.accum_steps = kBnAccum;
  c.train.precision = PrecisionSetting::kFp32;
  c.distributed.bn_sync = bn_sync;
  return c;
}

std::vector<torch::Tensor> run_bn_sync_steps(const Config& config, Collectives& coll,
                                             torch::Device device = torch::kCPU) {
  torch::manual_seed(5);
  auto model = create_model(config.model.name, ModelSpec{});
  model->to(device);
  auto optimizer = make_optimizer(config.optim, *model);
  DistributedDataParallel ddp(*model, coll, ddp_options(config));
  sync_batch_norms(config, *model, coll);
  TrainStep step(*model, *optimizer, ddp, device, step_options(config, device));
  model->train();
  torch::manual_seed(17);
  const torch::Tensor x = torch::rand({kBnSteps, kBnBatch, 1, 64, 64}).to(device);
  const torch::Tensor y = (torch::rand({kBnSteps, kBnBatch, 11}) > 0.7).to(device, torch::kFloat);
  const int64_t share = kBnBatch / 2, micro = share / config.train.accum_steps;
  const int accum = config.train.accum_steps;
  for (int s = 0; s < kBnSteps; ++s) {
    for (int m = 0; m < accum; ++m) {
      std::vector<torch::Tensor> xs, ys;
      for (int r = 0; r < 2; ++r) {
        if (coll.world_size() == 2 && r != coll.rank()) continue;
        xs.push_back(x[s].narrow(0, r * share + m * micro, micro));
        ys.push_back(y[s].narrow(0, r * share + m * micro, micro));
      }
      step.forward_backward(torch::cat(xs), torch::cat(ys), m == accum - 1);
    }
    step.optimizer_step(1e-3);
  }
  std::vector<torch::Tensor> state;
  for (const auto& p : model->parameters()) state.push_back(p.detach().cpu());
  for (const auto& b : model->buffers()) state.push_back(b.cpu().to(torch::kDouble));
  for (const auto& p : model->parameters()) {  // the optimizer's state: SGD's momentum buffers
    const auto it = optimizer->state().find(p.unsafeGetTensorImpl());
    const auto* sgd = it == optimizer->state().end()
                          ? nullptr
                          : dynamic_cast<const torch::optim::SGDParamState*>(it->second.get());
    EXPECT_TRUE(sgd) << "no SGD state for a parameter";
    if (sgd) state.push_back(sgd->momentum_buffer().cpu());
  }
  return state;
}

TEST(DistributedWorker, DISABLED_BnSync) {
  auto coll = join();
  const BnSync mode =
      std::string(std::getenv("RANZCR_TEST_BN_SYNC")) == "sync" ? BnSync::kSync : BnSync::kBroadcast;
  torch::save(run_bn_sync_steps(bn_sync_config(mode), *coll),
              worker_dir() + "/bn_" + std::to_string(coll->rank()) + ".pt");
  coll->shutdown();
}

// The same over NCCL, each rank on its own GPU: ATen's SyncBatchNorm kernels.
TEST(DistributedWorker, DISABLED_BnSyncNccl) {
  no_tf32();
  auto coll = join(Backend::kNccl);
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(coll->rank()));
  const BnSync mode =
      std::string(std::getenv("RANZCR_TEST_BN_SYNC")) == "sync" ? BnSync::kSync : BnSync::kBroadcast;
  const auto state = run_bn_sync_steps(bn_sync_config(mode), *coll, device);
  coll->barrier();
  torch::save(state, worker_dir() + "/bn_" + std::to_string(coll->rank()) + ".pt");
  coll->shutdown();
}

std::vector<torch::Tensor> load_tensors(const std::string& path) {
  std::vector<torch::Tensor> v;
  torch::load(v, path);
  return v;
}

TEST(Distributed, TwoRanksEqualOneRankWithTheGlobalBatch) {
  test::TempDir dir;
  ASSERT_EQ(run_test_workers("Equivalence", 2, dir.str()), 0);
  const auto p0 = load_tensors(dir / "params_0.pt"), p1 = load_tensors(dir / "params_1.pt");
  torch::manual_seed(0);
  SmallNet reference;
  run_steps(reference, 0, 1, nullptr);
  const auto pr = reference.parameters();
  ASSERT_EQ(p0.size(), pr.size());
  for (size_t i = 0; i < pr.size(); ++i) {
    EXPECT_TRUE(torch::equal(p0[i], p1[i])) << "ranks differ in parameter " << i;
    EXPECT_LE((p0[i] - pr[i]).abs().max().item<double>(), 1e-5) << "parameter " << i;
  }
}

// Two ranks over NCCL on two GPUs equal one process with the global batch on one GPU.
TEST(Distributed, NcclTwoGpusEqualOneGpuWithTheGlobalBatch) {
  if (const std::string why = why_not_two_gpus(); !why.empty()) GTEST_SKIP() << why;
  test::TempDir dir;
  ASSERT_EQ(run_test_workers("EquivalenceNccl", 2, dir.str()), 0);
  const auto p0 = load_tensors(dir / "params_0.pt"), p1 = load_tensors(dir / "params_1.pt");
  no_tf32();
  torch::manual_seed(0);
  SmallNet reference;
  reference.to(torch::Device(torch::kCUDA, 0));
  run_steps(reference, 0, 1, nullptr, torch::Device(torch::kCUDA, 0));
  const auto pr = reference.parameters();
  ASSERT_EQ(p0.size(), pr.size());
  for (size_t i = 0; i < pr.size(); ++i) {
    EXPECT_TRUE(torch::equal(p0[i], p1[i])) << "ranks differ in parameter " << i;
    EXPECT_LE((p0[i] - pr[i].detach().cpu()).abs().max().item<double>(), 1e-5) << "parameter " << i;
  }
}

TEST(Distributed, AllReduceStartsBeforeBackwardReturns) {
  test::TempDir dir;
  ASSERT_EQ(run_test_workers("Equivalence", 2, dir.str()), 0);
  for (int r = 0; r < 2; ++r) {
    const auto stats = load_tensors(dir / ("ddp_stats_" + std::to_string(r) + ".pt"))[0];
    EXPECT_GE(stats[0].item<int64_t>(), 3) << "buckets";
    EXPECT_GE(stats[1].item<int64_t>(), 1) << "buckets launched from inside backward";
    EXPECT_EQ(stats[2].item<int64_t>(), 0) << "a parameter no rank used has a gradient";
  }
}

TEST(Distributed, ShardedEvaluationEqualsSingleProcess) {
  test::TempDir dir;
  test::make_dataset(dir / "ds", 20, 64, 0);
  ASSERT_EQ(run_test_workers("Evaluation", 2, dir.str()), 0);
  const DatasetIndex index = load_index(dir / "ds/train.csv", dir / "ds/train", IndexOptions{});
  torch::manual_seed(5);
  auto model = create_model("tiny_cnn", ModelSpec{});
  InferenceOptions io;
  io.image_size = 32;
  io.batch_size = 4;
  auto local = make_local_collectives();
  const InferenceResult single = run_inference(*model, index, {12, 3, 7, 0, 19, 5, 8}, io, *local);
  for (int r = 0; r < 2; ++r) {
    const auto got = load_tensors(dir / ("eval_" + std::to_string(r) + ".pt"));
    EXPECT_TRUE(torch::equal(got[2], single.rows)) << "rank " << r;
    EXPECT_TRUE(torch::equal(got[1], single.labels)) << "rank " << r;
    EXPECT_LE((got[0] - single.logits).abs().max().item<double>(), 1e-6) << "rank " << r;
  }
}

TEST(Distributed, AnEmptyBatchOnOneRankKeepsTheCollectivesPaired) {
  test::TempDir dir;
  ASSERT_EQ(run_test_workers("EmptyBatchOnOneRank", 2, dir.str()), 0);
  const auto s0 = load_tensors(dir / "state_0.pt"), s1 = load_tensors(dir / "state_1.pt");
  ASSERT_EQ(s0.size(), s1.size());
  EXPECT_EQ(s0.back().item<double>(), 3.0);  // the all-reduce after the steps pairs up
  for (size_t i = 0; i + 1 < s0.size(); ++i)
    EXPECT_TRUE(torch::equal(s0[i], s1[i])) << "ranks differ in parameter " << i;
}

TEST(Distributed, LauncherFailsFastAndLeavesNoProcess) {
  test::TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  const int status = run_test_workers("FailFast", 2, dir.str());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(status, 3);
  EXPECT_LT(seconds, 60.0);  // fast: not the 300 s collective timeout; wide, for a loaded machine
  for (int r = 0; r < 2; ++r) {
    const pid_t pid = std::stoi(test::read_file(dir / ("pid_" + std::to_string(r))));
    EXPECT_EQ(::kill(pid, 0), -1) << "rank " << r << " (pid " << pid << ") still exists";
  }
}

TEST(Distributed, AuxSegLossTwoRanksEqualOneRankWithTheGlobalBatch) {
  test::TempDir dir;
  ASSERT_EQ(run_test_workers("AuxSeg", 2, dir.str()), 0);
  const auto p0 = load_tensors(dir / "aux_0.pt"), p1 = load_tensors(dir / "aux_1.pt");
  auto local = make_local_collectives();
  const auto pr = run_aux_steps(*local);
  ASSERT_EQ(p0.size(), pr.size());
  for (size_t i = 0; i < pr.size(); ++i) {
    EXPECT_TRUE(torch::equal(p0[i], p1[i])) << "ranks differ in parameter " << i;
    EXPECT_LE((p0[i] - pr[i]).abs().max().item<double>(), 1e-5) << "parameter " << i;
  }
}

// Runs `worker` (BnSync or BnSyncNccl) as 2 ranks with bn_sync: sync and with broadcast; the largest relative
// difference of each from `reference` (one process with the global batch) over the parameters, buffers and
// momentum buffers. The ranks' parameters must be equal.
std::map<std::string, double> bn_sync_gaps(const std::string& worker,
                                           const std::vector<torch::Tensor>& reference) {
  std::map<std::string, double> gaps;
  const size_t params = create_model("resnet18", ModelSpec{})->parameters().size();
  for (const std::string mode : {"sync", "broadcast"}) {
    test::TempDir dir;
    EXPECT_EQ(run_test_workers(worker, 2, dir.str(), {{"RANZCR_TEST_BN_SYNC", mode}}), 0) << mode;
    const auto s0 = load_tensors(dir / "bn_0.pt"), s1 = load_tensors(dir / "bn_1.pt");
    EXPECT_EQ(s0.size(), reference.size()) << mode;
    if (s0.size() != reference.size()) return {};
    double gap = 0;
    for (size_t i = 0; i < reference.size(); ++i) {
      if (i < params) EXPECT_TRUE(torch::equal(s0[i], s1[i])) << mode << ": ranks differ in parameter " << i;
      const double scale = 1.0 + reference[i].abs().max().item<double>();
      gap = std::max(gap, (s0[i] - reference[i]).abs().max().item<double>() / scale);
    }
    gaps[mode] = gap;
  }
  std::cout << worker << ": bn_sync: sync differs from one process by " << gaps["sync"] << ", broadcast by "
            << gaps["broadcast"] << " (relative, largest over parameters, buffers and momentum buffers)\n";
  return gaps;
}

// 2 ranks x batch B with distributed.bn_sync: sync equal 1 rank x batch 2B through the trainer's step: the
// parameters, the BatchNorm running statistics and the momentum buffers, all within float32's rounding. With
// broadcast (each rank normalises with its own half) they differ: the test sees a synchronisation that is
// not.
TEST(Distributed, SyncBatchNormTwoRanksEqualOneRankWithTheGlobalBatchThroughTheTrainStep) {
  auto local = make_local_collectives();
  const auto reference = run_bn_sync_steps(bn_sync_config(BnSync::kSync), *local);
  auto gaps = bn_sync_gaps("BnSync", reference);
  ASSERT_EQ(gaps.size(), 2u);
  EXPECT_LE(gaps["sync"], 1e-5) << "largest difference from one process with the global batch";
  EXPECT_GT(gaps["broadcast"], 1e-2) << "per-rank BatchNorm statistics should differ from the global batch's";
}

// The NCCL twin: two GPUs (ATen's SyncBatchNorm kernels) against one GPU with the global batch (cuDNN's
// BatchNorm). GPU reductions add in another order than the CPU's: a looser bound, still far below
// broadcast's.
TEST(Distributed, NcclSyncBatchNormTwoGpusEqualOneGpuWithTheGlobalBatch) {
  if (const std::string why = why_not_two_gpus(); !why.empty()) GTEST_SKIP() << why;
  no_tf32();
  auto local = make_local_collectives();
  const auto reference =
      run_bn_sync_steps(bn_sync_config(BnSync::kSync), *local, torch::Device(torch::kCUDA, 0));
  auto gaps = bn_sync_gaps("BnSyncNccl", reference);
  ASSERT_EQ(gaps.size(), 2u);
  EXPECT_LE(gaps["sync"], 1e-4) << "largest difference from one GPU with the global batch";
  EXPECT_GT(gaps["broadcast"], 1e-2) << "per-rank BatchNorm statistics should differ from the global batch's";
}

}  // namespace
}  // namespace ranzcr
