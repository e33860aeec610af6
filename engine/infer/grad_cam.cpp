#include "engine/infer/grad_cam.h"

#include <torch/torch.h>

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <unordered_map>

#include "core/check.h"
#include "core/durable_file.h"
#include "data/batch_loader.h"
#include "data/csv.h"
#include "engine/infer/inference.h"
#include "engine/io/trained_model.h"
#include "engine/report/draw.h"
#include "engine/runtime/device_batches.h"

namespace ranzcr {

torch::Tensor grad_cam(Classifier& model, const torch::Tensor& input, const std::vector<int64_t>& labels) {
  RANZCR_CHECK(static_cast<int64_t>(labels.size()) == input.size(0), "grad_cam: one label per image");
  struct EvalMode {  // eval mode for the call, the caller's mode back afterwards (also on a throw)
    Classifier& m;
    const bool was_training = m.is_training();
    ~EvalMode() { m.train(was_training); }
  } mode{model};
  model.eval();
  torch::AutoGradMode grad_mode(true);
  // A leaf that needs a gradient keeps the last map in a graph even when the weights need none.
  const torch::Tensor x = input.detach().to(torch::kFloat32).requires_grad_(true);
  const ClassifierOutput out = model.forward_with_features(x);
  const torch::Tensor a = out.last_features;
  const torch::Tensor index = torch::tensor(labels, torch::kLong).to(out.logits.device()).unsqueeze(1);
  // Image i's logit depends on its own map only (eval mode), so one backward gives every image's gradient.
  const torch::Tensor selected = out.logits.gather(1, index).sum();
  const torch::Tensor g = torch::autograd::grad({selected}, {a})[0];
  torch::Tensor cam = torch::relu((g.mean({2, 3}, /*keepdim=*/true) * a).sum(1, /*keepdim=*/true));
  namespace F = torch::nn::functional;
  cam = F::interpolate(cam, F::InterpolateFuncOptions()
                                .size(std::vector<int64_t>{input.size(2), input.size(3)})
                                .mode(torch::kBilinear)
                                .align_corners(false));
  return cam.squeeze(1).detach();
}

std::vector<int64_t> cam_label_indices(const CamOptions& options, const std::vector<std::string>& names) {
  if (options.labels.empty() || options.labels == std::vector<std::string>{"top1"}) return {-1};
  std::vector<int64_t> out;
  if (options.labels == std::vector<std::string>{"all"}) {
    for (size_t k = 0; k < names.size(); ++k) out.push_back(static_cast<int64_t>(k));
    return out;
  }
  for (const auto& label : options.labels) {
    const auto it = std::find(names.begin(), names.end(), label);
    if (it == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "'" : ", '") + n + "'";
      RANZCR_FAIL("--cam-labels: the model has no label '", label, "' (all, top1 or one of ", known, ")");
    }
    out.push_back(it - names.begin());
  }
  return out;
}

int64_t top_label(const torch::Tensor& probs) {
  const torch::Tensor p = probs.to(torch::kCPU, torch::kDouble).contiguous();
  const double* v = p.data_ptr<double>();
  int64_t best = 0;
  for (int64_t k = 1; k < p.numel(); ++k) best = v[k] > v[best] ? k : best;
  return best;
}

