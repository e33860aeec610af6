// The run folder's layout (output.dir): the one place that names its files. Training writes them, resume,
// cross-validation, ensembles (--checkpoints-from) and the Hub pin read them.
#pragma once

#include <filesystem>
#include <string>

namespace ranzcr::run_folder {

/// <run>/config.yaml: the resolved config.
inline std::string config_file(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "config.yaml").string();
}
/// <run>/log.txt: the run's log.
inline std::string log_file(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "log.txt").string();
}
/// <run>/checkpoints: every checkpoint of the run.
inline std::string checkpoints(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "checkpoints").string();
}
/// <run>/checkpoints/last.pt: the latest state, which a run resumes from.
inline std::string last_checkpoint(const std::string& run_dir) {
  return checkpoints(run_dir) + "/last.pt";
}
/// <run>/checkpoints/best.pt: the weights of the best validation epoch.
inline std::string best_checkpoint(const std::string& run_dir) {
  return checkpoints(run_dir) + "/best.pt";
}

}  // namespace ranzcr::run_folder
