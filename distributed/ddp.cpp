#include "distributed/ddp.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <chrono>
#include <map>
#include <mutex>
#include <unordered_set>

namespace ranzcr {
namespace {

// Channels_last (NHWC) but not also contiguous: such tensors are flattened in NHWC order.
bool nhwc(const torch::Tensor& t) {
  return t.dim() == 4 && !t.is_contiguous() && t.is_contiguous(torch::MemoryFormat::ChannelsLast);
}

// `t` as a 1-d tensor in the memory order of `layout` (a parameter: the same on every rank). A view, no
// copy, when `t` has that layout: reshape(-1) would copy an NHWC gradient into NCHW order.
torch::Tensor flat_view(const torch::Tensor& t, const torch::Tensor& layout) {
  return nhwc(layout) ? t.permute({0, 2, 3, 1}).reshape(-1) : t.reshape(-1);
}

// Copies `flat`, the flat_views of `targets` one after the other (each in the order of its `layouts` entry, a
// parameter), back into them: one multi-tensor copy, so on CUDA a few kernel launches per bucket rather than
// one per tensor (about 600 a step on resnet200d). A plain memory copy where a target has its layout. An
// undefined target is skipped (its part of `flat` is left unread).
void copy_all_from_flat(const std::vector<torch::Tensor>& targets, const std::vector<torch::Tensor>& layouts,
                        const torch::Tensor& flat) {
  std::vector<torch::Tensor> dst, src;
  int64_t offset = 0;
  for (size_t k = 0; k < targets.size(); ++k) {
    const torch::Tensor& t = targets[k];
    const int64_t numel = layouts[k].numel();
    offset += numel;
    if (!t.defined()) continue;
    const torch::Tensor part = flat.narrow(0, offset - numel, numel);
    if (nhwc(layouts[k])) {
      dst.push_back(t.permute({0, 2, 3, 1}));
      src.push_back(part.view({t.size(0), t.size(2), t.size(3), t.size(1)}));
    } else {
      dst.push_back(t);
      src.push_back(part.view_as(t));
    }
  }
  if (!dst.empty()) at::_foreach_copy_(dst, src);
}

}  // namespace

void broadcast_coalesced(Collectives& collectives, const std::vector<torch::Tensor>& tensors, int root) {
  std::map<torch::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  torch::NoGradGuard no_grad;
  for (auto& kv : by_dtype) {
    std::vector<torch::Tensor> flat_parts;
    for (const auto& t : kv.second) flat_parts.push_back(flat_view(t.detach(), t));
    torch::Tensor flat = torch::cat(flat_parts);
    collectives.broadcast(flat, root);
    std::vector<torch::Tensor> targets;
    for (const auto& t : kv.second) targets.push_back(t.detach());
    copy_all_from_flat(targets, kv.second, flat);
  }
}

struct DistributedDataParallel::State {
  using Accumulator = decltype(torch::autograd::impl::grad_accumulator(std::declval<torch::Tensor>()));
  Collectives* collectives = nullptr;
  DdpOptions options;
  std::vector<torch::Tensor> params;
  std::vector<torch::Tensor> buffers;
  std::vector<Accumulator> accumulators;      // kept alive: the hooks live on them
  std::vector<std::vector<int64_t>> buckets;  // parameter indices, in launch order
  std::vector<int64_t> bucket_of;
  bool enabled = true;
  bool active = false;  // several ranks (or sync_alone): the calls communicate
  bool sync = true;
  double wait_seconds = 0.0;

  std::mutex mutex;
  std::vector<char> ready;
  std::vector<int64_t> pending;  // per bucket: gradients not yet ready
  int64_t next_launch = 0;
  int64_t launched_in_backward = 0;
  int64_t last_launched_in_backward = 0;
  std::vector<torch::Tensor> flat;  // per bucket, while in flight
  std::vector<std::unique_ptr<Collectives::Pending>> inflight;
  // Which parameters this step used, summed over the ranks inside bucket 0's all-reduce (one element per
  // parameter after its gradients): a parameter no rank used keeps no gradient, as in PyTorch's DDP.
  std::vector<int64_t> unused_here;  // parameters outside this rank's autograd graph (prepare_backward)
  int64_t bucket0_numel = 0;         // gradient elements of bucket 0, before the usage flags

