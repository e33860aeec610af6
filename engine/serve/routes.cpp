// engine/serve/routes.h: the table of serve's endpoints and its path matcher.
#include "engine/serve/routes.h"

namespace ranzcr {
namespace {

constexpr Access kAnyone = Access::kAnyone, kToken = Access::kToken, kTokenReady = Access::kTokenReady;

// Every endpoint, once. docs/serving.md describes them.
const std::vector<Route> kRoutes = {
    // method, path, label, access, holds an upload, endpoint, what the method takes
    {"POST", "/v1/predict", nullptr, kTokenReady, true, predict_v1, "one image file"},
    {"POST", "/v1/cam", nullptr, kTokenReady, false, cam_v1, "one image file"},
    {"POST", "/v1/input", nullptr, kTokenReady, false, input_v1, "one image file"},
    {"GET", "/healthz", nullptr, kAnyone, false, health, ""},
    {"GET", "/readyz", nullptr, kAnyone, false, readiness_probe, ""},
    {"GET", "/metrics", nullptr, kToken, false, metrics_text, ""},
    {"GET", "/", nullptr, kAnyone, false, page, ""},
    {"GET", "/v2", nullptr, kAnyone, false, server_metadata_v2, ""},
    {"GET", "/v2/health/live", nullptr, kAnyone, false, live_v2, ""},
    {"GET", "/v2/health/ready", nullptr, kAnyone, false, ready_v2, ""},
    {"GET", "/v2/models/{model}[/versions/{version}]", "/v2/models", kTokenReady, false, model_metadata_v2,
     ""},
    {"GET", "/v2/models/{model}[/versions/{version}]/ready", "/v2/models", kAnyone, false, model_ready_v2,
     ""},
    {"POST", "/v2/models/{model}[/versions/{version}]/infer", "/v2/infer", kTokenReady, true, infer_v2,
     "an inference request"},
};

std::vector<std::string> split_segments(const std::string& path) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= path.size();) {
    size_t end = path.find('/', at);
    if (end == std::string::npos) end = path.size();
    out.push_back(path.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// `pattern` without its optional group, and with it (the group's brackets dropped).
std::vector<std::string> alternatives(const std::string& pattern) {
  const size_t open = pattern.find('['), close = pattern.find(']');
  if (open == std::string::npos || close == std::string::npos) return {pattern};
  return {pattern.substr(0, open) + pattern.substr(close + 1),
          pattern.substr(0, open) + pattern.substr(open + 1, close - open - 1) + pattern.substr(close + 1)};
}

// A route's path pattern as segments, once for each of its alternatives, made when first asked for.
struct CompiledRoute {
  const Route* route;
  std::vector<std::vector<std::string>> alternatives;
};

const std::vector<CompiledRoute>& compiled_routes() {
  static const std::vector<CompiledRoute> compiled = [] {
    std::vector<CompiledRoute> out;
    for (const Route& r : kRoutes) {
      CompiledRoute c{&r, {}};
      for (const std::string& pattern : alternatives(r.path))
        c.alternatives.push_back(split_segments(pattern));
      out.push_back(std::move(c));
    }
    return out;
  }();
  return compiled;
}

// Whether the path's segments `got` match the pattern's `want`; its {model} and {version} into `call`.
bool matches(const std::vector<std::string>& want, const std::vector<std::string>& got, Call* call) {
  if (want.size() != got.size()) return false;
  const std::string *model = nullptr, *version = nullptr;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == "{model}" || want[i] == "{version}") {
      if (got[i].empty()) return false;
      (want[i] == "{model}" ? model : version) = &got[i];
    } else if (want[i] != got[i]) {
      return false;
    }
  }
  if (call) {
    call->model = model ? *model : "";
    call->version = version ? *version : "";
  }
  return true;
}

}  // namespace

const std::vector<Route>& routes() {
  return kRoutes;
}

const Route* match_route(const std::string& path, Call* call) {
  const std::vector<std::string> got = split_segments(path);  // once, for every pattern
  for (const CompiledRoute& c : compiled_routes())
    for (const std::vector<std::string>& want : c.alternatives)
      if (matches(want, got, call)) return c.route;
  return nullptr;
}

bool takes_method(const Route& route, const std::string& method) {
  return method == route.method || (method == "HEAD" && std::string(route.method) == "GET");
}

std::string route_label(const Route& route) {
  return route.label ? route.label : route.path;
}

std::string route_path(Endpoint endpoint, const std::string& model) {
  for (const Route& r : kRoutes) {
    if (r.endpoint != endpoint) continue;
    std::string path = alternatives(r.path).front();
    if (const size_t at = path.find("{model}"); at != std::string::npos) path.replace(at, 7, model);
    return path;
  }
  return "";
}

}  // namespace ranzcr
