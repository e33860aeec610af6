// `ranzcr cv` (k-fold runs, out-of-fold predictions) and ensembles in evaluate/predict, end to end with
// the real binary on a small synthetic data set.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "data/csv.h"
#include "engine/io/checkpoint.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

using test::run_command;

// AUC of `scores` against 0/1 `labels` from average ranks (Mann-Whitney U); NaN with one class only.
double reference_auc(const std::vector<double>& scores, const std::vector<int>& labels) {
  std::vector<size_t> order(scores.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  std::vector<double> rank(scores.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && scores[order[j + 1]] == scores[order[i]]) ++j;
    for (size_t k = i; k <= j; ++k) rank[order[k]] = 0.5 * static_cast<double>(i + j) + 1.0;
    i = j + 1;
  }
  double pos = 0, rank_sum = 0;
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i]) pos += 1, rank_sum += rank[i];
  const double neg = static_cast<double>(labels.size()) - pos;
  if (pos == 0 || neg == 0) return std::nan("");
  return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

// A CSV's probability columns by id.
std::map<std::string, std::vector<double>> probabilities(const std::string& path, size_t first_column) {
  const CsvTable t = read_csv(path);
  std::map<std::string, std::vector<double>> out;
  for (const auto& row : t.rows) {
    std::vector<double> v;
    for (size_t k = first_column; k < row.size(); ++k) v.push_back(std::stod(row[k]));
    out[row[0]] = v;
  }
  return out;
}

class CvTest : public test::CliSuite<CvTest> {
 public:
  static test::CliSetup setup() {
    return test::CliSetup{80,
                          64,
                          12,
                          {{"data.image_size", "48"},
                           {"data.folds", "3"},
                           {"train.epochs", "2"},
                           {"train.batch_size", "16"},
                           {"distributed.timeout_seconds", "60"},
                           {"distributed.grace_seconds", "5"}}};
  }

 protected:
};

