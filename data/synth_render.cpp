// The synthetic chest X-rays: anatomy, devices (ETT, NGT, CVC, Swan-Ganz) with their labels and
// polylines, rendered per study (render_study, data/synth.h). The data set around them: synth.cpp.
#include "data/synth.h"

#include <opencv2/imgproc.hpp>

#include <cmath>
#include <random>
#include <stdexcept>

#include "data/image_pipeline.h"

namespace ranzcr {
namespace {

enum Label {
  kEttAbnormal,
  kEttBorderline,
  kEttNormal,
  kNgtAbnormal,
  kNgtBorderline,
  kNgtIncomplete,
  kNgtNormal,
  kCvcAbnormal,
  kCvcBorderline,
  kCvcNormal,
  kSwanGanz,
};

using Pt = cv::Point2d;  // normalised image coordinates: x right, y down, [0, 1]

// Anatomy shared by all studies of one patient.
struct Anatomy {
  double cx, carina_y, diaphragm_y, clavicle_y, lung_w, lung_h, body_w, heart_dx, rib_gap, exposure;
};

Anatomy make_anatomy(uint64_t seed, int64_t patient) {
  std::mt19937_64 rng(mix_seed(seed, 0x9a7e47ULL, static_cast<uint64_t>(patient)));
  auto u = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  Anatomy a;
  a.cx = u(0.46, 0.54);
  a.carina_y = u(0.33, 0.41);
  a.diaphragm_y = a.carina_y + u(0.32, 0.40);
  a.clavicle_y = a.carina_y - u(0.15, 0.19);
  a.lung_w = u(0.14, 0.18);
  a.lung_h = (a.diaphragm_y - a.clavicle_y) * u(0.55, 0.6);
  a.body_w = u(0.36, 0.44);
  a.heart_dx = u(0.04, 0.08);
  a.rib_gap = u(0.055, 0.07);
  a.exposure = u(0.85, 1.15);
  return a;
}

// A smooth curve through control points (de Casteljau), sampled at n points.
std::vector<Pt> bezier(const std::vector<Pt>& ctrl, int n = 40) {
  std::vector<Pt> out;
  for (int i = 0; i <= n; ++i) {
    const double t = static_cast<double>(i) / n;
    std::vector<Pt> p = ctrl;
    for (size_t k = p.size() - 1; k > 0; --k)
      for (size_t j = 0; j < k; ++j) p[j] = p[j] * (1.0 - t) + p[j + 1] * t;
    out.push_back(p[0]);
  }
  return out;
}

// Concatenates Bezier segments through `knots` (each segment a quadratic with a midpoint bend `bend`).
std::vector<Pt> smooth_path(const std::vector<Pt>& knots, std::mt19937_64& rng, double bend = 0.01) {
  std::normal_distribution<double> jitter(0.0, bend);
  std::vector<Pt> out;
  for (size_t i = 0; i + 1 < knots.size(); ++i) {
    const Pt mid = (knots[i] + knots[i + 1]) * 0.5 + Pt(jitter(rng), jitter(rng));
    auto seg = bezier({knots[i], mid, knots[i + 1]}, 16);
    out.insert(out.end(), seg.begin() + (i ? 1 : 0), seg.end());
  }
  return out;
}

std::vector<cv::Point> to_pixels(const std::vector<Pt>& path, int size, int shift = 0) {
  std::vector<cv::Point> px;
  const double scale = size * static_cast<double>(1 << shift);
  for (const auto& p : path)
    px.emplace_back(cv::saturate_cast<int>(p.x * scale), cv::saturate_cast<int>(p.y * scale));
  return px;
}

std::vector<cv::Point> subsample(const std::vector<cv::Point>& pts, size_t max_points = 24) {
  if (pts.size() <= max_points) return pts;
  std::vector<cv::Point> out;
  for (size_t i = 0; i < max_points; ++i) out.push_back(pts[i * (pts.size() - 1) / (max_points - 1)]);
  return out;
}

int pick(std::mt19937_64& rng, std::initializer_list<double> probs) {
  double r = std::uniform_real_distribution<double>(0.0, 1.0)(rng), acc = 0.0;
  int i = 0;
  for (double p : probs) {
    acc += p;
    if (r < acc) return i;
    ++i;
  }
  return i - 1;
}

double uniform(std::mt19937_64& rng, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}

class Renderer {
 public:
  Renderer(int size, const Anatomy& a) : s_(size), a_(a) {
    img_ = cv::Mat(size, size, CV_32F, cv::Scalar(0.06));
    devices_ = cv::Mat::zeros(size, size, CV_8U);
  }

  void anatomy() {
    body();
    ribs_and_clavicles();
    cv::GaussianBlur(img_, img_, cv::Size(0, 0), 0.006 * s_ + 0.5);
  }

