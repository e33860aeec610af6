#include "engine/report/eval_outputs.h"

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>

#include "core/check.h"
#include "core/durable_file.h"
#include "data/csv.h"
#include "data/split.h"
#include "engine/report/metrics.h"
#include "engine/report/threshold_report.h"

namespace ranzcr {

EvalData evaluation_data(const Config& config, const std::string& csv, const std::string& images) {
  IndexOptions io = index_options(config.data);
  io.label_columns = config.data.label_columns;
  EvalData d;
  if (!csv.empty()) {
    d.index = load_index(csv, images, io);
    d.rows.resize(d.index.size());
    std::iota(d.rows.begin(), d.rows.end(), 0);
    d.source = csv;
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

namespace {

// The per-label table on stdout.
void print_evaluation(const std::vector<std::string>& paths, const EvalData& data, const EvalPredictions& p,
                      const AucReport& auc, const std::vector<LabelRocSummary>& roc, double loss) {
  const std::vector<std::string>& names = p.models.front().info.label_names;
  std::cout << "evaluate " << models_text(paths) << " on " << data.source << " (" << p.rows.size(0)
            << " images)\n";
  std::cout << std::left << std::setw(30) << "label" << std::right << std::setw(10) << "AUC" << std::setw(18)
            << "95% CI" << std::setw(11) << "positives\n";
  const auto positives = p.labels.sum(0);
  for (size_t k = 0; k < names.size(); ++k) {
    const auto& a = auc.per_class[k];
    const auto& ci = roc[k].auc_ci;
    std::cout << std::left << std::setw(30) << names[k] << std::right << std::setw(10)
              << (a ? (std::ostringstream() << std::fixed << std::setprecision(4) << *a).str() : "undefined")
              << std::setw(18)
              << (ci ? (std::ostringstream()
                        << std::fixed << std::setprecision(4) << ci->low << "-" << ci->high)
                           .str()
                     : "")
              << std::setw(10) << positives[k].item<int64_t>() << "\n";
  }
  std::cout << std::left << std::setw(30) << "mean" << std::right << std::setw(10) << std::fixed
            << std::setprecision(4) << auc.mean << "\nloss " << loss << "\n";
}

nlohmann::json evaluation_json(const std::vector<std::string>& paths, const EvalData& data,
                               const EvalPredictions& p, const AucReport& auc,
                               const std::vector<LabelRocSummary>& roc, double loss) {
  const std::vector<std::string>& names = p.models.front().info.label_names;
  nlohmann::json j, per_class = nlohmann::json::object(), ci = nlohmann::json::object(),
                    ap = nlohmann::json::object();
  for (size_t k = 0; k < names.size(); ++k) {
    per_class[names[k]] = auc.per_class[k] ? nlohmann::json(*auc.per_class[k]) : nlohmann::json();
    ci[names[k]] = roc[k].auc_ci ? nlohmann::json{roc[k].auc_ci->low, roc[k].auc_ci->high} : nlohmann::json();
    ap[names[k]] = roc[k].average_precision ? nlohmann::json(*roc[k].average_precision) : nlohmann::json();
  }
  j["auc_mean"] = std::isnan(auc.mean) ? nlohmann::json() : nlohmann::json(auc.mean);
  j["auc"] = per_class;
  j["auc_ci95"] = ci;
  j["average_precision"] = ap;
  j["loss"] = loss;
  j["num_images"] = p.rows.size(0);
  j["checkpoints"] = paths;
  j["models"] = nlohmann::json::array();
  for (size_t i = 0; i < p.models.size(); ++i)
    j["models"].push_back({{"checkpoint", paths[i]},
                           {"model", p.models[i].info.model.name},
                           {"epoch", p.models[i].info.epoch},
                           {"weights", p.models[i].info.ema ? "ema" : "model"},
                           {"image_size", p.models[i].image_size}});
  if (paths.size() == 1) {
    j["checkpoint"] = paths.front();
    j["epoch"] = p.models.front().info.epoch;
    j["weights"] = p.models.front().info.ema ? "ema" : "model";
  }
  j["source"] = data.source;
  j["tta_hflip"] = p.tta_hflip;
  return j;
}

// Each label's probabilities and truth, for the ROC report.
std::vector<LabelScores> label_scores(const EvalPredictions& p) {
  const std::vector<std::string>& names = p.models.front().info.label_names;
  const torch::Tensor probs = p.probs.to(torch::kDouble).contiguous(),
                      labels = p.labels.to(torch::kFloat).contiguous();
  std::vector<LabelScores> out(names.size());
  for (size_t k = 0; k < names.size(); ++k) {
    out[k].name = names[k];
    const torch::Tensor pk = probs.select(1, static_cast<int64_t>(k)).contiguous();
    const torch::Tensor lk = labels.select(1, static_cast<int64_t>(k)).contiguous();
    out[k].scores.assign(pk.data_ptr<double>(), pk.data_ptr<double>() + pk.numel());
    out[k].labels.assign(lk.data_ptr<float>(), lk.data_ptr<float>() + lk.numel());
  }
  return out;
}

// roc.png, pr.png and operating_points.csv in the folder of `json_path`; returns their paths.
std::vector<std::string> write_roc_files(const std::string& json_path, const std::vector<LabelScores>& scores,
                                         const std::vector<LabelRocSummary>& roc) {
  const std::filesystem::path dir = std::filesystem::path(json_path).parent_path();
  const std::string csv = (dir / "operating_points.csv").string();
  write_file_atomic(csv, operating_points_csv(roc));
  write_roc_png((dir / "roc.png").string(), scores, roc);
  write_pr_png((dir / "pr.png").string(), scores, roc);
  std::cout << "wrote " << csv << ", " << (dir / "roc.png").string() << ", " << (dir / "pr.png").string()
            << "\n";
  return {csv, (dir / "roc.png").string(), (dir / "pr.png").string()};
}

// One model: binary cross-entropy of its logits, as validation; an ensemble: of the averaged
// probabilities (mean over all entries), in float64.
double evaluation_loss(const EvalPredictions& p, bool single) {
  if (single) return torch::binary_cross_entropy_with_logits(p.logits, p.labels).item<double>();
  return torch::binary_cross_entropy(p.probs.to(torch::kDouble), p.labels.to(torch::kDouble)).item<double>();
}

}  // namespace

EvalReport report_evaluation(const std::vector<std::string>& paths, const EvalData& data,
                             const EvalPredictions& p, const EvalReportOptions& options, RunLog& log) {
  const bool single = paths.size() == 1;
  const std::vector<std::string>& names = p.models.front().info.label_names;
  const double loss = evaluation_loss(p, single);
  const AucReport auc = multilabel_auc(single ? p.logits : p.probs, p.labels, names);
  const std::vector<LabelScores> scores = label_scores(p);
  const std::vector<LabelRocSummary> roc = summarize_roc(scores, options.bootstrap, options.seed);
  print_evaluation(paths, data, p, auc, roc, loss);
  for (const auto& name : auc.undefined) log.warn("column '" + name + "' has a single class: AUC undefined");
  if (p.skipped > 0) log.warn(std::to_string(p.skipped) + " unreadable images skipped");
  EvalReport report{evaluation_json(paths, data, p, auc, roc, loss).dump(2), {}};
  if (options.out.empty()) return report;
  write_file_atomic(options.out, report.json + "\n");
  std::cout << "wrote " << options.out << "\n";
  report.files = write_roc_files(options.out, scores, roc);
  report.files.insert(report.files.begin(), options.out);
  return report;
}

std::optional<LabelThresholds> prediction_thresholds(const std::string& file, const std::string& point,
                                                     const std::vector<std::string>& labels) {
  if (file.empty()) return std::nullopt;
  const std::map<std::string, double> by_label = read_thresholds(file, point);
  LabelThresholds t{point, {}, {}};
  for (const auto& name : labels) {
    const auto it = by_label.find(name);
    t.per_label.push_back(it == by_label.end() ? std::numeric_limits<double>::quiet_NaN() : it->second);
    if (it == by_label.end()) t.missing.push_back(name);
  }
  for (const auto& [name, threshold] : by_label)
    RANZCR_CHECK(std::find(labels.begin(), labels.end(), name) != labels.end(), file,
                 " has a threshold for label '", name,
                 "', which the model does not predict (another model's operating points?)");
  return t;
}

DatasetIndex prediction_index(const Config& config, const std::string& csv, const std::string& images) {
  DatasetIndex index;
  if (!csv.empty()) {
    IndexOptions io = index_options(config.data);
    io.with_labels = false;
    io.label_columns = config.data.label_columns;
    index = load_index(csv, images, io);
  } else {
    index = index_from_folder(images, config.data.image_ext);
  }
  index.label_names = config.data.label_columns;
  return index;
}

std::string submission_csv(const std::string& id_column, const DatasetIndex& index,
                           const torch::Tensor& probs, const torch::Tensor& rows,
                           const std::optional<LabelThresholds>& thresholds) {
  std::ostringstream csv;
  csv << id_column;
  for (const auto& name : index.label_names) csv << "," << name;
  if (thresholds)
    for (const auto& name : index.label_names) csv << "," << csv_escape(name + ":" + thresholds->point);
  csv << "\n" << std::fixed << std::setprecision(6);
  const auto pa = probs.accessor<double, 2>();
  const auto ra = rows.accessor<int64_t, 1>();
  for (int64_t i = 0; i < probs.size(0); ++i) {
    csv << index.ids[ra[i]];
    for (int64_t k = 0; k < probs.size(1); ++k) csv << "," << pa[i][k];
    if (thresholds)
      for (int64_t k = 0; k < probs.size(1); ++k)
        csv << ","
            << (std::isnan(thresholds->per_label[k])   ? ""
                : pa[i][k] >= thresholds->per_label[k] ? "1"
                                                       : "0");
    csv << "\n";
  }
  return csv.str();
}

}  // namespace ranzcr
