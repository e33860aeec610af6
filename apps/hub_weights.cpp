#include "apps/hub_weights.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "core/check.h"
#include "distributed/world.h"
#include "hub/pretrained_weights.h"
#include "models/registry.h"

namespace ranzcr {

namespace {

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

PretrainedLog pretrained_log(RunLog& log) {
  return {[&log](const std::string& line) { log.info(line); },
          [&log](const std::string& line) { log.warn(line); }};
}

int fetch_weights(const std::vector<std::string>& names, bool all) {
  RunLog log(true);
  std::vector<std::string> todo = names;
  if (all) {
    const std::vector<std::string> zoo = model_names();
    for (const auto& [model, repo] : hub::timm_default_repos())
      if (!repo.empty() && std::find(zoo.begin(), zoo.end(), model) != zoo.end()) todo.push_back(model);
  }
  RANZCR_CHECK(!todo.empty(), "fetch-weights: name a zoo model or hf-hub:ORG/REPO, or give --all");
  const hub::HubOptions options = hub_options(log);
  for (const std::string& name : todo) {
    // NAME is read as model.pretrained is (the config's parser); a zoo model's name reads as a file there.
    hub::PretrainedSource source = TextSetting<hub::PretrainedSource>::parse(name);
    if (!source.names_hub()) source.kind = hub::PretrainedSource::Kind::kTimm;
    const hub::HubWeightsRef ref = hub::hub_weights_ref(source, name);
    hub::HubWeights w;
    try {
      w = hub::fetch_hub_weights(options, ref);
    } catch (const hub::HubError& e) {
      RANZCR_FAIL("fetch-weights ", name, ": ", e.what());
    }
    std::cout << name << ": " << setting_text(w.pinned()) << " " << w.weights.filename << " "
              << hub::format_bytes(w.weights.size)
              << (w.weights.downloaded ? " downloaded" : " already cached")
              << (w.mean.empty() ? " (" + w.config_note + ")"
                                 : " mean " + number_list(w.mean) + " std " + number_list(w.std))
              << "\n";
  }
  std::cout << "cache: " << options.cache_dir << "\n";
  return 0;
}

}  // namespace ranzcr
