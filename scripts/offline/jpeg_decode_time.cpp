// Times OpenCV's JPEG decode of one file, the way the app decodes (data/image_pipeline.cpp: cv::imdecode
// from memory, grayscale, at full size or reduced by libjpeg to 1/2, 1/4 or 1/8), one thread. Built twice
// by scripts/offline/rehearse-host.sh, against the offline bundle's static OpenCV and against Debian's, to
// compare their JPEG decoders (libjpeg-turbo with or without its SIMD code).
//   jpeg_decode_time FILE.jpg [REPEATS]
// Prints the JPEG line of cv::getBuildInformation(), then one line per mode: "<mode> <median ms> <min ms>"
// over REPEATS decodes (default 15) after one warm-up decode.
#include <opencv2/core.hpp>
#include <opencv2/core/utility.hpp>
#include <opencv2/imgcodecs.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s FILE.jpg [REPEATS]\n", argv[0]);
    return 2;
  }
  const int repeats = argc == 3 ? std::atoi(argv[2]) : 15;
  if (repeats < 1) {
    std::fprintf(stderr, "jpeg_decode_time: REPEATS must be at least 1\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  const std::vector<unsigned char> buf((std::istreambuf_iterator<char>(in)),
                                       std::istreambuf_iterator<char>());
  if (buf.empty()) {
    std::fprintf(stderr, "jpeg_decode_time: cannot read %s\n", argv[1]);
    return 1;
  }
  cv::setNumThreads(1);
  std::istringstream info(cv::getBuildInformation());
  for (std::string line; std::getline(info, line);) {
    if (line.find("JPEG:") != std::string::npos && line.find("JPEG 2000") == std::string::npos) {
      line.erase(0, line.find_first_not_of(' '));
      std::printf("# %s\n", line.c_str());
    }
  }
  const struct {
    const char* name;
    int flags;
  } modes[] = {{"full", cv::IMREAD_GRAYSCALE},
               {"reduced2", cv::IMREAD_REDUCED_GRAYSCALE_2},
               {"reduced4", cv::IMREAD_REDUCED_GRAYSCALE_4},
               {"reduced8", cv::IMREAD_REDUCED_GRAYSCALE_8}};
  for (const auto& mode : modes) {
    cv::Mat img = cv::imdecode(buf, mode.flags);  // warm-up
    if (img.empty()) {
      std::fprintf(stderr, "jpeg_decode_time: OpenCV cannot decode %s\n", argv[1]);
      return 1;
    }
    std::vector<double> ms;
    for (int i = 0; i < repeats; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      img = cv::imdecode(buf, mode.flags);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("%s %.3f %.3f %dx%d\n", mode.name, ms[ms.size() / 2], ms.front(), img.cols, img.rows);
  }
  return 0;
}
