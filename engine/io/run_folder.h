// The layout of a run folder (output.dir) and of a cv root (`ranzcr cv`'s output.dir, one run folder per
// fold): the one place that names their files and folders, but for the trackers' own (tracking/: each
// tracker names the files it keeps in a run folder). Training writes them; resume, `plot`, cross-validation,
// ensembles (--checkpoints-from) and the Hub pin read them. Messages that name a file take its name from
// here too (kMetrics, ...), so a rename is one edit.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/digits.h"

namespace ranzcr::run_folder {

// The names, for messages and help texts.
inline constexpr const char* kConfig = "config.yaml";
inline constexpr const char* kLog = "log.txt";
inline constexpr const char* kMetrics = "metrics.jsonl";
inline constexpr const char* kCheckpoints = "checkpoints";
inline constexpr const char* kLastFile = "last.pt";
inline constexpr const char* kBestFile = "best.pt";
inline constexpr const char* kLast = "checkpoints/last.pt";  // relative to the run folder
inline constexpr const char* kBest = "checkpoints/best.pt";
inline constexpr const char* kFoldPrefix = "fold_";
inline constexpr const char* kFoldBest = "fold_K/checkpoints/best.pt";  // a cv root's every fold's best
inline constexpr const char* kOutOfFold = "oof.csv";
inline constexpr const char* kCvReport = "cv.json";

/// <run>/config.yaml: the resolved config.
inline std::string config_file(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / kConfig).string();
}
/// <run>/log.txt: the run's log.
inline std::string log_file(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / kLog).string();
}
/// <run>/metrics.jsonl: one JSON line per finished epoch.
inline std::string metrics_file(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / kMetrics).string();
}
/// <run>/curves_loss.png, curves_auc.png, curves_auc_per_label.png: the PNG training curves, in that order.
inline std::vector<std::string> curves_files(const std::string& run_dir) {
  std::vector<std::string> paths;
  for (const char* name : {"curves_loss.png", "curves_auc.png", "curves_auc_per_label.png"})
    paths.push_back((std::filesystem::path(run_dir) / name).string());
  return paths;
}
/// <run>/checkpoints: every checkpoint of the run.
inline std::string checkpoints(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / kCheckpoints).string();
}
/// <run>/checkpoints/last.pt: the latest state, which a run resumes from.
inline std::string last_checkpoint(const std::string& run_dir) {
  return checkpoints(run_dir) + "/" + kLastFile;
}
/// <run>/checkpoints/best.pt: the weights of the best validation epoch.
inline std::string best_checkpoint(const std::string& run_dir) {
  return checkpoints(run_dir) + "/" + kBestFile;
}

namespace detail {
inline constexpr const char* kEpochPrefix = "epoch_";    // output.keep_every
inline constexpr const char* kTopPrefix = "top_epoch_";  // output.keep_best_k
inline std::string numbered(const std::string& checkpoints_dir, const char* prefix, int64_t epoch) {
  std::ostringstream name;
  name << checkpoints_dir << "/" << prefix << std::setw(3) << std::setfill('0') << epoch << ".pt";
  return name.str();
}
}  // namespace detail

/// <checkpoints>/epoch_NNN.pt: the checkpoint kept every output.keep_every epochs.
inline std::string epoch_checkpoint(const std::string& checkpoints_dir, int64_t epoch) {
  return detail::numbered(checkpoints_dir, detail::kEpochPrefix, epoch);
}
/// <checkpoints>/top_epoch_NNN.pt: one of the output.keep_best_k best epochs.
inline std::string top_epoch_checkpoint(const std::string& checkpoints_dir, int64_t epoch) {
  return detail::numbered(checkpoints_dir, detail::kTopPrefix, epoch);
}
/// Whether a file name in <checkpoints> is a top_epoch_NNN.pt.
inline bool is_top_epoch_checkpoint(const std::filesystem::path& file) {
  return file.filename().string().rfind(detail::kTopPrefix, 0) == 0 && file.extension() == ".pt";
}

/// <cv root>/fold_K: fold K's run folder.
inline std::string fold_dir(const std::string& cv_root, int fold) {
  return (std::filesystem::path(cv_root) / (kFoldPrefix + std::to_string(fold))).string();
}
/// K of a folder named fold_K (K: 1 to 6 digits), nullopt for another name.
inline std::optional<int> fold_number(std::string_view folder_name) {
  const std::string_view prefix = kFoldPrefix;
  if (folder_name.substr(0, prefix.size()) != prefix) return std::nullopt;
  return parse_digits(folder_name.substr(prefix.size()), 6);
}
/// <cv root>/oof.csv: every image's out-of-fold probabilities.
inline std::string out_of_fold_file(const std::string& cv_root) {
  return (std::filesystem::path(cv_root) / kOutOfFold).string();
}
/// <cv root>/cv.json: the per-fold and out-of-fold AUCs.
inline std::string cv_report_file(const std::string& cv_root) {
  return (std::filesystem::path(cv_root) / kCvReport).string();
}

}  // namespace ranzcr::run_folder
