// How a remote tracker's requests reach its server without ever holding up the run: one thread sends them in
// order; a request the server does not answer is retried with backoff, then it and every later one are
// appended to a spool file (one self-contained JSON line each) until a probe gets through again, when the
// spool goes first; a request the server refuses is dropped with a warning. Nothing blocks or throws to the
// caller. What is particular to a tracker comes from it: how one request is sent, which JSON values are its
// requests (Courier), and how its queued calls become requests (TakeRequest), so that consecutive calls can
// merge into one request. MLflow's RunLogger (tracking/mlflow/) is one user. No LibTorch.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace ranzcr::tracking {

/// A request that did not reach its server: `retriable` (no answer, 408, 429, a 5xx: worth trying again
/// later) or refused (not worth it: dropped).
class DeliveryError : public std::runtime_error {
 public:
  DeliveryError(const std::string& message, bool retriable)
      : std::runtime_error(message), retriable_(retriable) {}
  bool retriable() const { return retriable_; }

 private:
  bool retriable_;
};

/// A tracker's server, as Delivery and replay_spool use it.
class Courier {
 public:
  virtual ~Courier() = default;
  /// The server as messages name it, without credentials ("MLflow tracking server http://host:5000").
  virtual std::string server_name() const = 0;
  /// Whether `j` is one of this tracker's requests (a spool line that is not makes the file no spool).
  virtual bool is_request(const nlohmann::json& j) const = 0;
  /// Sends one request. Throws DeliveryError (a std::runtime_error of another type: refused).
  virtual void send(const nlohmann::json& request) = 0;
  /// The sends of the calling thread fail (no answer) within about a second once `*flag` turns true;
  /// nullptr: never. Delivery's thread sets it so that close() can abandon a send in flight.
  virtual void cancel_sends_when(const std::atomic<bool>* /*flag*/) {}
};

/// A call a tracker queued, of the tracker's own type: kept in order until its turn comes.
struct QueuedCall {
  virtual ~QueuedCall() = default;
};
using CallQueue = std::deque<std::unique_ptr<QueuedCall>>;
/// Takes the call or calls at the front of `queue` (never empty) that make one request, and returns the
/// request. A call may be taken in part (it stays at the front).
using TakeRequest = std::function<nlohmann::json(CallQueue& queue)>;

struct DeliveryOptions {
  std::string spool_path;                        // requests not delivered are appended here (JSON lines)
  double retry_seconds = 10;                     // retries with backoff (0.25 s doubling) before spooling one
  double probe_seconds = 30;                     // once spooling, try the server again after this long
  std::function<void(const std::string&)> warn;  // one line when spooling starts, and for refused requests
};

class Delivery {
 public:
  Delivery(std::unique_ptr<Courier> courier, TakeRequest take, DeliveryOptions options);
  ~Delivery();  // close(10)
  Delivery(const Delivery&) = delete;
  Delivery& operator=(const Delivery&) = delete;

  /// Queues `call`; ignored after close().
  void push(std::unique_ptr<QueuedCall> call);
  /// Waits until every request so far is sent or spooled, at most `timeout_s`, then spools what is left
  /// (the request in flight is abandoned and spooled too). No more requests after it.
  void close(double timeout_s);
  int64_t spooled() const;     // requests written to the spool file so far
  int64_t sent() const;        // requests the server took so far
  double cpu_seconds() const;  // CPU seconds its thread has used so far

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// What replay_spool did.
struct SpoolReplay {
  int64_t sent = 0;     // requests delivered (and removed from the file)
  int64_t refused = 0;  // requests the server refused (removed, with a warning each)
  int64_t left = 0;     // requests still in the file (the server stopped answering)
};

/// Sends the requests of the spool file `spool_path` in order through `courier`; those delivered or refused
/// leave the file (rewritten atomically; removed when empty). Stops at the first request the server does not
/// answer. No file: nothing to do. Throws std::runtime_error for a file that is not such a spool (one line).
SpoolReplay replay_spool(Courier& courier, const std::string& spool_path,
                         const std::function<void(const std::string&)>& warn);

/// Appends `request` as one line to the spool file `path` (core/durable_file.h's append_line, under the
/// spools' lock). Throws std::runtime_error naming the file when it cannot.
void append_to_spool(const std::string& path, const nlohmann::json& request);

/// One line of JSON (invalid UTF-8 replaced, never a throw for it).
std::string json_line(const nlohmann::json& j);

}  // namespace ranzcr::tracking
