// model.pretrained's Hub names (`timm`, `hf-hub:ORG/REPO[@REV]`) for a job, and `ranzcr fetch-weights`.
// The environment (HF_ENDPOINT, HF_HUB_CACHE/HF_HOME, HF_TOKEN, HF_HUB_OFFLINE, ...) is read here, in apps/.
#pragma once

#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/report/run_log.h"
#include "hub/download.h"

namespace ranzcr {

/// The Hub options of this process's environment, with progress and notes going to `log`.
hub::HubOptions hub_options(RunLog& log);

/// `config` with its Hub weights in place when model.pretrained names them (unchanged otherwise):
/// model.pretrained pinned to the commit ("hf-hub:ORG/REPO@COMMIT", so the run's config.yaml and checkpoints
/// name the same bytes), model.pretrained_file the cached file, and model.input_mean/input_std those of the
/// weights' config.json unless the config set them (one input channel: the mean of the three). When the run
/// resumes output.dir's last.pt (train.resume: auto) and that pinned the same repository, its commit is used.
/// `network`: false for a process whose node's first process has fetched them already (the cache only).
/// Logs repo, commit, file and normalisation. Throws one line on failure.
Config with_hub_weights(const Config& config, bool network, RunLog& log);

/// `config` with model.pretrained pinned to the commit the run of `checkpoint` used, when both name the same
/// Hub repository (unchanged otherwise): `train --resume PATH` normalises as that run did.
Config pin_hub_weights_to(const Config& config, const std::string& checkpoint);

/// `ranzcr fetch-weights NAME... | --all`: NAME is a zoo model (timm's default weights) or
/// hf-hub:ORG/REPO[@REV].
int fetch_weights(const std::vector<std::string>& names, bool all);

}  // namespace ranzcr
