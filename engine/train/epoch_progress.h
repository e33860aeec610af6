// The Trainer's bookkeeping of an epoch, private to engine/train: the loss sums and progress records
// (Progress), the divergence check (LossWatch) and the stop/divergence poll all ranks agree on (Poll).
// Device values stay on the device; they are read only when polled or reported (a host sync).
#pragma once

#include <torch/types.h>

#include <atomic>
#include <chrono>
#include <csignal>

#include "distributed/collectives.h"
#include "engine/report/metrics_writer.h"

namespace ranzcr {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Stop flags and the divergence check are combined over the ranks (and read from the GPU) only every
// this many optimizer steps and at the end of an epoch: a collective, and on CUDA a host sync, per step
// would stall the pipeline. One process on the CPU checks every step (it costs nothing there).
constexpr int64_t kPollSteps = 8;
// Consecutive non-finite losses tolerated before the run counts as diverged: none, except with fp16,
// where the loss scaler skips overflowing steps and an overflow now and then is expected.
constexpr int64_t kFp16NonFiniteLosses = 8;

struct EpochTotals {  // summed over ranks
  double loss_sum = 0.0, images = 0.0, skipped = 0.0, seconds = 0.0;
};

/// Non-finite losses, counted on the device (reading the count is a host sync: done only when polled).
class LossWatch {
 public:
  LossWatch(const torch::Device& device, int64_t tolerated) : tolerated_(static_cast<double>(tolerated)) {
    const auto opts = torch::TensorOptions().dtype(torch::kDouble).device(device);
    run_ = torch::zeros({}, opts), worst_ = torch::zeros({}, opts);
  }
  void add(const torch::Tensor& loss) {
    if (!loss.defined()) return;
    const torch::Tensor bad = torch::isfinite(loss).logical_not().to(torch::kDouble);
    run_.add_(1.0).mul_(bad);  // consecutive non-finite losses so far
    worst_ = torch::maximum(worst_, run_);
  }
  /// 1 when more consecutive losses than tolerated were non-finite since the last call, else 0.
  double take_diverged() {
    const double worst = worst_.item<double>();
    worst_.copy_(run_);
    return worst > tolerated_ ? 1.0 : 0.0;
  }

 private:
  double tolerated_;
  torch::Tensor run_, worst_;
};

/// What every rank must agree on after a step: was any rank asked to stop (SIGTERM/SIGINT), did any
/// rank's loss diverge. One process reads its own flag every step (free); several all-reduce their
/// flags every kPollSteps steps and at the end of an epoch.
class Poll {
 public:
  struct Result {
    int signal = 0;  // this rank's signal, or SIGTERM when another rank's stopped it; 0 = none
    bool diverged = false;
  };
  Poll(Collectives& collectives, const std::atomic<int>* flag, bool every_step)
      : collectives_(collectives), flag_(flag), every_step_(every_step) {}
  /// After optimizer step `step`.
  Result after_step(int64_t step, bool epoch_end, LossWatch& watch) {
    const bool due = every_step_ || epoch_end || step % kPollSteps == 0;
    if (collectives_.world_size() == 1) return {local(), due && watch.take_diverged() > 0};
    if (!due) return {};
    return combine(watch.take_diverged());
  }
  /// Between epochs (after validation and the checkpoint save): whether a stop was asked meanwhile.
  int signal_between_epochs() { return collectives_.world_size() == 1 ? local() : combine(0.0).signal; }

 private:
  Result combine(double diverged) {
    torch::Tensor t = torch::tensor({local() > 0 ? 1.0 : 0.0, diverged}, torch::kDouble);
    collectives_.all_reduce_sum(t);
    const auto v = t.accessor<double, 1>();
    return {v[0] > 0 ? (local() > 0 ? local() : SIGTERM) : 0, v[1] > 0};
  }
  int local() const { return flag_ ? flag_->load() : 0; }
  Collectives& collectives_;
  const std::atomic<int>* flag_;
  bool every_step_;
};

/// Loss sums of an epoch (kept on the device: reading them is a host sync, done only for progress
/// records and at the end of the epoch) and the periodic progress record.
class Progress {
 public:
  Progress(const torch::Device& device, int64_t epoch, int64_t epochs, int64_t batches_before,
           int64_t batches, double period)
      : epoch_(epoch), epochs_(epochs), before_(batches_before), batches_(batches), period_(period) {
    const auto opts = torch::TensorOptions().dtype(torch::kDouble).device(device);
    loss_sum_ = torch::zeros({}, opts), window_loss_ = torch::zeros({}, opts);
  }
  void add(const torch::Tensor& loss, int64_t n, int64_t skipped) {
    skipped_ += skipped;
    if (!loss.defined()) return;
    const torch::Tensor weighted = loss.to(torch::kDouble) * static_cast<double>(n);
    loss_sum_ += weighted, window_loss_ += weighted;
    seen_ += n, window_n_ += n;
  }
  /// After batch `done` (1-based, this run): a progress record every `period` seconds and at the end.
  void maybe_report(int64_t done, int64_t step, double lr, int world, MetricsWriter& out) {
    if (seconds_since(last_) < period_ && done != batches_) return;
    const double elapsed = seconds_since(start_);
    ProgressRecord r;
    r.epoch = epoch_ + 1, r.epochs = epochs_, r.batch = before_ + done, r.batches = before_ + batches_;
    r.step = step, r.lr = lr;
    r.loss = window_n_ > 0 ? window_loss_.item<double>() / window_n_ : 0.0;
    r.images_per_sec = seen_ * world / std::max(elapsed, 1e-9);
    r.eta_seconds = elapsed / done * (batches_ - done);
    out.progress(r);
    window_loss_.zero_();
    window_n_ = 0.0;
    last_ = Clock::now();
  }
  /// The epoch's totals over every rank.
  EpochTotals totals(Collectives& collectives) const {
    const double seconds = seconds_since(start_);
    torch::Tensor stats =
        torch::tensor({loss_sum_.item<double>(), seen_, static_cast<double>(skipped_)}, torch::kDouble);
    collectives.all_reduce_sum(stats);
    const auto s = stats.accessor<double, 1>();
    return EpochTotals{s[0], s[1], s[2], seconds};
  }

 private:
  int64_t epoch_, epochs_, before_, batches_;
  double period_;
  torch::Tensor loss_sum_, window_loss_;
  double seen_ = 0.0, window_n_ = 0.0;
  int64_t skipped_ = 0;
  Clock::time_point start_ = Clock::now(), last_ = Clock::now();
};

}  // namespace ranzcr
