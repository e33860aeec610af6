// ranzcr: train, evaluate and predict chest X-ray tube/line classifiers (RANZCR CLiP shape).
#include <c10/util/Exception.h>
#include <CLI/CLI.hpp>

#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "apps/commands.h"
#include "apps/hub_weights.h"
#include "apps/trackers.h"
#include "core/text.h"
#include "engine/io/run_folder.h"
#include "engine/report/roc_curves.h"

namespace {

// A missing or unknown command word, named with the commands there are ("" = fine: CLI11 goes on).
std::string command_problem(CLI::App& app, int argc, char** argv) {
  std::string names;
  bool known = false;
  const std::string word = argc > 1 ? argv[1] : "";
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
    known = known || sub->get_name() == word;
  }
  if (argc < 2) return "no command given; the commands are " + names + " (see ranzcr --help)";
  if (known || word.rfind("-", 0) == 0) return "";
  return "unknown command '" + word + "'; the commands are " + names + " (see ranzcr --help)";
}

// The subcommands, each with its options, and what runs when it is the one given.
struct Commands {
  ranzcr::TrainArgs train;
  ranzcr::EvalArgs eval, pred;
  ranzcr::SynthArgs synth;
  ranzcr::BenchArgs bench;
  ranzcr::PlotArgs plot;
  ranzcr::ExportArgs exp;
  ranzcr::CvArgs cv;
  ranzcr::ServeArgs serve;
  struct {
    std::vector<std::string> names;
    bool all = false;
  } fetch;
  std::string tracker_sync_dir;
  std::vector<std::pair<CLI::App*, std::function<int()>>> runs;

  void add(CLI::App* sub, std::function<int()> run) { runs.emplace_back(sub, std::move(run)); }
};

// --at: the operating point of --thresholds' operating_points.csv, one of those evaluate writes.
void add_operating_point_option(CLI::App* sub, std::string& at) {
  std::vector<std::string> names = ranzcr::operating_point_names();
  const std::string last = names.back();
  names.pop_back();
  sub->add_option("--at", at, "Its operating point: " + ranzcr::join(names, ", ") + " or " + last)
      ->check(CLI::IsMember(ranzcr::operating_point_names()));
}

// --config (required), --set and --nproc-per-node: what every job of one config file takes.
template <class Args>
void add_job_options(CLI::App* sub, Args& a, const std::string& config_help, const std::string& set_example) {
  sub->add_option("--config", a.config, config_help)->required();
  sub->add_option("--set", a.sets, "Override a config key: --set " + set_example + " (value parsed as YAML)");
  sub->add_option("--nproc-per-node", a.nproc_per_node, "Worker processes on this node: N or auto");
}

void add_train(CLI::App& app, Commands& c) {
  auto* t = app.add_subcommand("train", "Train a model from a YAML config");
  add_job_options(t, c.train, "YAML config file", "train.epochs=3");
  t->add_option("--resume", c.train.resume, "Resume from a checkpoint (model, optimizer, schedule, epoch)");
  c.add(t, [&c] { return ranzcr::run_train(c.train); });
}

// The options evaluate and predict share: the models, the config, TTA, workers.
void add_model_options(CLI::App* sub, ranzcr::EvalArgs& a) {
  sub->add_option("--config", a.config, "YAML config (default: the first model's resolved config)");
  sub->add_option("--set", a.sets, "Override a config key");
  sub->add_option("--checkpoint", a.checkpoints,
                  "Checkpoint (.pt) or exported .safetensors file; repeat it for an ensemble");
  sub->add_option("--checkpoints-from", a.checkpoints_from,
                  std::string("Run folder: its ") + ranzcr::run_folder::kBest + ", or a cv folder's every " +
                      ranzcr::run_folder::kFoldBest);
  sub->add_flag("--tta", a.tta, "Average with the horizontally flipped image");
  sub->add_option("--nproc-per-node", a.nproc_per_node, "Worker processes sharing the images: N or auto");
}

