// The subcommands: each reads its config, then runs a job (processes.h) whose body calls the engine.
#include "apps/commands.h"
#include "core/text.h"

#include "apps/hub_weights.h"
#include "apps/trackers.h"
#include "core/check.h"

#include "net/http.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <opencv2/core/utility.hpp>
#include <opencv2/core/version.hpp>

#include <link.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <optional>
#include <sstream>

#include "apps/processes.h"
#include "apps/stop_signals.h"
#include "core/durable_file.h"
#include "data/synth.h"
#include "distributed/process_group.h"
#include "engine/infer/ensemble.h"
#include "engine/infer/grad_cam.h"
#include "engine/infer/inference.h"
#include "engine/infer/onnx_graph.h"
#include "engine/io/run_folder.h"
#include "engine/io/trained_model.h"
#include "engine/jobs/bench.h"
#include "engine/jobs/cross_validation.h"
#include "engine/report/curves.h"
#include "engine/report/eval_outputs.h"
#include "engine/report/tracked_run.h"
#include "engine/runtime/precision.h"
#include "onnx/onnx_export.h"
#ifdef RANZCR_WITH_SERVE
#include "engine/serve/http_server.h"
#endif
#include "engine/train/trainer.h"
#include "models/registry.h"

namespace ranzcr {
namespace {

// The models of evaluate/predict: every --checkpoint (in order), then those of --checkpoints-from.
std::vector<std::string> model_paths(const EvalArgs& args) {
  std::vector<std::string> paths = args.checkpoints;
  if (!args.checkpoints_from.empty())
    for (const auto& path : checkpoints_in(args.checkpoints_from)) paths.push_back(path);
  RANZCR_CHECK(!paths.empty(),
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
    RANZCR_FAIL(paths.front(), " holds no training config: pass --config");
  } else {
    config = parse_config(info.config_yaml, paths.front() + " (embedded config)", sets);
  }
  config.model = info.model;
  config.data.label_columns = info.label_names;
  apply_job_settings(config);
  return config;
}

// Each ensemble member's inference settings: the config's, with the model's own model section; with
// several models also its own training data.image_size, data.cache_size (and augment.scale, which sizes it
// when 0), data.augment.clahe and data.dicom (--set applied).
MemberOptions member_options(const EvalArgs& args, const Config& config, const torch::Device& device,
                             bool several, InferUse use) {
  return [&args, config, device, several, use](const TrainedModelInfo& info) {
    Config own = config;
    own.model = info.model;
    if (several && !info.config_yaml.empty()) {
      const Config trained = parse_config(info.config_yaml, info.path + " (embedded config)", args.sets);
      own.data.image_size = trained.data.image_size;
      own.data.cache_size = trained.data.cache_size;
      own.data.augment.scale = trained.data.augment.scale;  // with cache_size 0, the prepared size
      own.data.augment.clahe = trained.data.augment.clahe;
      own.data.dicom = trained.data.dicom;
    }
    return command_inference_options(own, device, use, args.tta);
  };
}

// What evaluate reports of an ensemble's result (engine/report/eval_outputs.h).
EvalPredictions eval_predictions(const EnsembleResult& r) {
  EvalPredictions p{r.probs, r.logits, r.labels, r.rows, r.skipped, {}, r.options.front().tta_hflip};
  for (size_t i = 0; i < r.models.size(); ++i) p.models.push_back({r.models[i], r.options[i].image_size});
  return p;
}

// cv's trackers' run: the parent of the folds' runs, continued from the cv folder's record, with the
// out-of-fold figures (oof_auc_mean, oof_auc/<label>, ...) and files at the end.
std::unique_ptr<TrackedRun> open_cv_run(const Config& c, const tracking::TrackerFactory& trackers,
                                        Collectives& collectives, const torch::Device& device) {
  auto run = std::make_unique<TrackedRun>(trackers("cv"));
  if (run->empty()) return nullptr;
  tracking::RunStart start;
  start.command = "cv";
  start.run_dir = c.output.dir;
  start.continue_folder_run = c.train.resume == ResumeSetting::kAuto;
  start.params = config_params(c);
  start.tags = {{"ranzcr.device", device.str()},
                {"ranzcr.world_size", std::to_string(collectives.world_size())},
                {"ranzcr.model", c.model.name}};
  run->open(start, {}, {});
  return run->empty() ? nullptr : std::move(run);
}

void end_cv_run(TrackedRun& run, const Config& c) {
  const std::string report = run_folder::cv_report_file(c.output.dir);
  std::ifstream in(report);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<tracking::Figure> figures;
  for (const auto& [key, value] : figures_of_json_line(json))
    figures.push_back({key.rfind("auc", 0) == 0 ? "oof_" + key : key, value});
  run.log_figures(figures, c.data.folds);
  run.log_artifact(run_folder::config_file(c.output.dir));
  run.log_artifact(report);
  run.log_artifact(run_folder::out_of_fold_file(c.output.dir));
  run.finish(tracking::RunStatus::kFinished);
}

int finish(const TrainSummary& summary, const Config& config, RunLog& log) {
  if (summary.stopped_by_signal) return 128 + summary.stopped_by_signal;
  if (summary.already_finished) return 0;
  log.info("done: best val_auc_mean " + std::to_string(summary.best_auc) + "; run folder " +
           config.output.dir);
  return 0;
}

}  // namespace

int run_train(const TrainArgs& args) {
  Config config = job_config(args.config, args.sets, args.nproc_per_node);
  const TrackingSetup tracking = tracking_setup(config, args.config);
  if (!args.resume.empty()) read_checkpoint_meta(args.resume);  // fail early on a bad file
  return run_job(
      config, args.argv,
      [&](const Job& job, Collectives& collectives, RunLog& log, const torch::Device& device) {
        const Config& c = job.config;
        TrainOptions options;
        options.resume_path = args.resume;
        options.weights = job.weights;
        options.device = device;
        options.stop_signal = &stop_signal();
        options.trackers = tracker_factory(tracking, log);
        return finish(train(c, collectives, log, options), c, log);
      },
      JobInputs{/*dataset=*/true, /*resume=*/args.resume});  // its run's Hub pin, not main's newest
}

int run_bench(const BenchArgs& args) {
  RANZCR_CHECK(!args.infer || args.profile.empty(),
               "--profile records training steps; it does not go with --infer (expected one of them)");
  RANZCR_CHECK(args.infer || args.onnx.empty(),
               "--onnx writes the graph bench --infer runs: it needs --infer");
  const Config config = job_config(args.config, args.sets, args.nproc_per_node);
  return run_job(
      config, args.argv, [&](const Job& job, Collectives& collectives, RunLog&, const torch::Device& device) {
        const Config& c = job.config;
        BenchOptions options;
        options.steps = args.steps;
        options.warmup = args.warmup;
        options.loader_steps = args.loader_steps;
        options.device = device;
        options.weights = job.weights;
        options.profile_dir = args.profile;
        options.infer = args.infer;
        options.onnx_out = args.onnx;
        options.profile_steps = args.profile_steps;
        // The figures are out (stdout and --out) before the profile starts: a profile that fails
        // or is cut short by a time limit costs none of them.
        options.on_figures = [&](const BenchResult& r) {
          if (!collectives.is_main()) return;
          std::cout << bench_table(r) << std::flush;
          if (!args.out.empty()) {
            write_file_atomic(args.out, bench_json(r));
            std::cout << "wrote " << args.out << "\n" << std::flush;
          }
        };
        const BenchResult r =
            args.infer ? run_infer_bench(c, collectives, options) : run_bench(c, collectives, options);
        if (!collectives.is_main()) return 0;
        std::cout << bench_profile_report(r) << std::flush;
        if (!r.profile_error.empty() && !args.out.empty())
          write_file_atomic(args.out, bench_json(r));  // the same figures, and why no profile
        return 0;
      });
}

int run_evaluate(const EvalArgs& args) {
  const std::vector<std::string> paths = model_paths(args);
  RANZCR_CHECK(args.csv.empty() || !args.images.empty(),
               "--csv needs --images (the folder of the CSV's images)");
  const Config config = eval_config(args, paths);
  auto body = [&](const Job& job, Collectives& collectives, RunLog& log, const torch::Device& device) {
    const Config& c = job.config;
    const EvalData data = evaluation_data(c, args.csv, args.images);
    log.info("evaluate: " + models_text(paths) + " run by " +
             backend_name(resolve_backend(c, device, InferUse::kMetrics)));
    const EnsembleResult r =
        run_ensemble(paths, member_options(args, c, device, paths.size() > 1, InferUse::kMetrics), data.index,
                     data.rows, device, collectives);
    if (!collectives.is_main()) return 0;
    const EvalReport report =
        report_evaluation(paths, data, eval_predictions(r),
                          EvalReportOptions{args.out, args.bootstrap, static_cast<uint64_t>(c.seed)}, log);
    track_evaluation(args.tracker_run, c, paths, report, log);
    return 0;
  };
  return run_job(config, args.argv, body, JobInputs{/*dataset=*/args.csv.empty(), ""});
}

namespace {

// predict --cam: every rank writes the overlays of its share of the images.
void write_overlays(const EvalArgs& args, const std::vector<std::string>& paths, const EnsembleResult& r,
                    const DatasetIndex& index, const torch::Device& device, Collectives& collectives,
                    RunLog& log) {
  CamOptions cam;
  cam.dir = args.cam_dir;
  cam.labels = args.cam_labels;
  log.info("predict: Grad-CAM overlays of " + std::to_string(r.rows.size(0)) + " images into " + cam.dir);
  const int64_t written = write_cams(paths, r, index, cam, device, collectives);
  log.info("predict: wrote " + std::to_string(written) + " overlays" +
           (collectives.world_size() > 1 ? " on rank 0 (the other ranks theirs)" : "") + " into " + cam.dir);
}

}  // namespace

int run_predict(const EvalArgs& args) {
  const std::vector<std::string> paths = model_paths(args);
  const Config config = eval_config(args, paths);
  auto body = [&](const Job& job, Collectives& collectives, RunLog& log, const torch::Device& device) {
    const Config& c = job.config;
    const DatasetIndex index = prediction_index(c, args.csv, args.images);
    const std::optional<LabelThresholds> thresholds =
        prediction_thresholds(args.thresholds, args.at, index.label_names);
    if (!args.cam_dir.empty())
      cam_label_indices(CamOptions{args.cam_dir, args.cam_labels}, index.label_names);
    if (thresholds && !thresholds->missing.empty()) {
      std::string names;
      for (const auto& n : thresholds->missing) names += (names.empty() ? "" : ", ") + n;
      log.warn(args.thresholds + " has no " + args.at + " threshold for " + names +
               " (one class only where evaluate ran): their :" + args.at + " columns stay empty");
    }
    std::vector<int64_t> rows(index.size());
    std::iota(rows.begin(), rows.end(), 0);
    log.info("predict: " + std::to_string(index.size()) + " images from " + args.images + " with " +
             models_text(paths) + " run by " +
             backend_name(resolve_backend(c, device, InferUse::kPredictions)));
    const EnsembleResult r =
        run_ensemble(paths, member_options(args, c, device, paths.size() > 1, InferUse::kPredictions), index,
                     rows, device, collectives);
    if (!args.cam_dir.empty()) write_overlays(args, paths, r, index, device, collectives, log);
    if (!collectives.is_main()) return 0;
    write_file_atomic(args.out, submission_csv(c.data.id_column, index, r.probs, r.rows, thresholds));
    if (r.skipped > 0)
      log.warn(std::to_string(r.skipped) + " unreadable images skipped (no row written for them)");
    log.info("wrote " + args.out + " (" + std::to_string(r.probs.size(0)) + " rows)");
    return 0;
  };
  return run_job(config, args.argv, body, JobInputs{/*dataset=*/false, ""});
}

namespace {

#ifdef RANZCR_WITH_SERVE
// The bearer token of --token-file: its first line, trimmed; an empty one is an error.
std::string read_token(const std::string& path) {
  std::ifstream in(path);
  RANZCR_CHECK(in, "cannot read --token-file ", path);
  std::string token;
  std::getline(in, token);
  const auto first = token.find_first_not_of(" \t\r"), last = token.find_last_not_of(" \t\r");
  RANZCR_CHECK(first != std::string::npos, "--token-file ", path, " is empty (one line: the token)");
  return token.substr(first, last - first + 1);
}

ServeOptions serve_options(const ServeArgs& args, const Config& config,
                           const std::optional<LabelThresholds>& thresholds) {
  ServeOptions o;
  o.host = args.host;
  o.port = args.port;
  o.batcher.max_batch = args.max_batch;
  o.batcher.max_wait = std::chrono::microseconds(static_cast<int64_t>(args.max_wait_ms * 1000));
  o.batcher.max_queue = args.max_queue;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(args.timeout_ms));
  o.max_body_bytes = static_cast<size_t>(args.max_body_mb) << 20;
  const auto ms = [](double seconds) {
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  };
  o.max_header_bytes = static_cast<size_t>(args.max_header_kb) << 10;
  o.header_timeout = ms(args.header_timeout_s);
  o.body_timeout = ms(args.body_timeout_s);
  o.body_min_rate = std::max<size_t>(1, static_cast<size_t>(args.body_min_kbps * 1024));
  o.idle_timeout = ms(args.idle_timeout_s);
  o.max_connections = args.max_connections;
  o.io_threads = args.io_threads;
  o.model_name = args.model_name;
  o.server_version = RANZCR_VERSION;
  o.decode_threads = std::max(1, config.data.num_workers);
  // The limits in answers and log lines as the user set them (apps/main.cpp's flags).
  o.limit_names = {"--timeout-ms",     "--header-timeout-s", "--max-header-kb",  "--max-body-mb",
                   "--body-timeout-s", "--body-min-kbps",    "--max-connections"};
  if (!args.token_file.empty()) o.token = read_token(args.token_file);
  if (thresholds) {
    o.operating_point = thresholds->point;
    o.thresholds = thresholds->per_label;
  }
  return o;
}
#endif

}  // namespace

