// serve's endpoints in one table (routes.cpp): each route's method, path, metrics label, who may call it,
// whether it holds an upload, and its endpoint. Routing (Service::handle), the metrics labels and the
// header-time decision (Service::on_header) read it, so a path is spelled once. Internal to engine/serve.
#pragma once

#include <string>
#include <vector>

#include "engine/serve/service_state.h"

namespace ranzcr {

/// Who may call a route: anyone; with the bearer token (--token-file); with it, once the models are loaded.
enum class Access { kAnyone, kToken, kTokenReady };

struct Route {
  const char* method;  // "GET" (HEAD too) or "POST"
  /// The path: exact, or a pattern of segments where {model} and {version} take any one segment and
  /// [/versions/{version}] may be left out.
  const char* path;
  const char* label;  // the metrics' endpoint label; nullptr: the path itself
  Access access;
  bool holds_upload;  // a POST whose image is batched: an open batch waits for its body (Batcher::Incoming)
  Endpoint endpoint;
  const char* takes;  // what the method takes, for the 405 answer ("one image file"); "" for nothing
};

/// The routes.
const std::vector<Route>& routes();

/// The route whose path `path` matches (whatever the method), its {model} and {version} put into `call`
/// when given; nullptr when none does.
const Route* match_route(const std::string& path, Call* call = nullptr);

/// Whether `method` is what `route` takes (GET routes take HEAD too).
bool takes_method(const Route& route, const std::string& method);

/// The route's label for the metrics: its own, or its path.
std::string route_label(const Route& route);

/// The path of the route answering `endpoint` with {model} filled in (for the log line that says where
/// the server listens).
std::string route_path(Endpoint endpoint, const std::string& model = "");

}  // namespace ranzcr