namespace {

// A file name for an image id: letters, digits, '.', '-' and '_' kept, anything else '_'.
std::string file_stem(const std::string& id) {
  std::string s = id;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  return s.empty() ? "_" : s;
}

// One panel: the grey input with the normalised map in jet colours over it, and a title bar.
cv::Mat render_panel(const cv::Mat& grey, const cv::Mat& cam, const std::string& title) {
  constexpr int kBar = 28;
  cv::Mat heat_u8, heat, base, out(grey.rows + kBar, grey.cols, CV_8UC3, draw::kBackground);
  cam.convertTo(heat_u8, CV_8U, 255.0);
  cv::applyColorMap(heat_u8, heat, cv::COLORMAP_JET);
  cv::cvtColor(grey, base, cv::COLOR_GRAY2BGR);
  cv::addWeighted(base, 0.55, heat, 0.45, 0.0, out(cv::Rect(0, kBar, grey.cols, grey.rows)));
  std::string shown = title;
  while (shown.size() > 4 && draw::text_width(shown, 0.45) > grey.cols - 8)
    shown = shown.substr(0, shown.size() - 4) + "..";
  draw::put_text(out, shown, {4, 19}, 0.45);
  return out;
}

// Per image of a batch, per chosen label: the maps summed over the models (each normalised to [0, 1]).
struct CamBatch {
  std::vector<int64_t> rows;
  std::vector<cv::Mat> grey;                 // the first model's input, panel-sized, 8-bit
  std::vector<std::vector<int64_t>> labels;  // label indices per image
  std::vector<std::vector<cv::Mat>> maps;    // [image][label] CV_32F panel-sized
};

cv::Mat to_mat(const torch::Tensor& t, int size) {  // [H, W] float -> CV_32F at size x size
  const torch::Tensor c = t.to(torch::kCPU, torch::kFloat32).contiguous();
  cv::Mat m(static_cast<int>(c.size(0)), static_cast<int>(c.size(1)), CV_32F, c.data_ptr<float>());
  cv::Mat out;
  cv::resize(m, out, cv::Size(size, size), 0, 0, cv::INTER_LINEAR);
  return out;
}

// "id,label,probability,x,y": the map's maximum as fractions of the image's width and height (pixel
// centres); empty x and y when the map is zero everywhere.
std::string peak_row(const std::string& id, const std::string& label, double probability,
                     const cv::Mat& map) {
  double hi = 0;
  cv::Point at;
  cv::minMaxLoc(map, nullptr, &hi, nullptr, &at);
  char buf[96];
  if (hi > 0)
    std::snprintf(buf, sizeof buf, ",%.6f,%.5f,%.5f\n", probability, (at.x + 0.5) / map.cols,
                  (at.y + 0.5) / map.rows);
  else
    std::snprintf(buf, sizeof buf, ",%.6f,,\n", probability);
  return csv_escape(id) + "," + csv_escape(label) + buf;
}

// The models' input pictures as 8-bit grey panels: the first channel of `images` ([N, C, S, S] as a model
// with options `o` takes them) un-normalised.
std::vector<cv::Mat> grey_panels(const torch::Tensor& images, const InferenceOptions& o, int panel_size) {
  const torch::Tensor pixels = (images.select(1, 0) * o.input_std.front() + o.input_mean.front()).clamp(0, 1);
  std::vector<cv::Mat> out;
  for (int64_t i = 0; i < images.size(0); ++i) {
    cv::Mat g;
    to_mat(pixels[i], panel_size).convertTo(g, CV_8U, 255.0);
    out.push_back(g);
  }
  return out;
}

// One model's maps of `images`, each normalised to [0, 1], added to the batch's (cb.labels chosen first).
void add_maps(CamBatch& cb, const torch::Tensor& images, Classifier& model, int panel_size) {
  if (cb.maps.empty()) cb.maps.resize(cb.labels.size());
  for (size_t i = 0; i < cb.labels.size(); ++i) cb.maps[i].resize(cb.labels[i].size());
  for (size_t j = 0; j < cb.labels.front().size(); ++j) {
    std::vector<int64_t> per_image;
    for (const auto& l : cb.labels) per_image.push_back(l[j]);
    const torch::Tensor cam = grad_cam(model, images, per_image);
    for (int64_t i = 0; i < images.size(0); ++i) {
      cv::Mat map = to_mat(cam[i], panel_size);
      double hi = 0;
      cv::minMaxLoc(map, nullptr, &hi);
      if (hi > 0) map /= hi;
      cb.maps[i][j] = cb.maps[i][j].empty() ? map : cb.maps[i][j] + map;
    }
  }
}

// Image i's strip (a panel per chosen label, the maps averaged over `num_models`) and its cam_peaks rows.
std::pair<cv::Mat, std::string> draw_strip(const CamBatch& cb, size_t i, const std::string& id,
                                           const std::function<double(int64_t)>& probability,
                                           const std::vector<std::string>& names, size_t num_models) {
  std::vector<cv::Mat> panels;
  std::string peaks;
  for (size_t j = 0; j < cb.labels[i].size(); ++j) {
    const int64_t k = cb.labels[i][j];
    const double p = probability(k);
    char text[32];
    std::snprintf(text, sizeof text, " p=%.3f", p);
    const cv::Mat map = cb.maps[i][j] / static_cast<double>(num_models);
    panels.push_back(render_panel(cb.grey[i], map, names[k] + text));
    peaks += peak_row(id, names[k], p, map);
  }
  cv::Mat strip;
  cv::hconcat(panels, strip);
  return {strip, peaks};
}

// predict --cam over this rank's rows: every model walks the same rows in the same batches (one batch size
// for all), each batch's maps are summed over the models, then drawn.
class CamWriter {
 public:
  CamWriter(const std::vector<std::string>& paths, const EnsembleResult& predicted, const DatasetIndex& index,
            const CamOptions& options, const torch::Device& device, Collectives& collectives)
      : predicted_(predicted),
        index_(index),
        options_(options),
        names_(predicted.models.front().label_names),
        chosen_(cam_label_indices(options, names_)),
        probs_(predicted.probs.accessor<double, 2>()) {
    const int64_t* r = predicted.rows.data_ptr<int64_t>();
    const std::vector<int64_t> rows(r, r + predicted.rows.numel());
    for (size_t i = 0; i < rows.size(); ++i) position_[rows[i]] = static_cast<int64_t>(i);
    const std::vector<int64_t> mine = rows_of_rank(rows, collectives);
    for (size_t m = 0; m < paths.size(); ++m) {
      models_.push_back(load_trained_model(paths[m], device));
      InferenceOptions o = predicted.options[m];
      // Backward through the model keeps every activation: at most 8 images at a time.
      o.batch_size = std::min(8, predicted.options.front().batch_size);
      loaders_.push_back(eval_loader(index, mine, o));
      batches_.push_back(std::make_unique<DeviceBatches>(*loaders_.back(), device_batch_options(o)));
    }
    const std::string file = collectives.world_size() > 1
                                 ? "cam_peaks_rank" + std::to_string(collectives.rank()) + ".csv"
                                 : "cam_peaks.csv";
    peaks_file_ = (std::filesystem::path(options.dir) / file).string();
  }