  void reset() {
    ready.assign(params.size(), 0);
    pending.clear();
    for (const auto& b : buckets) pending.push_back(static_cast<int64_t>(b.size()));
    next_launch = 0;
    launched_in_backward = 0;
    flat.assign(buckets.size(), torch::Tensor());
    unused_here.clear();
    inflight.clear();
    inflight.resize(buckets.size());
  }

  // Caller holds the mutex.
  void launch(int64_t b) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> parts;
    for (int64_t i : buckets[b]) {
      const torch::Tensor& g = params[i].grad();
      parts.push_back(g.defined() ? flat_view(g, params[i])
                                  : torch::zeros({params[i].numel()}, params[i].options()));
    }
    if (b == 0) parts.push_back(usage_flags(parts.front().options()));
    flat[b] = torch::cat(parts).div_(collectives->world_size());
    inflight[b] = collectives->all_reduce_sum_async(flat[b]);
  }

  // One per parameter: 0 where this rank did not use it, else 1. Made on the device without a host copy.
  torch::Tensor usage_flags(const torch::TensorOptions& options) const {
    torch::Tensor flags = torch::ones({static_cast<int64_t>(params.size())}, options);
    for (int64_t i : unused_here) flags[i].fill_(0);
    return flags;
  }

  // The parameters that no rank used this step (bucket 0 done). Reads the flags back, a host sync, only
  // when this rank left some parameter unused: one it used is used.
  std::vector<char> unused_everywhere() {
    std::vector<char> unused(params.size(), 0);
    if (unused_here.empty()) return unused;
    const torch::Tensor flags = flat[0].narrow(0, bucket0_numel, static_cast<int64_t>(params.size())).cpu();
    for (int64_t i : unused_here) unused[i] = flags[i].item<double>() == 0.0;
    return unused;
  }

  void on_grad_ready(int64_t i) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!enabled || !sync || ready[i]) return;
    ready[i] = 1;
    --pending[bucket_of[i]];
    while (next_launch < static_cast<int64_t>(buckets.size()) && pending[next_launch] == 0) {
      launch(next_launch++);
      ++launched_in_backward;
    }
  }
};

DistributedDataParallel::DistributedDataParallel(torch::nn::Module& module, Collectives& collectives,
                                                 DdpOptions options)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.collectives = &collectives;
  s.options = options;
  for (const auto& p : module.parameters())
    if (p.requires_grad()) s.params.push_back(p);
  s.buffers = module.buffers();
  s.active = collectives.world_size() > 1 || options.sync_alone;
  if (!s.active) return;

  std::vector<torch::Tensor> all = s.params;
  all.insert(all.end(), s.buffers.begin(), s.buffers.end());
  broadcast_coalesced(collectives, all, 0);

  // Buckets in reverse parameter order: gradients of the last layers are ready first.
  s.bucket_of.assign(s.params.size(), -1);
  int64_t bytes = 0;
  for (int64_t i = static_cast<int64_t>(s.params.size()) - 1; i >= 0; --i) {
    const int64_t size = s.params[i].numel() * s.params[i].element_size();
    if (s.buckets.empty() || (bytes > 0 && bytes + size > options.bucket_bytes)) {
      s.buckets.emplace_back();
      bytes = 0;
    }
    s.buckets.back().push_back(i);
    s.bucket_of[i] = static_cast<int64_t>(s.buckets.size()) - 1;
    bytes += size;
  }
  if (!s.buckets.empty())
    for (int64_t i : s.buckets.front()) s.bucket0_numel += s.params[i].numel();
  s.reset();
  std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < s.params.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(s.params[i]);
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [weak, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          if (auto st = weak.lock()) st->on_grad_ready(static_cast<int64_t>(i));
          return outputs;
        }));
    s.accumulators.push_back(std::move(acc));
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->enabled = false;
}