int run_serve(const ServeArgs& args) {
#ifndef RANZCR_WITH_SERVE
  (void)args;
  RANZCR_FAIL(
      "this ranzcr was built without serve (no Boost.Beast headers at build time): apt-get install "
      "libboost1.81-dev, then rebuild (scripts/setup.sh)");
#else
  const EvalArgs& m = args.models;
  const std::vector<std::string> paths = model_paths(m);
  const Config config = eval_config(m, paths);
  const std::optional<LabelThresholds> thresholds =
      prediction_thresholds(m.thresholds, m.at, config.data.label_columns);
  const ServeOptions options = serve_options(args, config, thresholds);
  auto body = [&](const Job& job, Collectives&, RunLog& log, const torch::Device& device) {
    const Config& c = job.config;
    if (thresholds && !thresholds->missing.empty())
      log.warn(m.thresholds + " has no " + m.at + " threshold for some labels: their decisions are null");
    auto load = [&] {
      log.info("serve: loading " + models_text(paths) + " on " + device.str() + ", run by " +
               backend_name(resolve_backend(c, device, InferUse::kPredictions)));
      return std::make_unique<ServedModels>(
          paths, member_options(m, c, device, paths.size() > 1, InferUse::kPredictions), device);
    };
    return serve_http(load, options, stop_signal(), log);
  };
  return run_job(config, m.argv, body, JobInputs{/*dataset=*/false, ""});
#endif
}

