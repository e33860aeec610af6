#include "engine/report/metrics_writer.h"

#include "core/durable_file.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <iomanip>
#include <sstream>

namespace ranzcr {
namespace {

std::string fmt(double v, int precision = 4) {
  std::ostringstream ss;
  ss << std::fixed << std::setprecision(precision) << v;
  return ss.str();
}

std::string fmt_duration(double s) {
  const int64_t t = static_cast<int64_t>(std::max(0.0, s));
  std::ostringstream ss;
  ss << t / 60 << ":" << std::setw(2) << std::setfill('0') << t % 60;
  return ss.str();
}

// "[#########---------------]": `done` of `total` in `width` cells.
std::string progress_bar(int64_t done, int64_t total, int width) {
  const int64_t filled = total > 0 ? std::min<int64_t>(width, done * width / total) : 0;
  return "[" + std::string(filled, '#') + std::string(width - filled, '-') + "]";
}

class ConsoleWriter : public MetricsWriter {
 public:
  explicit ConsoleWriter(RunLog& log) : log_(log) {}
  void progress(const ProgressRecord& r) override {
    const std::string tail = " loss " + fmt(r.loss) + " lr " + fmt(r.lr, 6) + " " + fmt(r.images_per_sec, 1) +
                             " img/s eta " + fmt_duration(r.eta_seconds);
    const std::string epoch = "epoch " + std::to_string(r.epoch) + "/" + std::to_string(r.epochs);
    const std::string steps = std::to_string(r.batch) + "/" + std::to_string(r.batches);
    log_.progress(epoch + " " + progress_bar(r.batch, r.batches, 24) + " " + steps + tail,
                  epoch + " step " + steps + tail);
  }
  void epoch(const EpochRecord& r) override {
    std::string line = "epoch " + std::to_string(r.epoch) + "/" + std::to_string(r.epochs) + " train_loss " +
                       fmt(r.train_loss);
    for (const auto& s : r.train_scalars) line += " " + s.name + " " + fmt(s.value);
    line += " val_loss " + fmt(r.val_loss) + " val_auc " + fmt(r.auc.mean);
    for (const auto& v : r.validations) line += " " + v.name + "_val_auc " + fmt(v.auc.mean);
    log_.info(line + (r.improved ? " (best)" : "") + " " + fmt(r.images_per_sec, 1) + " img/s " +
              fmt(r.epoch_seconds, 1) + " s");
    for (const auto& name : r.auc.undefined)
      log_.warn("validation column '" + name + "' has a single class: AUC undefined, left out of the mean");
    if (r.skipped_images > 0)
      log_.warn(std::to_string(r.skipped_images) + " unreadable images skipped this epoch");
  }

 private:
  RunLog& log_;
};

// {"label": auc or null, ...}
nlohmann::json per_class_json(const AucReport& auc, const std::vector<std::string>& names) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t k = 0; k < auc.per_class.size(); ++k)
    out[names[k]] = auc.per_class[k] ? nlohmann::json(*auc.per_class[k]) : nlohmann::json();
  return out;
}

class JsonlWriter : public MetricsWriter {
 public:
  explicit JsonlWriter(std::string path) : path_(std::move(path)) {}
  void epoch(const EpochRecord& r) override { append_line(path_, epoch_json_line(r)); }

 private:
  std::string path_;
};

}  // namespace

double EpochRecord::selection_metric() const {
  for (const auto& v : validations)
    if (v.selects_best) return v.auc.mean;
  return auc.mean;
}

std::string epoch_json_line(const EpochRecord& r) {
  nlohmann::json j;
  j["epoch"] = r.epoch;
  j["step"] = r.step;
  j["train_loss"] = r.train_loss;
  for (const auto& s : r.train_scalars) j[s.name] = s.value;
  j["val_loss"] = r.val_loss;
  j["val_auc_mean"] = std::isnan(r.auc.mean) ? nlohmann::json() : nlohmann::json(r.auc.mean);
  j["val_auc"] = per_class_json(r.auc, r.label_names);
  for (const auto& v : r.validations) {
    j[v.name + "_val_loss"] = v.loss;
    j[v.name + "_val_auc_mean"] = std::isnan(v.auc.mean) ? nlohmann::json() : nlohmann::json(v.auc.mean);
    j[v.name + "_val_auc"] = per_class_json(v.auc, r.label_names);
  }
  j["lr"] = r.lr;
  j["images_per_sec"] = r.images_per_sec;
  j["epoch_seconds"] = r.epoch_seconds;
  j["val_seconds"] = r.val_seconds;
  j["auc_seconds"] = r.auc_seconds;
  j["train_images"] = r.train_images;
  j["val_images"] = r.val_images;
  j["skipped_images"] = r.skipped_images;
  return j.dump();
}

std::unique_ptr<MetricsWriter> make_console_writer(RunLog& log) {
  return std::make_unique<ConsoleWriter>(log);
}

std::unique_ptr<MetricsWriter> make_jsonl_writer(const std::string& path) {
  return std::make_unique<JsonlWriter>(path);
}

}  // namespace ranzcr
