// Synchronised BatchNorm (models/sync_batch_norm.h) in one process: its hand-written backward against
// autograd of the composed operations and against finite differences in float64; two threads standing in for
// two ranks (uneven batches) against one BatchNorm over the whole batch; torch's BatchNorm2d wherever it is
// not synchronised. The real ranks, through the trainer, are in tests/distributed/.
#include <c10/core/AutogradState.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/runtime/cuda_support.h"
#include "models/registry.h"
#include "models/sync_batch_norm.h"

namespace ranzcr {
namespace {

// `ranks` threads as the ranks of a job: each collective returns once every thread has called it. A rank
// that waits longer than `patience` for the others throws instead (a test that deadlocks fails, it does not
// hang: see run_ranks).
class ThreadReducer {
 public:
  explicit ThreadReducer(int ranks, std::chrono::seconds patience = std::chrono::seconds(60))
      : ranks_(ranks), patience_(patience), deposits_(ranks) {}

  class Rank : public BatchNormReducer {
   public:
    Rank(ThreadReducer& group, int rank) : group_(group), rank_(rank) {}
    int world_size() const override { return group_.ranks_; }
    torch::Tensor all_gather_stack(const torch::Tensor& tensor) override {
      return torch::stack(group_.exchange(rank_, tensor));
    }
    void all_reduce_sum(torch::Tensor& tensor) override {
      const auto all = group_.exchange(rank_, tensor);
      torch::Tensor sum = torch::zeros_like(tensor);
      for (const auto& t : all) sum += t;  // in rank order on every rank: the same bits everywhere
      tensor.copy_(sum);
    }

   private:
    ThreadReducer& group_;
    int rank_;
  };

 private:
  // Every rank's tensor (a copy), once all have given theirs.
  std::vector<torch::Tensor> exchange(int rank, const torch::Tensor& tensor) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int64_t round = round_;
    deposits_[rank] = tensor.clone();
    if (++arrived_ == ranks_) {
      result_ = deposits_;
      arrived_ = 0;
      ++round_;
      changed_.notify_all();
    } else if (!changed_.wait_for(lock, patience_, [&] { return round_ != round; })) {
      throw std::runtime_error("rank " + std::to_string(rank) + " waited " +
                               std::to_string(patience_.count()) +
                               " s in a collective for the other ranks (a deadlock)");
    }
    return result_;
  }

