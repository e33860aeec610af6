// output.mlflow's part that reads the environment, as MLflow's own clients do: the tracking URI
// (output.mlflow "env" = MLFLOW_TRACKING_URI), the credentials (MLFLOW_TRACKING_USERNAME and
// MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN), and the program's tags (commit, version, user);
// and `ranzcr mlflow-sync`.
#pragma once

#include <optional>
#include <string>

#include "engine/config/config.h"
#include "engine/report/mlflow_run.h"

namespace ranzcr {

/// The MLflow set-up of `config`; nullopt when output.mlflow is "". Throws std::runtime_error (one line)
/// for "env" without MLFLOW_TRACKING_URI, or a URI MLflow's REST API cannot be reached at.
std::optional<MlflowSetup> mlflow_setup(const Config& config);

/// The same for a URI given outside a config (evaluate --mlflow-run, mlflow-sync): `uri`, or
/// MLFLOW_TRACKING_URI when `uri` is "" or "env" ("" when neither is set).
MlflowSetup mlflow_setup_for(const std::string& uri);

/// output.mlflow_experiment's default: the config file's name without its extension.
void default_mlflow_experiment(Config& config, const std::string& config_path);

/// `ranzcr mlflow-sync RUN_DIR`: sends the spooled MLflow requests of a run (or cv) folder; non-zero when
/// some are left (the server did not answer).
int run_mlflow_sync(const std::string& run_dir);

}  // namespace ranzcr
