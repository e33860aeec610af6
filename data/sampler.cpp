#include "data/sampler.h"

#include <torch/torch.h>

#include <numeric>
#include <stdexcept>

namespace ranzcr {

DistributedSampler::DistributedSampler(int64_t size, SamplerOptions options)
    : size_(size), options_(options) {
  if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size)
    throw std::invalid_argument("DistributedSampler: need 0 <= rank < world_size");
  if (size_ < 0) throw std::invalid_argument("DistributedSampler: negative size");
}

int64_t DistributedSampler::num_samples() const {
  const int64_t w = options_.world_size;
  if (!options_.pad) return (size_ - options_.rank + w - 1) / w;
  if (options_.drop_last) return size_ / w;
  return (size_ + w - 1) / w;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order(size_);
  if (options_.shuffle) {
    auto gen = at::detail::createCPUGenerator(options_.seed + static_cast<uint64_t>(epoch_));
    const auto perm = torch::randperm(size_, gen, torch::kLong);
    const int64_t* p = perm.data_ptr<int64_t>();
    order.assign(p, p + size_);
  } else {
    std::iota(order.begin(), order.end(), 0);
  }
  const int64_t w = options_.world_size;
  if (options_.pad) {
    const int64_t total = num_samples() * w;
    if (total > size_ && size_ > 0) {  // pad by repeating from the front (PyTorch's rule)
      const int64_t need = total - size_;
      for (int64_t i = 0; i < need; ++i) order.push_back(order[i % size_]);
    } else {
      order.resize(total);  // drop_last truncation
    }
  }
  std::vector<int64_t> mine;
  for (size_t i = options_.rank; i < order.size(); i += w) mine.push_back(order[i]);
  return mine;
}

}  // namespace ranzcr
