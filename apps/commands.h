// The ranzcr subcommands. Each returns the process exit status; user errors throw std::runtime_error
// and are reported by main() as one `error: ...` line.
#pragma once

#include <string>
#include <vector>

#include "data/data_config.h"

namespace ranzcr {

struct TrainArgs {
  std::string config;
  std::vector<std::string> sets;  // --set key=value
  std::string resume;
  std::string nproc_per_node;     // --nproc-per-node ("" = from the config)
  std::vector<std::string> argv;  // the command line after the program name (re-used by workers)
};

struct EvalArgs {
  std::string config;  // "" = the first model's own resolved config
  std::vector<std::string> sets;
  std::vector<std::string> checkpoints;  // --checkpoint, repeatable: several = an ensemble
  std::string checkpoints_from;          // --checkpoints-from RUN_DIR: its best checkpoint, or every fold's
  std::string csv;                       // "" = the config's validation split
  std::string images;                    // image folder for --csv / predict
  std::string out;
  bool tta = false;
  int bootstrap = 1000;       // evaluate: resamples of the AUC's confidence interval (0 = none)
  std::string thresholds;     // predict: an operating_points.csv ("" = probabilities only)
  std::string at = "youden";  // predict: its operating point
  std::string cam_dir;        // predict --cam: Grad-CAM overlays here ("" = none)
  std::vector<std::string> cam_labels{"top1"};  // --cam-labels: all, top1 or label names
  std::string nproc_per_node;                   // --nproc-per-node ("" = 1 process)
  std::string
      tracker_run;  // evaluate: add the figures to this tracker run ("" = the model's own; apps/trackers.h)
  std::vector<std::string> argv;  // the command line after the program name (re-used by workers)
};

struct ServeArgs {
  EvalArgs models;  // --checkpoint, --checkpoints-from, --config, --set, --tta, --thresholds, --at
  std::string host = "127.0.0.1";
  int port = 8080;
  int max_batch = 8;
  double max_wait_ms = 5;
  int max_queue = 64;
  double timeout_ms = 30000;
  int max_body_mb = 64;
  int max_header_kb = 16;
  double header_timeout_s = 10;  // the whole request header (then 408)
  double body_timeout_s = 10;    // the body: this long plus its size at body_min_kbps (then 408)
  double body_min_kbps = 64;
  double idle_timeout_s = 5;  // keep-alive connections with no new request
  int max_connections = 10000;
  int io_threads = 1;
  std::string model_name = "ranzcr";  // the Open Inference Protocol's model name
  std::string token_file;             // "" = no authentication
};

struct CvArgs {
  std::string config;
  std::vector<std::string> sets;  // --set key=value
  std::string nproc_per_node;     // --nproc-per-node ("" = from the config)
  std::vector<std::string> argv;  // the command line after the program name (re-used by workers)
};

struct BenchArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string nproc_per_node;  // --nproc-per-node ("" = from the config)
  int steps = 30;
  int warmup = 5;
  int loader_steps = 0;  // 0: steps
  std::string out;       // JSON file ("" = table only)
  std::string profile;   // folder for a profiler trace and kernel table ("" = none)
  int profile_steps = 5;
  bool infer = false;             // --infer: inference figures (engine/jobs/bench.h, run_infer_bench)
  std::string onnx;               // --onnx FILE (with --infer): the model's ONNX graph, for other runtimes
  std::vector<std::string> argv;  // the command line after the program name (re-used by workers)
};

struct SynthArgs {
  std::string out;
  int num_images = 3000;
  int num_test_images = 200;
  int image_size = 512;
  int seed = 7;
  int threads = 0;
  SynthFormat format = SynthFormat::kJpeg;
};

struct PlotArgs {
  std::string run_dir;  // a run folder (output.dir) holding a metrics file
};

struct ExportArgs {
  std::string checkpoint;  // a ranzcr checkpoint (or an exported file)
  std::string
      checkpoints_from;  // --checkpoints-from RUN_DIR: an ensemble of its best checkpoints (.onnx only)
  std::string out;       // the file to write: .safetensors or .onnx, told by the extension
};

int run_train(const TrainArgs& args);
int run_evaluate(const EvalArgs& args);
int run_predict(const EvalArgs& args);
/// `ranzcr serve`: the models behind HTTP until SIGTERM (engine/serve/http_server.h).
int run_serve(const ServeArgs& args);
/// `ranzcr cv`: one job whose every process trains each fold of data.folds in turn (a train run in
/// a fold folder each, skipped when finished), then writes the out-of-fold predictions and their report
/// (run_folder.h).
int run_cv(const CvArgs& args);
int run_bench(const BenchArgs& args);
int run_synth(const SynthArgs& args);
/// Redraws the PNG training curves of a run folder from its metrics file.
int run_plot(const PlotArgs& args);
int run_export(const ExportArgs& args);
int run_models();
/// `ranzcr --version`: this program's version and those of LibTorch (with CUDA/cuDNN), OpenCV and NCCL.
std::string version_text();

}  // namespace ranzcr
