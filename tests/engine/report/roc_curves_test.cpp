// ROC/PR curves, operating points and AUC against scikit-learn on the same scores (scripts/report/
// sklearn_reference.py; skipped where the python has no scikit-learn: RANZCR_SKLEARN_PYTHON, the project's
// .venv, or python3), plus hand-checked cases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/report/metrics.h"
#include "engine/report/roc_curves.h"
#include "tests/build_paths.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

std::string sklearn_python() {
  return test::python("RANZCR_SKLEARN_PYTHON");
}

struct Case {
  std::vector<double> scores;
  std::vector<float> labels;
};

// Scores with many ties (rounded to 2 decimals) and a rare positive class, like a RANZCR label.
Case random_case(uint64_t seed, int n, double prevalence, double separation) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution positive(prevalence);
  std::normal_distribution<double> noise(0.0, 1.0);
  Case c;
  for (int i = 0; i < n; ++i) {
    const bool p = positive(rng);
    c.labels.push_back(p ? 1.f : 0.f);
    c.scores.push_back(std::round(100.0 / (1.0 + std::exp(-(noise(rng) + (p ? separation : 0.0))))) / 100.0);
  }
  if (std::count(c.labels.begin(), c.labels.end(), 1.f) == 0) c.labels[0] = 1.f;
  return c;
}

double number(const nlohmann::json& v) {
  return v.is_string() ? std::numeric_limits<double>::infinity() : v.get<double>();
}

void expect_equal(const std::vector<double>& ours, const nlohmann::json& theirs, const std::string& what) {
  ASSERT_EQ(ours.size(), theirs.size()) << what;
  for (size_t i = 0; i < ours.size(); ++i) {
    const double t = number(theirs[i]);
    if (std::isinf(t)) {
      EXPECT_TRUE(std::isinf(ours[i])) << what << "[" << i << "]";
    } else {
      EXPECT_NEAR(ours[i], t, 1e-12) << what << "[" << i << "]";
    }
  }
}

TEST(Roc, MatchesScikitLearn) {
  test::TempDir dir;
  std::vector<Case> cases;
  for (int k = 0; k < 12; ++k)
    cases.push_back(random_case(100 + k, 50 + 97 * k, k % 3 == 0 ? 0.03 : 0.3, 0.3 * k));
  nlohmann::json in;
  for (const auto& c : cases) in["cases"].push_back({{"scores", c.scores}, {"labels", c.labels}});
  std::ofstream(dir / "in.json") << in.dump();
  const auto r = test::run_command(sklearn_python() + " " + test::source_dir() +
                                   "/scripts/report/sklearn_reference.py " + (dir / "in.json") + " " +
                                   (dir / "out.json"));
  if (r.status / 256 == 77 || r.status == 77) RANZCR_SKIP_WITHOUT_REFERENCE("no scikit-learn: " << r.output);
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json out = nlohmann::json::parse(std::ifstream(dir / "out.json"));
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    const nlohmann::json& ref = out["cases"][k];
    const std::string at = "case " + std::to_string(k);
    EXPECT_NEAR(*roc_auc(c.scores, c.labels), ref["auc"].get<double>(), 1e-9) << at;
    EXPECT_NEAR(*average_precision(c.scores, c.labels), ref["ap"].get<double>(), 1e-12) << at;
    for (bool drop : {false, true}) {
      const RocCurve roc = roc_curve(c.scores, c.labels, drop);
      const nlohmann::json& rr = ref[drop ? "roc_dropped" : "roc"];
      expect_equal(roc.fpr, rr["fpr"], at + " fpr");
      expect_equal(roc.tpr, rr["tpr"], at + " tpr");
      expect_equal(roc.thresholds, rr["thresholds"], at + " thresholds");
    }
    const PrCurve pr = precision_recall_curve(c.scores, c.labels);
    expect_equal(pr.precision, ref["pr"]["precision"], at + " precision");
    expect_equal(pr.recall, ref["pr"]["recall"], at + " recall");
    expect_equal(pr.thresholds, ref["pr"]["thresholds"], at + " pr thresholds");
    for (const OperatingPoint& p : operating_points(c.scores, c.labels)) {
      const double t = number(ref["points"][p.name]);
      if (std::isinf(t)) {
        EXPECT_TRUE(std::isinf(p.threshold)) << at << " " << p.name;
      } else {
        EXPECT_EQ(p.threshold, t) << at << " " << p.name;
      }
    }
  }
}

// Ten samples worked by hand: scores 0.1..1.0, positives at 0.4, 0.7, 0.8, 0.9, 1.0.
TEST(Roc, OperatingPointsByHand) {
  const std::vector<double> s{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};
  const std::vector<float> l{0, 0, 0, 1, 0, 0, 1, 1, 1, 1};
  const auto points = operating_points(s, l);
  ASSERT_EQ(points.size(), 5u);
  // >= 0.7: tp 4, fp 0 -> sens 0.8, spec 1: J = 0.8 (>= 0.4: sens 1, spec 0.6: J = 0.6)
  EXPECT_EQ(points[0].name, "youden");
  EXPECT_DOUBLE_EQ(points[0].threshold, 0.7);
  EXPECT_DOUBLE_EQ(points[0].sensitivity, 0.8);
  EXPECT_DOUBLE_EQ(points[0].specificity, 1.0);
  EXPECT_DOUBLE_EQ(points[0].ppv, 1.0);
  EXPECT_DOUBLE_EQ(points[0].npv, 5.0 / 6.0);
  EXPECT_DOUBLE_EQ(points[1].threshold, 0.4);  // sens90: the first threshold with sensitivity 1
  EXPECT_DOUBLE_EQ(points[1].specificity, 0.6);
  EXPECT_DOUBLE_EQ(points[3].threshold, 0.7);  // spec90: the lowest threshold with specificity >= 0.9
  const auto ci = bootstrap_auc_interval(s, l, 1000, 7);
  ASSERT_TRUE(ci.has_value());
  EXPECT_LE(ci->low, *roc_auc(s, l));
  EXPECT_GE(ci->high, *roc_auc(s, l));
  EXPECT_EQ(ci->high, 1.0);
  const auto again = bootstrap_auc_interval(s, l, 1000, 7);
  EXPECT_EQ(again->low, ci->low);  // seeded
  EXPECT_FALSE(bootstrap_auc_interval(s, std::vector<float>(10, 0.f), 100, 7).has_value());
  // Exact ties in Youden's J (1/3 at 0.9, 0.8 and 0.4; in floating point 1 - 2/3 > 1/3): the highest.
  EXPECT_EQ(operating_points({0.9, 0.8, 0.8, 0.6, 0.4, 0.3}, {1, 1, 0, 0, 1, 0})[0].threshold, 0.9);
}

}  // namespace
}  // namespace ranzcr
