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
#include "engine/config/config.h"
#include "engine/infer/ensemble.h"
#include "engine/infer/inference.h"
#include "engine/io/checkpoint.h"
#include "engine/io/trained_model.h"
#include "engine/jobs/bench.h"
#include "engine/jobs/cross_validation.h"
#include "engine/report/curves.h"
#include "engine/report/metrics.h"
#include "engine/report/run_log.h"
#include "engine/runtime/cuda_support.h"
#include "engine/runtime/precision.h"
#include "engine/train/trainer.h"
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

// NCCL needs GPUs and a LibTorch built with it.
void require_usable_backend(const std::string& backend) {
  if (backend != "nccl") return;
  if (!torch::cuda::is_available())
    throw std::runtime_error("distributed.backend nccl needs GPUs; none is visible (use gloo or auto)");
  if (!nccl_available())
    throw std::runtime_error(
        "distributed.backend nccl: this LibTorch was built without NCCL (use gloo or auto)");
}

int visible_gpus() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

// Where a process of `world` runs: its device (train.device) and, in a process group, the backend.
struct Placement {
  torch::Device device = torch::kCPU;
  std::string backend;  // "" for a single process (launcher "single": no process group)
};

// Throws one clear line when train.device or the backend cannot work here: cuda without a GPU, cuda:N
// out of range or shared, NCCL without GPUs or with ranks truly sharing a GPU (more ranks on the node
// than GPUs, unless each rank was given its own: srun --gpus-per-task, CUDA_VISIBLE_DEVICES per rank).
Placement place(const Config& config, const WorldInfo& world, const EnvMap& env) {
  const int gpus = visible_gpus();
  const bool own = gpus_assigned_per_rank(env, world);
  Placement p;
  p.device = resolve_device(config.train.device, world.local_rank, world.local_world_size, gpus, own);
  if (world.launcher == "single") return p;
  p.backend = resolve_backend(config.distributed.backend, p.device);
  require_usable_backend(p.backend);
  if (p.backend == "nccl" && local_ranks_share_gpu(world.local_world_size, gpus, own))
    throw std::runtime_error(
        std::to_string(world.local_world_size) + " ranks on this node share " + std::to_string(gpus) +
        " visible GPU(s): NCCL refuses two ranks on one GPU (use at most one process per "
        "GPU, distributed.backend gloo, or train.device cpu)");
  return p;
}