  int ranks_;
  std::chrono::seconds patience_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<torch::Tensor> deposits_, result_;
  int arrived_ = 0;
  int64_t round_ = 0;
};

// A reducer of one rank: the collectives are identities.
class OneRank : public BatchNormReducer {
 public:
  int world_size() const override { return 1; }
  torch::Tensor all_gather_stack(const torch::Tensor& tensor) override { return tensor.unsqueeze(0).clone(); }
  void all_reduce_sum(torch::Tensor&) override {}
};

torch::TensorOptions f64() {
  return torch::TensorOptions().dtype(torch::kDouble);
}

// Batch normalisation written as plain tensor operations (autograd differentiates it).
torch::Tensor composed_batch_norm(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                                  double eps) {
  const auto mean = x.mean({0, 2, 3}, /*keepdim=*/true);
  const auto var = (x - mean).square().mean({0, 2, 3}, /*keepdim=*/true);
  return (x - mean) / (var + eps).sqrt() * w.view({1, -1, 1, 1}) + b.view({1, -1, 1, 1});
}

TEST(SyncBatchNorm, BackwardEqualsAutogradOfTheComposedOperationsInFloat64) {
  torch::manual_seed(3);
  const double eps = 1e-5;
  const auto x0 =
      torch::randn({6, 4, 5, 3}, f64()) * 3 + 7;  // an offset mean: a naive sum of squares loses digits
  const auto w0 = torch::rand({4}, f64()) + 0.5, b0 = torch::randn({4}, f64());
  const auto g = torch::randn({6, 4, 5, 3}, f64());

  auto x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  OneRank one;
  auto rm = torch::zeros({4}, f64()), rv = torch::ones({4}, f64());
  const auto y = sync_batch_norm(x, w, b, rm, rv, 0.1, eps, one);
  y.backward(g);

  auto xr = x0.clone().requires_grad_(), wr = w0.clone().requires_grad_(), br = b0.clone().requires_grad_();
  const auto yr = composed_batch_norm(xr, wr, br, eps);
  yr.backward(g);

  EXPECT_TRUE(torch::allclose(y, yr, 0, 1e-12)) << (y - yr).abs().max();
  EXPECT_TRUE(torch::allclose(x.grad(), xr.grad(), 0, 1e-11)) << (x.grad() - xr.grad()).abs().max();
  EXPECT_TRUE(torch::allclose(w.grad(), wr.grad(), 0, 1e-10)) << (w.grad() - wr.grad()).abs().max();
  EXPECT_TRUE(torch::allclose(b.grad(), br.grad(), 0, 1e-10)) << (b.grad() - br.grad()).abs().max();
  // The running statistics as torch's BatchNorm updates them (unbiased variance).
  const auto count = 6.0 * 5 * 3;
  const auto mean = x0.mean({0, 2, 3}), var = x0.var({0, 2, 3}, /*unbiased=*/false) * count / (count - 1);
  EXPECT_TRUE(torch::allclose(rm, 0.1 * mean, 0, 1e-12));
  EXPECT_TRUE(torch::allclose(rv, 0.9 + 0.1 * var, 0, 1e-12));
}

// Central differences of <g, y(x + h v)> along random directions against <grad, v>.
TEST(SyncBatchNorm, GradientsMatchFiniteDifferencesInFloat64) {
  torch::manual_seed(5);
  const double eps = 1e-3, h = 1e-6;
  const auto x0 = torch::randn({3, 2, 4, 4}, f64());
  const auto w0 = torch::rand({2}, f64()) + 0.5, b0 = torch::randn({2}, f64());
  const auto g = torch::randn({3, 2, 4, 4}, f64());
  OneRank one;
  const auto loss = [&](const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
    return (sync_batch_norm(x, w, b, torch::Tensor(), torch::Tensor(), 0.1, eps, one) * g).sum();
  };
  auto x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  loss(x, w, b).backward();
  torch::NoGradGuard no_grad;
  for (int k = 0; k < 5; ++k) {
    const auto vx = torch::randn_like(x0), vw = torch::randn_like(w0), vb = torch::randn_like(b0);
    const double numeric = (loss(x0 + h * vx, w0 + h * vw, b0 + h * vb).item<double>() -
                            loss(x0 - h * vx, w0 - h * vw, b0 - h * vb).item<double>()) /
                           (2 * h);
    const double analytic =
        ((x.grad() * vx).sum() + (w.grad() * vw).sum() + (b.grad() * vb).sum()).item<double>();
    EXPECT_NEAR(numeric, analytic, 1e-6 * std::max(1.0, std::abs(analytic))) << "direction " << k;
  }
}

// Runs `body(rank)` on one thread per rank; once every thread has ended, throws one error naming each rank's
// failure (a rank's real error and the other's timeout waiting for it both show).
// Each thread runs its own backward: with multithreaded autograd (the default) every CUDA node of a device
// runs on that device's one autograd worker thread, so rank 0's node, waiting in a collective for rank 1's,
// would block the thread rank 1's node is queued on (a deadlock on a GPU; on a CPU each caller runs its own
// nodes). Switched off (c10::AutogradState, thread-local; torch.autograd.set_multithreading_enabled(False)),
// the engine puts every node in the calling thread's own ready queue (Engine::ready_queue), as on a CPU.
void run_ranks(int ranks, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      c10::AutogradState::get_tls_state().set_multithreading_enabled(false);
      try {
        body(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  std::string failures;
  for (int r = 0; r < ranks; ++r) {
    if (!errors[static_cast<size_t>(r)]) continue;
    try {
      std::rethrow_exception(errors[static_cast<size_t>(r)]);
    } catch (const std::exception& e) {
      failures += (failures.empty() ? "" : "; ") + ("rank " + std::to_string(r) + ": ") + e.what();
    }
  }
  if (!failures.empty()) throw std::runtime_error(failures);
}

// One comparison of two ranks against one BatchNorm: the parameters' dtype, the inputs' (default: the
// parameters'; bf16 as under autocast), the images per rank, the device and the inputs' memory layout.
struct TwoRanks {
  torch::Dtype dtype = torch::kFloat;
  double tolerance = 1e-5;
  std::vector<int64_t> sizes = {3, 5};
  torch::Device device = torch::kCPU;
  std::optional<torch::Dtype> input_dtype;
  bool channels_last = false;
};

// Two ranks with sizes[0] and sizes[1] images equal one BatchNorm over all of them: outputs, the input's
// gradient, the summed weight and bias gradients, and the running statistics. On the CPU the composite path;
// on CUDA ATen's SyncBatchNorm kernels. A rank may have no image (a count of 0 to weigh). With
// channels_last the inputs, the gradients flowing in, the outputs and the input gradients are NHWC.
void expect_two_ranks_equal_one(const TwoRanks& c) {
  const torch::Dtype input_dtype = c.input_dtype.value_or(c.dtype);
  const auto& sizes = c.sizes;
  SCOPED_TRACE("images per rank " + std::to_string(sizes[0]) + " and " + std::to_string(sizes[1]) + " on " +
               c.device.str() + " in " + std::string(c10::toString(input_dtype)) +
               (c.channels_last ? ", channels_last" : ""));
  torch::manual_seed(7);
  const auto format = c.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  const auto options = torch::TensorOptions().dtype(input_dtype).device(c.device);
  const int64_t total = sizes[0] + sizes[1];
  const auto x = (torch::randn({total, 3, 4, 5}) * 2 + 1).to(options).contiguous(format),
             g = torch::randn({total, 3, 4, 5}).to(options).contiguous(format);
  const auto share = [&](const torch::Tensor& t, int r) {
    return t.narrow(0, r == 0 ? 0 : sizes[0], sizes[r]).contiguous(format);
  };

  torch::nn::BatchNorm2d one(torch::nn::BatchNorm2dOptions(3));
  one->to(c.device, c.dtype);
  auto xo = x.clone().requires_grad_();
  const auto yo = one->forward(xo);
  yo.backward(g);

  ThreadReducer group(2);
  std::vector<SyncBatchNorm2d> layers;
  std::vector<torch::Tensor> xs, ys(2);
  for (int r = 0; r < 2; ++r) {
    layers.emplace_back(torch::nn::BatchNorm2dOptions(3));
    layers[r]->to(c.device, c.dtype);
    layers[r]->set_reducer(std::make_shared<ThreadReducer::Rank>(group, r));
    EXPECT_TRUE(layers[r]->synchronised());
    xs.push_back(share(x, r).clone(format).requires_grad_());
  }
  {
    std::optional<cuda::SyncDebugErrorGuard> no_host_sync;  // on CUDA the layer never waits for the device
    if (c.device.is_cuda()) no_host_sync.emplace();
    run_ranks(2, [&](int r) {
      ys[r] = layers[r]->forward(xs[r]);
      ys[r].backward(share(g, r));
    });
  }

  const auto gap = [](const torch::Tensor& a, const torch::Tensor& b) {
    return (a - b).abs().max().item<double>();
  };
  const auto grad = [](const torch::Tensor& t) {
    return t.grad().defined() ? t.grad() : torch::zeros_like(t);
  };
  const double tolerance = c.tolerance;
  EXPECT_LE(gap(torch::cat({ys[0], ys[1]}).detach(), yo.detach()), tolerance);
  EXPECT_LE(gap(torch::cat({grad(xs[0]), grad(xs[1])}), xo.grad()), tolerance);
  EXPECT_LE(gap(grad(layers[0]->weight) + grad(layers[1]->weight), one->weight.grad()), tolerance);
  EXPECT_LE(gap(grad(layers[0]->bias) + grad(layers[1]->bias), one->bias.grad()), tolerance);
  for (int r = 0; r < 2; ++r) {
    EXPECT_LE(gap(layers[r]->running_mean, one->running_mean), tolerance) << "rank " << r;
    EXPECT_LE(gap(layers[r]->running_var, one->running_var), tolerance) << "rank " << r;
    EXPECT_EQ(layers[r]->num_batches_tracked.item<int64_t>(), 1);
    EXPECT_EQ(ys[r].scalar_type(), input_dtype) << "rank " << r;
    if (c.channels_last &&
        sizes[r] > 0) {  // the layout the next convolution reads, and the one it hands back
      EXPECT_TRUE(ys[r].is_contiguous(torch::MemoryFormat::ChannelsLast)) << "output of rank " << r;
      EXPECT_TRUE(grad(xs[r]).is_contiguous(torch::MemoryFormat::ChannelsLast)) << "input grad of rank " << r;
    }
  }
  // Each rank's own statistics are not the global ones: the test would see a layer that did not synchronise.
  if (sizes[0] > 0 && sizes[1] > 0 && !c.input_dtype)
    EXPECT_GT(gap(x.narrow(0, 0, sizes[0]).to(torch::kDouble).mean({0, 2, 3}) * 0.1,
                  one->running_mean.to(torch::kDouble)),
              10 * tolerance);
}

TEST(SyncBatchNorm, TwoRanksWithUnevenBatchesEqualOneBatchNormOverBoth) {
  expect_two_ranks_equal_one({torch::kDouble, 1e-12});
  expect_two_ranks_equal_one({torch::kFloat, 1e-5});
  expect_two_ranks_equal_one(
      {torch::kFloat, 0.1, {3, 5}, torch::kCPU, torch::kBFloat16});  // float32 parameters
}

// NHWC, as training runs with train.channels_last (on by default on a GPU), in float32 and with bf16 inputs.
TEST(SyncBatchNorm, ChannelsLastStaysNhwcAndEqualsOneBatchNorm) {
  expect_two_ranks_equal_one({torch::kFloat, 1e-5, {3, 5}, torch::kCPU, std::nullopt, true});
  expect_two_ranks_equal_one({torch::kFloat, 0.1, {3, 5}, torch::kCPU, torch::kBFloat16, true});
}

// A rank whose batch came out empty still takes part (a count of 0), first or last.
TEST(SyncBatchNorm, ARankWithNoImagesWeighsNothing) {
  expect_two_ranks_equal_one({torch::kDouble, 1e-12, {0, 6}});
  expect_two_ranks_equal_one({torch::kDouble, 1e-12, {6, 0}});
}

// A rank that never arrives is an error after the reducer's patience, not a hang (the CUDA test below
// relies on it).
TEST(SyncBatchNorm, AMissingRankIsAnErrorNotAHang) {
  ThreadReducer group(2, std::chrono::seconds(1));
  ThreadReducer::Rank rank0(group, 0);
  torch::Tensor t = torch::ones({2});
  EXPECT_THROW(rank0.all_reduce_sum(t), std::runtime_error);
}

// On CUDA through ATen's SyncBatchNorm kernels (batch_norm_stats, batch_norm_gather_stats_with_counts,
// batch_norm_elemt, batch_norm_backward_reduce/elemt): the same claims, two threads on one GPU as two ranks,
// with no host-device synchronisation (CUDA's sync-debug mode set to error). Each thread runs its own
// backward (run_ranks), and a rank that waits over 60 s in a collective throws (ThreadReducer), so it cannot
// hang; ctest's timeout for it is 180 s (tests/ctest_timeouts.cmake).
TEST(SyncBatchNorm, CudaKernelsEqualOneBatchNormOverBoth) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU";
  const torch::Device cuda(torch::kCUDA, 0);
  at::globalContext().setAllowTF32CuDNN(false);
  expect_two_ranks_equal_one({torch::kFloat, 1e-4, {3, 5}, cuda});
  expect_two_ranks_equal_one({torch::kFloat, 1e-4, {0, 6}, cuda});
  expect_two_ranks_equal_one({torch::kFloat, 1e-4, {6, 0}, cuda});
  expect_two_ranks_equal_one({torch::kDouble, 1e-10, {3, 5}, cuda});
  expect_two_ranks_equal_one({torch::kFloat, 0.1, {3, 5}, cuda, torch::kBFloat16});  // float32 parameters
  // channels_last + bf16, as training runs on a GPU by default
  expect_two_ranks_equal_one({torch::kFloat, 1e-4, {3, 5}, cuda, std::nullopt, true});
  expect_two_ranks_equal_one({torch::kFloat, 0.1, {3, 5}, cuda, torch::kBFloat16, true});
  expect_two_ranks_equal_one({torch::kFloat, 0.1, {0, 6}, cuda, torch::kBFloat16, true});
}

// bf16 inputs (as under autocast): the statistics in float32, the output in bf16 and close to float32's.
TEST(SyncBatchNorm, Bf16InputsKeepFloat32Statistics) {
  torch::manual_seed(11);
  const auto x = torch::randn({4, 2, 3, 3}) * 4 + 100;  // a large mean: bf16 sums would lose it
  OneRank one;
  auto rm = torch::zeros({2}), rv = torch::ones({2});
  const auto y =
      sync_batch_norm(x.to(torch::kBFloat16), torch::Tensor(), torch::Tensor(), rm, rv, 1.0, 1e-5, one);
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  auto rm32 = torch::zeros({2}), rv32 = torch::ones({2});
  const auto y32 = sync_batch_norm(x.to(torch::kBFloat16).to(torch::kFloat), torch::Tensor(), torch::Tensor(),
                                   rm32, rv32, 1.0, 1e-5, one);
  EXPECT_TRUE(torch::allclose(y.to(torch::kFloat), y32, 0.02, 0.02));
  EXPECT_TRUE(torch::allclose(rm, rm32));
  EXPECT_TRUE(torch::allclose(rv, rv32));
}

// Without a reducer, with one of one rank, and in evaluation mode it is torch's BatchNorm2d, bit for bit; its
// state dict has torch's names.
TEST(SyncBatchNorm, UnsynchronisedIsTorchsBatchNorm) {
  torch::manual_seed(13);
  const auto x = torch::randn({4, 3, 5, 5});
  torch::nn::BatchNorm2d reference(3);
  SyncBatchNorm2d plain(3), alone(3);
  alone->set_reducer(std::make_shared<OneRank>());
  EXPECT_FALSE(alone->synchronised());
  const auto r = reference->forward(x);
  EXPECT_TRUE(torch::equal(plain->forward(x), r));
  EXPECT_TRUE(torch::equal(alone->forward(x), r));
  EXPECT_TRUE(torch::equal(plain->running_mean, reference->running_mean));
  ThreadReducer group(2);
  SyncBatchNorm2d synced(3);
  synced->set_reducer(std::make_shared<ThreadReducer::Rank>(group, 0));
  torch::nn::BatchNorm2d fresh(3);
  synced->eval();
  fresh->eval();
  EXPECT_TRUE(torch::equal(synced->forward(x), fresh->forward(x)));  // no collective: eval
  std::vector<std::string> names, reference_names;
  for (const auto& p : synced->named_buffers()) names.push_back(p.key());
  for (const auto& p : reference->named_buffers()) reference_names.push_back(p.key());
  EXPECT_EQ(names, reference_names);
}

// Every BatchNorm of the zoo's models is synchronisable: set_batch_norm_sync finds them all.
TEST(SyncBatchNorm, EveryModelsBatchNormsAreSynchronisable) {
  ModelSpec spec;
  spec.num_classes = 11;
  for (const std::string name : {"tiny_cnn", "resnet18", "resnet50d", "efficientnet_b0"}) {
    auto model = create_model(name, spec);
    int64_t batch_norms = 0;
    for (const auto& m : model->modules())
      if (m->as<torch::nn::BatchNorm2d>()) ++batch_norms;
    ASSERT_GT(batch_norms, 0) << name;
    EXPECT_EQ(set_batch_norm_sync(*model, std::make_shared<OneRank>()), batch_norms) << name;
  }
  torch::nn::Sequential foreign(torch::nn::Conv2d(3, 3, 1), torch::nn::BatchNorm2d(3));
  EXPECT_THROW(set_batch_norm_sync(*foreign, std::make_shared<OneRank>()), c10::Error);
}

}  // namespace
}  // namespace ranzcr
