// Class activation maps (Grad-CAM, Selvaraju et al. 2017) of trained models, and `predict --cam`'s
// overlays: where in the image the model found its evidence for a label.
#pragma once

#include <torch/types.h>

#include <opencv2/core.hpp>

#include <string>
#include <vector>

#include "data/dataset_index.h"
#include "distributed/collectives.h"
#include "engine/infer/ensemble.h"
#include "models/registry.h"

namespace ranzcr {

/// Grad-CAM of label `labels[i]` for image i of `input` (as the model takes it): the last feature map A
/// (ClassifierOutput::last_features) weighted per channel by the spatial mean of d logit / d A, summed
/// over channels, ReLU'd, bilinearly upsampled to the input size. [N, H, W] float32 on the input's
/// device, not normalised. Runs the model in eval mode with gradients (none reach the parameters).
torch::Tensor grad_cam(Classifier& model, const torch::Tensor& input, const std::vector<int64_t>& labels);

/// What `predict --cam DIR --cam-labels ...` draws.
struct CamOptions {
  std::string dir;                  // one PNG per image: DIR/<id>.png
  std::vector<std::string> labels;  // {"all"}, {"top1"} (the most probable label) or label names
  int panel_size = 320;             // side of each panel, pixels
};

/// The label indices `options.labels` names (all, top1 = -1, or names); throws std::runtime_error naming
/// an unknown label and the valid ones.
std::vector<int64_t> cam_label_indices(const CamOptions& options, const std::vector<std::string>& names);

/// The most probable label of one image's probabilities [C] (the first of equals): --cam-labels top1.
int64_t top_label(const torch::Tensor& probs);

/// The overlays `write_cams` draws, for images already in memory (serve's /v1/cam): `inputs[m]` the batch as
/// models[m] takes it ([N, C, S, S] on its device, DeviceBatch::images), `first_options` the first model's
/// (to show its input), `probs` [N, C] the ensemble's probabilities, `labels[i]` image i's label indices.
/// Per image a BGR strip of one panel per label (panel_size + 28 rows).
std::vector<cv::Mat> cam_overlays(const std::vector<Classifier*>& models,
                                  const std::vector<torch::Tensor>& inputs,
                                  const InferenceOptions& first_options, const torch::Tensor& probs,
                                  const std::vector<std::vector<int64_t>>& labels,
                                  const std::vector<std::string>& names, int panel_size = 320);

/// Writes this rank's share of the images `predicted` holds: per image a row of panels, one per chosen
/// label, each the model's input with its Grad-CAM (jet colours, normalised to the image's maximum)
/// over it and the label's probability; with several models their normalised maps averaged. Each model
/// is loaded again from `paths` with the options of `predicted`. Also writes DIR/cam_peaks.csv
/// (id,label,probability,peak_x,peak_y: each map's maximum as fractions of the width and height;
/// cam_peaks_rankN.csv per rank with several processes). Returns the number of PNGs written.
int64_t write_cams(const std::vector<std::string>& paths, const EnsembleResult& predicted,
                   const DatasetIndex& index, const CamOptions& options, const torch::Device& device,
                   Collectives& collectives);

}  // namespace ranzcr