  // Draws a device along `path`; returns its pixel polyline.
  std::vector<cv::Point> device(const std::vector<Pt>& path, double width, int intensity) {
    constexpr int kShift = 4;
    auto pts = to_pixels(path, s_, kShift);
    const int thick = std::max(1, static_cast<int>(std::lround(width * s_)));
    cv::polylines(devices_, std::vector<std::vector<cv::Point>>{pts}, false, cv::Scalar(intensity), thick,
                  cv::LINE_AA, kShift);
    return subsample(to_pixels(path, s_));
  }

  // The finished picture as 8 bits (*u8) and 16 bits (*u16).
  void finish(double noise, cv::Mat* u8, cv::Mat* u16) {
    cv::Mat dev;
    devices_.convertTo(dev, CV_32F, 0.45 / 255.0);
    cv::GaussianBlur(dev, dev, cv::Size(0, 0), 0.0015 * s_ + 0.3);
    img_ += dev;
    cv::Mat n(s_, s_, CV_32F);
    cv::randn(n, 0.0, noise);  // the thread's cv::RNG, seeded in render_study from the study's rng
    img_ = img_ * a_.exposure + n;
    img_.convertTo(*u8, CV_8U, 255.0);
    img_.convertTo(*u16, CV_16U, 65535.0);
  }

 private:
  // Soft tissue, lung fields, mediastinum, heart and spine.
  void body() {
    const double cx = a_.cx, mid_y = 0.5 * (a_.clavicle_y + a_.diaphragm_y);
    fill_ellipse({cx, 0.58}, {a_.body_w, 0.62}, 0.50);  // soft tissue
    for (int side : {-1, 1})                            // lung fields
      fill_ellipse({cx + side * (a_.lung_w + 0.03), mid_y}, {a_.lung_w, a_.lung_h}, 0.20);
    fill_rect({cx - 0.05, 0.0}, {cx + 0.05, a_.diaphragm_y}, 0.52);               // mediastinum
    fill_ellipse({cx + a_.heart_dx, a_.diaphragm_y - 0.09}, {0.14, 0.10}, 0.56);  // heart
    fill_rect({cx - 0.022, 0.0}, {cx + 0.022, 1.0}, 0.66);                        // spine
    for (double y = 0.02; y < 1.0; y += 0.034) fill_rect({cx - 0.022, y}, {cx + 0.022, y + 0.006}, 0.55);
  }

  // Rib arcs and clavicles, drawn on their own layer and added to the image.
  void ribs_and_clavicles() {
    const double cx = a_.cx;
    cv::Mat ribs = cv::Mat::zeros(s_, s_, CV_32F);
    const int thick = std::max(1, static_cast<int>(0.009 * s_));
    for (int side : {-1, 1}) {
      for (int k = 0; k < 10; ++k) {
        const double y = a_.clavicle_y + 0.01 + k * a_.rib_gap * 0.8;
        const cv::Point c = px({cx + side * 0.02, y + 0.05});
        const cv::Size axes(static_cast<int>((a_.lung_w * 2 + 0.02) * s_), static_cast<int>(0.07 * s_));
        cv::ellipse(ribs, c, axes, side < 0 ? 180.0 : 0.0, side < 0 ? 0 : -90, side < 0 ? 90 : 0, 0.11, thick,
                    cv::LINE_AA);
      }
      cv::line(ribs, px({cx + side * 0.03, a_.clavicle_y}), px({cx + side * 0.27, a_.clavicle_y - 0.035}),
               0.16, std::max(1, static_cast<int>(0.016 * s_)), cv::LINE_AA);  // clavicle
    }
    img_ += ribs;
  }

  cv::Point px(Pt p) const { return cv::Point(static_cast<int>(p.x * s_), static_cast<int>(p.y * s_)); }
  void fill_ellipse(Pt c, Pt axes, double value) {
    cv::ellipse(img_, px(c), cv::Size(static_cast<int>(axes.x * s_), static_cast<int>(axes.y * s_)), 0, 0,
                360, value, cv::FILLED, cv::LINE_AA);
  }
  void fill_rect(Pt a, Pt b, double value) { cv::rectangle(img_, px(a), px(b), value, cv::FILLED); }

