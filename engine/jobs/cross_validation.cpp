#include "engine/jobs/cross_validation.h"
#include "core/check.h"

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "data/csv.h"
#include "data/dataset_index.h"
#include "data/split.h"
#include "distributed/collectives.h"
#include "engine/infer/ensemble.h"
#include "engine/infer/inference.h"
#include "engine/io/checkpoint.h"
#include "engine/io/run_folder.h"
#include "engine/io/trained_model.h"
#include "engine/runtime/precision.h"
#include "engine/train/trainer.h"

namespace fs = std::filesystem;

namespace ranzcr {
namespace {

nlohmann::json auc_or_null(double v) {
  return std::isnan(v) ? nlohmann::json() : nlohmann::json(v);
}

// One fold's validation rows predicted by its best checkpoint: probabilities go into `probs` and `fold_of`.
FoldReport predict_fold(const Config& config, int k, const DatasetIndex& index, const torch::Device& device,
                        torch::Tensor& probs, std::vector<int>& fold_of) {
  const Config fc = fold_config(config, k);
  FoldReport f;
  f.fold = k;
  f.checkpoint = run_folder::best_checkpoint(fc.output.dir);
  TrainedModel trained = load_trained_model(f.checkpoint, device);
  if (trained.info.label_names != index.label_names)
    RANZCR_FAIL(f.checkpoint, " predicts other labels than ", train_csv_path(config.data),
                " has; was the fold trained with another config?");
  Config ic = fc;
  ic.model = trained.info.model;
  const InferenceOptions io = command_inference_options(ic, device, InferUse::kMetrics);
  const std::unique_ptr<ModelRunner> runner = runner_for(trained, io, {io.batch_size});
  auto local = make_local_collectives();
  const InferenceResult r =
      run_inference(*runner, index, validation_split(fc.data, index.groups, fc.seed).val, io, *local);
  const torch::Tensor p = torch::sigmoid(r.logits.to(torch::kDouble));  // float32 would tie close logits
  probs.index_copy_(0, r.rows, p);
  const auto ra = r.rows.accessor<int64_t, 1>();
  for (int64_t i = 0; i < r.rows.size(0); ++i) fold_of[ra[i]] = k;
  f.epoch = trained.info.epoch;
  f.best_val_auc = read_checkpoint_meta(f.checkpoint).best_metric;
  f.oof_auc = multilabel_auc(p, r.labels, index.label_names).mean;
  f.num_images = r.rows.size(0);
  return f;
}

std::string oof_csv(const Config& config, const DatasetIndex& index, const torch::Tensor& probs,
                    const std::vector<int>& fold_of) {
  std::ostringstream csv;
  csv << csv_escape(config.data.id_column) << ",fold";
  for (const auto& name : index.label_names) csv << "," << csv_escape(name);
  csv << "\n" << std::setprecision(17);
  const auto pa = probs.accessor<double, 2>();
  for (size_t i = 0; i < index.size(); ++i) {
    if (fold_of[i] < 0) continue;  // an unreadable image skipped (data.skip_bad_images)
    csv << csv_escape(index.ids[i]) << "," << fold_of[i];
    for (size_t k = 0; k < index.num_labels(); ++k) csv << "," << pa[i][k];
    csv << "\n";
  }
  return csv.str();
}

nlohmann::json cv_json(const CvReport& report, const std::vector<std::string>& label_names) {
  nlohmann::json j;
  j["auc_mean"] = auc_or_null(report.auc.mean);
  nlohmann::json per_class = nlohmann::json::object();
  for (size_t k = 0; k < label_names.size(); ++k) {
    const auto& a = report.auc.per_class[k];
    per_class[label_names[k]] = a ? nlohmann::json(*a) : nlohmann::json();
  }
  j["auc"] = per_class;
  j["num_images"] = report.num_images;
  double sum = 0;
  j["folds"] = nlohmann::json::array();
  for (const auto& f : report.folds) {
    sum += f.best_val_auc;
    j["folds"].push_back({{"fold", f.fold},
                          {"checkpoint", f.checkpoint},
                          {"epoch", f.epoch},
                          {"best_val_auc_mean", f.best_val_auc},
                          {"oof_auc_mean", auc_or_null(f.oof_auc)},
                          {"num_images", f.num_images}});
  }
  j["fold_best_val_auc_mean"] = report.folds.empty() ? 0.0 : sum / static_cast<double>(report.folds.size());
  return j;
}

}  // namespace

Config fold_config(Config config, int fold) {
  config.data.fold = fold;
  config.output.dir = run_folder::fold_dir(config.output.dir, fold);
  return config;
}

std::string fold_finished(const Config& fold_config) {
  const std::string last = run_folder::last_checkpoint(fold_config.output.dir);
  if (fold_config.train.resume != ResumeSetting::kAuto || !fs::exists(last)) return "";
  const CheckpointMeta meta = read_checkpoint_meta(last);
  // Another model's run is left to `train`, which says so.
  if (meta.model_name != fold_config.model.name || !run_finished(fold_config.train, meta)) return "";
  return std::to_string(meta.epoch) + " epochs" +
         (meta.epoch < fold_config.train.epochs ? ", stopped early" : "") + ", best val_auc_mean " +
         std::to_string(meta.best_metric);
}

CvReport write_out_of_fold(const Config& config, const torch::Device& device, RunLog& log) {
  const DatasetIndex index = load_train_index(config.data, index_options(config.data));
  const int64_t n = static_cast<int64_t>(index.size()), c = static_cast<int64_t>(index.num_labels());
  torch::Tensor probs = torch::zeros({n, c}, torch::kDouble);
  std::vector<int> fold_of(index.size(), -1);
  CvReport report;
  for (int k = 0; k < config.data.folds; ++k) {
    report.folds.push_back(predict_fold(config, k, index, device, probs, fold_of));
    const FoldReport& f = report.folds.back();
    log.info("cv: fold " + std::to_string(k) + " out-of-fold: " + std::to_string(f.num_images) +
             " images, mean AUC " + std::to_string(f.oof_auc) + " (" + run_folder::kBestFile + ", epoch " +
             std::to_string(f.epoch) + ")");
  }
  std::vector<int64_t> done;
  for (int64_t i = 0; i < n; ++i)
    if (fold_of[i] >= 0) done.push_back(i);
  const torch::Tensor rows = torch::tensor(done, torch::kLong);
  const torch::Tensor labels =
      torch::from_blob(const_cast<float*>(index.labels.data()), {n, c}).to(torch::kDouble);
  report.auc = multilabel_auc(probs.index_select(0, rows), labels.index_select(0, rows), index.label_names);
  report.num_images = static_cast<int64_t>(done.size());
  write_file_atomic(run_folder::out_of_fold_file(config.output.dir), oof_csv(config, index, probs, fold_of));
  write_file_atomic(run_folder::cv_report_file(config.output.dir),
                    cv_json(report, index.label_names).dump(2) + "\n");
  return report;
}

namespace {

// Rank 0's `yes`, on every rank.
bool main_rank_says(Collectives& collectives, bool yes) {
  torch::Tensor t = torch::tensor({yes ? 1.0 : 0.0}, torch::kDouble);
  collectives.broadcast(t, 0);
  return t.item<double>() > 0;
}

}  // namespace

int train_folds(const Config& config, Collectives& collectives, RunLog& log, const TrainOptions& options) {
  for (int k = 0; k < config.data.folds; ++k) {
    const Config fold = fold_config(config, k);
    const std::string name = "cv: fold " + std::to_string(k) + " of " + std::to_string(config.data.folds);
    const std::string done = collectives.is_main() ? fold_finished(fold) : "";  // only rank 0 logs it
    if (main_rank_says(collectives, !done.empty())) {
      log.info(name + ": already finished (" + done + ") in " + fold.output.dir + "; not trained again");
      continue;
    }
    if (const int sig = stop_requested(collectives, options.stop_signal)) return sig;
    log.info(name + ": training in " + fold.output.dir);
    const TrainSummary summary = train(fold, collectives, log, options);
    if (summary.stopped_by_signal) return summary.stopped_by_signal;
    if (!summary.already_finished)
      log.info("done: best val_auc_mean " + std::to_string(summary.best_auc) + "; run folder " +
               fold.output.dir);
    log.close_file();  // the fold's log file holds the fold alone
  }
  return stop_requested(collectives, options.stop_signal);
}

}  // namespace ranzcr
