// model.pretrained's Hub sources (hub/weights_source.h): `timm` (timm's default ImageNet weights for the
// model) or `hf-hub:ORG/REPO[@REV]` (timm's spelling), fetched through the Hub cache (hub/download.h), with
// the normalisation the weights were trained with from the repository's config.json.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hub/download.h"
#include "hub/weights_source.h"

namespace ranzcr::hub {

/// The timm version hub/timm_default_tags.inc was generated from.
extern const char* const kTimmTagsVersion;

/// timm's default pretrained repository for a zoo model ("timm/resnet50.a1_in1k"), "" when timm has no
/// weights for it (efficientnet_b6/b7), nullopt when timm has no model of that name.
std::optional<std::string> timm_default_repo(const std::string& model_name);

/// Every (model, repository) pair of the table, repository "" where timm has none.
std::vector<std::pair<std::string, std::string>> timm_default_repos();

/// A Hub repository at a revision: what model.pretrained's Hub sources come to.
struct HubWeightsRef {
  std::string repo_id;
  std::string revision = "main";
};

/// The repository that `source` (timm or hf-hub:...) names for the model `model_name`: `timm` -> timm's
/// default tag for it, hf-hub:ORG/REPO[@REV] -> that (revision main when none was given). Throws HubError
/// (kOther) with one line for a model timm has no weights for.
HubWeightsRef hub_weights_ref(const PretrainedSource& source, const std::string& model_name);

struct HubWeights {
  HubFile weights;                // model.safetensors (else pytorch_model.bin)
  std::vector<double> mean, std;  // config.json's pretrained_cfg (RGB), empty when it has none
  std::string config_source;      // where mean/std come from: "config.json", timm's registry
  std::string config_note;        // why mean/std are empty ("" when found)
  /// hf-hub:ORG/REPO@COMMIT: the same bytes again.
  PretrainedSource pinned() const;
};

/// The weights file (model.safetensors, else pytorch_model.bin) and config.json of `ref`, from the cache
/// or downloaded. Throws HubError with one line.
HubWeights fetch_hub_weights(const HubOptions& options, const HubWeightsRef& ref);

}  // namespace ranzcr::hub
