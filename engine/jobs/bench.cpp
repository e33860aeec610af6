#include "engine/jobs/bench.h"
#include "core/check.h"
#include "core/text.h"

#include <dlfcn.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "core/durable_file.h"
#include "data/batch_loader.h"
#include "data/dataset_index.h"
#include "data/sampler.h"
#include "data/split.h"
#include "distributed/ddp.h"
#include "distributed/process_group.h"
#include "engine/infer/ensemble.h"
#include "engine/infer/inference.h"
#include "engine/infer/onnx_graph.h"
#include "engine/io/pretrained.h"
#include "engine/jobs/step_profile.h"
#include "engine/runtime/device_batches.h"
#include "engine/train/fused_optimizer.h"
#include "engine/train/train_step.h"

namespace ranzcr {
namespace {

using Clock = std::chrono::steady_clock;

void device_sync(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// Timed section: every rank waits for its device, then the slowest rank's time counts.
class Stopwatch {
 public:
  Stopwatch(const torch::Device& device, Collectives& collectives)
      : device_(device), collectives_(collectives) {}
  void start() {
    device_sync(device_);
    collectives_.barrier();
    start_ = Clock::now();
  }
  double stop() {
    device_sync(device_);
    torch::Tensor t =
        torch::tensor({std::chrono::duration<double>(Clock::now() - start_).count()}, torch::kDouble);
    collectives_.all_reduce_sum(t);  // mean over ranks (lockstep in DDP: close to each rank's own)
    return t.item<double>() / collectives_.world_size();
  }

 private:
  torch::Device device_;
  Collectives& collectives_;
  Clock::time_point start_;
};

// This rank's training rows for `batches` batches (the epoch-0 order, repeated if the split is short).
std::vector<int64_t> bench_rows(const Config& config, const std::vector<int64_t>& train, int64_t batches,
                                Collectives& collectives) {
  SamplerOptions so;
  so.rank = collectives.rank();
  so.world_size = collectives.world_size();
  so.seed = static_cast<uint64_t>(config.seed);
  const std::vector<int64_t> order = DistributedSampler(static_cast<int64_t>(train.size()), so).indices();
  RANZCR_CHECK(!order.empty(), "bench: the training split is empty");
  std::vector<int64_t> rows;
  const size_t need = static_cast<size_t>(batches * config.train.batch_size);
  for (size_t i = 0; rows.size() < need; ++i) rows.push_back(train[order[i % order.size()]]);
  return rows;
}

struct Setup {
  DatasetIndex index;
  std::vector<int64_t> train_rows;
  LoaderOptions loader;
  DeviceBatchOptions batches;
};

// The loader figure's timed batches: --loader-steps, else --steps.
int loader_steps(const BenchOptions& o) {
  return o.loader_steps > 0 ? o.loader_steps : o.steps;
}

// The loader's own rate. Its prefetch window fills during the warm-up, and batches already made would be
// counted at no cost (a cached data set gave millions of images per second over a few steps): they are
// taken untimed too, so the clock starts with the window about empty and times batches made while it runs.
double time_loader(const Setup& s, const Config& config, const BenchOptions& o, Stopwatch& watch,
                   SectionUsage* cpu) {
  BatchLoader loader(s.index, s.train_rows, ImageTransform(train_transform(config.data, config.seed)), 0,
                     s.loader);
  for (int i = 0; i < o.warmup + s.loader.prefetch_batches; ++i) loader.next();
  watch.start();
  const ThreadUsage usage;
  int64_t images = 0;
  for (int i = 0; i < loader_steps(o); ++i) images += loader.next()->images.size(0);
  const double seconds = watch.stop();
  *cpu = usage.finish();  // after the clock: finding the pools' threads takes some milliseconds
  return images / seconds;
}

// One batch on the device, then the loader's threads stop: on a CPU they would take cores from the compute.
DeviceBatch fixed_batch(const Setup& s, const Config& config) {
  BatchLoader loader(s.index, s.train_rows, ImageTransform(train_transform(config.data, config.seed)), 0,
                     s.loader);
  DeviceBatches batches(loader, s.batches);
  return *batches.next();
}

double time_compute(const DeviceBatch& batch, const BenchOptions& o, const std::function<void()>& run,
                    Stopwatch& watch, SectionUsage* cpu = nullptr) {
  for (int i = 0; i < o.warmup; ++i) run();
  watch.start();
  const ThreadUsage usage;
  for (int i = 0; i < o.steps; ++i) run();
  const double seconds = watch.stop();
  if (cpu) *cpu = usage.finish();
  return static_cast<double>(batch.size()) * o.steps / seconds;
}

// Whether every rank should profile: the main rank makes the --profile folder, and all learn whether it
// could, so that the ranks' steps (and their collectives) stay paired. "" when it could, else why not.
std::string profile_folder_problem(const BenchOptions& o, Collectives& collectives) {
  std::string problem;
  if (collectives.is_main()) {
    try {
      prepare_profile_folder(o.profile_dir);
    } catch (const std::exception& e) {
      problem = first_line(e.what());
    }
  }
  torch::Tensor ok = torch::tensor({problem.empty() ? 1.0 : 0.0}, torch::kDouble);
  collectives.broadcast(ok, 0);
  if (problem.empty() && ok.item<double>() < 0.5)
    problem = "the main rank could not prepare " + o.profile_dir;
  return problem;
}

// --profile, after the figures: the main rank records the steps (trace, kernel table); the others take the
// same steps with it. Sets the main rank's kernel table (top 10), or the one line of a failure: the figures
// are measured and handed over (on_figures) before, and stand.
void profile_compute(const BenchOptions& o, const std::function<void()>& run, Collectives& collectives,
                     BenchResult& r) {
  r.profile_error = profile_folder_problem(o, collectives);
  if (!r.profile_error.empty()) return;
  collectives.barrier();
  if (collectives.is_main()) {
    try {  // write_step_profile takes every step even when the profiler fails (the other ranks' are paired)
      r.profile_table = profile_table(
          write_step_profile(run, o.profile_steps, o.device, o.profile_dir, o.profile_warmup), 10);
    } catch (const c10::Error& e) {
      r.profile_error = first_line(e.what_without_backtrace());
    } catch (const std::exception& e) {
      r.profile_error = first_line(e.what());
    }
  } else {
    for (int i = 0; i < o.profile_warmup + o.profile_steps; ++i) run();
  }
  collectives.barrier();
}

// The version of the cuBLAS this process loaded (with LibTorch's CUDA libraries), asked of the library
// itself; "" when none is loaded (a CPU build) or it does not answer.
std::string loaded_cublas_version() {
  using GetProperty = int (*)(int, int*);  // cublasGetProperty(libraryPropertyType, int*)
  auto get = reinterpret_cast<GetProperty>(dlsym(RTLD_DEFAULT, "cublasGetProperty"));
  int major = 0, minor = 0, patch = 0;
  if (!get || get(0, &major) != 0 || get(1, &minor) != 0 || get(2, &patch) != 0) return "";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

// The version of the cuDNN this process loaded, asked of the library itself (cudnnGetVersion: major * 10000
// + minor * 100 + patch since cuDNN 9), not the one LibTorch was compiled against; "" when none is loaded.
std::string loaded_cudnn_version() {
  using GetVersion = size_t (*)();
  auto get = reinterpret_cast<GetVersion>(dlsym(RTLD_DEFAULT, "cudnnGetVersion"));
  if (!get) return "";
  const size_t v = get();
  if (v == 0) return "";
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

struct E2e {
  double images_per_sec = 0.0;
  double sync_wait_share = 0.0;  // of the timed steps' wall time
  SectionUsage cpu;
  LoaderQueueStats queue;
};

E2e time_e2e(const Setup& s, const Config& config, const BenchOptions& o, TrainStep& step,
             const DistributedDataParallel& ddp, Stopwatch& watch) {
  BatchLoader loader(s.index, s.train_rows, ImageTransform(train_transform(config.data, config.seed)), 1,
                     s.loader);
  DeviceBatches batches(loader, s.batches);
  auto run = [&] {
    const DeviceBatch batch = *batches.next();
    step.forward_backward(batch.images, batch.labels, true);
    step.optimizer_step(config.optim.lr);
    return batch.size();
  };
  for (int i = 0; i < o.warmup; ++i) run();
  watch.start();
  const ThreadUsage usage;
  loader.reset_queue_stats();
  const double wait_before = ddp.sync_wait_seconds();
  int64_t images = 0;
  for (int i = 0; i < o.steps; ++i) images += run();
  const double wait = ddp.sync_wait_seconds() - wait_before;
  LoaderQueueStats queue = loader.queue_stats();
  const double seconds = watch.stop();
  SectionUsage cpu = usage.finish();
  return E2e{images / seconds, wait / seconds, std::move(cpu), std::move(queue)};
}

// The settings and the libraries of the run, beside its figures.
void describe(const Config& config, const BenchOptions& o, const TrainStep& step, bool channels_last,
              int world, BenchResult& r) {
  r.device = o.device.str();
  r.model = config.model.name;
  r.precision = precision_name(step.options().precision);
  r.channels_last = channels_last;
  r.in_channels = config.model.in_channels;
  r.image_size = config.data.image_size;
  r.batch_size = config.train.batch_size;
  r.threads = torch::get_num_threads();
  r.loader_workers = config.data.num_workers;
  r.world_size = world;
  r.steps = o.steps;
  r.warmup = o.warmup;
  r.loader_steps = loader_steps(o);
  r.torch_version = TORCH_VERSION;
  r.cudnn_version = o.device.is_cuda() ? loaded_cudnn_version() : "";  // a CPU run uses none
  r.cublas_version = loaded_cublas_version();
  r.nccl_version = nccl_version();
  r.profile_dir = o.profile_dir;
}

}  // namespace

BenchResult run_bench(const Config& config, Collectives& collectives, const BenchOptions& o) {
  const torch::Device device = o.device;
  Setup s;
  s.index = load_train_index(config.data, index_options(config.data));
  s.loader = train_loader_options(config, device, /*drop_last=*/true);
  const int loader_batches = o.warmup + s.loader.prefetch_batches + loader_steps(o);  // time_loader's
  // Enough batches that the loader's threads never run out in a timed section: they claim up to a prefetch
  // window past the consumer, and one that runs out ends (its CPU time would be lost to the figures, and
  // the last steps would run with the loader idle).
  s.train_rows =
      bench_rows(config, validation_split(config.data, s.index.groups, config.seed).train,
                 std::max(o.warmup + o.steps, loader_batches) + s.loader.prefetch_batches + 1, collectives);
  s.loader.cache = open_run_cache(config.data, s.index.image_paths, [&](const std::string& line) {
    if (collectives.is_main()) std::fprintf(stderr, "%s\n", line.c_str());
  });
  const bool channels_last = resolve_channels_last(config.train.channels_last, device);
  s.batches = DeviceBatchOptions{device, config.model.in_channels, channels_last, config.model.input_mean,
                                 config.model.input_std};

  torch::manual_seed(config.seed);
  auto model =
      starting_model(config, o.weights, static_cast<int64_t>(s.index.num_labels()), device, channels_last)
          .model;
  model->train();
  auto optimizer = make_optimizer(config.optim, *model);
  DistributedDataParallel ddp(*model, collectives, ddp_options(config));
  sync_batch_norms(config, *model, collectives);  // distributed.bn_sync: sync (as train has it)
  TrainStep step(*model, *optimizer, ddp, device, step_options(config, device));
  Stopwatch watch(device, collectives);

  BenchResult r;
  const int world = collectives.world_size();
  r.loader_images_per_sec = world * time_loader(s, config, o, watch, &r.loader_cpu);
  const DeviceBatch batch = fixed_batch(s, config);
  auto run = [&] {
    step.forward_backward(batch.images, batch.labels, true);
    step.optimizer_step(config.optim.lr);
  };
  r.compute_images_per_sec = world * time_compute(batch, o, run, watch, &r.compute_cpu);
  E2e e2e = time_e2e(s, config, o, step, ddp, watch);
  r.e2e_images_per_sec = world * e2e.images_per_sec;
  r.e2e_cpu = std::move(e2e.cpu);
  r.e2e_queue = std::move(e2e.queue);
  if (world > 1) r.sync_wait_share = e2e.sync_wait_share;
  describe(config, o, step, channels_last, world, r);
  if (o.on_figures) o.on_figures(r);
  if (!o.profile_dir.empty()) profile_compute(o, run, collectives, r);
  return r;
}

namespace {

// The bench model as a trained one: the config's network and labels, its weights as the job starts from them.
TrainedModel bench_model(const Config& config, const ResolvedWeights& weights, const DatasetIndex& index) {
  TrainedModel t;
  t.info.path = "bench (" + config.model.name + ")";
  t.info.model = config.model;
  t.info.label_names = index.label_names;
  t.info.config_yaml = config_to_yaml(config);
  torch::manual_seed(config.seed);
  t.model =
      starting_model(config, weights, static_cast<int64_t>(index.num_labels()), torch::kCPU, false).model;
  t.model->eval();
  return t;
}

// Predict's path, from files to logits: the eval loader feeding the runner, `o.steps` batches after the
// warm-up's.
double time_infer_e2e(const DatasetIndex& index, const std::vector<int64_t>& rows, const InferenceOptions& io,
                      ModelRunner& runner, const BenchOptions& o, Stopwatch& watch) {
  std::unique_ptr<BatchLoader> loader = eval_loader(index, rows, io);
  DeviceBatches batches(*loader, device_batch_options(io));
  c10::InferenceMode inference;
  for (int i = 0; i < o.warmup; ++i) eval_logits(runner, batches.next()->images, io);
  watch.start();
  int64_t images = 0;
  for (int i = 0; i < o.steps; ++i) {
    const DeviceBatch b = *batches.next();
    eval_logits(runner, b.images, io);
    images += b.size();
  }
  return images / watch.stop();
}

// The eval loader alone (decode, resize, collate), timed as time_loader times the training loader.
double time_infer_loader(const DatasetIndex& index, const std::vector<int64_t>& rows,
                         const InferenceOptions& io, const BenchOptions& o, Stopwatch& watch) {
  std::unique_ptr<BatchLoader> loader = eval_loader(index, rows, io);
  for (int i = 0; i < o.warmup + io.prefetch_batches; ++i) loader->next();
  watch.start();
  int64_t images = 0;
  for (int i = 0; i < loader_steps(o); ++i) images += loader->next()->images.size(0);
  return images / watch.stop();
}

}  // namespace

BenchResult run_infer_bench(const Config& config, Collectives& collectives, const BenchOptions& o) {
  const DatasetIndex index = load_train_index(config.data, index_options(config.data));
  const InferenceOptions io = command_inference_options(config, o.device, InferUse::kPredictions);
  const int batches = o.warmup + io.prefetch_batches + std::max(o.steps, loader_steps(o)) + 1;
  std::vector<int64_t> all(index.size());
  std::iota(all.begin(), all.end(), 0);
  RANZCR_CHECK(!all.empty(), "bench: the data set is empty");
  std::vector<int64_t> rows;  // the index in order, repeated as often as the figures need
  for (size_t i = 0; rows.size() < static_cast<size_t>(batches) * io.batch_size; ++i)
    rows.push_back(all[i % all.size()]);
  const TrainedModel trained = bench_model(config, o.weights, index);
  if (!o.onnx_out.empty() && collectives.is_main())
    write_file_atomic(o.onnx_out, trained_models_onnx({&trained}));
  const std::unique_ptr<ModelRunner> runner = runner_for(trained, io, {io.batch_size});
  Stopwatch watch(o.device, collectives);
  BenchResult r;
  r.mode = "infer";
  r.backend = runner->name();
  r.loader_images_per_sec = time_infer_loader(index, rows, io, o, watch);
  {
    std::unique_ptr<BatchLoader> loader = eval_loader(index, rows, io);
    DeviceBatches device_batches(*loader, device_batch_options(io));
    const DeviceBatch batch = *device_batches.next();
    loader.reset();  // its threads stop: on a CPU they would take cores from the model
    c10::InferenceMode inference;
    r.compute_images_per_sec = time_compute(
        batch, o, [&] { eval_logits(*runner, batch.images, io); }, watch);
  }
  r.e2e_images_per_sec = time_infer_e2e(index, rows, io, *runner, o, watch);
  r.device = o.device.str();
  r.model = config.model.name;
  r.precision = io.backend.backend == InferBackend::kOpenVino
                    ? runner->name().substr(runner->name().find(' ') + 1)
                    : precision_name(io.precision);
  r.channels_last = io.channels_last;
  r.in_channels = config.model.in_channels;
  r.image_size = config.data.image_size;
  r.batch_size = io.batch_size;
  r.threads =
      io.backend.backend == InferBackend::kOpenVino ? io.backend.num_threads : torch::get_num_threads();
  r.loader_workers = io.num_workers;
  r.steps = o.steps;
  r.warmup = o.warmup;
  r.loader_steps = loader_steps(o);
  r.torch_version = TORCH_VERSION;
  if (o.on_figures) o.on_figures(r);
  return r;
}

namespace {

// The e2e queue's figures, per step and as shares of its time (the JSON's and the table's).
struct QueueFigures {
  double wait_ms_per_step, wait_share, empty_share, depth_mean;
};

QueueFigures queue_figures(const LoaderQueueStats& q) {
  const double wall = std::max(q.seconds, 1e-9);
  const size_t steps = std::max<size_t>(q.depth_at_next.size(), 1);
  return {1e3 * q.wait_seconds / steps, q.wait_seconds / wall, q.empty_seconds / wall,
          q.depth_seconds / wall};
}

nlohmann::json section_json(const SectionUsage& u) {
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& g : u.groups) {
    nlohmann::json e = {
        {"threads", g.threads}, {"cpu_s", g.cpu_seconds}, {"cores", g.cpu_seconds / u.wall_seconds}};
    e["wait_s"] = g.wait_seconds >= 0.0 ? nlohmann::json(g.wait_seconds) : nlohmann::json(nullptr);
    e["kernel_s"] = g.kernel_seconds;
    groups[g.group] = e;
  }
  return {
      {"wall_s", u.wall_seconds}, {"cores", u.cores()}, {"page_faults", u.page_faults}, {"groups", groups}};
}

// Where each figure's CPU went, and how the e2e steps found the loader's queue.
void add_cpu_json(const BenchResult& r, nlohmann::json& j) {
  j["cpu"] = {{"loader", section_json(r.loader_cpu)},
              {"compute", section_json(r.compute_cpu)},
              {"e2e", section_json(r.e2e_cpu)}};
  const QueueFigures f = queue_figures(r.e2e_queue);
  j["e2e_batch_wait_ms_per_step"] = f.wait_ms_per_step;
  j["e2e_batch_wait_share"] = f.wait_share;
  j["e2e_queue_empty_share"] = f.empty_share;
  j["e2e_queue_depth_mean"] = f.depth_mean;
  j["e2e_queue_depth_per_step"] = r.e2e_queue.depth_at_next;
}

}  // namespace

std::string bench_json(const BenchResult& r) {
  nlohmann::json j;
  j["implementation"] = "ranzcr";
  j["mode"] = r.mode;
  if (r.mode == "infer") j["backend"] = r.backend;
  j["loader_images_per_sec"] = r.loader_images_per_sec;
  j["compute_images_per_sec"] = r.compute_images_per_sec;
  j["e2e_images_per_sec"] = r.e2e_images_per_sec;
  if (r.world_size > 1) j["sync_wait_share"] = r.sync_wait_share;
  if (r.mode == "train") add_cpu_json(r, j);
  j["device"] = r.device;
  j["model"] = r.model;
  j["in_channels"] = r.in_channels;
  j["image_size"] = r.image_size;
  j["batch_size"] = r.batch_size;
  j["precision"] = r.precision;
  j["channels_last"] = r.channels_last;
  j["threads"] = r.threads;
  j["loader_workers"] = r.loader_workers;
  j["world_size"] = r.world_size;
  j["steps"] = r.steps;
  j["warmup"] = r.warmup;
  j["loader_steps"] = r.loader_steps;
  j["torch_version"] = r.torch_version;
  auto version = [](const std::string& v) { return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v); };
  j["versions"] = {{"torch", r.torch_version},
                   {"cudnn", version(r.cudnn_version)},
                   {"cublas", version(r.cublas_version)},
                   {"nccl", version(r.nccl_version)}};
  if (!r.profile_dir.empty()) j["profile_dir"] = r.profile_dir;
  if (!r.profile_error.empty()) j["profile_error"] = r.profile_error;
  return j.dump(2) + "\n";
}

namespace {

std::string infer_table(const BenchResult& r) {
  std::ostringstream ss;
  ss << "bench --infer: " << r.model << " " << r.image_size << " px, batch " << r.batch_size << ", run by "
     << r.backend << ", device " << r.device << ", " << r.loader_workers << " loader workers, " << r.steps
     << " batches after " << r.warmup << " warm-up\n";
  ss << std::fixed << std::setprecision(2);
  ss << "  loader   " << std::setw(10) << r.loader_images_per_sec
     << " images/s  (read, decode, resize, collate)\n";
  ss << "  model    " << std::setw(10) << r.compute_images_per_sec
     << " images/s  (the model alone, fixed batch)\n";
  ss << "  e2e      " << std::setw(10) << r.e2e_images_per_sec
     << " images/s  (files to logits, as predict)\n";
  return ss.str();
}

// Where the CPU went in each figure (cores used per wall second, by thread group) and the e2e batch wait.
std::string cpu_lines(const BenchResult& r) {
  std::ostringstream ss;
  ss << "  CPU, cores by thread group (waiting for a core, in the kernel):\n"
     << "    loader   " << usage_line(r.loader_cpu) << "\n"
     << "    compute  " << usage_line(r.compute_cpu) << "\n"
     << "    e2e      " << usage_line(r.e2e_cpu) << "\n";
  const QueueFigures f = queue_figures(r.e2e_queue);
  ss << std::fixed << std::setprecision(1) << "  e2e batch wait " << f.wait_ms_per_step << " ms per step ("
     << 100.0 * f.wait_share << "% of the time); prefetch queue empty " << 100.0 * f.empty_share
     << "% of the time, " << f.depth_mean << " batches ready on average\n";
  return ss.str();
}

}  // namespace

std::string bench_table(const BenchResult& r) {
  if (r.mode == "infer") return infer_table(r);
  std::ostringstream ss;
  ss << "bench: " << r.model << " " << r.image_size << " px, batch " << r.batch_size << " x " << r.world_size
     << " rank(s), " << r.precision << (r.channels_last ? ", channels_last" : "") << ", device " << r.device
     << ", " << r.threads << " threads, " << r.loader_workers << " loader workers, " << r.steps
     << " steps after " << r.warmup << " warm-up";
  if (r.loader_steps != r.steps) ss << " (loader: " << r.loader_steps << " batches)";
  ss << "\n";
  ss << std::fixed << std::setprecision(1);
  ss << "  loader   " << std::setw(10) << r.loader_images_per_sec
     << " images/s  (read, decode, augment, collate)\n";
  ss << "  compute  " << std::setw(10) << r.compute_images_per_sec
     << " images/s  (forward, backward, step; batch on device)\n";
  ss << "  e2e      " << std::setw(10) << r.e2e_images_per_sec
     << " images/s  (training step fed by the loader)\n";
  if (r.world_size > 1)
    ss << "  gradient sync wait: " << std::setprecision(1) << 100.0 * r.sync_wait_share << "% of e2e time\n";
  ss << cpu_lines(r);
  ss << "  LibTorch " << r.torch_version;
  if (!r.cudnn_version.empty()) ss << ", cuDNN " << r.cudnn_version;
  if (!r.cublas_version.empty()) ss << ", cuBLAS " << r.cublas_version;
  if (!r.nccl_version.empty()) ss << ", NCCL " << r.nccl_version;
  ss << "\n";
  return ss.str();
}

std::string bench_profile_report(const BenchResult& r) {
  if (r.profile_dir.empty()) return "";
  if (!r.profile_error.empty()) return "profile: failed, the figures above stand: " + r.profile_error + "\n";
  return "\n" + r.profile_table + "(the whole table: " + r.profile_dir +
         "/kernels.md; the trace: " + r.profile_dir +
         "/trace.json, for https://ui.perfetto.dev or chrome://tracing)\n";
}

}  // namespace ranzcr
