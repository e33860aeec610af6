// The Open Inference Protocol's /v2 (KServe v2 REST; routes.cpp lists them): server metadata, health, the
// model's metadata and readiness, and infer (images as BYTES in, probabilities [N, labels] and the operating
// point's decisions out), its JSON and binary extension read and written by inference_protocol.cpp.
#include <torch/torch.h>

#include <cmath>
#include <mutex>

#include "engine/serve/inference_protocol.h"
#include "engine/serve/service_state.h"

namespace ranzcr {
namespace {

ServeJson model_metadata(const ServiceState& s) {
  const int64_t labels = static_cast<int64_t>(s.models->label_names().size());
  ServeJson outputs =
      ServeJson::array({{{"name", "probabilities"}, {"datatype", "FP64"}, {"shape", {-1, labels}}}});
  if (!s.options.thresholds.empty())
    outputs.push_back({{"name", "decisions"}, {"datatype", "INT32"}, {"shape", {-1, labels}}});
  ServeJson members = ServeJson::array();
  for (size_t m = 0; m < s.models->infos().size(); ++m)
    members.push_back({{"name", s.models->infos()[m].model.name}, {"epoch", s.models->infos()[m].epoch}});
  return {{"name", s.options.model_name},
          {"versions", {"1"}},
          {"platform", "ranzcr_libtorch"},
          {"inputs", ServeJson::array({{{"name", "image"}, {"datatype", "BYTES"}, {"shape", {-1}}}})},
          {"outputs", outputs},
          {"labels", s.models->label_names()},
          {"operating_point",
           s.options.thresholds.empty() ? ServeJson(nullptr) : ServeJson(s.options.operating_point)},
          {"members", members}};
}

std::vector<OutputTensor> output_tensors(const ServiceState& s, const std::vector<torch::Tensor>& probs) {
  const int64_t n = static_cast<int64_t>(probs.size()),
                c = static_cast<int64_t>(s.models->label_names().size());
  OutputTensor p{"probabilities", "FP64", n, c, {}, {}}, d{"decisions", "INT32", n, c, {}, {}};
  for (const torch::Tensor& row : probs) {
    const double* v = row.data_ptr<double>();
    for (int64_t k = 0; k < c; ++k) {
      p.fp64.push_back(v[k]);
      if (s.options.thresholds.empty()) continue;
      const double th = s.options.thresholds[static_cast<size_t>(k)];
      d.int32.push_back(std::isnan(th) ? -1 : (v[k] >= th ? 1 : 0));
    }
  }
  std::vector<OutputTensor> out{std::move(p)};
  if (!s.options.thresholds.empty()) out.push_back(std::move(d));
  return out;
}

// The images of one infer request: their probabilities as they come back from the batches, answered once
// all are in (or at the first failure).
struct Join {
  std::mutex mutex;
  std::vector<torch::Tensor> probs;
  size_t left = 0;
  bool answered = false;
};

HttpResponse infer_answer(const ServiceState& s, const InferRequest& request,
                          const std::vector<torch::Tensor>& probs) {
  const InferAnswer a = write_infer_answer(s.options.model_name, "1", request, output_tensors(s, probs));
  HttpResponse r;
  r.body = a.body;
  if (a.header_length >= 0) {
    r.content_type = "application/octet-stream";
    r.headers.emplace_back("Inference-Header-Content-Length", std::to_string(a.header_length));
  }
  return r;
}

// Each image queued; the answer goes when the last is back.
void submit_all(ServiceState& s, const Call& call, std::shared_ptr<const InferRequest> request,
                const std::vector<std::shared_ptr<const PreparedImage>>& images) {
  auto join = std::make_shared<Join>();
  join->probs.resize(images.size());
  join->left = images.size();
  for (size_t i = 0; i < images.size(); ++i) {
    auto done = [&s, join, i, request, call](BatchOutcome o) {
      std::lock_guard<std::mutex> lock(join->mutex);
      if (join->answered) return;
      s.guarded(call.label, call.respond, [&] {
        if (o.status != BatchOutcome::Status::kDone) join->answered = true;
        s.check_outcome(o);
        join->probs[i] = o.probs;
        if (--join->left > 0) return;
        join->answered = true;
        call.respond(infer_answer(s, *request, join->probs));
      });
    };
    std::unique_lock<std::mutex> lock(join->mutex);
    if (join->answered) break;
    lock.unlock();
    try {
      s.submit(images[i], call, done);
    } catch (...) {
      lock.lock();
      if (join->answered) break;  // an earlier image failed and answered
      join->answered = true;
      throw;
    }
  }
}

}  // namespace

void server_metadata_v2(ServiceState& s, const Call& call) {
  call.respond(json_response(
      {{"name", "ranzcr"}, {"version", s.options.server_version}, {"extensions", {"binary_tensor_data"}}}));
}

void live_v2(ServiceState&, const Call& call) {
  call.respond(text_response(200, "", "text/plain"));
}

void ready_v2(ServiceState& s, const Call& call) {
  call.respond(s.readiness());
}

void model_metadata_v2(ServiceState& s, const Call& call) {
  call.respond(json_response(model_metadata(s)));
}

void model_ready_v2(ServiceState& s, const Call& call) {
  call.respond(s.readiness());
}

// The images of one infer request, each decoded, then each queued.
void infer_v2(ServiceState& s, const Call& call) {
  std::vector<std::string> outputs{"probabilities"};
  if (!s.options.thresholds.empty()) outputs.push_back("decisions");
  const std::string encoding = call.req->header("Content-Encoding");
  if (!encoding.empty() && encoding != "identity")
    throw ProtocolError(415, "Content-Encoding " + encoding + " is not supported: send the body as is");
  s.decode.post([&s, call, outputs] {  // parsed here, not on an I/O thread: a body may be 64 MiB
    s.guarded(call.label, call.respond, [&] {
      auto request = std::make_shared<const InferRequest>(
          parse_infer_request(call.req->body, call.req->header("Inference-Header-Content-Length"), outputs));
      std::string().swap(call.req->body);
      std::vector<std::shared_ptr<const PreparedImage>> images;
      for (size_t i = 0; i < request->images.size(); ++i)
        images.push_back(
            s.prepare(request->images[i], call.deadline, "input 'image' element " + std::to_string(i)));
      submit_all(s, call, request, images);
    });
    call.req->hold.reset();
  });
}

}  // namespace ranzcr