  int64_t run() {
    std::filesystem::create_directories(options_.dir);
    for (CamBatch cb; next_batch(cb); cb = CamBatch()) write(cb);
    write_file_atomic(peaks_file_, peaks_);
    return written_;
  }

 private:
  // The next batch's maps, summed over the models; false at the end.
  bool next_batch(CamBatch& cb) {
    for (size_t m = 0; m < models_.size(); ++m) {
      std::optional<DeviceBatch> b = batches_[m]->next();
      if (!b) return false;
      if (b->size() == 0) continue;
      if (m == 0) start(cb, *b, predicted_.options[m]);
      RANZCR_CHECK(torch::equal(b->indices, torch::tensor(cb.rows)),
                   "--cam: the models read different images");
      add_maps(cb, b->images, *models_[m].model, options_.panel_size);
    }
    return true;
  }

  // The rows, the input pictures and each image's labels (top1: the prediction's most probable).
  void start(CamBatch& cb, const DeviceBatch& b, const InferenceOptions& o) {
    cb.rows.assign(b.indices.data_ptr<int64_t>(), b.indices.data_ptr<int64_t>() + b.size());
    cb.grey = grey_panels(b.images, o, options_.panel_size);
    for (int64_t i = 0; i < b.size(); ++i)
      cb.labels.push_back(chosen_ == std::vector<int64_t>{-1}
                              ? std::vector<int64_t>{top_label(predicted_.probs[position_.at(cb.rows[i])])}
                              : chosen_);
  }

  // A PNG per image (a panel per label) and its cam_peaks.csv rows.
  void write(const CamBatch& cb) {
    for (size_t i = 0; i < cb.rows.size(); ++i) {
      const std::string& id = index_.ids[cb.rows[i]];
      const int64_t p = position_.at(cb.rows[i]);
      auto [strip, peaks] = draw_strip(
          cb, i, id, [&](int64_t k) { return probs_[p][k]; }, names_, models_.size());
      peaks_ += peaks;
      draw::write_png((std::filesystem::path(options_.dir) / (file_stem(id) + ".png")).string(), strip);
      ++written_;
    }
  }

  const EnsembleResult& predicted_;
  const DatasetIndex& index_;
  const CamOptions& options_;
  const std::vector<std::string>& names_;
  const std::vector<int64_t> chosen_;
  const torch::TensorAccessor<double, 2> probs_;
  std::unordered_map<int64_t, int64_t> position_;  // index row -> row of `predicted`
  std::vector<TrainedModel> models_;
  std::vector<std::unique_ptr<BatchLoader>> loaders_;
  std::vector<std::unique_ptr<DeviceBatches>> batches_;
  std::string peaks_ = "id,label,probability,peak_x,peak_y\n", peaks_file_;
  int64_t written_ = 0;
};

}  // namespace

std::vector<cv::Mat> cam_overlays(const std::vector<Classifier*>& models,
                                  const std::vector<torch::Tensor>& inputs,
                                  const InferenceOptions& first_options, const torch::Tensor& probs,
                                  const std::vector<std::vector<int64_t>>& labels,
                                  const std::vector<std::string>& names, int panel_size) {
  RANZCR_CHECK(models.size() == inputs.size() && !models.empty(), "cam_overlays: one input per model");
  CamBatch cb;
  cb.grey = grey_panels(inputs.front(), first_options, panel_size);
  cb.labels = labels;
  for (size_t m = 0; m < models.size(); ++m) add_maps(cb, inputs[m], *models[m], panel_size);
  const torch::Tensor p = probs.to(torch::kCPU, torch::kDouble).contiguous();
  const auto a = p.accessor<double, 2>();
  std::vector<cv::Mat> out;
  for (size_t i = 0; i < labels.size(); ++i)
    out.push_back(draw_strip(
                      cb, i, "", [&](int64_t k) { return a[i][k]; }, names, models.size())
                      .first);
  return out;
}

int64_t write_cams(const std::vector<std::string>& paths, const EnsembleResult& predicted,
                   const DatasetIndex& index, const CamOptions& options, const torch::Device& device,
                   Collectives& collectives) {
  return CamWriter(paths, predicted, index, options, device, collectives).run();
}

}  // namespace ranzcr
