// model.pretrained as a typed value: no weights, a weights file, timm's default weights for the model, or a
// Hugging Face Hub repository at a revision. Parsed once, when the config is read (engine/config's
// TextSetting); engine/io/pretrained_source.h resolves it to a file for a job.
#pragma once

#include <string>

namespace ranzcr::hub {

struct PretrainedSource {
  enum class Kind { kNone, kFile, kTimm, kHub };
  Kind kind = Kind::kNone;
  std::string file;      // kFile: the path as written
  std::string repo_id;   // kHub: ORG/REPO
  std::string revision;  // kHub: a branch, tag or commit; "" when not given (the Hub's main)

  bool empty() const { return kind == Kind::kNone; }
  /// `timm` or hf-hub:...: fetched through the Hub cache before the job starts.
  bool names_hub() const { return kind == Kind::kTimm || kind == Kind::kHub; }
  bool operator==(const PretrainedSource& o) const {
    return kind == o.kind && file == o.file && repo_id == o.repo_id && revision == o.revision;
  }
};

/// The one parser of model.pretrained: "" (none), `timm`, `hf-hub:ORG/REPO[@REVISION]` (the repository id
/// checked as the Hub does), anything else a file path. Throws std::runtime_error with one line naming the
/// setting and what was expected.
PretrainedSource parse_pretrained_source(const std::string& text);

/// As a config writes it: "", the path, "timm", "hf-hub:ORG/REPO" or "hf-hub:ORG/REPO@REVISION".
std::string setting_text(const PretrainedSource& source);

}  // namespace ranzcr::hub
