// The server's own endpoints and /v1 (routes.cpp lists them): an upload's probabilities as JSON, its
// Grad-CAM overlay and its model input as PNGs, the probes, the metrics and the page.
#include <torch/torch.h>

#include <cmath>

#include "engine/infer/grad_cam.h"
#include "engine/serve/service_state.h"

namespace ranzcr {
namespace {

// The JSON of one image's probabilities: per label, with the operating point's decisions when set.
ServeJson answer_v1(const ServiceState& s, const PreparedImage& image, const torch::Tensor& probs) {
  const std::vector<std::string>& names = s.models->label_names();
  const double* p = probs.data_ptr<double>();
  ServeJson out = {{"labels", names}, {"probabilities", ServeJson::object()}};
  for (size_t k = 0; k < names.size(); ++k) out["probabilities"][names[k]] = p[k];
  if (!s.options.thresholds.empty()) {
    out["operating_point"] = s.options.operating_point;
    out["thresholds"] = out["decisions"] = ServeJson::object();
    for (size_t k = 0; k < names.size(); ++k) {
      const double th = s.options.thresholds[k];
      out["thresholds"][names[k]] = std::isnan(th) ? ServeJson(nullptr) : ServeJson(th);
      out["decisions"][names[k]] = std::isnan(th) ? ServeJson(nullptr) : ServeJson(p[k] >= th ? 1 : 0);
    }
  }
  out["models"] = ServeJson::array();
  for (size_t m = 0; m < s.models->infos().size(); ++m) {
    const TrainedModelInfo& info = s.models->infos()[m];
    out["models"].push_back({{"path", s.models->paths()[m]},
                             {"name", info.model.name},
                             {"epoch", info.epoch},
                             {"ema", info.ema}});
  }
  out["image"] = {{"format", image.format}, {"width", image.width}, {"height", image.height}};
  return out;
}

}  // namespace

void predict_v1(ServiceState& s, const Call& call) {
  s.decode.post([&s, call] {
    s.guarded(call.label, call.respond, [&] {
      std::shared_ptr<const PreparedImage> image = s.prepare(call.req->body, call.deadline);
      const double decode_seconds = seconds_since(call.arrival);
      s.submit(image, call, [&s, image, call, decode_seconds](BatchOutcome o) {
        s.guarded(call.label, call.respond, [&] {
          s.check_outcome(o);
          ServeJson out = answer_v1(s, *image, o.probs);
          out["batch_size"] = o.batch_size;
          out["seconds"] = {{"decode", decode_seconds},
                            {"queue", o.queue_seconds},
                            {"model", o.model_seconds},
                            {"total", seconds_since(call.arrival)}};
          call.respond(json_response(out));
        });
      });
      call.req->hold.reset();  // submitted: an open batch need not wait for it any longer
    });
    call.req->hold.reset();
  });
}

void cam_v1(ServiceState& s, const Call& call) {
  std::vector<std::string> labels = call.req->params("labels");
  if (labels.empty()) labels = {"top1"};
  try {
    cam_label_indices(CamOptions{"", labels}, s.models->label_names());
  } catch (const std::exception& e) {
    throw Refusal(400, "bad_labels", e.what());  // an unknown label name
  }
  s.decode.post([&s, call, labels] {
    s.guarded(call.label, call.respond, [&] {
      std::shared_ptr<const PreparedImage> image = s.prepare(call.req->body, call.deadline);
      ServedModels* m = s.models.get();
      const bool queued = s.batcher->run_exclusive([&s, m, image, labels, call] {
        if (ServeClock::now() >= call.deadline) return;  // its 504 has been sent
        s.guarded(call.label, call.respond, [&] { call.respond(png_response(m->cam_png(*image, labels))); });
      });
      if (!queued) throw Refusal(503, "queue_full", "the queue is full; retry shortly");
    });
  });
}

void input_v1(ServiceState& s, const Call& call) {
  s.decode.post([&s, call] {
    s.guarded(call.label, call.respond, [&] {
      call.respond(png_response(s.models->input_png(*s.prepare(call.req->body, call.deadline))));
    });
  });
}

void health(ServiceState&, const Call& call) {
  call.respond(text_response(200, "ok\n"));
}

void readiness_probe(ServiceState& s, const Call& call) {
  call.respond(text_response(s.ready ? 200 : 503, s.ready ? "ready\n" : "loading\n"));
}

void metrics_text(ServiceState& s, const Call& call) {
  call.respond(text_response(200, s.metrics.text(s.ready ? s.batcher->queue_length() : 0),
                             "text/plain; version=0.0.4"));
}

void page(ServiceState&, const Call& call) {
  call.respond(text_response(200, serve_page(), "text/html; charset=utf-8"));
}

}  // namespace ranzcr