int run_cv(const CvArgs& args) {
  Config config = job_config(args.config, args.sets, args.nproc_per_node);
  RANZCR_CHECK(config.data.folds >= 2, "cv needs data.folds >= 2 (it is ", config.data.folds,
               "): set it in the config or with --set data.folds=5");
  const TrackingSetup tracking = tracking_setup(config, args.config);
  auto body = [&tracking](const Job& job, Collectives& collectives, RunLog& log,
                          const torch::Device& device) {
    const Config& c = job.config;
    TrainOptions options;
    options.device = device;
    options.weights = job.weights;
    options.stop_signal = &stop_signal();
    options.trackers = tracker_factory(tracking, log);
    std::unique_ptr<TrackedRun> parent;  // main rank: the cv run, the folds' runs its children
    if (collectives.is_main()) parent = open_cv_run(c, options.trackers, collectives, device);
    if (parent) options.parent_run_ids = parent->run_ids({});
    if (const int sig = train_folds(c, collectives, log, options)) {
      if (parent) parent->finish(tracking::RunStatus::kKilled);
      return 128 + sig;
    }
    if (!collectives.is_main()) return 0;
    share_cores(c, 1, current_environment());  // the other ranks are done
    const CvReport report = write_out_of_fold(c, device, log);
    log.info("cv: out-of-fold mean AUC " + std::to_string(report.auc.mean) + " over " +
             std::to_string(report.num_images) + " images; wrote " +
             run_folder::out_of_fold_file(c.output.dir) + " and " + run_folder::cv_report_file(c.output.dir));
    if (parent) end_cv_run(*parent, c);
    return 0;
  };
  return run_job(config, args.argv, body);
}