void DistributedDataParallel::before_forward() {
  State& s = *state_;
  if (!s.active || !s.options.broadcast_buffers || s.buffers.empty()) return;
  broadcast_coalesced(*s.collectives, s.buffers, 0);
}

void DistributedDataParallel::set_require_sync(bool sync) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->sync = sync;
}

void DistributedDataParallel::prepare_backward(const torch::Tensor& loss) {
  State& s = *state_;
  if (!s.active || !s.sync || !loss.grad_fn()) return;
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<const torch::autograd::Node*> stack{loss.grad_fn().get()};
  while (!stack.empty()) {
    const torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    for (const auto& edge : node->next_edges())
      if (edge.function) stack.push_back(edge.function.get());
  }
  std::vector<int64_t> unused;
  for (size_t i = 0; i < s.params.size(); ++i) {
    // Restoring weights with set_/set_data after construction can give a parameter a new accumulator,
    // which our hook is not on: every gradient would then count as unused (zeros). Build DDP last.
    TORCH_INTERNAL_ASSERT(
        torch::autograd::impl::grad_accumulator(s.params[i]).get() == s.accumulators[i].get(),
        "DistributedDataParallel: parameter ", i,
        " has a new gradient accumulator; construct the wrapper after loading weights");
    // Used here: in this backward's graph, or by an earlier micro-step of the window (its gradient
    // accumulated without sync), whose gradient is then averaged as any other.
    if (!seen.count(s.accumulators[i].get()) && !s.params[i].grad().defined())
      unused.push_back(static_cast<int64_t>(i));
  }
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.unused_here = unused;  // before any bucket launches: bucket 0 carries them
  }
  for (size_t i = 0; i < s.params.size(); ++i)  // not in the graph: ready now (zeros, or its accumulation)
    if (!seen.count(s.accumulators[i].get())) s.on_grad_ready(static_cast<int64_t>(i));
}

void DistributedDataParallel::finish_gradient_sync() {
  State& s = *state_;
  if (!s.active) return;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.sync) return;
  const auto start = std::chrono::steady_clock::now();
  while (s.next_launch < static_cast<int64_t>(s.buckets.size())) s.launch(s.next_launch++);
  torch::NoGradGuard no_grad;
  std::vector<char> unused;
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    s.inflight[b]->wait();
    if (b == 0) unused = s.unused_everywhere();
    std::vector<torch::Tensor> grads, layouts;
    for (int64_t i : s.buckets[b]) {
      torch::Tensor& p = s.params[i];
      layouts.push_back(p);
      if (unused[i]) {  // no rank used it: its gradient stays as it was (undefined after zero_grad)
        grads.emplace_back();
        continue;
      }
      // The gradient keeps (or, when new, takes) the parameter's layout, as autograd gives it.
      if (!p.grad().defined()) p.mutable_grad() = torch::empty_like(p, torch::MemoryFormat::Preserve);
      grads.push_back(p.grad());
    }
    copy_all_from_flat(grads, layouts, s.flat[b]);
  }
  s.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.last_launched_in_backward = s.launched_in_backward;
  s.reset();
}

void DistributedDataParallel::average_buffers() {
  State& s = *state_;
  if (!s.active) return;
  torch::NoGradGuard no_grad;
  for (auto& b : s.buffers) {
    if (!b.is_floating_point()) continue;  // counters (num_batches_tracked) stay as they are
    torch::Tensor t = b.detach().clone();
    s.collectives->all_reduce_sum(t);
    b.detach().copy_(t.div_(s.collectives->world_size()));
  }
}

int64_t DistributedDataParallel::num_buckets() const {
  return static_cast<int64_t>(state_->buckets.size());
}

double DistributedDataParallel::sync_wait_seconds() const {
  return state_->wait_seconds;
}

int64_t DistributedDataParallel::launched_during_backward() const {
  return state_->last_launched_in_backward;
}

}  // namespace ranzcr