// The acceptance test of `cv`: killed (SIGKILL) while fold 1 trains, the same command finishes without
// training fold 0 again; oof.csv holds every training image once, and its mean AUC, recomputed here from
// oof.csv and train.csv, is cv.json's.
TEST_F(CvTest, KilledInFoldOneResumesAndOofAucMatches) {
  const std::string out = *dir_ / "cv";
  const std::vector<std::string> args = {"cv", "--config", cfg(), "--set", "output.dir=" + out};
  const pid_t pid = test::spawn(args, {}, out + ".log");
  ASSERT_TRUE(test::wait_for_file(out + "/fold_1/config.yaml", 120)) << test::read_file(out + ".log");
  ::kill(pid, SIGKILL);
  EXPECT_EQ(test::wait_exit(pid, 30), 128 + SIGKILL);
  ASSERT_FALSE(std::filesystem::exists(out + "/oof.csv")) << "finished before the kill";
  const std::string fold0_metrics = test::read_file(out + "/fold_0/metrics.jsonl");
  ASSERT_EQ(test::read_metrics(out + "/fold_0").size(), 2u);

  const auto again = run_command(bin() + " cv --config " + cfg() + " --set output.dir=" + out);
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_NE(again.output.find("cv: fold 0 of 3: already finished"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("cv: fold 0 of 3: training"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("cv: fold 1 of 3: training"), std::string::npos) << again.output;
  EXPECT_EQ(test::read_file(out + "/fold_0/metrics.jsonl"), fold0_metrics);
  for (int k = 0; k < 3; ++k)
    EXPECT_EQ(test::read_metrics(out + "/fold_" + std::to_string(k)).size(), 2u) << k;

  // oof.csv: every training image exactly once, each in the fold whose model did not train on it.
  const CsvTable train = read_csv(*dir_ / "ds/train.csv");
  const CsvTable oof = read_csv(out + "/oof.csv");
  ASSERT_EQ(oof.rows.size(), train.rows.size());
  ASSERT_EQ(oof.header.size(), 2u + 11u);
  EXPECT_EQ(oof.header[0], "StudyInstanceUID");
  EXPECT_EQ(oof.header[1], "fold");
  const auto cv = nlohmann::json::parse(test::read_file(out + "/cv.json"));
  std::map<std::string, int> fold_of;
  std::vector<int> fold_rows(3, 0);
  for (const auto& row : oof.rows) {
    EXPECT_TRUE(fold_of.emplace(row[0], std::stoi(row[1])).second) << "twice: " << row[0];
    ++fold_rows.at(std::stoi(row[1]));
  }
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(cv["folds"][k]["num_images"].get<int>(), fold_rows[k]) << k;
    EXPECT_GT(fold_rows[k], 0);
    // best.pt scored on its own validation rows: the AUC its run logged.
    EXPECT_NEAR(cv["folds"][k]["oof_auc_mean"].get<double>(),
                cv["folds"][k]["best_val_auc_mean"].get<double>(), 1e-6);
  }
  const int patient = train.column("PatientID");
  std::map<std::string, int> patient_fold;  // GroupKFold: a patient's images are all in one fold
  for (const auto& row : train.rows) {
    ASSERT_TRUE(fold_of.count(row[0])) << "missing: " << row[0];
    auto [it, fresh] = patient_fold.emplace(row[patient], fold_of[row[0]]);
    EXPECT_EQ(it->second, fold_of[row[0]]) << row[patient];
  }

  // The mean AUC, recomputed from oof.csv and train.csv's labels.
  const auto probs = probabilities(out + "/oof.csv", 2);
  double sum = 0;
  int defined = 0;
  for (size_t k = 0; k < 11; ++k) {
    const std::string& label = oof.header[2 + k];
    const int column = train.column(label);
    std::vector<double> scores;
    std::vector<int> labels;
    for (const auto& row : train.rows) {
      scores.push_back(probs.at(row[0])[k]);
      labels.push_back(std::stoi(row[column]));
    }
    const double auc = reference_auc(scores, labels);
    if (std::isnan(auc)) {
      EXPECT_TRUE(cv["auc"][label].is_null()) << label;
      continue;
    }
    EXPECT_NEAR(cv["auc"][label].get<double>(), auc, 1e-6) << label;
    sum += auc, ++defined;
  }
  ASSERT_GT(defined, 0);
  EXPECT_NEAR(cv["auc_mean"].get<double>(), sum / defined, 1e-6);
  EXPECT_EQ(cv["num_images"].get<int>(), 80);
}

// With --nproc-per-node 2 every fold is a 2-process job (Gloo); the fold models then serve as an
// ensemble: --checkpoints-from the cv folder is the same as naming every fold's best.pt, and 2 predict
// processes write the same submission as one.
TEST_F(CvTest, TwoProcessesPerFoldAndEnsembleFromTheCvFolder) {
  const std::string out = *dir_ / "cv2";
  const auto r = run_command(bin() + " cv --config " + cfg() + " --set data.folds=2 --set output.dir=" + out +
                             " --nproc-per-node 2");
  ASSERT_EQ(r.status, 0) << r.output;
  for (int k = 0; k < 2; ++k)
    EXPECT_EQ(read_checkpoint_meta(out + "/fold_" + std::to_string(k) + "/checkpoints/last.pt").world_size,
              2);
  EXPECT_EQ(read_csv(out + "/oof.csv").rows.size(), 80u);
  for (int k = 0; k < 2; ++k) {  // one job trains both folds: each still logs to its own log.txt
    const std::string log = test::read_file(out + "/fold_" + std::to_string(k) + "/log.txt");
    EXPECT_NE(log.find("] model: tiny_cnn"), std::string::npos) << "fold " << k << ": " << log;
    EXPECT_EQ(log.find("fold_" + std::to_string(1 - k)), std::string::npos) << "fold " << k << ": " << log;
  }

  const std::string images = " --images " + *dir_ / "ds/test";
  auto predict = [&](const std::string& models, const std::string& csv) {
    const auto p = run_command(bin() + " predict " + models + images + " --tta --out " + out + "/" + csv);
    EXPECT_EQ(p.status, 0) << p.output;
    return test::read_file(out + "/" + csv);
  };
  const std::string from = predict("--checkpoints-from " + out, "from.csv");
  EXPECT_EQ(read_csv(out + "/from.csv").rows.size(), 12u);
  EXPECT_EQ(from, predict("--checkpoint " + out + "/fold_0/checkpoints/best.pt --checkpoint " + out +
                              "/fold_1/checkpoints/best.pt",
                          "named.csv"));
  EXPECT_EQ(from, predict("--checkpoints-from " + out + " --nproc-per-node 2", "two.csv"));

  // evaluate too: 2 processes score exactly the images and probabilities of one.
  auto evaluate = [&](const std::string& nproc, const std::string& json) {
    const auto e =
        run_command(bin() + " evaluate --checkpoints-from " + out + " --csv " + *dir_ / "ds/test_labels.csv" +
                    images + " --nproc-per-node " + nproc + " --out " + json);
    EXPECT_EQ(e.status, 0) << e.output;
    EXPECT_EQ(e.output.find("launching 2 workers") != std::string::npos, nproc == "2") << e.output;
    return nlohmann::json::parse(test::read_file(json));
  };
  const auto one = evaluate("1", out + "/e1.json"), two = evaluate("2", out + "/e2.json");
  EXPECT_EQ(one["num_images"], 12);
  EXPECT_EQ(one["checkpoints"].size(), 2u);
  EXPECT_DOUBLE_EQ(one["loss"].get<double>(), two["loss"].get<double>());
  EXPECT_EQ(one["auc"], two["auc"]);
}

// An ensemble of two models with other input sizes gives the mean of their probabilities; evaluate's
// loss for it is the BCE of those mean probabilities; models with other labels are refused.
TEST_F(CvTest, EnsembleAveragesProbabilities) {
  const std::string d = dir_->str();
  const std::string base = bin() + " train --config " + cfg() + " --set data.folds=0 --set train.epochs=1";
  for (const auto& [name, sets] :
       {std::pair<std::string, std::string>{"a", " --set data.image_size=48"},
        {"b", " --set data.image_size=32 --set train.ema_decay=0.9"},
        {"c", " --set 'data.label_columns=[\"ETT - Abnormal\", \"NGT - Normal\"]'"}}) {
    const auto t = run_command(base + " --set output.dir=" + d + "/" + name + sets);
    ASSERT_EQ(t.status, 0) << t.output;
  }
  const std::string a = d + "/a/checkpoints/best.pt", b = d + "/b/checkpoints/best.pt";
  const std::string images = " --csv " + d + "/ds/train.csv --images " + d + "/ds/train";
  for (const auto& [models, csv] : {std::pair<std::string, std::string>{" --checkpoint " + a, "pa.csv"},
                                    {" --checkpoint " + b, "pb.csv"},
                                    {" --checkpoint " + a + " --checkpoint " + b, "pab.csv"}}) {
    const auto p = run_command(bin() + " predict" + models + images + " --out " + d + "/" + csv);
    ASSERT_EQ(p.status, 0) << p.output;
  }
  const auto pa = probabilities(d + "/pa.csv", 1), pb = probabilities(d + "/pb.csv", 1);
  const auto pab = probabilities(d + "/pab.csv", 1);
  ASSERT_EQ(pab.size(), 80u);
  const CsvTable train = read_csv(d + "/ds/train.csv");
  double bce = 0;
  int n = 0;
  for (const auto& [id, v] : pab) {
    for (size_t k = 0; k < v.size(); ++k) {
      // predict writes 6 decimals: each of the three values is rounded by up to 5e-7 (so up to 1e-6
      // together), plus float32 rounding of the mean (< 1e-7).
      EXPECT_NEAR(v[k], 0.5 * (pa.at(id)[k] + pb.at(id)[k]), 1.1e-6) << id << " " << k;
    }
  }
  const std::vector<std::string> header = read_csv(d + "/pab.csv").header;
  for (const auto& row : train.rows) {
    const auto& v = pab.at(row[0]);
    for (size_t k = 0; k < v.size(); ++k) {
      const double y = std::stod(row[train.column(header[1 + k])]);
      const double p = std::clamp(v[k], 1e-12, 1 - 1e-12);
      bce -= y * std::log(p) + (1 - y) * std::log(1 - p), ++n;
    }
  }
  const auto e = run_command(bin() + " evaluate --checkpoint " + a + " --checkpoint " + b + images +
                             " --out " + d + "/eab.json");
  ASSERT_EQ(e.status, 0) << e.output;
  const auto j = nlohmann::json::parse(test::read_file(d + "/eab.json"));
  EXPECT_NEAR(j["loss"].get<double>(), bce / n, 1e-4);
  EXPECT_EQ(j["checkpoints"], nlohmann::json({a, b}));
  EXPECT_EQ(j["models"][1]["image_size"], 32);
  EXPECT_EQ(j["models"][1]["weights"], "ema");
  EXPECT_EQ(j["num_images"], 80);

  const auto bad = run_command(bin() + " predict --checkpoint " + a + " --checkpoint " + d +
                               "/c/checkpoints/best.pt" + images + " --out " + d + "/bad.csv");
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_NE(bad.output.find("error: " + d + "/c/checkpoints/best.pt predicts other labels than " + a),
            std::string::npos)
      << bad.output;
}

TEST_F(CvTest, UserErrors) {
  const std::string d = dir_->str();
  auto expect_error = [&](const std::string& args, const std::string& expected) {
    const auto r = run_command(bin() + " " + args);
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find("error: " + expected), std::string::npos) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  };
  expect_error("cv --config " + cfg() + " --set data.folds=0", "cv needs data.folds >= 2 (it is 0)");
  expect_error("predict --images " + d + "/ds/test --out " + d + "/x.csv", "no model given");
  expect_error("predict --checkpoints-from " + d + "/absent --images " + d + "/ds/test --out " + d + "/x.csv",
               "run folder not found: " + d + "/absent");
  expect_error("evaluate --checkpoints-from " + d + "/ds", d + "/ds holds no checkpoints/best.pt");
}

}  // namespace
}  // namespace ranzcr
