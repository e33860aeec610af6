// Where model.pretrained's weights come from, for one job: the file it names, or Hub weights (`timm`,
// `hf-hub:ORG/REPO[@REV]`) fetched into the Hugging Face cache and pinned to their commit. The setting was
// parsed when the config was read (hub/weights_source.h); resolve_weights is the one place that turns it
// into a file and a normalisation, once per job (apps/processes.cpp), and the job carries the result to
// whatever builds the model (pretrained.h).
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

/// model.pretrained resolved for a job.
struct ResolvedWeights {
  hub::PretrainedSource source;  // the setting, a Hub one pinned to its commit (hf-hub:ORG/REPO@COMMIT)
  std::string file;              // the local file to load; "" = no weights
  /// The normalisation the weights were trained with for this input (one channel: the mean of RGB's), as
  /// the run uses it: empty when the config sets its own or the weights say none.
  std::vector<double> input_mean, input_std;
};

/// Resolves model.pretrained: a file is itself; Hub weights are fetched (or found in the cache), pinned to
/// their commit, with the normalisation of the weights' config.json unless the config set
/// model.input_mean/input_std. `resume`: the checkpoint this job continues ("" for none); when it pinned
/// the same repository, its commit is used, so a resumed run normalises as it did. `network`: false for a
/// process whose node's first process has fetched them already (the cache only, whatever `options` say).
/// Logs repo, commit, file and normalisation. Throws one line on failure.
ResolvedWeights resolve_weights(const Config& config, hub::HubOptions options, bool network,
                                const std::string& resume, const PretrainedLog& log);

/// `config` as the job runs and records it (its config.yaml, its checkpoints): model.pretrained pinned
/// and model.input_mean/input_std those of `weights` where it has them.
Config config_with(const Config& config, const ResolvedWeights& weights);

/// The checkpoint a train job continues: `explicit_path` (--resume) when given, else output.dir's last
/// checkpoint when train.resume is auto and there is one, else "".
std::string resumed_checkpoint(const Config& config, const std::string& explicit_path);

/// `values` as the log writes them: "[0.485, 0.456, 0.406]" (4 significant digits).
std::string number_list(const std::vector<double>& values);

}  // namespace ranzcr
