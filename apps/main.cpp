// ranzcr: train, evaluate and predict chest X-ray tube/line classifiers (RANZCR CLiP shape).
#include <c10/util/Exception.h>
#include <CLI/CLI.hpp>

#include <iostream>

#include "apps/commands.h"

namespace {

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ranzcr: train, evaluate and predict chest X-ray tube/line classifiers"};
  app.require_subcommand(1);
  app.set_version_flag("--version", ranzcr::version_text());
  ranzcr::TrainArgs train;
  ranzcr::EvalArgs eval, pred;
  ranzcr::SynthArgs synth;
  ranzcr::BenchArgs bench;
  ranzcr::PlotArgs plot;
  ranzcr::ExportArgs exp;
  ranzcr::CvArgs cv;

  auto* t = app.add_subcommand("train", "Train a model from a YAML config");
  t->add_option("--config", train.config, "YAML config file")->required();
  t->add_option("--set", train.sets, "Override a config key: --set train.epochs=3 (value parsed as YAML)");
  t->add_option("--resume", train.resume, "Resume from a checkpoint (model, optimizer, schedule, epoch)");
  t->add_option("--nproc-per-node", train.nproc_per_node, "Worker processes on this node: N or auto");

  auto* e = app.add_subcommand("evaluate", "Score a checkpoint: per-label and mean ROC AUC, loss");
  e->add_option("--config", eval.config, "YAML config (default: the first model's resolved config)");
  e->add_option("--set", eval.sets, "Override a config key");
  e->add_option("--checkpoint", eval.checkpoints,
                "Checkpoint (.pt) or exported .safetensors file; repeat it for an ensemble");
  e->add_option("--checkpoints-from", eval.checkpoints_from,
                "Run folder: its checkpoints/best.pt, or a cv folder's every fold_K/checkpoints/best.pt");
  e->add_option("--csv", eval.csv, "Labelled CSV to evaluate on (default: the config's validation split)");
  e->add_option("--images", eval.images, "Image folder for --csv");
  e->add_option("--out", eval.out, "Write metrics JSON here");
  e->add_flag("--tta", eval.tta, "Average with the horizontally flipped image");
  e->add_option("--nproc-per-node", eval.nproc_per_node, "Worker processes sharing the images: N or auto");

  auto* p = app.add_subcommand("predict", "Write a Kaggle submission CSV of probabilities");
  p->add_option("--config", pred.config, "YAML config (default: the first model's resolved config)");
  p->add_option("--set", pred.sets, "Override a config key");
  p->add_option("--checkpoint", pred.checkpoints,
                "Checkpoint (.pt) or exported .safetensors file; repeat it for an ensemble");
  p->add_option("--checkpoints-from", pred.checkpoints_from,
                "Run folder: its checkpoints/best.pt, or a cv folder's every fold_K/checkpoints/best.pt");
  p->add_option("--images", pred.images, "Image folder (every <id><data.image_ext> in it)")->required();
  p->add_option("--csv", pred.csv, "Predict only the ids listed in this CSV (e.g. sample_submission.csv)");
  p->add_option("--out", pred.out, "Submission CSV to write")->required();
  p->add_flag("--tta", pred.tta, "Average with the horizontally flipped image");
  p->add_option("--nproc-per-node", pred.nproc_per_node, "Worker processes sharing the images: N or auto");

  auto* c = app.add_subcommand("cv", "Train every fold of data.folds, then out-of-fold predictions");
  c->add_option("--config", cv.config, "YAML config file (data.folds >= 2)")->required();
  c->add_option("--set", cv.sets, "Override a config key: --set data.folds=5");
  c->add_option("--nproc-per-node", cv.nproc_per_node, "Worker processes per fold on this node: N or auto");

  auto* s = app.add_subcommand("synth", "Generate a synthetic RANZCR-shaped data set (Kaggle layout)");
  s->add_option("--out", synth.out, "Output folder (must not exist)")->required();
  s->add_option("--num-images", synth.num_images, "Training studies")->check(CLI::Range(10, 10000000));
  s->add_option("--num-test-images", synth.num_test_images, "Test studies")->check(CLI::Range(0, 10000000));
  s->add_option("--image-size", synth.image_size, "Image side, pixels")->check(CLI::Range(64, 4096));
  s->add_option("--seed", synth.seed, "Generator seed");
  s->add_option("--threads", synth.threads, "Threads (0 = all cores)")->check(CLI::Range(0, 1024));

  auto* b = app.add_subcommand("bench", "Images per second of a config: loader, compute, end to end");
  b->add_option("--config", bench.config, "YAML config file")->required();
  b->add_option("--set", bench.sets, "Override a config key");
  b->add_option("--steps", bench.steps, "Timed batches/steps per figure")->check(CLI::Range(1, 1000000));
  b->add_option("--warmup", bench.warmup, "Untimed batches/steps before each figure")
      ->check(CLI::Range(0, 1000000));
  b->add_option("--out", bench.out, "Write the figures as JSON here");
  b->add_option("--nproc-per-node", bench.nproc_per_node, "Worker processes on this node: N or auto");

  auto* pl = app.add_subcommand("plot", "Redraw a run folder's PNG training curves from its metrics.jsonl");
  pl->add_option("RUN_DIR", plot.run_dir, "Run folder (output.dir)")->required();

  auto* x =
      app.add_subcommand("export", "Write a checkpoint's weights as timm-named .safetensors with metadata");
  x->add_option("--checkpoint", exp.checkpoint, "Checkpoint file (best.pt, last.pt, ...)")->required();
  x->add_option("--out", exp.out, "The .safetensors file to write")->required();

  auto* m = app.add_subcommand("models", "List the model names");

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
    if (t->parsed()) {
      train.argv.assign(argv + 1, argv + argc);
      return ranzcr::run_train(train);
    }
    if (e->parsed()) {
      eval.argv.assign(argv + 1, argv + argc);
      return ranzcr::run_evaluate(eval);
    }
    if (p->parsed()) {
      pred.argv.assign(argv + 1, argv + argc);
      return ranzcr::run_predict(pred);
    }
    if (c->parsed()) {
      cv.argv.assign(argv + 1, argv + argc);
      return ranzcr::run_cv(cv);
    }
    if (s->parsed()) return ranzcr::run_synth(synth);
    if (b->parsed()) {
      bench.argv.assign(argv + 1, argv + argc);
      return ranzcr::run_bench(bench);
    }
    if (pl->parsed()) return ranzcr::run_plot(plot);
    if (x->parsed()) return ranzcr::run_export(exp);
    if (m->parsed()) return ranzcr::run_models();
  } catch (const c10::Error& ex) {
    std::cerr << "error: " << first_line(ex.what_without_backtrace()) << std::endl;
    return 1;
  } catch (const std::exception& ex) {
    std::cerr << "error: " << first_line(ex.what()) << std::endl;
    return 1;
  }
  return 0;
}