int run_synth(const SynthArgs& args) {
  SynthConfig config;
  config.num_images = args.num_images;
  config.num_test_images = args.num_test_images;
  config.image_size = args.image_size;
  config.seed = args.seed;
  config.format = args.format;
  const int threads = args.threads > 0 ? args.threads : hardware_threads();
  generate_synthetic(args.out, config, threads, print_progress);
  const char* ext = args.format == SynthFormat::kDicom ? " .dcm" : " .jpg";
  std::cout << "wrote " << args.out << ": train.csv, train/ (" << args.num_images << ext
            << "), train_annotations.csv, test/ (" << args.num_test_images << ext
            << "), sample_submission.csv, test_labels.csv\n";
  return 0;
}

// libjpeg-turbo's own "can the inverse DCT use SIMD" check (jsimd.c; jsimd_none.c, the build without SIMD,
// always says no). Declared weak: it is there when the JPEG library is linked in statically (the offline
// bundle's OpenCV), and null when OpenCV loads a shared libjpeg, which exports the libjpeg API only.
extern "C" int jsimd_can_idct_islow(void) __attribute__((weak));

namespace {

// The path of a loaded shared libjpeg (libjpeg.so.*), or "".
std::string loaded_libjpeg() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string name = info->dlpi_name ? info->dlpi_name : "";
        const std::string base = name.substr(name.rfind('/') + 1);
        if (base.rfind("libjpeg.so", 0) != 0) return 0;
        *static_cast<std::string*>(out) = name;
        return 1;
      },
      &found);
  if (found.empty()) return found;
  std::error_code ec;
  const auto real = std::filesystem::canonical(found, ec);
  return ec ? found : real.string();
}