void add_evaluate_predict(CLI::App& app, Commands& c) {
  auto* e = app.add_subcommand("evaluate", "Score a checkpoint: per-label and mean ROC AUC, loss");
  add_model_options(e, c.eval);
  e->add_option("--csv", c.eval.csv, "Labelled CSV to evaluate on (default: the config's validation split)");
  e->add_option("--images", c.eval.images, "Image folder for --csv");
  e->add_option("--out", c.eval.out,
                "Write metrics JSON here, and beside it roc.png, pr.png and operating_points.csv");
  e->add_option("--bootstrap", c.eval.bootstrap, "Resamples for the AUC's 95% confidence interval (0 = none)")
      ->check(CLI::Range(0, 1000000));
  ranzcr::add_evaluate_tracker_option(*e, c.eval.tracker_run);
  c.add(e, [&c] { return ranzcr::run_evaluate(c.eval); });

  auto* p = app.add_subcommand("predict", "Write a Kaggle submission CSV of probabilities");
  add_model_options(p, c.pred);
  p->add_option("--images", c.pred.images, "Image folder (every <id><data.image_ext> in it)")->required();
  p->add_option("--csv", c.pred.csv, "Predict only the ids listed in this CSV (e.g. sample_submission.csv)");
  p->add_option("--out", c.pred.out, "Submission CSV to write")->required();
  p->add_option("--thresholds", c.pred.thresholds,
                "operating_points.csv (from evaluate): add a 0/1 column per label, LABEL:POINT");
  add_operating_point_option(p, c.pred.at);
  p->add_option("--cam", c.pred.cam_dir, "Write a Grad-CAM overlay PNG per image into this folder");
  p->add_option("--cam-labels", c.pred.cam_labels, "Labels of --cam: all, top1 (default) or label names")
      ->expected(1, -1);
  c.add(p, [&c] { return ranzcr::run_predict(c.pred); });
}

void add_serve(CLI::App& app, Commands& c) {
  auto* s = app.add_subcommand("serve", "Serve the model(s) over HTTP: JSON API, Grad-CAM, a web page");
  ranzcr::ServeArgs& a = c.serve;
  add_model_options(s, a.models);
  s->remove_option(s->get_option("--nproc-per-node"));
  s->add_option("--thresholds", a.models.thresholds,
                "operating_points.csv (from evaluate): a 0/1 decision per label in each answer");
  add_operating_point_option(s, a.models.at);
  s->add_option("--host", a.host, "Address to listen on (default 127.0.0.1: this machine only)");
  s->add_option("--port", a.port, "Port (0: any free one, named in the log)")->check(CLI::Range(0, 65535));
  s->add_option("--max-batch", a.max_batch, "Images per model batch, at most")->check(CLI::Range(1, 4096));
  s->add_option("--max-wait-ms", a.max_wait_ms, "How long a batch waits to fill after its first image")
      ->check(CLI::Range(0.0, 60000.0));
  s->add_option("--max-queue", a.max_queue, "Requests waiting for the model, at most (then 503)")
      ->check(CLI::Range(1, 1000000));
  s->add_option("--timeout-ms", a.timeout_ms, "Per request, from arrival to answer (then 504)")
      ->check(CLI::Range(1.0, 3600000.0));
  s->add_option("--max-body-mb", a.max_body_mb, "Largest upload, MiB (then 413)")->check(CLI::Range(1, 4096));
  s->add_option("--max-header-kb", a.max_header_kb, "Largest request header, KiB (then 431)")
      ->check(CLI::Range(1, 1024));
  s->add_option("--header-timeout-s", a.header_timeout_s, "Time for a whole request header (then 408)")
      ->check(CLI::Range(0.1, 3600.0));
  s->add_option("--body-timeout-s", a.body_timeout_s,
                "Time for a body, plus its size at --body-min-kbps (then 408)")
      ->check(CLI::Range(0.1, 3600.0));
  s->add_option("--body-min-kbps", a.body_min_kbps,
                "Slowest a body or an answer may flow, KiB/s, past --body-timeout-s")
      ->check(CLI::Range(0.001, 1e7));
  s->add_option("--idle-timeout-s", a.idle_timeout_s, "Close a keep-alive connection idle this long")
      ->check(CLI::Range(0.1, 3600.0));
  s->add_option("--max-connections", a.max_connections, "Open connections at most (more are closed at once)")
      ->check(CLI::Range(1, 1000000));
  s->add_option("--io-threads", a.io_threads, "Threads reading and writing sockets")
      ->check(CLI::Range(1, 256));
  s->add_option("--model-name", a.model_name,
                "The model's name in the Open Inference Protocol (/v2/models/NAME)")
      ->check([](const std::string& v) {
        const bool ok =
            !v.empty() && v.size() <= 128 &&
            v.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
                std::string::npos;
        return ok ? std::string() : std::string("a name of letters, digits, '.', '_' and '-' (at most 128)");
      });
  s->add_option("--token-file", a.token_file, "Require Authorization: Bearer <the file's first line>");
  c.add(s, [&c] { return ranzcr::run_serve(c.serve); });
}

