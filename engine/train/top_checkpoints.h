// output.keep_best_k: the checkpoints of the k best epochs by validation metric, kept as
// numbered checkpoints beside the last and the best (run_folder.h). A resumed run finds the ones kept before.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ranzcr {

class TopCheckpoints {
 public:
  TopCheckpoints(std::string dir, int k) : dir_(std::move(dir)), k_(k) {}
  /// Takes over the files an earlier run kept, reading each one's epoch and metric; removes those of
  /// epochs after `epoch` (a resumed run trains them again).
  void scan(int64_t epoch);
  /// Where epoch `epoch` (1-based) with validation `metric` is to be saved; "" when it is not among the k
  /// best. Call prune() once it is written.
  std::string admit(int64_t epoch, double metric);
  /// Deletes the files that fell out of the k best.
  void prune();
  /// The kept epochs, best first.
  std::vector<int64_t> epochs() const;
  std::string path(int64_t epoch) const;

 private:
  void sort();
  std::string dir_;
  int k_;
  std::vector<std::pair<double, int64_t>> kept_;  // (metric, epoch)
};

}  // namespace ranzcr