// One line on OpenCV's JPEG decoder: which libjpeg (OpenCV's build information: "build-libjpeg-turbo (ver
// 2.1.2-62)" for its own copy, else the library it was configured with, "/usr/lib/.../libjpeg.so (ver 62)")
// and, where the library is linked in, whether its decoder uses SIMD on this CPU (OpenCV 4.6 does not say).
std::string jpeg_decoder_text() {
  std::string built;
  std::istringstream info(cv::getBuildInformation());
  for (std::string line; std::getline(info, line);) {
    const auto at = line.find("JPEG:");
    if (at == std::string::npos) continue;
    built = line.substr(at + 5);
    built.erase(0, built.find_first_not_of(" \t"));
    break;
  }
  if (built.empty()) return "none in OpenCV's build information";
  // A static archive's path is the build machine's: its name is enough.
  const auto space = built.find(' ');
  const std::string lib = built.substr(0, space);
  if (lib.size() > 2 && lib.compare(lib.size() - 2, 2, ".a") == 0 && lib.find('/') != std::string::npos)
    built = lib.substr(lib.rfind('/') + 1) + (space == std::string::npos ? "" : built.substr(space));
  // (jsimd_* is libjpeg-turbo's: a library that has it is libjpeg-turbo)
  if (jsimd_can_idct_islow)
    return std::string("libjpeg-turbo linked in (OpenCV: ") + built + "), SIMD " +
           (jsimd_can_idct_islow() ? "yes" : "no");
  const std::string shared = loaded_libjpeg();
  if (!shared.empty()) return shared + ", shared (OpenCV: " + built + "), SIMD not visible from here";
  return built;
}

}  // namespace

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
  v << "\nOpenCV " << CV_VERSION << "\nJPEG decoder " << jpeg_decoder_text();
  v << "\nNCCL " << (nccl.empty() ? "not built in" : nccl);
  const std::string http = net::http_client_version();
  const std::string onnx = onnx_library_version();
  v << "\nONNX export " << (onnx.empty() ? "not built in (Debian's libonnx-dev)" : "ONNX " + onnx);
  const std::string ov = openvino_version();
  v << "\nOpenVINO " << (ov.empty() ? "not built in (LibTorch runs inference on the CPU)" : ov);
  v << "\nHub downloads " << (http.empty() ? "not built in (the Hugging Face cache is read only)" : http);
  return v.str();
}

int run_plot(const PlotArgs& args) {
  for (const auto& path : write_curves(args.run_dir)) std::cout << "wrote " << path << "\n";
  return 0;
}

namespace {

int export_to_onnx(const ExportArgs& args) {
  const std::vector<std::string> paths = args.checkpoints_from.empty()
                                             ? std::vector<std::string>{args.checkpoint}
                                             : checkpoints_in(args.checkpoints_from);
  const int64_t bytes = export_onnx(paths, args.out);
  std::cout << "wrote " << args.out << ": ONNX opset 17, "
            << (paths.size() == 1 ? "one model" : "an ensemble of ")
            << (paths.size() == 1 ? "" : std::to_string(paths.size()) + " models") << ", " << bytes / 1000
            << " kB, input \"" << kOnnxInput
            << "\" (normalised; metadata_props hold the mean, std, size and labels)\n";
  return 0;
}

}  // namespace

int run_export(const ExportArgs& args) {
  RANZCR_CHECK(!args.checkpoint.empty() || !args.checkpoints_from.empty(),
               "no model given: pass --checkpoint FILE or --checkpoints-from RUN_DIR");
  if (ends_with(args.out, ".onnx")) return export_to_onnx(args);
  RANZCR_CHECK(ends_with(args.out, ".safetensors"), "export cannot write ", args.out,
               ": the extension says the format, expected .safetensors or .onnx");
  RANZCR_CHECK(args.checkpoints_from.empty(),
               "--checkpoints-from exports an ensemble, which only an .onnx file can hold (one graph)");
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
