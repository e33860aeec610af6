#include "apps/hub_weights.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "distributed/world.h"
#include "engine/io/checkpoint.h"
#include "engine/io/run_folder.h"
#include "hub/hub_cache.h"
#include "hub/pretrained_weights.h"
#include "models/registry.h"

namespace fs = std::filesystem;

namespace ranzcr {

namespace {

std::string list(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    char n[32];
    std::snprintf(n, sizeof n, "%.4g", v[i]);
    s += (i ? ", " : "") + std::string(n);
  }
  return s + "]";
}

// On a terminal, a bar redrawn at most 5 times a second; in a log, a line every 5 seconds and at the end.
class DownloadProgress {
 public:
  explicit DownloadProgress(RunLog& log) : log_(log) {}
  void operator()(const std::string& label, int64_t done, int64_t total) {
    if (total >= 0 && total < 1000000) return;  // a small file (config.json) needs no progress
    const auto now = std::chrono::steady_clock::now();
    const bool end = total > 0 && done >= total;
    const double since = std::chrono::duration<double>(now - last_).count();
    if (label != label_) {  // a new file (or a new try of it): the rate counts from here
      label_ = label;
      start_ = last_ = now;
      first_done_ = last_done_ = done;
      return;
    }
    if ((!end && since < (log_.terminal() ? 0.2 : 5.0)) || done == last_done_) return;
    last_ = now;
    last_done_ = done;
    const double secs = std::max(1e-3, std::chrono::duration<double>(now - start_).count());
    char rate[32];
    std::snprintf(rate, sizeof rate, "%.1f MB/s", static_cast<double>(done - first_done_) / 1e6 / secs);
    std::string text = "download " + label + ": " + hub::format_bytes(done);
    if (total > 0) {
      const int pct = static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total));
      text += " of " + hub::format_bytes(total) + " (" + std::to_string(pct) + "%)";
      const int filled = pct / 5;
      const std::string bar = "[" + std::string(filled, '#') + std::string(20 - filled, '.') + "] ";
      log_.progress(bar + text + ", " + rate, text + ", " + rate);
    } else {
      log_.progress(text + ", " + rate, text + ", " + rate);
    }
  }

 private:
  RunLog& log_;
  std::string label_;
  std::chrono::steady_clock::time_point start_, last_;
  int64_t first_done_ = 0, last_done_ = -1;
};

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

void apply_normalisation(Config& c, const hub::HubWeights& w, RunLog& log) {
  const bool mean_set = c.explicit_keys.count("model.input_mean") > 0;
  const bool std_set = c.explicit_keys.count("model.input_std") > 0;
  if (w.mean.empty()) {
    log.warn("pretrained: " + w.config_note + "; normalising with model.input_mean " +
             list(c.model.input_mean) + " model.input_std " + list(c.model.input_std));
    return;
  }
  const std::vector<double> mean = for_channels(w.mean, c.model.in_channels);
  const std::vector<double> std = for_channels(w.std, c.model.in_channels);
  if (!mean_set) c.model.input_mean = mean;
  if (!std_set) c.model.input_std = std;
  const std::string source =
      mean_set || std_set ? "model.input_mean/input_std as set" : "from " + w.config_source;
  log.info("pretrained: normalisation mean " + list(c.model.input_mean) + " std " + list(c.model.input_std) +
           " (" + source + "; the weights' RGB mean " + list(w.mean) + " std " + list(w.std) + ")");
  if ((mean_set && c.model.input_mean != mean) || (std_set && c.model.input_std != std))
    log.warn("pretrained: the weights were trained with mean " + list(mean) + " std " + list(std) +
             " for this input; the config's model.input_mean/input_std differ");
}

}  // namespace

hub::HubOptions hub_options(RunLog& log) {
  hub::HubOptions o = hub::hub_options_from_env(current_environment());
  auto progress = std::make_shared<DownloadProgress>(log);
  o.progress = [progress](const std::string& label, int64_t done, int64_t total) {
    (*progress)(label, done, total);
  };
  o.note = [&log](const std::string& line) { log.warn(line); };
  return o;
}

Config pin_hub_weights_to(const Config& config, const std::string& checkpoint) {
  if (!hub::names_hub_weights(config.model.pretrained)) return config;
  const hub::HubWeightsRef ref = hub::parse_hub_weights(config.model.pretrained, config.model.name);
  const std::string commit = pinned_commit(checkpoint, ref.repo_id);
  if (commit.empty()) return config;
  Config c = config;
  c.model.pretrained = "hf-hub:" + ref.repo_id + "@" + commit;
  return c;
}

Config with_hub_weights(const Config& config, bool network, RunLog& log) {
  if (!hub::names_hub_weights(config.model.pretrained)) return config;
  Config c = config;
  hub::HubOptions options = hub_options(log);
  if (!network) options.offline = true;
  hub::HubWeightsRef ref = hub::parse_hub_weights(c.model.pretrained, c.model.name);
  const std::string resume =
      c.train.resume == ResumeSetting::kAuto ? run_folder::last_checkpoint(c.output.dir) : "";
  if (const std::string commit = pinned_commit(resume, ref.repo_id);
      !commit.empty() && commit != ref.revision) {
    log.info("pretrained: " + resume + " pinned " + ref.repo_id + " at commit " + commit + ": using it");
    ref.revision = commit;
  }
  hub::HubWeights w;
  try {
    w = hub::fetch_hub_weights(options, ref);
  } catch (const hub::HubError& e) {
    std::string what = "model.pretrained " + c.model.pretrained + ": " + e.what();
    if (e.kind() == hub::HubErrorKind::kOfflineMiss && network)
      what += "; on a machine with network run `ranzcr fetch-weights " +
              (c.model.pretrained == "timm" ? c.model.name : c.model.pretrained) + "` and copy " +
              options.cache_dir + " here (or unset HF_HUB_OFFLINE)";
    throw std::runtime_error(what);
  }
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

int fetch_weights(const std::vector<std::string>& names, bool all) {
  RunLog log(true);
  std::vector<std::string> todo = names;
  if (all) {
    const std::vector<std::string> zoo = model_names();
    for (const auto& [model, repo] : hub::timm_default_repos())
      if (!repo.empty() && std::find(zoo.begin(), zoo.end(), model) != zoo.end()) todo.push_back(model);
  }
  if (todo.empty())
    throw std::runtime_error("fetch-weights: name a zoo model or hf-hub:ORG/REPO, or give --all");
  const hub::HubOptions options = hub_options(log);
  for (const std::string& name : todo) {
    const bool hub_name = hub::names_hub_weights(name);
    const hub::HubWeightsRef ref = hub::parse_hub_weights(hub_name ? name : "timm", name);
    hub::HubWeights w;
    try {
      w = hub::fetch_hub_weights(options, ref);
    } catch (const hub::HubError& e) {
      throw std::runtime_error("fetch-weights " + name + ": " + e.what());
    }
    std::cout << name << ": " << w.pinned() << " " << w.weights.filename << " "
              << hub::format_bytes(w.weights.size)
              << (w.weights.downloaded ? " downloaded" : " already cached")
              << (w.mean.empty() ? " (" + w.config_note + ")"
                                 : " mean " + list(w.mean) + " std " + list(w.std))
              << "\n";
  }
  std::cout << "cache: " << options.cache_dir << "\n";
  return 0;
}

}  // namespace ranzcr
