#include "engine/serve/served_models.h"

#include <torch/torch.h>

#include <opencv2/imgcodecs.hpp>

#include "core/check.h"
#include "data/batch_loader.h"
#include "data/image_pipeline.h"
#include "engine/infer/grad_cam.h"
#include "engine/runtime/device_batches.h"
#include "engine/runtime/precision.h"

namespace ranzcr {
namespace {

constexpr const char* kUploadName = "(the upload)";

// Model m's transform equals model j's: the same file gives the same input.
bool same_recipe(const TransformOptions& a, const TransformOptions& b) {
  const PrepareOptions pa = a.prepare(), pb = b.prepare();
  return a.image_size == b.image_size && pa.side == pb.side && pa.clahe == pb.clahe &&
         pa.dicom.window == pb.dicom.window && pa.dicom.timeout_seconds == pb.dicom.timeout_seconds &&
         pa.dicom.memory_limit_mb == pb.dicom.memory_limit_mb;
}

std::vector<unsigned char> png_bytes(const cv::Mat& image) {
  std::vector<unsigned char> out;
  RANZCR_CHECK(cv::imencode(".png", image, out), "cannot encode a PNG");
  return out;
}

}  // namespace

ServedModels::ServedModels(const std::vector<std::string>& paths, const MemberOptions& options_for,
                           const torch::Device& device)
    : paths_(paths), device_(device) {
  RANZCR_CHECK(!paths.empty(), "no model given");
  for (const auto& path : paths) {
    TrainedModel trained = load_trained_model(path, device);
    if (!infos_.empty() && trained.info.label_names != infos_.front().label_names)
      RANZCR_FAIL(path, " predicts other labels than ", paths.front());
    options_.push_back(options_for(trained.info));
    runners_.push_back(runner_for(trained, options_.back()));
    infos_.push_back(trained.info);
    models_.push_back(trained.model);
  }
}

PreparedImage ServedModels::prepare(const std::vector<unsigned char>& bytes) const {
  PreparedImage out;
  out.format = image_format(bytes);
  if (out.format.empty())
    RANZCR_FAIL("the uploaded file is not a JPEG, PNG or DICOM file (", bytes.size(), " bytes)");
  std::vector<TransformOptions> recipes;
  for (size_t m = 0; m < options_.size(); ++m) {
    recipes.push_back(eval_transform(options_[m]));
    size_t same = 0;
    while (same < m && !same_recipe(recipes[same], recipes[m])) ++same;
    if (same < m) {
      out.inputs.push_back(out.inputs[same]);
      continue;
    }
    const PrepareOptions prepare = recipes[m].prepare();
    cv::Size size;
    const cv::Mat gray = decode_grayscale_bytes(bytes, kUploadName, prepare.side, &size, prepare.dicom);
    out.width = size.width;
    out.height = size.height;
    const cv::Mat f = to_float(ImageTransform(recipes[m]).transform_u8(prepare_decoded(gray, prepare), 0, 0));
    out.inputs.push_back(torch::from_blob(f.data, {1, f.rows, f.cols}, torch::kFloat32).clone());
  }
  return out;
}

torch::Tensor ServedModels::device_input(size_t m, const std::vector<const PreparedImage*>& images) const {
  std::vector<torch::Tensor> pixels;
  for (const PreparedImage* image : images) pixels.push_back(image->inputs[m]);
  Batch batch;
  batch.images = torch::stack(pixels);  // [N, 1, S, S] float, as the loader's float batches
  batch.labels = torch::zeros({batch.images.size(0), 0});
  DeviceBatchOptions o = device_batch_options(options_[m]);
  return upload_batch(std::move(batch), o).images;
}

torch::Tensor ServedModels::predict(const std::vector<const PreparedImage*>& given) {
  RANZCR_CHECK(!given.empty(), "predict: no image");
  c10::InferenceMode inference;  // no autograd bookkeeping at all (NoGradGuard still counts versions)
  // Padded with copies of the last image to a warmed-up size (eval mode: each image's numbers are its own);
  // the copies' rows are dropped below.
  const int64_t n = static_cast<int64_t>(given.size());
  std::vector<const PreparedImage*> images = given;
  images.resize(static_cast<size_t>(padded_batch_size(static_cast<int>(n), padded_sizes_)), given.back());
  const bool single = models_.size() == 1;
  torch::Tensor sum;
  for (size_t m = 0; m < models_.size(); ++m) {
    const torch::Tensor logits =
        eval_logits(*runners_[m], device_input(m, images), options_[m]).narrow(0, 0, n).to(torch::kCPU);
    const torch::Tensor p = member_probabilities(logits, single);
    sum = m == 0 ? p : sum + p;
  }
  return (single ? sum : sum / static_cast<double>(models_.size())).contiguous();
}

std::vector<std::string> ServedModels::runner_names() const {
  std::vector<std::string> names;
  for (const auto& r : runners_) names.push_back(r->name());
  return names;
}

std::vector<unsigned char> ServedModels::input_png(const PreparedImage& image) const {
  const torch::Tensor f = image.inputs.front()[0].contiguous();
  const cv::Mat m(static_cast<int>(f.size(0)), static_cast<int>(f.size(1)), CV_32F, f.data_ptr<float>());
  cv::Mat u8;
  m.convertTo(u8, CV_8U, 255.0);
  return png_bytes(u8);
}

std::vector<unsigned char> ServedModels::cam_png(const PreparedImage& image,
                                                 const std::vector<std::string>& labels) {
  const std::vector<const PreparedImage*> one{&image};
  const torch::Tensor probs = predict(one);
  std::vector<int64_t> chosen = cam_label_indices(CamOptions{"", labels}, label_names());
  if (chosen == std::vector<int64_t>{-1}) chosen = {top_label(probs[0])};
  std::vector<Classifier*> models;
  std::vector<torch::Tensor> inputs;
  for (size_t m = 0; m < models_.size(); ++m) {
    models.push_back(models_[m].get());
    inputs.push_back(device_input(m, one));
  }
  return png_bytes(cam_overlays(models, inputs, options_.front(), probs, {chosen}, label_names()).front());
}

void ServedModels::warm_up(int max_batch, std::optional<bool> pad) {
  RANZCR_CHECK(max_batch >= 1, "serve: the largest batch must hold at least one image");
  const bool padded =
      pad.value_or(device_.is_cuda() || options_.front().backend.backend == InferBackend::kOpenVino);
  const std::vector<int> sizes = batch_plan(max_batch, padded);
  padded_sizes_.clear();  // the warm-up's own batches run at their size
  PreparedImage blank;
  for (const auto& o : options_) blank.inputs.push_back(torch::zeros({1, o.image_size, o.image_size}));
  for (int n : sizes) predict(std::vector<const PreparedImage*>(static_cast<size_t>(n), &blank));
  if (padded) padded_sizes_ = sizes;
}

std::vector<int> batch_plan(int max_batch, bool pad) {
  std::vector<int> sizes{1};
  if (pad)
    for (int n = 2; n < max_batch; n *= 2) sizes.push_back(n);
  if (max_batch > 1) sizes.push_back(max_batch);
  return sizes;
}

int padded_batch_size(int n, const std::vector<int>& sizes) {
  for (int size : sizes)
    if (size >= n) return size;
  return n;
}

}  // namespace ranzcr