  int s_;
  const Anatomy& a_;
  cv::Mat img_, devices_;
};

// The patient's anatomy as seen in one study: shifted a little and exposed a little differently.
Anatomy position_for_study(const Anatomy& base, std::mt19937_64& rng) {
  Anatomy a = base;
  std::normal_distribution<double> pos(0.0, 0.008);
  a.cx += pos(rng);
  const double dy = pos(rng);
  a.carina_y += dy, a.diaphragm_y += dy, a.clavicle_y += dy;
  a.exposure *= std::uniform_real_distribution<double>(0.92, 1.08)(rng);
  return a;
}

// A device's label and its centre line (normalised coordinates).
struct Device {
  int label;
  std::vector<Pt> path;
};

// Endotracheal tube: tip height above the carina decides the label.
Device endotracheal_tube(std::mt19937_64& rng, const Anatomy& a) {
  auto u = [&](double lo, double hi) { return uniform(rng, lo, hi); };
  const double cx = a.cx, car = a.carina_y;
  const int status = pick(rng, {0.04, 0.13, 0.83});  // abnormal, borderline, normal
  const double x0 = cx + u(-0.01, 0.01);
  std::vector<Pt> path;
  if (status == 0 && u(0, 1) < 0.5) {  // too deep: into the right main bronchus
    path =
        smooth_path({{x0, -0.02}, {cx, car - 0.02}, {cx - u(0.04, 0.07), car + u(0.03, 0.06)}}, rng, 0.003);
  } else {
    double d;  // tip height above the carina
    if (status == 0)
      d = u(0.19, 0.26);
    else if (status == 1)
      d = u(0, 1) < 0.5 ? u(0.015, 0.04) : u(0.125, 0.16);
    else
      d = u(0.05, 0.12);
    path = smooth_path({{x0, -0.02}, {cx + u(-0.008, 0.008), car - d}}, rng, 0.004);
  }
  return {kEttAbnormal + (status == 0 ? 0 : status == 1 ? 1 : 2), path};
}

// Nasogastric tube: down the oesophagus; the tip (or its absence) decides the label.
Device nasogastric_tube(std::mt19937_64& rng, const Anatomy& a) {
  auto u = [&](double lo, double hi) { return uniform(rng, lo, hi); };
  const double cx = a.cx, car = a.carina_y, dia = a.diaphragm_y;
  const int status = pick(rng, {0.045, 0.07, 0.325, 0.56});  // abnormal, borderline, incomplete, normal
  const double ex = cx + u(0.008, 0.02);
  std::vector<Pt> knots = {{ex, -0.02}, {ex, car}};
  int label = kNgtNormal;
  if (status == 0) {
    label = kNgtAbnormal;
    if (u(0, 1) < 0.6) {  // down the airway into the right lung
      knots = {{cx, -0.02}, {cx, car - 0.01}, {cx - u(0.08, 0.14), car + u(0.1, 0.2)}};
    } else {  // coiled in the oesophagus
      const double yc = u(car - 0.05, dia - 0.12), rad = u(0.03, 0.05);
      for (int k = 0; k <= 12; ++k)
        knots.push_back({ex + rad * std::sin(k * 0.9), yc + 0.5 * rad * (1 - std::cos(k * 0.9))});
    }
  } else if (status == 1) {
    label = kNgtBorderline;
    knots.push_back({ex + 0.01, dia + u(-0.035, 0.02)});
  } else if (status == 2) {
    label = kNgtIncomplete;
    knots.push_back({ex + 0.01, dia});
    knots.push_back({cx + u(0.06, 0.12), 1.08});
  } else {
    knots.push_back({ex + 0.01, dia});
    knots.push_back({cx + u(0.08, 0.16), std::min(0.95, dia + u(0.08, 0.16))});
  }
  return {label, smooth_path(knots, rng, 0.006)};
}

// A central venous catheter's course from its entry site (0 right IJ, 1 left IJ, 2 right subclavian,
// 3 left subclavian) into the chest.
std::vector<Pt> cvc_entry_course(int entry, std::mt19937_64& rng, const Anatomy& a) {
  auto u = [&](double lo, double hi) { return uniform(rng, lo, hi); };
  const double cx = a.cx, clav = a.clavicle_y;
  if (entry == 0) return {{cx - u(0.08, 0.12), -0.02}, {cx - 0.06, clav + 0.02}};
  if (entry == 1) return {{cx + u(0.08, 0.12), -0.02}, {cx + 0.05, clav + 0.03}, {cx - 0.02, clav + 0.06}};
  if (entry == 2) return {{cx - u(0.3, 0.38), clav + 0.02}, {cx - 0.1, clav + 0.04}};
  return {{cx + u(0.3, 0.38), clav + 0.03}, {cx + 0.05, clav + 0.05}, {cx - 0.02, clav + 0.07}};
}

// Extends a central venous catheter's `knots` from the SVC (at x = svc_x) to a tip placed for `status`
// (0 abnormal, 1 borderline, 2 normal); returns the catheter's label.
int cvc_tip_course(int status, double svc_x, std::mt19937_64& rng, const Anatomy& a, std::vector<Pt>* knots) {
  auto u = [&](double lo, double hi) { return uniform(rng, lo, hi); };
  const double cx = a.cx, car = a.carina_y, clav = a.clavicle_y;
  int label = kCvcNormal;
  if (status == 0) {
    label = kCvcAbnormal;
    const int kind = pick(rng, {0.4, 0.3, 0.3});
    if (kind == 0) {  // turns up into the neck
      knots->push_back({svc_x, clav + 0.08});
      knots->push_back({svc_x - 0.03, clav + 0.03});
      knots->push_back({svc_x - 0.05, clav - u(0.06, 0.12)});
    } else if (kind == 1) {  // crosses into the opposite subclavian vein
      knots->push_back({svc_x, clav + 0.08});
      knots->push_back({cx + u(0.15, 0.25), clav + 0.04});
    } else {  // far too deep, into the IVC
      knots->push_back({svc_x, car});
      knots->push_back({svc_x + 0.01, car + u(0.22, 0.28)});
    }
  } else {
    double t;  // tip below the carina
    if (status == 1) {
      label = kCvcBorderline;
      t = u(0, 1) < 0.6 ? u(-0.08, -0.035) : u(0.105, 0.15);
    } else {
      t = u(-0.01, 0.08);
    }
    knots->push_back({svc_x, car + std::min(t, 0.0) - 0.04});
    knots->push_back({svc_x + u(-0.005, 0.005), car + t});
  }
  return label;
}

// Central venous catheter: entry site, course and tip position decide its label.
Device central_venous_catheter(std::mt19937_64& rng, const Anatomy& a) {
  const int status = pick(rng, {0.085, 0.24, 0.675});    // abnormal, borderline, normal
  const int entry = pick(rng, {0.5, 0.15, 0.25, 0.10});  // right IJ, left IJ, right/left subclavian
  const double svc_x = a.cx - uniform(rng, 0.035, 0.05);
  std::vector<Pt> knots = cvc_entry_course(entry, rng, a);
  const int label = cvc_tip_course(status, svc_x, rng, a, &knots);
  return {label, smooth_path(knots, rng, 0.006)};
}

// Swan-Ganz catheter: through the right heart into the pulmonary artery.
Device swan_ganz_catheter(std::mt19937_64& rng, const Anatomy& a) {
  auto u = [&](double lo, double hi) { return uniform(rng, lo, hi); };
  const double cx = a.cx, car = a.carina_y, clav = a.clavicle_y;
  std::vector<Pt> knots = {{cx - u(0.08, 0.12), -0.02},
                           {cx - 0.05, clav + 0.03},
                           {cx - 0.045, car + 0.05},
                           {cx - 0.02, car + u(0.16, 0.2)},
                           {cx + 0.06, car + u(0.2, 0.24)},
                           {cx + u(0.06, 0.08), car + 0.03},
                           {cx + u(0.1, 0.14), car + u(-0.01, 0.03)}};
  return {kSwanGanz, smooth_path(knots, rng, 0.008)};
}

}  // namespace

const std::vector<std::string>& ranzcr_label_names() {
  static const std::vector<std::string> names = {"ETT - Abnormal",
                                                 "ETT - Borderline",
                                                 "ETT - Normal",
                                                 "NGT - Abnormal",
                                                 "NGT - Borderline",
                                                 "NGT - Incompletely Imaged",
                                                 "NGT - Normal",
                                                 "CVC - Abnormal",
                                                 "CVC - Borderline",
                                                 "CVC - Normal",
                                                 "Swan Ganz Catheter Present"};
  return names;
}

SynthStudy render_study(uint64_t seed, int64_t index, int64_t patient, int image_size, bool test_split) {
  const Anatomy base = make_anatomy(seed, patient);
  std::mt19937_64 rng(mix_seed(seed, test_split ? 2 : 1, static_cast<uint64_t>(index)));
  cv::theRNG().state = rng();                       // cv::randn in Renderer::finish draws from it
  const Anatomy a = position_for_study(base, rng);  // the same patient, positioned a little differently

  SynthStudy study;
  study.labels.assign(11, 0);
  Renderer r(image_size, a);
  r.anatomy();
  auto add = [&](const Device& device, double width, int intensity) {
    study.labels[device.label] = 1;
    study.annotations.push_back(
        {ranzcr_label_names()[device.label], r.device(device.path, width, intensity)});
  };
  // Each device is drawn from the study's rng in this order: its presence first, then its course.
  if (uniform(rng, 0, 1) < 0.285) add(endotracheal_tube(rng, a), 0.014, 200);
  if (uniform(rng, 0, 1) < 0.28) add(nasogastric_tube(rng, a), 0.007, 190);
  const int num_cvc = pick(rng, {0.06, 0.64, 0.30});  // 0, 1 or 2 central venous catheters
  for (int k = 0; k < num_cvc; ++k) add(central_venous_catheter(rng, a), 0.008, 230);
  if (uniform(rng, 0, 1) < 0.028) add(swan_ganz_catheter(rng, a), 0.008, 230);

  r.finish(std::uniform_real_distribution<double>(0.015, 0.04)(rng), &study.image, &study.image16);
  return study;
}

}  // namespace ranzcr
