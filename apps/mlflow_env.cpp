// apps/mlflow_env.h: MLflow's environment variables and the program's tags.
#include "apps/mlflow_env.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "core/check.h"
#include "ranzcr_git_commit.h"

namespace ranzcr {

namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// MLflow's tags for where a run comes from, and the program's version.
std::vector<tracking::KeyValue> program_tags() {
  std::vector<tracking::KeyValue> tags{
      {"mlflow.source.name", "ranzcr"}, {"mlflow.source.type", "LOCAL"}, {"ranzcr.version", RANZCR_VERSION}};
  if (std::string(RANZCR_GIT_COMMIT).size()) tags.emplace_back("mlflow.source.git.commit", RANZCR_GIT_COMMIT);
  std::string user = env("USER");
  if (user.empty()) user = env("LOGNAME");
  if (!user.empty()) tags.emplace_back("mlflow.user", user);
  return tags;
}

}  // namespace

MlflowSetup mlflow_setup_for(const std::string& uri) {
  MlflowSetup s;
  s.server.uri = uri.empty() || uri == "env" ? env("MLFLOW_TRACKING_URI") : uri;
  while (!s.server.uri.empty() && s.server.uri.back() == '/') s.server.uri.pop_back();
  s.server.username = env("MLFLOW_TRACKING_USERNAME");
  s.server.password = env("MLFLOW_TRACKING_PASSWORD");
  s.server.token = env("MLFLOW_TRACKING_TOKEN");
  s.tags = program_tags();
  return s;
}

std::optional<MlflowSetup> mlflow_setup(const Config& config) {
  const std::string& uri = config.output.mlflow;
  if (uri.empty()) return std::nullopt;
  MlflowSetup s = mlflow_setup_for(uri);
  RANZCR_CHECK(!s.server.uri.empty(),
               "output.mlflow is env, but MLFLOW_TRACKING_URI is not set (export it, e.g. "
               "MLFLOW_TRACKING_URI=http://mlflow.example:5000, or give the URI in output.mlflow)");
  const std::string& u = s.server.uri;
  RANZCR_CHECK(u.rfind("http://", 0) == 0 || u.rfind("https://", 0) == 0, "MLFLOW_TRACKING_URI is '", u,
               "': ranzcr logs to an MLflow tracking server over HTTP (http(s)://host:port), not to a "
               "local store or Databricks");
  return s;
}

void default_mlflow_experiment(Config& config, const std::string& config_path) {
  if (config.output.mlflow_experiment.empty())
    config.output.mlflow_experiment = std::filesystem::path(config_path).stem().string();
}

int run_mlflow_sync(const std::string& run_dir) {
  RunLog log;
  const int64_t left = sync_mlflow_spools(run_dir, mlflow_setup_for("").server, log);
  RANZCR_CHECK(left == 0, "mlflow-sync: ", left, " requests are still spooled in ", run_dir,
               " (the server did not answer): run it again later");
  return 0;
}

}  // namespace ranzcr