// Settles this process on `device` (the current CUDA device before any CUDA allocation).
torch::Device settle(const torch::Device& device) {
  cuda::set_device(device);
  return device;
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

// The models of evaluate/predict: every --checkpoint (in order), then those of --checkpoints-from.
std::vector<std::string> model_paths(const EvalArgs& args) {
  std::vector<std::string> paths = args.checkpoints;
  if (!args.checkpoints_from.empty())
    for (const auto& path : checkpoints_in(args.checkpoints_from)) paths.push_back(path);
  if (paths.empty())
    throw std::runtime_error(
        "no model given: pass --checkpoint FILE (repeatable) or --checkpoints-from RUN_DIR");
  return paths;
}

// The config for evaluate/predict: the given file, or the first model's own resolved config; one process
// unless --nproc-per-node. The model section is always the first model's own (its name, channels and input
// normalisation), the label columns its labels.
Config eval_config(const EvalArgs& args, const std::vector<std::string>& paths) {
  const TrainedModelInfo info = load_trained_model(paths.front(), torch::kCPU).info;
  std::vector<std::string> sets = args.sets;
  sets.push_back("distributed.nproc_per_node=" + (args.nproc_per_node.empty() ? "1" : args.nproc_per_node));
  Config config;
  if (!args.config.empty()) {
    config = load_config(args.config, sets);
  } else if (info.config_yaml.empty()) {
    throw std::runtime_error(paths.front() + " holds no training config: pass --config");
  } else {
    config = parse_config(info.config_yaml, paths.front() + " (embedded config)", sets);
  }
  config.model = info.model;
  config.data.label_columns = info.label_names;
  apply_threads(config);
  return config;
}

// Each ensemble member's inference settings: the config's, with the model's own model section; with
// several models also its own training data.image_size and data.augment.clahe (--set applied).
MemberOptions member_options(const EvalArgs& args, const Config& config, const torch::Device& device,
                             bool several) {
  return [&args, config, device, several](const TrainedModelInfo& info) {
    Config own = config;
    own.model = info.model;
    if (several && !info.config_yaml.empty()) {
      const Config trained = parse_config(info.config_yaml, info.path + " (embedded config)", args.sets);
      own.data.image_size = trained.data.image_size;
      own.data.augment.clahe = trained.data.augment.clahe;
    }
    return inference_options(own, device, args.tta);
  };
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
  const DeviceSetting d = parse_device_setting(config.train.device);  // cpu or one GPU: one process
  return d.type == "cpu" || d.index >= 0 ? 1 : std::max(1, visible_gpus());
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
int run_worker(const Config& config, const WorldInfo& world, const EnvMap& env, bool needs_dataset,
               const JobBody& body) {
  const Placement placement = place(config, world, env);
  const torch::Device device = settle(placement.device);
  // Share the cores among this node's workers (torchrun sets OMP_NUM_THREADS for the same reason).
  if (config.train.num_threads == 0)
    torch::set_num_threads(std::max(1, hardware_threads() / world.local_world_size));
  ProcessGroupOptions pgo;
  pgo.backend = placement.backend;
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
  if (world.local_rank == 0 && needs_dataset) ensure_dataset(config, log);  // one copy per node
  collectives->barrier();
  install_stop_handlers();
  const int status = body(config, *collectives, log, device);
  collectives->shutdown();
  return status;
}

// Runs `body` as this process's share of the job the config and environment describe: a worker under
// an external launcher, one process, or the launcher of this node's workers (which re-run `argv`).
// `needs_dataset`: the job reads the config's training data set (generated first when it is synthetic).
int run_job(const Config& config, const std::vector<std::string>& argv, const JobBody& body,
            bool needs_dataset = true) {
  const EnvMap env = current_environment();
  const std::string& nproc = config.distributed.nproc_per_node;
  // Under Slurm, one task per node that starts its own workers is asked for with nproc_per_node > 1.
  const bool slurm_tasks_are_nodes = nproc != "auto" && std::stoi(nproc) > 1;
  if (auto world = worker_from_env(env, slurm_tasks_are_nodes))
    return run_worker(config, *world, env, needs_dataset, body);

  const int nproc_here = workers_per_node(config);
  const NodePlan plan = node_plan_from_env(env, slurm_tasks_are_nodes);
  RunLog log(true);
  if (nproc_here == 1 && plan.nnodes == 1) {  // one process: no process group at all
    const torch::Device device = settle(place(config, WorldInfo{}, env).device);
    if (needs_dataset) ensure_dataset(config, log);
    install_stop_handlers();
    auto collectives = make_local_collectives();
    return body(config, *collectives, log, device);
  }
  // Launcher: check what can be checked once here (one error line, not one per worker), then start
  // this node's workers.
  WorldInfo workers;
  workers.launcher = "self";
  workers.local_world_size = nproc_here;
  workers.world_size = nproc_here * plan.nnodes;
  place(config, workers, env);
  if (needs_dataset) {
    ensure_dataset(config, log);
    load_train_index(config.data, index_options(config.data));
  }
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

namespace {

// What evaluate runs on: rows of an index, and how to name them.
struct EvalData {
  DatasetIndex index;
  std::vector<int64_t> rows;
  std::string source;
};

EvalData evaluation_data(const EvalArgs& args, const Config& config) {
  IndexOptions io = index_options(config.data);
  io.label_columns = config.data.label_columns;
  EvalData d;
  if (!args.csv.empty()) {
    d.index = load_index(args.csv, args.images, io);
    d.rows.resize(d.index.size());
    std::iota(d.rows.begin(), d.rows.end(), 0);
    d.source = args.csv;
  } else {
    d.index = load_train_index(config.data, io);
    d.rows = validation_split(config.data, d.index.groups, config.seed).val;
    d.source = "validation split of " + train_csv_path(config.data);
  }
  return d;
}

std::string models_text(const std::vector<std::string>& paths) {
  if (paths.size() == 1) return paths.front();
  std::string s = "an ensemble of " + std::to_string(paths.size()) + " models (";
  for (size_t i = 0; i < paths.size(); ++i) s += (i ? ", " : "") + paths[i];
  return s + ")";
}

// The per-label table on stdout.
void print_evaluation(const std::vector<std::string>& paths, const EvalData& data, const EnsembleResult& r,
                      const AucReport& auc, double loss) {
  const std::vector<std::string>& names = r.models.front().label_names;
  std::cout << "evaluate " << models_text(paths) << " on " << data.source << " (" << r.rows.size(0)
            << " images)\n";
  std::cout << std::left << std::setw(30) << "label" << std::right << std::setw(10) << "AUC" << std::setw(11)
            << "positives\n";
  const auto positives = r.labels.sum(0);
  for (size_t k = 0; k < names.size(); ++k) {
    const auto& a = auc.per_class[k];
    std::cout << std::left << std::setw(30) << names[k] << std::right << std::setw(10)
              << (a ? (std::ostringstream() << std::fixed << std::setprecision(4) << *a).str() : "undefined")
              << std::setw(10) << positives[k].item<int64_t>() << "\n";
  }
  std::cout << std::left << std::setw(30) << "mean" << std::right << std::setw(10) << std::fixed
            << std::setprecision(4) << auc.mean << "\nloss " << loss << "\n";
}

nlohmann::json evaluation_json(const std::vector<std::string>& paths, const EvalData& data,
                               const EnsembleResult& r, const AucReport& auc, double loss) {
  const std::vector<std::string>& names = r.models.front().label_names;
  nlohmann::json j, per_class = nlohmann::json::object();
  for (size_t k = 0; k < names.size(); ++k)
    per_class[names[k]] = auc.per_class[k] ? nlohmann::json(*auc.per_class[k]) : nlohmann::json();
  j["auc_mean"] = std::isnan(auc.mean) ? nlohmann::json() : nlohmann::json(auc.mean);
  j["auc"] = per_class;
  j["loss"] = loss;
  j["num_images"] = r.rows.size(0);
  j["checkpoints"] = paths;
  j["models"] = nlohmann::json::array();
  for (size_t i = 0; i < r.models.size(); ++i)
    j["models"].push_back({{"checkpoint", paths[i]},
                           {"model", r.models[i].model.name},
                           {"epoch", r.models[i].epoch},
                           {"weights", r.models[i].ema ? "ema" : "model"},
                           {"image_size", r.options[i].image_size}});
  if (paths.size() == 1) {
    j["checkpoint"] = paths.front();
    j["epoch"] = r.models.front().epoch;
    j["weights"] = r.models.front().ema ? "ema" : "model";
  }
  j["source"] = data.source;
  j["tta_hflip"] = r.options.front().tta_hflip;
  return j;
}

// Rank 0's part of evaluate: AUC and loss (one model: of its logits, as validation; an ensemble: of the
// averaged probabilities), the table, the JSON.
void report_evaluation(const EvalArgs& args, const std::vector<std::string>& paths, const EvalData& data,
                       const EnsembleResult& r, RunLog& log) {
  const bool single = paths.size() == 1;
  const std::vector<std::string>& names = r.models.front().label_names;
  const double loss = single ? torch::binary_cross_entropy_with_logits(r.logits, r.labels).item<double>()
                             : probability_bce(r.probs, r.labels);
  const AucReport auc = multilabel_auc(single ? r.logits : r.probs, r.labels, names);
  print_evaluation(paths, data, r, auc, loss);
  for (const auto& name : auc.undefined) log.warn("column '" + name + "' has a single class: AUC undefined");
  if (r.skipped > 0) log.warn(std::to_string(r.skipped) + " unreadable images skipped");
  if (args.out.empty()) return;
  write_file_atomic(args.out, evaluation_json(paths, data, r, auc, loss).dump(2) + "\n");
  std::cout << "wrote " << args.out << "\n";
}

DatasetIndex prediction_index(const EvalArgs& args, const Config& config) {
  DatasetIndex index;
  if (!args.csv.empty()) {
    IndexOptions io = index_options(config.data);
    io.with_labels = false;
    io.label_columns = config.data.label_columns;
    index = load_index(args.csv, args.images, io);
  } else {
    index = index_from_folder(args.images, config.data.image_ext);
  }
  index.label_names = config.data.label_columns;
  return index;
}

std::string submission_csv(const Config& config, const DatasetIndex& index, const EnsembleResult& r) {
  std::ostringstream csv;
  csv << config.data.id_column;
  for (const auto& name : index.label_names) csv << "," << name;
  csv << "\n" << std::fixed << std::setprecision(6);
  const auto pa = r.probs.accessor<double, 2>();
  const auto ra = r.rows.accessor<int64_t, 1>();
  for (int64_t i = 0; i < r.probs.size(0); ++i) {
    csv << index.ids[ra[i]];
    for (int64_t k = 0; k < r.probs.size(1); ++k) csv << "," << pa[i][k];
    csv << "\n";
  }
  return csv.str();
}

// `cv`'s training of fold `k`: a `train` run with data.fold and output.dir set (its workers, with
// nproc_per_node > 1, re-run that `train` command line). Skipped when the fold's run is finished.
int train_fold(const CvArgs& args, const Config& config, int k, RunLog& log) {
  const Config fold = fold_config(config, k);
  const std::string name = "cv: fold " + std::to_string(k) + " of " + std::to_string(config.data.folds);
  if (const std::string done = fold_finished(fold); !done.empty()) {
    log.info(name + ": already finished (" + done + ") in " + fold.output.dir + "; not trained again");
    return 0;
  }
  if (const int sig = g_stop_signal.load()) return 128 + sig;
  log.info(name + ": training in " + fold.output.dir);
  std::string dir_yaml;  // output.dir as a single-quoted YAML string
  for (char ch : fold.output.dir) dir_yaml += ch == '\'' ? std::string("''") : std::string(1, ch);
  TrainArgs t;
  t.config = args.config;
  t.sets = args.sets;
  t.sets.push_back("data.fold=" + std::to_string(k));
  t.sets.push_back("output.dir='" + dir_yaml + "'");
  t.nproc_per_node = args.nproc_per_node;
  t.argv = {"train", "--config", args.config};
  for (const auto& s : t.sets) t.argv.insert(t.argv.end(), {"--set", s});
  if (!args.nproc_per_node.empty()) t.argv.insert(t.argv.end(), {"--nproc-per-node", args.nproc_per_node});
  return run_train(t);
}

}  // namespace

int run_evaluate(const EvalArgs& args) {
  const std::vector<std::string> paths = model_paths(args);
  if (!args.csv.empty() && args.images.empty())
    throw std::runtime_error("--csv needs --images (the folder of the CSV's images)");
  const Config config = eval_config(args, paths);
  auto body = [&](const Config& c, Collectives& collectives, RunLog& log, const torch::Device& device) {
    configure_device(device);
    const EvalData data = evaluation_data(args, c);
    const EnsembleResult r = run_ensemble(paths, member_options(args, c, device, paths.size() > 1),
                                          data.index, data.rows, device, collectives);
    if (collectives.is_main()) report_evaluation(args, paths, data, r, log);
    return 0;
  };
  return run_job(config, args.argv, body, /*needs_dataset=*/args.csv.empty());
}

int run_predict(const EvalArgs& args) {
  const std::vector<std::string> paths = model_paths(args);
  const Config config = eval_config(args, paths);
  auto body = [&](const Config& c, Collectives& collectives, RunLog& log, const torch::Device& device) {
    configure_device(device);
    const DatasetIndex index = prediction_index(args, c);
    std::vector<int64_t> rows(index.size());
    std::iota(rows.begin(), rows.end(), 0);
    log.info("predict: " + std::to_string(index.size()) + " images from " + args.images + " with " +
             models_text(paths));
    const EnsembleResult r = run_ensemble(paths, member_options(args, c, device, paths.size() > 1), index,
                                          rows, device, collectives);
    if (!collectives.is_main()) return 0;
    write_file_atomic(args.out, submission_csv(c, index, r));
    if (r.skipped > 0)
      log.warn(std::to_string(r.skipped) + " unreadable images skipped (no row written for them)");
    log.info("wrote " + args.out + " (" + std::to_string(r.probs.size(0)) + " rows)");
    return 0;
  };
  return run_job(config, args.argv, body, /*needs_dataset=*/false);
}

int run_cv(const CvArgs& args) {
  const Config config = job_config(args.config, args.sets, args.nproc_per_node);
  if (config.data.folds < 2)
    throw std::runtime_error("cv needs data.folds >= 2 (it is " + std::to_string(config.data.folds) +
                             "): set it in the config or with --set data.folds=5");
  RunLog log(true);
  for (int k = 0; k < config.data.folds; ++k)
    if (const int status = train_fold(args, config, k, log); status != 0) return status;
  if (const int sig = g_stop_signal.load()) return 128 + sig;
  const torch::Device device = settle(place(config, WorldInfo{}, current_environment()).device);
  configure_device(device);
  const CvReport report = write_out_of_fold(config, device, log);
  log.info("cv: out-of-fold mean AUC " + std::to_string(report.auc.mean) + " over " +
           std::to_string(report.num_images) + " images; wrote " + config.output.dir + "/oof.csv and " +
           config.output.dir + "/cv.json");
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
