#include "engine/serve/batcher.h"

#include <torch/torch.h>

#include <exception>

namespace ranzcr {
namespace {

double seconds_between(ServeClock::time_point a, ServeClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Batcher::Batcher(BatcherOptions options, RunBatch run, OnBatch on_batch)
    : options_(options), run_(std::move(run)), on_batch_(std::move(on_batch)), thread_([this] { loop(); }) {}

Batcher::~Batcher() {
  stop();
}

bool Batcher::submit(std::shared_ptr<const PreparedImage> image, ServeClock::time_point deadline, Done done) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_ || static_cast<int>(queue_.size() + tasks_.size()) >= options_.max_queue) return false;
  queue_.push_back(Pending{std::move(image), ServeClock::now(), deadline, std::move(done)});
  wake_.notify_all();
  return true;
}

bool Batcher::run_exclusive(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_ || static_cast<int>(queue_.size() + tasks_.size()) >= options_.max_queue) return false;
  tasks_.push_back(std::move(task));
  wake_.notify_all();
  return true;
}

Batcher::Incoming::Incoming(Batcher& b) : batcher_(b) {
  std::lock_guard<std::mutex> lock(b.mutex_);
  ++b.incoming_;
}

Batcher::Incoming::~Incoming() {
  std::lock_guard<std::mutex> lock(batcher_.mutex_);
  if (--batcher_.incoming_ == 0) batcher_.wake_.notify_all();
}

int Batcher::queue_length() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(queue_.size() + tasks_.size());
}

void Batcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<Batcher::Pending> Batcher::take_batch(std::unique_lock<std::mutex>& lock) {
  const auto close_at = queue_.front().queued + options_.max_wait;
  wake_.wait_until(lock, close_at, [&] {
    return stopping_ || static_cast<int>(queue_.size()) >= options_.max_batch || !tasks_.empty() ||
           incoming_ == 0;
  });
  std::vector<Pending> batch;
  while (!queue_.empty() && static_cast<int>(batch.size()) < options_.max_batch) {
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return batch;
}

void Batcher::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !tasks_.empty(); });
    if (!tasks_.empty()) {
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      try {
        task();
      } catch (...) {  // the task answers for itself (run_exclusive)
      }
      lock.lock();
      continue;
    }
    if (queue_.empty()) return;  // stopping, nothing left
    std::vector<Pending> batch = take_batch(lock);
    lock.unlock();
    run_batch(std::move(batch));
    lock.lock();
  }
}

void Batcher::run_batch(std::vector<Pending> batch) {
  const auto start = ServeClock::now();
  std::vector<Pending*> live;
  for (Pending& p : batch) {
    if (start < p.deadline) {
      live.push_back(&p);
      continue;
    }
    BatchOutcome expired;
    expired.status = BatchOutcome::Status::kExpired;
    expired.queue_seconds = seconds_between(p.queued, start);
    p.done(expired);
  }
  if (live.empty()) return;
  std::vector<const PreparedImage*> images;
  for (Pending* p : live) images.push_back(p->image.get());
  if (on_batch_) on_batch_(static_cast<int>(images.size()));
  size_t answered = 0;
  try {
    const torch::Tensor probs = run_(images);
    const double model_seconds = seconds_between(start, ServeClock::now());
    for (size_t i = 0; i < live.size(); ++i, answered = i) {
      BatchOutcome o;
      o.status = BatchOutcome::Status::kDone;
      o.probs = probs[static_cast<int64_t>(i)].clone();
      o.batch_size = static_cast<int>(live.size());
      o.queue_seconds = seconds_between(live[i]->queued, start);
      o.model_seconds = model_seconds;
      live[i]->done(std::move(o));
    }
  } catch (const std::exception& e) {
    for (size_t i = answered; i < live.size(); ++i) {  // those not answered yet
      BatchOutcome o;
      o.error = e.what();
      o.batch_size = static_cast<int>(live.size());
      live[i]->done(o);
    }
  }
}

}  // namespace ranzcr
