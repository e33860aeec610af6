// The Open Inference Protocol (KServe "v2", as Triton, KServe, MLServer and TorchServe speak it), REST form:
// reading an infer request and writing its answer, with the binary tensor data extension
// (Inference-Header-Content-Length). Only what `ranzcr serve` serves: one BYTES input "image" (each element
// one image file), the outputs "probabilities" (FP64 [N, labels]) and, with thresholds, "decisions"
// (INT32 [N, labels]: 1, 0, or -1 where the operating point has no threshold for the label). No LibTorch, no
// HTTP library: bytes in, bytes out.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ranzcr {

/// A request the protocol refuses: the HTTP status (400, 404, 415) and one line for `{"error": ...}`.
struct ProtocolError : std::runtime_error {
  ProtocolError(int status, const std::string& message) : std::runtime_error(message), status(status) {}
  int status;
};

/// One output the client asked for; `binary`: in the binary-data extension, else as JSON numbers.
struct RequestedOutput {
  std::string name;
  bool binary = false;
};

struct InferRequest {
  std::string id;                        // echoed in the answer ("" when the request has none)
  std::vector<std::string> images;       // the BYTES input's elements: one image file each
  std::vector<RequestedOutput> outputs;  // in the order asked; every output when the request names none
};

/// Reads an infer request. `body` is JSON, or JSON followed by binary tensor data when
/// `header_length` (the Inference-Header-Content-Length header's value) is not empty. In plain JSON a BYTES
/// element is a string: base64 when the input's parameters say `"content_type": "base64"`, else its UTF-8
/// bytes. `output_names`: the model's outputs. Throws ProtocolError (400) naming what is wrong.
InferRequest parse_infer_request(const std::string& body, const std::string& header_length,
                                 const std::vector<std::string>& output_names);

/// One output tensor of an answer: [rows, cols] of doubles (FP64) or ints (INT32).
struct OutputTensor {
  std::string name, datatype;  // "FP64" or "INT32"
  int64_t rows = 0, cols = 0;
  std::vector<double> fp64;
  std::vector<int32_t> int32;
};

/// The answer's body and, when any output is binary, the JSON header's length (for the
/// Inference-Header-Content-Length header; -1 when the body is JSON only). `tensors` in the model's order;
/// written in the order `request.outputs` asks.
struct InferAnswer {
  std::string body;
  int64_t header_length = -1;
};
InferAnswer write_infer_answer(const std::string& model_name, const std::string& model_version,
                               const InferRequest& request, const std::vector<OutputTensor>& tensors);

/// base64 (RFC 4648, padding optional, no whitespace) decoded; false when `text` is not base64.
bool base64_decode(const std::string& text, std::string& out);

}  // namespace ranzcr
