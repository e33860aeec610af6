#include "apps/commands.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <nlohmann/json.hpp>
#include <opencv2/core/version.hpp>

#include <atomic>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "data/dataset_index.h"
#include "data/split.h"
#include "data/synth.h"
#include "distributed/collectives.h"
#include "distributed/launcher.h"
#include "distributed/process_group.h"
#include "distributed/world.h"
#include "engine/bench.h"
#include "engine/checkpoint.h"
#include "engine/config.h"
#include "engine/curves.h"
#include "engine/inference.h"
#include "engine/metrics.h"
#include "engine/precision.h"
#include "engine/run_log.h"
#include "engine/trained_model.h"
#include "engine/trainer.h"
#include "models/registry.h"

namespace fs = std::filesystem;

namespace ranzcr {
namespace {

// The CPUs this process may use (affinity, cgroup quota, Slurm's --cpus-per-task).
int hardware_threads() {
  static const int n = usable_cpus(current_environment());
  return n;
}

void apply_threads(const Config& config) {
  if (config.train.num_threads > 0) torch::set_num_threads(config.train.num_threads);
}

// This process's device: a GPU when there are any (gpu_for_local_rank), else the CPU.
torch::Device worker_device(const WorldInfo& world) {
  if (!torch::cuda::is_available()) return torch::kCPU;
  const int gpus = static_cast<int>(torch::cuda::device_count());
  return torch::Device(torch::kCUDA,
                       static_cast<c10::DeviceIndex>(gpu_for_local_rank(world.local_rank, gpus)));
}

// NCCL needs GPUs and a LibTorch built with it.
void require_usable_backend(const std::string& backend) {
  if (backend != "nccl") return;
  if (!torch::cuda::is_available())
    throw std::runtime_error("distributed.backend nccl needs GPUs; none is visible (use gloo or auto)");
  if (!nccl_available())
    throw std::runtime_error(
        "distributed.backend nccl: this LibTorch was built without NCCL (use gloo or auto)");
}

// In a terminal: one line updated in place; in a log: a line per quarter.
void print_progress(int64_t done, int64_t total) {
  static const bool tty = ::isatty(STDOUT_FILENO);
  static int64_t last_quarter = -1;
  if (tty) {
    std::cout << "\rsynth: " << done << "/" << total << " images" << (done == total ? "\n" : "")
              << std::flush;
  } else if (done * 4 / std::max<int64_t>(total, 1) != last_quarter) {
    last_quarter = done * 4 / std::max<int64_t>(total, 1);
    std::cout << "synth: " << done << "/" << total << " images" << std::endl;
  }
}

bool same_folder(const std::string& a, const std::string& b) {
  auto norm = [](const std::string& p) { return fs::absolute(fs::path(p) / "").lexically_normal(); };
  return norm(a) == norm(b);
}

// Makes sure data.root holds a data set: generates the synthetic one when the config asks for it and
// data.root is where it lives (synth.root; never into a mistyped data.root), otherwise explains how to
// get the data.
void ensure_dataset(const Config& config, RunLog& log) {
  const fs::path root(config.data.root);
  if (fs::exists(train_csv_path(config.data))) return;
  const SynthConfig& synth = config.synth;
  if (!synth.generate_if_missing || !same_folder(synth.root, config.data.root)) {
    const std::string note =
        synth.generate_if_missing
            ? " (the synthetic data set is generated only in synth.root, " + synth.root + ")"
            : "";
    throw std::runtime_error(
        "data set not found: " + train_csv_path(config.data) +
        " (data.root). Put the Kaggle RANZCR CLiP data there (train.csv and train/), or generate a synthetic "
        "stand-in with: ./ranzcr synth --out " +
        root.string() + note);
  }
  if (fs::exists(root))
    throw std::runtime_error(root.string() + " exists but has no " + config.data.train_csv);
  log.info("generating the synthetic data set in " + root.string() + " (" +
           std::to_string(config.synth.num_images) + " images, " + std::to_string(config.synth.image_size) +
           " px, seed " + std::to_string(config.synth.seed) + "); done once");
  generate_synthetic(root.string(), config.synth, hardware_threads(), print_progress);
}

// The config for evaluate/predict: the given file, or the training run's own resolved config. The model
// section is always the trained model's own (its name, channels and input normalisation).
Config eval_config(const EvalArgs& args, const TrainedModelInfo& info) {
  Config config;
  if (!args.config.empty()) {
    config = load_config(args.config, args.sets);
  } else if (info.config_yaml.empty()) {
    throw std::runtime_error(args.checkpoint + " holds no training config: pass --config");
  } else {
    config = parse_config(info.config_yaml, args.checkpoint + " (embedded config)", args.sets);
  }
  config.model = info.model;
  config.data.label_columns = info.label_names;
  return config;
}

// A checkpoint or exported file, ready for inference on `device`.
TrainedModel load_for_inference(const EvalArgs& args, const torch::Device& device) {
  TrainedModel trained = load_trained_model(args.checkpoint, device);
  configure_device(device);
  return trained;
}

std::atomic<int> g_stop_signal{0};
std::atomic<int64_t> g_first_signal_ns{0};

int64_t monotonic_ns() {  // async-signal-safe
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// First SIGINT/SIGTERM: save soon and stop. Repeats are expected and ignored: Slurm signals every
// process of a step and our launcher forwards the same signal, torchrun may repeat it. A further signal
// stops at once only when it comes from someone else than our parent, kSignalRepeatSeconds or more
// after the first (a user who insists).
void on_stop_signal(int sig, siginfo_t* info, void*) {
  const int64_t now = monotonic_ns();
  int expected = 0;
  if (g_stop_signal.compare_exchange_strong(expected, sig)) {
    g_first_signal_ns = now;
    return;
  }
  const bool from_parent = info && info->si_code == SI_USER && info->si_pid == ::getppid();
  if (from_parent || now - g_first_signal_ns.load() < kSignalRepeatSeconds * 1000000000LL) return;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_sigaction = on_stop_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;  // file writes and waits go on; the flag is polled
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int workers_per_node(const Config& config) {
  const std::string& n = config.distributed.nproc_per_node;
  if (n != "auto") return std::stoi(n);
  return torch::cuda::is_available() ? std::max<int>(1, static_cast<int>(torch::cuda::device_count())) : 1;
}

int finish(const TrainSummary& summary, const Config& config, RunLog& log) {
  if (summary.stopped_by_signal) return 128 + summary.stopped_by_signal;
  if (summary.already_finished) return 0;
  log.info("done: best val_auc_mean " + std::to_string(summary.best_auc) + "; run folder " +
           config.output.dir);
  return 0;
}

// What a job runs on every process: training or the benchmark. Returns the exit status.
using JobBody = std::function<int(const Config&, Collectives&, RunLog&, const torch::Device&)>;

// One process of a multi-process job (started by us, torchrun, srun or a PyTorchJob).
int run_worker(const Config& config, const WorldInfo& world, const JobBody& body) {
  const torch::Device device = worker_device(world);
  // Share the cores among this node's workers (torchrun sets OMP_NUM_THREADS for the same reason).
  if (config.train.num_threads == 0)
    torch::set_num_threads(std::max(1, hardware_threads() / world.local_world_size));
  ProcessGroupOptions pgo;
  pgo.backend = resolve_backend(config.distributed.backend, device);
  require_usable_backend(pgo.backend);
  if (pgo.backend == "nccl" && device.is_cuda() && world.local_world_size > torch::cuda::device_count())
    throw std::runtime_error(
        std::to_string(world.local_world_size) + " ranks on this node share " +
        std::to_string(torch::cuda::device_count()) +
        " visible GPU(s): NCCL refuses two ranks on one GPU (use at most one process per "
        "GPU, or distributed.backend gloo)");
  pgo.init_method = config.distributed.init_method;
  pgo.timeout = std::chrono::milliseconds(static_cast<int64_t>(config.distributed.timeout_seconds * 1000));
  pgo.device = device;
  RunLog log(world.rank == 0);
  auto collectives = init_process_group(world, pgo);
  log.info("distributed: world size " + std::to_string(world.world_size) + ", " +
           std::to_string(world.local_world_size) + " ranks per node, backend " + pgo.backend + ", device " +
           device.str() + ", init " +
           (pgo.init_method == "env://"
                ? "env://" + world.master_addr + ":" + std::to_string(world.master_port)
                : pgo.init_method) +
           ", launcher " + world.launcher +
           (collectives->transport().empty() ? "" : ", " + collectives->transport()));
  if (world.local_rank == 0) ensure_dataset(config, log);  // one copy per node
  collectives->barrier();
  install_stop_handlers();
  const int status = body(config, *collectives, log, device);
  collectives->shutdown();
  return status;
}

// Runs `body` as this process's share of the job the config and environment describe: a worker under
// an external launcher, one process, or the launcher of this node's workers (which re-run `argv`).
int run_job(const Config& config, const std::vector<std::string>& argv, const JobBody& body) {
  const EnvMap env = current_environment();
  const std::string& nproc = config.distributed.nproc_per_node;
  // Under Slurm, one task per node that starts its own workers is asked for with nproc_per_node > 1.
  const bool slurm_tasks_are_nodes = nproc != "auto" && std::stoi(nproc) > 1;
  if (auto world = worker_from_env(env, slurm_tasks_are_nodes)) return run_worker(config, *world, body);

  const int nproc_here = workers_per_node(config);
  const NodePlan plan = node_plan_from_env(env, slurm_tasks_are_nodes);
  RunLog log(true);
  if (nproc_here == 1 && plan.nnodes == 1) {  // one process: no process group at all
    ensure_dataset(config, log);
    install_stop_handlers();
    auto collectives = make_local_collectives();
    return body(config, *collectives, log, worker_device(WorldInfo{}));
  }
  // Launcher: check what can be checked once here (one error line, not one per worker), then start
  // this node's workers.
  require_usable_backend(config.distributed.backend);
  ensure_dataset(config, log);
  load_train_index(config.data, index_options(config.data));
  LaunchOptions lo;
  lo.args = argv;
  lo.nproc = nproc_here;
  lo.node = plan;
  lo.grace_seconds = config.distributed.grace_seconds;
  const std::string& init = config.distributed.init_method;
  lo.host_store = init == "env://" || init == "env";
  log.info("launching " + std::to_string(nproc_here) + " workers on node " + std::to_string(plan.node_rank) +
           " of " + std::to_string(plan.nnodes) + " (" + plan.source + ")");
  return launch_workers(lo);
}

Config job_config(const std::string& path, std::vector<std::string> sets, const std::string& nproc_per_node) {
  if (!nproc_per_node.empty()) sets.push_back("distributed.nproc_per_node=" + nproc_per_node);
  Config config = load_config(path, sets);
  apply_threads(config);
  return config;
}

}  // namespace

int run_train(const TrainArgs& args) {
  const Config config = job_config(args.config, args.sets, args.nproc_per_node);
  if (!args.resume.empty()) read_checkpoint_meta(args.resume);  // fail early on a bad file
  return run_job(config, args.argv,
                 [&](const Config& c, Collectives& collectives, RunLog& log, const torch::Device& device) {
                   TrainOptions options;
                   options.resume_path = args.resume;
                   options.device = device;
                   options.stop_signal = &g_stop_signal;
                   return finish(train(c, collectives, log, options), c, log);
                 });
}

int run_bench(const BenchArgs& args) {
  const Config config = job_config(args.config, args.sets, args.nproc_per_node);
  return run_job(config, args.argv,
                 [&](const Config& c, Collectives& collectives, RunLog& log, const torch::Device& device) {
                   BenchOptions options;
                   options.steps = args.steps;
                   options.warmup = args.warmup;
                   options.device = device;
                   const BenchResult r = run_bench(c, collectives, options);
                   if (!collectives.is_main()) return 0;
                   std::cout << bench_table(r) << std::flush;
                   if (!args.out.empty()) {
                     write_file_atomic(args.out, bench_json(r));
                     std::cout << "wrote " << args.out << "\n";
                   }
                   return 0;
                 });
}

int run_evaluate(const EvalArgs& args) {
  const torch::Device device = worker_device(WorldInfo{});
  TrainedModel trained = load_for_inference(args, device);
  const TrainedModelInfo& meta = trained.info;
  Config config = eval_config(args, meta);
  apply_threads(config);
  RunLog log(true);
  IndexOptions io = index_options(config.data);
  io.label_columns = meta.label_names;
  DatasetIndex index;
  std::vector<int64_t> rows;
  std::string source;
  if (!args.csv.empty()) {
    if (args.images.empty())
      throw std::runtime_error("--csv needs --images (the folder of the CSV's images)");
    index = load_index(args.csv, args.images, io);
    rows.resize(index.size());
    std::iota(rows.begin(), rows.end(), 0);
    source = args.csv;
  } else {
    ensure_dataset(config, log);
    index = load_train_index(config.data, io);
    rows = validation_split(config, index).val;
    source = "validation split of " + train_csv_path(config.data);
  }
  set_memory_format(*trained.model, resolve_channels_last(config.train.channels_last, device));
  auto collectives = make_local_collectives();
  const InferenceResult r =
      run_inference(*trained.model, index, rows, inference_options(config, device, args.tta), *collectives);
  const double loss = torch::binary_cross_entropy_with_logits(r.logits, r.labels).item<double>();
  const AucReport auc = multilabel_auc(r.logits, r.labels, meta.label_names);

  std::cout << "evaluate " << args.checkpoint << " on " << source << " (" << r.rows.size(0) << " images)\n";
  std::cout << std::left << std::setw(30) << "label" << std::right << std::setw(10) << "AUC" << std::setw(11)
            << "positives\n";
  const auto positives = r.labels.sum(0);
  nlohmann::json per_class = nlohmann::json::object();
  for (size_t k = 0; k < meta.label_names.size(); ++k) {
    const auto& a = auc.per_class[k];
    std::cout << std::left << std::setw(30) << meta.label_names[k] << std::right << std::setw(10)
              << (a ? (std::ostringstream() << std::fixed << std::setprecision(4) << *a).str() : "undefined")
              << std::setw(10) << positives[k].item<int64_t>() << "\n";
    per_class[meta.label_names[k]] = a ? nlohmann::json(*a) : nlohmann::json();
  }
  std::cout << std::left << std::setw(30) << "mean" << std::right << std::setw(10) << std::fixed
            << std::setprecision(4) << auc.mean << "\nloss " << loss << "\n";
  for (const auto& name : auc.undefined) log.warn("column '" + name + "' has a single class: AUC undefined");
  if (r.skipped > 0) log.warn(std::to_string(r.skipped) + " unreadable images skipped");
  if (!args.out.empty()) {
    nlohmann::json j;
    j["auc_mean"] = std::isnan(auc.mean) ? nlohmann::json() : nlohmann::json(auc.mean);
    j["auc"] = per_class;
    j["loss"] = loss;
    j["num_images"] = r.rows.size(0);
    j["checkpoint"] = args.checkpoint;
    j["epoch"] = meta.epoch;
    j["weights"] = meta.ema ? "ema" : "model";
    j["source"] = source;
    j["tta_hflip"] = args.tta || config.train.tta_hflip;
    write_file_atomic(args.out, j.dump(2) + "\n");
    std::cout << "wrote " << args.out << "\n";
  }
  return 0;
}

int run_predict(const EvalArgs& args) {
  const torch::Device device = worker_device(WorldInfo{});
  TrainedModel trained = load_for_inference(args, device);
  const TrainedModelInfo& meta = trained.info;
  Config config = eval_config(args, meta);
  apply_threads(config);
  RunLog log(true);
  DatasetIndex index;
  if (!args.csv.empty()) {
    IndexOptions io = index_options(config.data);
    io.with_labels = false;
    io.label_columns = meta.label_names;
    index = load_index(args.csv, args.images, io);
  } else {
    index = index_from_folder(args.images, config.data.image_ext);
  }
  index.label_names = meta.label_names;
  std::vector<int64_t> rows(index.size());
  std::iota(rows.begin(), rows.end(), 0);
  set_memory_format(*trained.model, resolve_channels_last(config.train.channels_last, device));
  auto collectives = make_local_collectives();
  log.info("predict: " + std::to_string(index.size()) + " images from " + args.images);
  const InferenceResult r =
      run_inference(*trained.model, index, rows, inference_options(config, device, args.tta), *collectives);
  const torch::Tensor probs = torch::sigmoid(r.logits).contiguous();
  std::ostringstream csv;
  csv << config.data.id_column;
  for (const auto& name : meta.label_names) csv << "," << name;
  csv << "\n" << std::fixed << std::setprecision(6);
  const auto pa = probs.accessor<float, 2>();
  const auto ra = r.rows.accessor<int64_t, 1>();
  for (int64_t i = 0; i < probs.size(0); ++i) {
    csv << index.ids[ra[i]];
    for (int64_t k = 0; k < probs.size(1); ++k) csv << "," << pa[i][k];
    csv << "\n";
  }
  write_file_atomic(args.out, csv.str());
  if (r.skipped > 0)
    log.warn(std::to_string(r.skipped) + " unreadable images skipped (no row written for them)");
  log.info("wrote " + args.out + " (" + std::to_string(probs.size(0)) + " rows)");
  return 0;
}

int run_synth(const SynthArgs& args) {
  SynthConfig config;
  config.num_images = args.num_images;
  config.num_test_images = args.num_test_images;
  config.image_size = args.image_size;
  config.seed = args.seed;
  const int threads = args.threads > 0 ? args.threads : hardware_threads();
  generate_synthetic(args.out, config, threads, print_progress);
  std::cout << "wrote " << args.out << ": train.csv, train/ (" << args.num_images
            << "), train_annotations.csv, test/ (" << args.num_test_images
            << "), sample_submission.csv, test_labels.csv\n";
  return 0;
}

std::string version_text() {
  std::ostringstream v;
  v << "ranzcr " << RANZCR_VERSION << "\nLibTorch " << TORCH_VERSION;
  if (at::hasCUDA()) {
    const auto& hooks = at::detail::getCUDAHooks();
    const long cuda = hooks.versionCUDART();
    v << " (CUDA " << cuda / 1000 << "." << cuda % 1000 / 10;
    if (hooks.hasCuDNN()) {
      const long cudnn = hooks.versionCuDNN();
      v << ", cuDNN " << cudnn / 10000 << "." << cudnn % 10000 / 100 << "." << cudnn % 100;
    }
    v << ")";
  } else {
    v << " (CPU only)";
  }
  const std::string nccl = nccl_version();
  v << "\nOpenCV " << CV_VERSION << "\nNCCL " << (nccl.empty() ? "not built in" : nccl);
  return v.str();
}

int run_plot(const PlotArgs& args) {
  for (const auto& path : write_curves(args.run_dir)) std::cout << "wrote " << path << "\n";
  return 0;
}

int run_export(const ExportArgs& args) {
  const TrainedModel trained = load_trained_model(args.checkpoint, torch::kCPU);
  const TrainedModelInfo& info = trained.info;
  const int64_t n = export_safetensors(trained, args.out);
  std::cout << "wrote " << args.out << ": " << info.model.name << ", " << n << " tensors ("
            << (info.ema ? "the EMA weights" : "the model's weights") << " after epoch " << info.epoch
            << "), " << info.label_names.size() << " labels, " << info.model.in_channels << " input channel"
            << (info.model.in_channels == 1 ? "" : "s") << "\n";
  return 0;
}

int run_models() {
  for (const auto& name : model_names()) std::cout << name << "\n";
  return 0;
}

}  // namespace ranzcr
