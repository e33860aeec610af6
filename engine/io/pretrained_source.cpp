#include "engine/io/pretrained_source.h"

#include <cstdio>
#include <filesystem>

#include "core/check.h"
#include "engine/io/checkpoint.h"
#include "engine/io/run_folder.h"
#include "hub/hub_cache.h"
#include "hub/pretrained_weights.h"

namespace fs = std::filesystem;

namespace ranzcr {
namespace {

// The commit a checkpoint's run pinned for `repo_id`, "" when it pinned none (or another repository). The
// checkpoint's config is read here only.
std::string pinned_commit(const std::string& checkpoint, const std::string& repo_id) {
  std::error_code ec;
  if (checkpoint.empty() || !fs::exists(checkpoint, ec)) return "";
  try {
    const hub::PretrainedSource earlier =
        parse_config(read_checkpoint_meta(checkpoint).config_yaml, checkpoint).model.pretrained;
    const bool same = earlier.kind == hub::PretrainedSource::Kind::kHub && earlier.repo_id == repo_id;
    return same && hub::is_commit_hash(earlier.revision) ? earlier.revision : "";
  } catch (const std::exception&) {
    return "";  // the run itself reports an unreadable checkpoint
  }
}

// The RGB statistics for `channels` input channels: one channel gets the mean of the three (the first conv
// is summed over RGB); three keep them; another count gets the mean, repeated.
std::vector<double> for_channels(const std::vector<double>& rgb, int channels) {
  if (static_cast<int>(rgb.size()) == channels) return rgb;
  double sum = 0;
  for (double v : rgb) sum += v;
  return std::vector<double>(channels == 1 ? 1 : channels, sum / static_cast<double>(rgb.size()));
}

// The normalisation of `w` for this input, unless the config sets its own; logged either way.
void take_normalisation(ResolvedWeights& r, const Config& c, const hub::HubWeights& w,
                        const PretrainedLog& log) {
  const bool mean_set = c.explicit_keys.count("model.input_mean") > 0;
  const bool std_set = c.explicit_keys.count("model.input_std") > 0;
  if (w.mean.empty()) {
    log.warn("pretrained: " + w.config_note + "; normalising with model.input_mean " +
             number_list(c.model.input_mean) + " model.input_std " + number_list(c.model.input_std));
    return;
  }
  const std::vector<double> mean = for_channels(w.mean, c.model.in_channels);
  const std::vector<double> std = for_channels(w.std, c.model.in_channels);
  if (!mean_set) r.input_mean = mean;
  if (!std_set) r.input_std = std;
  const std::vector<double>& used_mean = mean_set ? c.model.input_mean : mean;
  const std::vector<double>& used_std = std_set ? c.model.input_std : std;
  const std::string source =
      mean_set || std_set ? "model.input_mean/input_std as set" : "from " + w.config_source;
  log.info("pretrained: normalisation mean " + number_list(used_mean) + " std " + number_list(used_std) +
           " (" + source + "; the weights' RGB mean " + number_list(w.mean) + " std " + number_list(w.std) +
           ")");
  if ((mean_set && c.model.input_mean != mean) || (std_set && c.model.input_std != std))
    log.warn("pretrained: the weights were trained with mean " + number_list(mean) + " std " +
             number_list(std) + " for this input; the config's model.input_mean/input_std differ");
}

// The weights of `ref`, or one line saying why not (with what to do on a host without network).
hub::HubWeights fetch(const hub::HubOptions& options, const hub::HubWeightsRef& ref, const ModelConfig& model,
                      bool network) {
  try {
    return hub::fetch_hub_weights(options, ref);
  } catch (const hub::HubError& e) {
    const bool offline_miss = e.kind() == hub::HubErrorKind::kOfflineMiss && network;
    const std::string setting = setting_text(model.pretrained);
    RANZCR_FAIL("model.pretrained ", setting, ": ", e.what(),
                offline_miss ? "; on a machine with network run `ranzcr fetch-weights " +
                                   (setting == "timm" ? model.name : setting) + "` and copy " +
                                   options.cache_dir + " here (or unset HF_HUB_OFFLINE)"
                             : std::string());
  }
}

}  // namespace

std::string number_list(const std::vector<double>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    char n[32];
    std::snprintf(n, sizeof n, "%.4g", values[i]);
    s += (i ? ", " : "") + std::string(n);
  }
  return s + "]";
}

ResolvedWeights resolve_weights(const Config& config, hub::HubOptions options, bool network,
                                const std::string& resume, const PretrainedLog& log) {
  ResolvedWeights r;
  r.source = config.model.pretrained;
  if (r.source.kind == hub::PretrainedSource::Kind::kFile) r.file = r.source.file;
  if (!r.source.names_hub()) return r;
  if (!network) options.offline = true;
  hub::HubWeightsRef ref = hub::hub_weights_ref(r.source, config.model.name);
  if (const std::string commit = pinned_commit(resume, ref.repo_id);
      !commit.empty() && commit != ref.revision) {
    log.info("pretrained: " + resume + " pinned " + ref.repo_id + " at commit " + commit + ": using it");
    ref.revision = commit;
  }
  const hub::HubWeights w = fetch(options, ref, config.model, network);
  const std::string revision =
      w.weights.revision == w.weights.commit ? "" : " revision " + w.weights.revision + " =";
  log.info("pretrained: " + w.weights.repo_id + revision + " commit " + w.weights.commit + ", " +
           w.weights.filename + " (" + hub::format_bytes(w.weights.size) +
           (w.weights.downloaded ? ", downloaded" : ", cached") + ") " + w.weights.path);
  r.source = w.pinned();
  r.file = w.weights.path;
  take_normalisation(r, config, w, log);
  return r;
}

Config config_with(const Config& config, const ResolvedWeights& weights) {
  Config c = config;
  c.model.pretrained = weights.source;
  if (!weights.input_mean.empty()) c.model.input_mean = weights.input_mean;
  if (!weights.input_std.empty()) c.model.input_std = weights.input_std;
  return c;
}

std::string resumed_checkpoint(const Config& config, const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  return config.train.resume == ResumeSetting::kAuto ? run_folder::last_checkpoint(config.output.dir) : "";
}

}  // namespace ranzcr
