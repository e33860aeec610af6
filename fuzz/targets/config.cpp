// --config FILE and --set overrides: the input up to its first NUL byte is the YAML file, each line after it
// one `--set key=value`. A config that is read must validate or be refused, and write out (config.yaml of
// the run folder) as YAML that reads back to the same config.
#include "engine/config/config.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranzcr;
  const std::string input = fuzz::as_string(data, size);
  const size_t nul = input.find('\0');
  const std::string yaml = input.substr(0, nul);
  std::vector<std::string> overrides;
  if (nul != std::string::npos) {
    std::string rest = input.substr(nul + 1);
    for (size_t start = 0; start <= rest.size();) {
      const size_t end = std::min(rest.find('\n', start), rest.size());
      overrides.push_back(rest.substr(start, end - start));
      start = end + 1;
    }
  }
  const std::string path =
      fuzz::write_input("config.yaml", reinterpret_cast<const uint8_t*>(yaml.data()), yaml.size());
  fuzz::expect_read_or_refused(
      [&] {
        const Config config = load_config(path, overrides);
        validate_config(config);
        const std::string written = config_to_yaml(config);
        std::string again;
        try {
          again = config_to_yaml(parse_config(written, "config.yaml of the run folder"));
        } catch (const std::exception& e) {
          fuzz::violation("the resolved config does not read back", e.what() + std::string("\n") + written);
        }
        if (again != written) fuzz::violation("the resolved config reads back differently", written + again);
      },
      "");
  return 0;
}
