// engine/report/tracked_run.h: a run's trackers fed by the engine.
#include "engine/report/tracked_run.h"

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

namespace ranzcr {

using tracking::Figure;

namespace {

// Records to every tracker: the training figures at once, the epoch's at validation, and the save.
class TrackerWriter : public MetricsWriter {
 public:
  explicit TrackerWriter(std::vector<std::unique_ptr<tracking::Tracker>>& trackers) : trackers_(trackers) {}
  void progress(const ProgressRecord& r) override {
    const std::vector<Figure> figures = step_figures(r);
    for (auto& t : trackers_) t->log_step(r.step, figures);
  }
  void epoch(const EpochRecord& r) override {
    const tracking::EpochFigures figures = epoch_figures(r);
    for (auto& t : trackers_) t->log_epoch(figures);
  }
  void saved(int64_t epoch) override {
    for (auto& t : trackers_) t->epoch_saved(epoch);
  }

 private:
  std::vector<std::unique_ptr<tracking::Tracker>>& trackers_;
};

std::string value_of(const TrackerRunIds& ids, const std::string& name) {
  const auto it = ids.find(name);
  return it == ids.end() ? "" : it->second;
}

// A YAML node as one parameter value: scalars as written, lists and maps in flow style.
std::string yaml_value(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  if (node.IsNull()) return "";
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

void flatten(const YAML::Node& node, const std::string& prefix, std::vector<tracking::KeyValue>& out) {
  for (const auto& item : node) {
    const std::string key = prefix + item.first.as<std::string>();
    if (item.second.IsMap())
      flatten(item.second, key + ".", out);
    else
      out.emplace_back(key, yaml_value(item.second));
  }
}

}  // namespace

TrackedRun::TrackedRun(std::vector<std::unique_ptr<tracking::Tracker>> trackers)
    : trackers_(std::move(trackers)) {}

TrackedRun::~TrackedRun() = default;

void TrackedRun::clear(const std::string& run_dir) {
  for (auto& t : trackers_) t->clear(run_dir);
}

void TrackedRun::open(tracking::RunStart start, const TrackerRunIds& resume, const TrackerRunIds& parents) {
  std::vector<std::unique_ptr<tracking::Tracker>> opened;
  for (auto& t : trackers_) {
    start.resume_id = value_of(resume, t->name());
    start.parent_run_id = value_of(parents, t->name());
    if (t->open(start)) opened.push_back(std::move(t));
  }
  trackers_ = std::move(opened);
}

TrackerRunIds TrackedRun::run_ids(TrackerRunIds ids) const {
  for (const auto& t : trackers_)
    if (std::string id = t->run_id(); !id.empty()) ids[t->name()] = std::move(id);
  return ids;
}

std::unique_ptr<MetricsWriter> TrackedRun::writer() {
  return std::make_unique<TrackerWriter>(trackers_);
}

void TrackedRun::log_figures(const std::vector<Figure>& figures, int64_t step) {
  for (auto& t : trackers_) t->log_figures(figures, step);
}

void TrackedRun::log_artifact(const std::string& path, const std::string& dir) {
  for (auto& t : trackers_) t->log_artifact(path, dir);
}

void TrackedRun::finish(tracking::RunStatus status) {
  for (auto& t : trackers_) t->finish(status);
}

std::vector<tracking::KeyValue> config_params(const Config& config) {
  std::vector<tracking::KeyValue> params;
  flatten(YAML::Load(config_to_yaml(config)), "", params);
  return params;
}

std::vector<Figure> figures_of_json_line(const std::string& line) {
  std::vector<Figure> out;
  const nlohmann::json j = nlohmann::json::parse(line);
  for (const auto& [key, value] : j.items()) {
    if (value.is_number()) out.push_back({key, value.get<double>()});
    if (!value.is_object()) continue;
    for (const auto& [label, v] : value.items())
      if (v.is_number()) out.push_back({key + "/" + label, v.get<double>()});
  }
  return out;
}

std::vector<Figure> step_figures(const ProgressRecord& r) {
  return {{"train/loss", r.loss}, {"train/lr", r.lr}, {"train/images_per_sec", r.images_per_sec}};
}

tracking::EpochFigures epoch_figures(const EpochRecord& r) {
  tracking::EpochFigures f;
  f.epoch = r.epoch;
  f.step = r.step;
  f.record = figures_of_json_line(epoch_json_line(r));
  f.curves.push_back({"val/loss", r.val_loss});
  f.curves.push_back({"val/auc_mean", r.auc.mean});
  for (size_t k = 0; k < r.auc.per_class.size() && k < r.label_names.size(); ++k)
    if (r.auc.per_class[k]) f.curves.push_back({"val/auc/" + r.label_names[k], *r.auc.per_class[k]});
  for (const auto& v : r.validations) {  // further weights (train.ema_decay: the EMA's)
    f.curves.push_back({"val/" + v.name + "_loss", v.loss});
    f.curves.push_back({"val/" + v.name + "_auc_mean", v.auc.mean});
  }
  for (const auto& s : r.train_scalars) {  // per epoch: train_aux_loss -> train/aux_loss
    std::string tag = s.name;
    if (const size_t i = tag.find('_'); i != std::string::npos) tag[i] = '/';
    f.curves.push_back({tag, s.value});
  }
  return f;
}

}  // namespace ranzcr
