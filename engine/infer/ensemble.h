// Ensembles for evaluate and predict: several trained models (checkpoints or exported files) run over the
// same rows, each with its own preprocessing (input size, channels, normalisation), their probabilities
// averaged.
#pragma once

#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "data/dataset_index.h"
#include "distributed/collectives.h"
#include "engine/infer/inference.h"
#include "engine/io/trained_model.h"

namespace ranzcr {

/// The best checkpoints a run folder holds: every fold's of a `cv` folder, sorted by K, else the run's own
/// (run_folder.h names them). Throws std::runtime_error (one line) when there is none, or when a fold
/// folder lacks its best checkpoint.
std::vector<std::string> checkpoints_in(const std::string& run_dir);

struct EnsembleResult {
  /// [N, C] float64 in [0, 1]: the mean over the models of sigmoid(logits), computed in float64 so that
  /// distinct logits stay distinct (for one model exactly its float32 sigmoid(logits), as before
  /// ensembles). Each model's --tta averages its logits over the flip first, as validation does.
  torch::Tensor probs;
  torch::Tensor logits;  // [N, C] the model's logits when there is one model; undefined otherwise
  torch::Tensor labels;  // [N, C] float32 0/1 ([N, 0] when the index is unlabeled)
  torch::Tensor rows;    // [N] int64: the index row of each prediction
  int64_t skipped = 0;   // unreadable images skipped (all ranks)
  std::vector<TrainedModelInfo> models;   // in the order of the paths
  std::vector<InferenceOptions> options;  // what each model ran with
};

/// The inference settings of one model (its own input size, channels and normalisation).
using MemberOptions = std::function<InferenceOptions(const TrainedModelInfo&)>;

/// Loads each of `paths` in turn on `device` (one model in memory at a time), runs it over `rows` of
/// `index` (sharded over the ranks of `collectives`, gathered on every rank) and averages the
/// probabilities. Every model must have the first one's label names (else std::runtime_error naming
/// both files).
EnsembleResult run_ensemble(const std::vector<std::string>& paths, const MemberOptions& options_for,
                            const DatasetIndex& index, const std::vector<int64_t>& rows,
                            const torch::Device& device, Collectives& collectives);

/// The runner of a loaded model under options.backend: LibTorch's forward in the options' layout and
/// precision (the model is kept by `trained`, which must outlive the runner), or OpenVINO on its ONNX graph,
/// compiled for each batch size of `warm_batches` at once (others when first seen).
std::unique_ptr<ModelRunner> runner_for(const TrainedModel& trained, const InferenceOptions& options,
                                        const std::vector<int64_t>& warm_batches = {});

/// One member's share of EnsembleResult::probs before the mean: float64 sigmoid of `logits` [N, C] float32,
/// taken in float32 for a lone model (`single`, as before ensembles), in float64 for an ensemble's member.
torch::Tensor member_probabilities(const torch::Tensor& logits, bool single);

}  // namespace ranzcr