void add_cv(CLI::App& app, Commands& c) {
  auto* cv = app.add_subcommand("cv", "Train every fold of data.folds, then out-of-fold predictions");
  add_job_options(cv, c.cv, "YAML config file (data.folds >= 2)", "data.folds=5");
  c.add(cv, [&c] { return ranzcr::run_cv(c.cv); });
}

void add_bench(CLI::App& app, Commands& c) {
  auto* b = app.add_subcommand("bench", "Images per second of a config: loader, compute, end to end");
  add_job_options(b, c.bench, "YAML config file", "train.batch_size=64");
  b->add_option("--steps", c.bench.steps, "Timed batches/steps per figure")->check(CLI::Range(1, 1000000));
  b->add_option("--warmup", c.bench.warmup, "Untimed batches/steps before each figure")
      ->check(CLI::Range(0, 1000000));
  b->add_option(
       "--loader-steps", c.bench.loader_steps,
       "Timed batches of the loader figure (default: --steps; the loader alone is cheap to time longer)")
      ->check(CLI::Range(1, 1000000));
  b->add_option("--out", c.bench.out, "Write the figures as JSON here");
  b->add_flag(
      "--infer", c.bench.infer,
      "Inference instead of training: the eval loader, the model alone (infer.backend, infer.precision) "
      "and files to logits as predict runs");
  b->add_option("--onnx", c.bench.onnx,
                "With --infer: also write the model's ONNX graph here (for other runtimes)");
  b->add_option(
      "--profile", c.bench.profile,
      "Profile compute steps into this folder: trace.json (Kineto trace with input shapes and strides, "
      "for Perfetto), kernels.json and kernels.md (top kernels by device time)");
  b->add_option("--profile-steps", c.bench.profile_steps, "Steps the profiler records (with --profile)")
      ->check(CLI::Range(1, 1000));
  c.add(b, [&c] { return ranzcr::run_bench(c.bench); });
}

void add_synth(CLI::App& app, Commands& c) {
  auto* s = app.add_subcommand("synth", "Generate a synthetic RANZCR-shaped data set (Kaggle layout)");
  s->add_option("--out", c.synth.out, "Output folder (must not exist)")->required();
  s->add_option("--num-images", c.synth.num_images, "Training studies")->check(CLI::Range(10, 10000000));
  s->add_option("--num-test-images", c.synth.num_test_images, "Test studies")->check(CLI::Range(0, 10000000));
  s->add_option("--image-size", c.synth.image_size, "Image side, pixels")->check(CLI::Range(64, 4096));
  s->add_option("--seed", c.synth.seed, "Generator seed");
  s->add_option("--threads", c.synth.threads, "Threads (0 = all cores)")->check(CLI::Range(0, 1024));
  s->add_option("--format", c.synth.format,
                "Image files: jpg, or dcm (DICOM: 12/16-bit, MONOCHROME1/2, compressed)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, ranzcr::SynthFormat>{
          {"jpg", ranzcr::SynthFormat::kJpeg}, {"dcm", ranzcr::SynthFormat::kDicom}}));
  c.add(s, [&c] { return ranzcr::run_synth(c.synth); });
}

