// A process group of one rank through a FileStore: init, all-reduce (blocking and async), broadcast,
// all-gather, barrier, shutdown, and a DDP step that really communicates (DdpOptions::sync_alone). With
// NCCL on a GPU (skipped without CUDA or NCCL; NCCL refuses two ranks on one GPU, so one rank is what a
// single-GPU host can test); the same body with Gloo on the CPU runs everywhere, so the test itself is
// known to work where no GPU is.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "distributed/ddp.h"
#include "distributed/process_group.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

std::shared_ptr<Collectives> world_of_one(Backend backend, const torch::Device& device,
                                          const std::string& store_path) {
  WorldInfo world;  // rank 0 of 1
  world.launcher = Launcher::kEnv;
  ProcessGroupOptions o;
  o.backend = backend;
  o.init_method = parse_init_method("file://" + store_path);
  o.timeout = std::chrono::seconds(60);
  o.device = device;
  return init_process_group(world, o);
}

void collectives_of_one(Backend backend, const torch::Device& device) {
  test::TempDir dir;
  auto c = world_of_one(backend, device, dir / "store");
  EXPECT_EQ(c->backend(), backend_name(backend));
  EXPECT_EQ(c->world_size(), 1);
  EXPECT_EQ(c->rank(), 0);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  torch::Tensor t = torch::arange(6, f32).reshape({2, 3});
  const torch::Tensor expected = t.clone();
  c->all_reduce_sum(t);
  EXPECT_TRUE(torch::equal(t.cpu(), expected.cpu()));
  auto pending = c->all_reduce_sum_async(t);
  pending->wait();
  EXPECT_TRUE(torch::equal(t.cpu(), expected.cpu()));
  torch::Tensor ints = torch::tensor({7, 8, 9}, torch::TensorOptions().dtype(torch::kInt64).device(device));
  c->broadcast(ints, 0);
  EXPECT_EQ(ints.cpu()[2].item<int64_t>(), 9);
  const torch::Tensor gathered = c->all_gather_cat(t);
  EXPECT_EQ(gathered.sizes(), t.sizes());
  EXPECT_TRUE(torch::equal(gathered.cpu(), expected.cpu()));
  c->barrier();
  c->shutdown();
}

// Gradients after a DDP step through the process group equal those of the plain backward (a world of one
// averages over one rank), and the buckets were launched from inside backward.
void ddp_step_of_one(Backend backend, const torch::Device& device) {
  test::TempDir dir;
  auto c = world_of_one(backend, device, dir / "store");
  torch::manual_seed(5);
  torch::nn::Sequential net(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3)), torch::nn::ReLU(),
                            torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 8, 3)), torch::nn::Flatten(),
                            torch::nn::Linear(8 * 4 * 4, 11));
  net->to(device);
  for (auto& p : net->parameters())  // NHWC conv weights, as on a GPU run
    if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
  const torch::Tensor x = torch::rand({4, 3, 8, 8}).to(device).contiguous(torch::MemoryFormat::ChannelsLast);
  const torch::Tensor y = (torch::rand({4, 11}) > 0.7).to(torch::kFloat32).to(device);
  torch::nn::functional::binary_cross_entropy_with_logits(net->forward(x), y).backward();
  std::vector<torch::Tensor> plain;
  for (auto& p : net->parameters()) {
    plain.push_back(p.grad().clone());
    p.mutable_grad() = torch::Tensor();
  }
  DdpOptions o;
  o.bucket_bytes = 1024;  // several buckets
  o.sync_alone = true;
  DistributedDataParallel ddp(*net, *c, o);
  ddp.before_forward();
  const torch::Tensor loss = torch::nn::functional::binary_cross_entropy_with_logits(net->forward(x), y);
  ddp.prepare_backward(loss);
  loss.backward();
  ddp.finish_gradient_sync();
  EXPECT_GE(ddp.num_buckets(), 2);
  EXPECT_GE(ddp.launched_during_backward(), 1);
  const auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_LE((params[i].grad() - plain[i]).abs().max().item<double>(), 1e-6) << "parameter " << i;
    EXPECT_EQ(params[i].grad().strides(), params[i].strides()) << "parameter " << i << " layout";
  }
  c->shutdown();
}

