#include "engine/infer/grad_cam.h"

#include <torch/torch.h>

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <unordered_map>

#include "data/batch_loader.h"
#include "data/csv.h"
#include "engine/config/check.h"
#include "engine/infer/inference.h"
#include "engine/io/atomic_file.h"
#include "engine/io/trained_model.h"
#include "engine/report/draw.h"
#include "engine/runtime/device_batches.h"

namespace ranzcr {

torch::Tensor grad_cam(Classifier& model, const torch::Tensor& input, const std::vector<int64_t>& labels) {
  RANZCR_CHECK(static_cast<int64_t>(labels.size()) == input.size(0), "grad_cam: one label per image");
  const bool was_training = model.is_training();
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
  model.train(was_training);
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

}  // namespace

int64_t write_cams(const std::vector<std::string>& paths, const EnsembleResult& predicted,
                   const DatasetIndex& index, const CamOptions& options, const torch::Device& device,
                   Collectives& collectives) {
  const std::vector<std::string>& names = predicted.models.front().label_names;
  const std::vector<int64_t> chosen = cam_label_indices(options, names);
  std::filesystem::create_directories(options.dir);
  std::vector<int64_t> rows(predicted.rows.data_ptr<int64_t>(),
                            predicted.rows.data_ptr<int64_t>() + predicted.rows.numel());
  std::unordered_map<int64_t, int64_t> position;
  for (size_t i = 0; i < rows.size(); ++i) position[rows[i]] = static_cast<int64_t>(i);
  const std::vector<int64_t> mine = rows_of_rank(rows, collectives);
  const auto probs = predicted.probs.accessor<double, 2>();
  // Every model walks the same rows in the same batches (one batch size for all).
  std::vector<TrainedModel> models;
  std::vector<std::unique_ptr<BatchLoader>> loaders;
  std::vector<std::unique_ptr<DeviceBatches>> batches;
  for (size_t m = 0; m < paths.size(); ++m) {
    models.push_back(load_trained_model(paths[m], device));
    InferenceOptions o = predicted.options[m];
    o.batch_size = predicted.options.front().batch_size;
    loaders.push_back(eval_loader(index, mine, o));
    batches.push_back(std::make_unique<DeviceBatches>(*loaders.back(), device_batch_options(o)));
  }
  int64_t written = 0;
  std::string peaks = "id,label,probability,peak_x,peak_y\n";
  const std::string peaks_file =
      (std::filesystem::path(options.dir) /
       (collectives.world_size() > 1 ? "cam_peaks_rank" + std::to_string(collectives.rank()) + ".csv"
                                     : "cam_peaks.csv"))
          .string();
  for (;;) {
    CamBatch cb;
    for (size_t m = 0; m < models.size(); ++m) {
      std::optional<DeviceBatch> b = batches[m]->next();
      if (!b) {
        write_file_atomic(peaks_file, peaks);
        return written;
      }
      if (b->size() == 0) continue;
      const InferenceOptions& o = predicted.options[m];
      if (m == 0) {
        cb.rows.assign(b->indices.data_ptr<int64_t>(), b->indices.data_ptr<int64_t>() + b->size());
        const torch::Tensor pixels =
            (b->images.select(1, 0) * o.input_std.front() + o.input_mean.front()).clamp(0, 1);
        for (int64_t i = 0; i < b->size(); ++i) {
          cv::Mat g;
          to_mat(pixels[i], options.panel_size).convertTo(g, CV_8U, 255.0);
          cb.grey.push_back(g);
          std::vector<int64_t> labels = chosen;
          if (labels == std::vector<int64_t>{-1}) {  // top1: the most probable label of the prediction
            const int64_t p = position.at(cb.rows[i]);
            int64_t best = 0;
            for (int64_t k = 1; k < predicted.probs.size(1); ++k)
              best = probs[p][k] > probs[p][best] ? k : best;
            labels = {best};
          }
          cb.labels.push_back(labels);
          cb.maps.emplace_back(labels.size());
        }
      }
      RANZCR_CHECK(torch::equal(b->indices, torch::tensor(cb.rows)),
                   "--cam: the models read different images");
      for (size_t j = 0; j < cb.labels.front().size(); ++j) {
        std::vector<int64_t> per_image;
        for (const auto& l : cb.labels) per_image.push_back(l[j]);
        const torch::Tensor cam = grad_cam(*models[m].model, b->images, per_image);
        for (int64_t i = 0; i < b->size(); ++i) {
          cv::Mat map = to_mat(cam[i], options.panel_size);
          double hi = 0;
          cv::minMaxLoc(map, nullptr, &hi);
          if (hi > 0) map /= hi;
          cb.maps[i][j] = cb.maps[i][j].empty() ? map : cb.maps[i][j] + map;
        }
      }
    }
    for (size_t i = 0; i < cb.rows.size(); ++i) {
      std::vector<cv::Mat> panels;
      for (size_t j = 0; j < cb.labels[i].size(); ++j) {
        const int64_t k = cb.labels[i][j];
        const double probability = probs[position.at(cb.rows[i])][k];
        char p[32];
        std::snprintf(p, sizeof p, " p=%.3f", probability);
        const cv::Mat map = cb.maps[i][j] / static_cast<double>(models.size());
        panels.push_back(render_panel(cb.grey[i], map, names[k] + p));
        peaks += peak_row(index.ids[cb.rows[i]], names[k], probability, map);
      }
      cv::Mat strip;
      cv::hconcat(panels, strip);
      draw::write_png(
          (std::filesystem::path(options.dir) / (file_stem(index.ids[cb.rows[i]]) + ".png")).string(), strip);
      ++written;
    }
  }
}

}  // namespace ranzcr
