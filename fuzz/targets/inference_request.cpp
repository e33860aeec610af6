// serve's reading of what a client sends, past the HTTP parser (Boost.Beast's): the request target (percent-
// decoding, UTF-8, NUL) and an Open Inference Protocol infer request, in plain JSON and in the binary-data
// extension (the first byte, when the input has one, picks the JSON header's length from the rest). Every
// input is read or refused with one line (std::invalid_argument, ProtocolError), and an error body built
// from any refusal is JSON.
#include <nlohmann/json.hpp>

#include "engine/serve/http_message.h"
#include "engine/serve/inference_protocol.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranzcr;
  const std::string input = fuzz::as_string(data, size);
  const std::vector<std::string> outputs{"probabilities", "decisions"};
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;
  fuzz::expect_read_or_refused([&] { split_target(input, path, query); }, "");
  fuzz::expect_read_or_refused([&] { parse_infer_request(input, "", outputs); }, "");
  if (size > 1) {
    const std::string rest = input.substr(1);
    const std::string length = std::to_string(static_cast<size_t>(data[0]) % (rest.size() + 1));
    fuzz::expect_read_or_refused(
        [&] {
          try {
            const InferRequest r = parse_infer_request(rest, length, outputs);
            for (const std::string& image : r.images) (void)image.size();
          } catch (const ProtocolError& e) {
            if (!nlohmann::json::parse(json_error(e.what())).contains("error"))
              fuzz::violation("an error body is not {\"error\": ...}", e.what());
            throw;
          }
        },
        "");
  }
  return 0;
}
