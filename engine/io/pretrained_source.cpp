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

// The commit a checkpoint's run pinned for `repo_id`, "" when it pinned none (or another repository).
std::string pinned_commit(const std::string& checkpoint, const std::string& repo_id) {
  std::error_code ec;
  if (checkpoint.empty() || !fs::exists(checkpoint, ec)) return "";
  try {
    const Config earlier = parse_config(read_checkpoint_meta(checkpoint).config_yaml, checkpoint);
    if (!hub::names_hub_weights(earlier.model.pretrained)) return "";
    const hub::HubWeightsRef ref = hub::parse_hub_weights(earlier.model.pretrained, earlier.model.name);
    return ref.repo_id == repo_id && hub::is_commit_hash(ref.revision) ? ref.revision : "";
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

void apply_normalisation(Config& c, const hub::HubWeights& w, const PretrainedLog& log) {
  const bool mean_set = c.explicit_keys.count("model.input_mean") > 0;
  const bool std_set = c.explicit_keys.count("model.input_std") > 0;
  if (w.mean.empty()) {
    log.warn("pretrained: " + w.config_note + "; normalising with model.input_mean " +
             number_list(c.model.input_mean) + " model.input_std " + number_list(c.model.input_std));
    return;
  }
  const std::vector<double> mean = for_channels(w.mean, c.model.in_channels);
  const std::vector<double> std = for_channels(w.std, c.model.in_channels);
  if (!mean_set) c.model.input_mean = mean;
  if (!std_set) c.model.input_std = std;
  const std::string source =
      mean_set || std_set ? "model.input_mean/input_std as set" : "from " + w.config_source;
  log.info("pretrained: normalisation mean " + number_list(c.model.input_mean) + " std " +
           number_list(c.model.input_std) + " (" + source + "; the weights' RGB mean " + number_list(w.mean) +
           " std " + number_list(w.std) + ")");
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
    RANZCR_FAIL("model.pretrained ", model.pretrained, ": ", e.what(),
                offline_miss ? "; on a machine with network run `ranzcr fetch-weights " +
                                   (model.pretrained == "timm" ? model.name : model.pretrained) +
                                   "` and copy " + options.cache_dir + " here (or unset HF_HUB_OFFLINE)"
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

Config pin_pretrained_to(const Config& config, const std::string& checkpoint) {
  if (!hub::names_hub_weights(config.model.pretrained)) return config;
  const hub::HubWeightsRef ref = hub::parse_hub_weights(config.model.pretrained, config.model.name);
  const std::string commit = pinned_commit(checkpoint, ref.repo_id);
  if (commit.empty()) return config;
  Config c = config;
  c.model.pretrained = "hf-hub:" + ref.repo_id + "@" + commit;
  return c;
}

Config resolve_pretrained(const Config& config, hub::HubOptions options, bool network,
                          const PretrainedLog& log) {
  if (!hub::names_hub_weights(config.model.pretrained)) return config;
  Config c = config;
  if (!network) options.offline = true;
  hub::HubWeightsRef ref = hub::parse_hub_weights(c.model.pretrained, c.model.name);
  const std::string resume =
      c.train.resume == ResumeSetting::kAuto ? run_folder::last_checkpoint(c.output.dir) : "";
  if (const std::string commit = pinned_commit(resume, ref.repo_id);
      !commit.empty() && commit != ref.revision) {
    log.info("pretrained: " + resume + " pinned " + ref.repo_id + " at commit " + commit + ": using it");
    ref.revision = commit;
  }
  const hub::HubWeights w = fetch(options, ref, c.model, network);
  const std::string revision =
      w.weights.revision == w.weights.commit ? "" : " revision " + w.weights.revision + " =";
  log.info("pretrained: " + w.weights.repo_id + revision + " commit " + w.weights.commit + ", " +
           w.weights.filename + " (" + hub::format_bytes(w.weights.size) +
           (w.weights.downloaded ? ", downloaded" : ", cached") + ") " + w.weights.path);
  c.model.pretrained = w.pinned();
  c.model.pretrained_file = w.weights.path;
  apply_normalisation(c, w, log);
  return c;
}

std::string pretrained_file(const ModelConfig& model) {
  RANZCR_CHECK(!hub::names_hub_weights(model.pretrained) || !model.pretrained_file.empty(),
               "model.pretrained ", model.pretrained,
               " names Hub weights, which are fetched before the job starts (resolve_pretrained)");
  return model.pretrained_file.empty() ? model.pretrained : model.pretrained_file;
}

}  // namespace ranzcr
