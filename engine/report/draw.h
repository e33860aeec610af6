// What the report's PNGs share (training curves, ROC and PR panels): colours, text, atomic PNG files.
#pragma once

#include <opencv2/core.hpp>

#include <string>
#include <vector>

namespace ranzcr::draw {

constexpr int kFont = 0;  // cv::FONT_HERSHEY_SIMPLEX
const cv::Scalar kBackground(255, 255, 255), kInk(40, 40, 40), kGrid(225, 225, 225);

/// Tableau 10 and a few more, BGR.
const std::vector<cv::Scalar>& palette();

/// Anti-aliased text with its baseline starting at `org`.
void put_text(cv::Mat& img, const std::string& text, cv::Point org, double scale = 0.5,
              const cv::Scalar& color = kInk);
int text_width(const std::string& text, double scale = 0.5);

/// Encodes `img` as PNG and writes it atomically. Throws std::runtime_error on failure.
void write_png(const std::string& path, const cv::Mat& img);

}  // namespace ranzcr::draw
