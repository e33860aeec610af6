// serve's dynamic batcher (as Triton's): prepared images that arrive together run as one batch on one
// thread that owns the models. A batch closes when it holds `max_batch` images or when its first image has
// waited `max_wait`; the queue is bounded (submit refuses when full) and every request has a deadline.
// Other work on the models (Grad-CAM, one image at a time) runs on the same thread between batches.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/serve/served_models.h"

namespace ranzcr {

using ServeClock = std::chrono::steady_clock;

struct BatcherOptions {
  int max_batch = 8;
  std::chrono::microseconds max_wait{std::chrono::milliseconds(5)};
  int max_queue = 64;  // requests waiting (not yet in a running batch), all kinds together
};

/// What became of one request.
struct BatchOutcome {
  enum class Status { kDone, kExpired, kFailed } status = Status::kFailed;
  torch::Tensor probs;  // kDone: [C] float64
  int batch_size = 0;   // images in the batch it ran in
  double queue_seconds = 0, model_seconds = 0;
  std::string error;  // kFailed: one line
};

class Batcher {
 public:
  /// Runs a batch: [N, C] float64 probabilities of the images, in order.
  using RunBatch = std::function<torch::Tensor(const std::vector<const PreparedImage*>&)>;
  /// Called with the size of each batch it runs (metrics).
  using OnBatch = std::function<void(int)>;

  Batcher(BatcherOptions options, RunBatch run, OnBatch on_batch = {});
  ~Batcher();  // stop()
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  /// Called once with what became of a request, on the batching thread (keep it short: hand the answer on).
  using Done = std::function<void(BatchOutcome)>;

  /// Queues `image` to be predicted before `deadline`, `done` called with the outcome; false (and `done` not
  /// called) when the queue is full (503). A request whose deadline passes while queued is not run
  /// (kExpired).
  bool submit(std::shared_ptr<const PreparedImage> image, ServeClock::time_point deadline, Done done);

  /// Runs `task` on the batching thread between batches (the models are not thread-safe); false when the
  /// queue is full. The task answers for itself: an exception escaping it is dropped.
  bool run_exclusive(std::function<void()> task);

  /// An upload on its way to submit (being read or decoded): while any is, an open batch waits for it (up to
  /// max_wait); when none is, the batch runs at once, so a lone request never waits for company.
  class Incoming {
   public:
    explicit Incoming(Batcher& b);
    ~Incoming();
    Incoming(const Incoming&) = delete;
    Incoming& operator=(const Incoming&) = delete;

   private:
    Batcher& batcher_;
  };

  /// Requests waiting now.
  int queue_length() const;

  /// Runs what is queued, then stops the thread. Later submits are refused.
  void stop();

 private:
  struct Pending {
    std::shared_ptr<const PreparedImage> image;
    ServeClock::time_point queued, deadline;
    Done done;
  };
  void loop();
  // Waits (lock held) for a batch to close; moves it out of the queue.
  std::vector<Pending> take_batch(std::unique_lock<std::mutex>& lock);
  void run_batch(std::vector<Pending> batch);

  const BatcherOptions options_;
  const RunBatch run_;
  const OnBatch on_batch_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Pending> queue_;
  std::deque<std::function<void()>> tasks_;
  int incoming_ = 0;  // Incoming objects alive
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ranzcr
