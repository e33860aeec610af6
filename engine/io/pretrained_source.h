// Where model.pretrained's weights come from: the file it names, or Hub weights (`timm`,
// `hf-hub:ORG/REPO[@REV]`) fetched into the Hugging Face cache and pinned to their commit. The one place
// that resolves the setting; the caller hands in the Hub options it read from its environment (with its
// progress display), and pretrained.h loads the file resolved here.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "hub/download.h"

namespace ranzcr {

/// Where the lines about the weights go (the run's log).
struct PretrainedLog {
  std::function<void(const std::string&)> info, warn;
};

/// `config` with its Hub weights in place when model.pretrained names them (unchanged otherwise):
/// model.pretrained pinned to the commit ("hf-hub:ORG/REPO@COMMIT", so the run's resolved config and
/// checkpoints name the same bytes), model.pretrained_file the cached file, and model.input_mean/input_std
/// those of the weights' config.json unless the config set them (one input channel: the mean of the
/// three). When the run resumes output.dir's last checkpoint (train.resume: auto) and that pinned the same
/// repository, its commit is used. `network`: false for a process whose node's first process has fetched
/// them already (the cache only, whatever `options` say). Logs repo, commit, file and normalisation.
/// Throws one line on failure.
Config resolve_pretrained(const Config& config, hub::HubOptions options, bool network,
                          const PretrainedLog& log);

/// `config` with model.pretrained pinned to the commit the run of `checkpoint` used, when both name the same
/// Hub repository (unchanged otherwise): `train --resume PATH` normalises as that run did.
Config pin_pretrained_to(const Config& config, const std::string& checkpoint);

/// The local file of model.pretrained: the file it names, or the Hub cache file resolve_pretrained resolved
/// a Hub name (timm, hf-hub:...) to. Throws when a Hub name was not resolved.
std::string pretrained_file(const ModelConfig& model);

/// `values` as the log writes them: "[0.485, 0.456, 0.406]" (4 significant digits).
std::string number_list(const std::vector<double>& values);

}  // namespace ranzcr
