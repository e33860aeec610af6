// The Hub as this process's environment sets it up (HF_ENDPOINT, HF_HUB_CACHE/HF_HOME, HF_TOKEN,
// HF_HUB_OFFLINE, ...: read here, in apps/) with download progress drawn on the run log, for resolving
// model.pretrained (engine/io/pretrained_source.h) and for `ranzcr fetch-weights`.
#pragma once

#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/io/pretrained_source.h"
#include "engine/report/run_log.h"
#include "hub/download.h"

namespace ranzcr {

/// The Hub options of this process's environment, with progress and notes going to `log`.
hub::HubOptions hub_options(RunLog& log);

/// Where resolve_weights' lines go: `log`'s info and warnings.
PretrainedLog pretrained_log(RunLog& log);

/// `ranzcr fetch-weights NAME... | --all`: NAME is a zoo model (timm's default weights) or
/// hf-hub:ORG/REPO[@REV].
int fetch_weights(const std::vector<std::string>& names, bool all);

}  // namespace ranzcr
