#include "distributed/collectives.h"

namespace ranzcr {
namespace {

class LocalCollectives final : public Collectives {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void all_reduce_sum(torch::Tensor&) override {}
  torch::Tensor all_gather_cat(const torch::Tensor& tensor) override { return tensor; }
  void broadcast(torch::Tensor&, int) override {}
  void barrier() override {}
};

}  // namespace

std::unique_ptr<Collectives::Pending> Collectives::all_reduce_sum_async(torch::Tensor& tensor) {
  struct Done final : Pending {
    void wait() override {}
  };
  all_reduce_sum(tensor);
  return std::make_unique<Done>();
}

std::shared_ptr<Collectives> make_local_collectives() {
  return std::make_shared<LocalCollectives>();
}

}  // namespace ranzcr
