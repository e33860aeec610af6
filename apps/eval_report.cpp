#include "apps/eval_report.h"

#include <torch/torch.h>

#include <cmath>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <sstream>

#include "data/split.h"
#include "engine/io/atomic_file.h"
#include "engine/report/metrics.h"

namespace ranzcr {

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

namespace {

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

}  // namespace

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

}  // namespace ranzcr
