// The trackers' config keys (under `output.`), kept beside the trackers: engine/config visits them with the
// rest of the config (visit_tracker_keys) and checks them when the config is read (check_tracker_keys); the
// trackers a job gets are picked from them in apps/trackers.cpp. Adding a tracker's keys touches this file,
// not the config's.
#pragma once

#include <string>

#include "core/check.h"

namespace ranzcr::tracking {

struct TrackerKeys {
  // MLflow tracking (docs/tracking.md): "" = off; a tracking URI http(s)://host:port; or "env" =
  // MLFLOW_TRACKING_URI, as MLflow's Python client takes it. Credentials only from the environment.
  std::string mlflow;
  std::string mlflow_experiment;  // "" = the config file's name (apps fills it in)
  std::string mlflow_run_name;    // "" = the run folder's name
  bool mlflow_required = true;    // the server must answer at start; false: train on without tracking
};

/// Calls `v(key, field)` for every tracker key, as the config's field table does for its own.
template <class Keys, class Visitor>
void visit_tracker_keys(Keys& k, Visitor&& v) {
  v("output.mlflow", k.mlflow);
  v("output.mlflow_experiment", k.mlflow_experiment);
  v("output.mlflow_run_name", k.mlflow_run_name);
  v("output.mlflow_required", k.mlflow_required);
}

/// Throws std::runtime_error (one line) for a value that cannot work: output.mlflow not off, "env" or an
/// http(s) URI, or a URI with credentials in it (they would land in config.yaml).
inline void check_tracker_keys(const TrackerKeys& k) {
  const std::string& uri = k.mlflow;
  if (uri.empty() || uri == "env") return;
  const bool http = uri.rfind("http://", 0) == 0 || uri.rfind("https://", 0) == 0;
  RANZCR_CHECK(http && uri.size() > uri.find("//") + 2, "config: ",
               "output.mlflow must be an MLflow tracking server's URI http(s)://host:port, \"env\" "
               "(MLFLOW_TRACKING_URI) or \"\" (off), got '",
               uri, "'");
  const std::string authority = uri.substr(uri.find("//") + 2, uri.find('/', uri.find("//") + 2));
  RANZCR_CHECK(authority.find('@') == std::string::npos, "config: ",
               "output.mlflow must not hold a user name or password (they would be written to config.yaml): "
               "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN");
}

}  // namespace ranzcr::tracking
