#include "engine/infer/ensemble.h"
#include "core/check.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "core/text.h"
#include "engine/infer/onnx_graph.h"
#include "engine/io/run_folder.h"
#include "engine/runtime/precision.h"

namespace fs = std::filesystem;

namespace ranzcr {
namespace {

// The first image one model read and the other did not.
std::string first_difference(const DatasetIndex& index, const torch::Tensor& a, const torch::Tensor& b) {
  const int64_t n = std::min(a.size(0), b.size(0));
  const int64_t* pa = a.data_ptr<int64_t>();
  const int64_t* pb = b.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    if (pa[i] != pb[i]) return "first at " + index.image_paths[std::min(pa[i], pb[i])];
  return "first at " + index.image_paths[a.size(0) > n ? pa[n] : pb[n]];
}

}  // namespace

std::vector<std::string> checkpoints_in(const std::string& run_dir) {
  RANZCR_CHECK(fs::is_directory(run_dir), "run folder not found: ", run_dir);
  std::map<int, std::string> folds;
  for (const auto& e : fs::directory_iterator(run_dir)) {
    const int k = e.is_directory() ? run_folder::fold_number(e.path().filename().string()).value_or(-1) : -1;
    if (k >= 0) folds[k] = run_folder::best_checkpoint(e.path().string());
  }
  std::vector<std::string> out;
  for (const auto& [k, path] : folds) {
    if (!fs::exists(path))
      RANZCR_FAIL(run_dir, ": fold ", k, " has no best checkpoint (", path, "); finish the cv run first");
    out.push_back(path);
  }
  if (!out.empty()) return out;
  const std::string best = run_folder::best_checkpoint(run_dir);
  if (!fs::exists(best))
    RANZCR_FAIL(run_dir, " holds no ", run_folder::kBest, " nor ", run_folder::kFoldBest);
  return {best};
}

EnsembleResult run_ensemble(const std::vector<std::string>& paths, const MemberOptions& options_for,
                            const DatasetIndex& index, const std::vector<int64_t>& rows,
                            const torch::Device& device, Collectives& collectives) {
  RANZCR_CHECK(!paths.empty(), "no model given");
  EnsembleResult out;
  const bool single = paths.size() == 1;
  torch::Tensor sum;
  for (const auto& path : paths) {
    TrainedModel trained = load_trained_model(path, device);
    if (!out.models.empty() && trained.info.label_names != out.models.front().label_names)
      RANZCR_FAIL(path, " predicts other labels than ", paths.front(), " (",
                  join(trained.info.label_names, ", "), " vs ", join(out.models.front().label_names, ", "),
                  ")");
    const InferenceOptions options = options_for(trained.info);
    const std::unique_ptr<ModelRunner> runner = runner_for(trained, options, {options.batch_size});
    InferenceResult r = run_inference(*runner, index, rows, options, collectives);
    if (out.models.empty()) {
      out.labels = r.labels;
      out.rows = r.rows;
      out.skipped = r.skipped;
      out.logits = r.logits;
      sum = member_probabilities(r.logits, single);
    } else {
      if (!torch::equal(r.rows, out.rows))  // e.g. members with other data.dicom.window and skip_bad_images
        RANZCR_FAIL(path, " read other images than ", paths.front(), " (", r.rows.size(0), " vs ",
                    out.rows.size(0), " readable; ", first_difference(index, r.rows, out.rows),
                    "): their data settings differ");
      sum = sum + member_probabilities(r.logits, single);
    }
    out.models.push_back(trained.info);
    out.options.push_back(options);
  }
  const int64_t n = static_cast<int64_t>(paths.size());
  out.probs = (single ? sum : sum / static_cast<double>(n)).contiguous();
  if (n > 1) out.logits = torch::Tensor();
  return out;
}

std::unique_ptr<ModelRunner> runner_for(const TrainedModel& trained, const InferenceOptions& options,
                                        const std::vector<int64_t>& warm_batches) {
  if (options.backend.backend == InferBackend::kOpenVino)
    return openvino_runner(trained_models_onnx({&trained}), options.backend, warm_batches);
  set_memory_format(*trained.model, options.channels_last);
  trained.model->eval();
  return libtorch_runner(*trained.model, options.device, options.precision);
}

torch::Tensor member_probabilities(const torch::Tensor& logits, bool single) {
  return single ? torch::sigmoid(logits).to(torch::kDouble) : torch::sigmoid(logits.to(torch::kDouble));
}

}  // namespace ranzcr