// plot, export, models.
void add_tools(CLI::App& app, Commands& c) {
  auto* pl = app.add_subcommand("plot", std::string("Redraw a run folder's PNG training curves from its ") +
                                            ranzcr::run_folder::kMetrics);
  pl->add_option("RUN_DIR", c.plot.run_dir, "Run folder (output.dir)")->required();
  c.add(pl, [&c] { return ranzcr::run_plot(c.plot); });

  auto* x = app.add_subcommand(
      "export", "Write a checkpoint as timm-named .safetensors or as an ONNX graph, with metadata");
  auto* xc = x->add_option("--checkpoint", c.exp.checkpoint,
                           std::string("Checkpoint file (") + ranzcr::run_folder::kBestFile + ", " +
                               ranzcr::run_folder::kLastFile + ", ...)");
  auto* xf =
      x->add_option("--checkpoints-from", c.exp.checkpoints_from,
                    "Run folder: one ONNX graph averaging its best checkpoints (every fold's of a cv run)");
  xc->excludes(xf);
  x->add_option("--out", c.exp.out, "The file to write: .safetensors or .onnx")->required();
  c.add(x, [&c] { return ranzcr::run_export(c.exp); });

  auto* m = app.add_subcommand("models", "List the model names");
  c.add(m, [] { return ranzcr::run_models(); });
  auto* f = app.add_subcommand(
      "fetch-weights", "Fill the Hugging Face cache with pretrained weights (for hosts without network)");
  f->add_option("NAME", c.fetch.names,
                "A zoo model (timm's default ImageNet weights) or hf-hub:ORG/REPO[@REV]");
  f->add_flag("--all", c.fetch.all, "Every zoo model that timm has weights for");
  c.add(f, [&c] { return ranzcr::fetch_weights(c.fetch.names, c.fetch.all); });

  auto* sync = ranzcr::add_tracker_sync_command(app, c.tracker_sync_dir);
  c.add(sync, [&c] { return ranzcr::run_tracker_sync(c.tracker_sync_dir); });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ranzcr: train, evaluate and predict chest X-ray tube/line classifiers"};
  app.require_subcommand(1);
  app.set_version_flag("--version", ranzcr::version_text());
  Commands commands;
  add_train(app, commands);
  add_evaluate_predict(app, commands);
  add_cv(app, commands);
  add_serve(app, commands);
  add_synth(app, commands);
  add_bench(app, commands);
  add_tools(app, commands);
  // Workers started by the launcher re-run the same command line.
  const std::vector<std::string> args(argv + 1, argv + argc);
  commands.train.argv = commands.eval.argv = commands.pred.argv = commands.cv.argv = commands.bench.argv =
      commands.serve.models.argv = args;

  if (const std::string problem = command_problem(app, argc, argv); !problem.empty()) {
    std::cerr << "error: " << problem << std::endl;
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForVersion& ex) {
    return app.exit(ex);
  } catch (const CLI::CallForHelp& ex) {
    return app.exit(ex);
  } catch (const CLI::CallForAllHelp& ex) {
    return app.exit(ex);
  } catch (const CLI::ParseError& ex) {
    std::cerr << "error: " << ex.what() << " (see ranzcr --help)" << std::endl;
    return 2;
  }
  try {
    for (const auto& [sub, run] : commands.runs)
      if (sub->parsed()) return run();
  } catch (const c10::Error& ex) {
    std::cerr << "error: " << ranzcr::first_line(ex.what_without_backtrace()) << std::endl;
    return 1;
  } catch (const std::exception& ex) {
    std::cerr << "error: " << ranzcr::first_line(ex.what()) << std::endl;
    return 1;
  }
  return 0;
}