// A parameter the loss does not use keeps no gradient (PyTorch's DDP leaves it None), so AdamW leaves it
// untouched instead of decaying it; the used ones are averaged as before.
void unused_parameter_of_one(Backend backend, const torch::Device& device) {
  test::TempDir dir;
  auto c = world_of_one(backend, device, dir / "store");
  torch::manual_seed(3);
  torch::nn::Linear used(4, 2), unused(4, 2), head(2, 1);
  torch::nn::Sequential net(used, head);
  net->register_module("unused", unused);
  net->to(device);
  DdpOptions o;
  o.bucket_bytes = 16;  // one bucket per parameter: the unused one is in bucket 0 or later
  o.sync_alone = true;
  DistributedDataParallel ddp(*net, *c, o);
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(0.1).weight_decay(0.5));
  const torch::Tensor before = unused->weight.detach().clone();
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    const torch::Tensor loss = net->forward(torch::rand({3, 4}).to(device)).sum();
    ddp.prepare_backward(loss);
    loss.backward();
    ddp.finish_gradient_sync();
    EXPECT_FALSE(unused->weight.grad().defined()) << "step " << step;
    EXPECT_FALSE(unused->bias.grad().defined()) << "step " << step;
    EXPECT_TRUE(used->weight.grad().defined());
    EXPECT_TRUE(head->bias.grad().defined());
    opt.step();
  }
  EXPECT_TRUE(torch::equal(unused->weight.detach().cpu(), before.cpu()))
      << "AdamW decayed an unused parameter";
  // A gradient it already has (accumulated by an earlier micro-step without sync) counts as used: averaged
  // over the ranks like any other, here over one, so it stays as it was.
  unused->weight.mutable_grad() = torch::full_like(unused->weight, 7.0);
  const torch::Tensor loss = net->forward(torch::rand({3, 4}).to(device)).sum();
  ddp.prepare_backward(loss);
  loss.backward();
  ddp.finish_gradient_sync();
  EXPECT_TRUE(torch::equal(unused->weight.grad().cpu(), torch::full({2, 4}, 7.0)));
  c->shutdown();
}

bool have_nccl() {
  return nccl_available() && torch::cuda::is_available();
}

TEST(ProcessGroupOfOne, GlooCollectives) {
  collectives_of_one(Backend::kGloo, torch::kCPU);
}

TEST(ProcessGroupOfOne, GlooDdpStep) {
  ddp_step_of_one(Backend::kGloo, torch::kCPU);
}

TEST(ProcessGroupOfOne, GlooUnusedParametersKeepNoGradient) {
  unused_parameter_of_one(Backend::kGloo, torch::kCPU);
}

TEST(NcclCuda, CollectivesOfOneRank) {
  if (!have_nccl()) GTEST_SKIP() << "no CUDA device or no NCCL in this LibTorch";
  collectives_of_one(Backend::kNccl, torch::Device(torch::kCUDA, 0));
}

TEST(NcclCuda, DdpStepOfOneRank) {
  if (!have_nccl()) GTEST_SKIP() << "no CUDA device or no NCCL in this LibTorch";
  ddp_step_of_one(Backend::kNccl, torch::Device(torch::kCUDA, 0));
}

TEST(NcclCuda, UnusedParametersKeepNoGradient) {
  if (!have_nccl()) GTEST_SKIP() << "no CUDA device or no NCCL in this LibTorch";
  unused_parameter_of_one(Backend::kNccl, torch::Device(torch::kCUDA, 0));
}

}  // namespace
}  // namespace ranzcr
