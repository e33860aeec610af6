#include "data/synth.h"

#include <opencv2/imgcodecs.hpp>

#include <unistd.h>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "data/csv.h"
#include "data/image_pipeline.h"

namespace fs = std::filesystem;

namespace ranzcr {
namespace {

// Study ids, the patient of every study and the train/test split of a data set being generated.
struct SynthPlan {
  uint64_t seed;
  int image_size;
  SynthFormat format;
  int64_t n_train, total;           // studies [0, n_train) are train, [n_train, total) test
  std::vector<int64_t> patient_of;  // patient index of each study

  bool is_test(int64_t i) const { return i >= n_train; }
  std::string study_id(int64_t i) const {
    return "1.2.826.0.1.3680043.8.498." + std::to_string(seed) + (i < n_train ? ".1" : ".2") +
           std::to_string(100000 + i);
  }
  std::string patient_name(int64_t p) const {
    std::ostringstream ss;
    ss << std::hex << (mix_seed(seed, 4, p) & 0xFFFFFFFFFULL);
    return ss.str();
  }
};

SynthPlan make_plan(const SynthConfig& config) {
  SynthPlan plan;
  plan.seed = static_cast<uint64_t>(config.seed);
  plan.image_size = config.image_size;
  plan.format = config.format;
  const int64_t n_train = config.num_images, n_test = config.num_test_images, total = n_train + n_test;
  plan.n_train = n_train;
  plan.total = total;
  // Patients: about 9 studies each, as in the real set; test patients are distinct from train patients.
  const int64_t train_patients = std::max<int64_t>(2, (n_train + 8) / 9);
  const int64_t test_patients = std::max<int64_t>(1, (n_test + 8) / 9);
  plan.patient_of.resize(total);
  std::mt19937_64 prng(mix_seed(plan.seed, 3, 0));
  for (int64_t i = 0; i < total; ++i)
    plan.patient_of[i] = i < n_train ? static_cast<int64_t>(prng() % train_patients)
                                     : train_patients + static_cast<int64_t>(prng() % test_patients);
  return plan;
}

// Creates an empty temporary sibling of `out_dir` holding train/ and test/; returns its path.
fs::path make_staging_folder(const std::string& out_dir) {
  const fs::path final_dir(out_dir);
  RANZCR_CHECK(!fs::exists(final_dir), "output folder already exists: ", out_dir);
  if (final_dir.has_parent_path()) fs::create_directories(final_dir.parent_path());
  const fs::path tmp = final_dir.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp / "train");
  fs::create_directories(tmp / "test");
  return tmp;
}

// A study's train.csv / test_labels.csv row: id, the 11 labels, patient.
std::string label_row(const SynthStudy& st) {
  std::string row = st.id;
  for (int v : st.labels) row += "," + std::to_string(v);
  return row + "," + st.patient + "\n";
}

// A study's train_annotations.csv rows: one per device, its polyline as "[[x, y], [x, y], ...]".
std::string annotation_rows(const SynthStudy& st) {
  std::string rows;
  for (const auto& an : st.annotations) {
    std::string pts = "[";
    for (size_t k = 0; k < an.polyline.size(); ++k)
      pts += (k ? ", [" : "[") + std::to_string(an.polyline[k].x) + ", " + std::to_string(an.polyline[k].y) +
             "]";
    rows += st.id + "," + csv_escape(an.label) + "," + csv_escape(pts + "]") + "\n";
  }
  return rows;
}

// Renders study i, writes its JPEG (or DICOM) under `dir` and returns its label and annotation rows.
void render_and_save(const SynthPlan& plan, int64_t i, const fs::path& dir, std::string* row,
                     std::string* ann_rows) {
  const bool test = plan.is_test(i);
  SynthStudy st = render_study(plan.seed, i, plan.patient_of[i], plan.image_size, test);
  st.id = plan.study_id(i);
  st.patient = plan.patient_name(plan.patient_of[i]);
  const bool dicom = plan.format == SynthFormat::kDicom;
  const fs::path file = dir / (test ? "test" : "train") / (st.id + (dicom ? ".dcm" : ".jpg"));
  if (dicom)
    write_synthetic_dicom(file.string(), st, i);
  else if (!cv::imwrite(file.string(), st.image, {cv::IMWRITE_JPEG_QUALITY, 92}))
    RANZCR_FAIL("cannot write ", file.string());
  *row = label_row(st);
  *ann_rows = annotation_rows(st);
}

// Runs job(i) for every i in [0, total) on `num_threads` threads while the calling thread reports
// progress. Returns the first exception a job threw (the jobs not yet started are then skipped).
std::exception_ptr run_parallel(int64_t total, int num_threads, const std::function<void(int64_t)>& job,
                                const std::function<void(int64_t, int64_t)>& progress) {
  std::atomic<int64_t> next{0}, done{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (int64_t i = next++; i < total; i = next++) {
      try {
        job(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next = total;
      }
      ++done;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(1, num_threads); ++t) threads.emplace_back(work);
  while (done < total && !error) {
    if (progress) progress(done, total);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  for (auto& t : threads) t.join();
  return error;
}

// Writes train.csv, train_annotations.csv, sample_submission.csv and test_labels.csv into `dir`.
void write_csv_files(const fs::path& dir, const SynthPlan& plan, const std::vector<std::string>& rows,
                     const std::vector<std::string>& ann_rows) {
  std::string label_header;
  for (const auto& name : ranzcr_label_names()) label_header += "," + name;
  std::ofstream train(dir / "train.csv"), ann(dir / "train_annotations.csv"),
      sub(dir / "sample_submission.csv"), test_labels(dir / "test_labels.csv");
  train << "StudyInstanceUID" << label_header << ",PatientID\n";
  ann << "StudyInstanceUID,label,data\n";
  sub << "StudyInstanceUID" << label_header << "\n";
  test_labels << "StudyInstanceUID" << label_header << ",PatientID\n";
  for (int64_t i = 0; i < plan.total; ++i) {
    if (!plan.is_test(i)) {
      train << rows[i];
      ann << ann_rows[i];
    } else {
      test_labels << rows[i];
      sub << plan.study_id(i) << ",0,0,0,0,0,0,0,0,0,0,0\n";
    }
  }
  for (auto* f : {&train, &ann, &sub, &test_labels}) {
    f->close();
    RANZCR_CHECK(*f, "cannot write the CSV files in ", dir.string());
  }
}

}  // namespace

void generate_synthetic(const std::string& out_dir, const SynthConfig& config, int num_threads,
                        const std::function<void(int64_t, int64_t)>& progress) {
  const fs::path tmp = make_staging_folder(out_dir);
  const SynthPlan plan = make_plan(config);
  std::vector<std::string> rows(plan.total), ann_rows(plan.total);
  const std::exception_ptr error = run_parallel(
      plan.total, num_threads, [&](int64_t i) { render_and_save(plan, i, tmp, &rows[i], &ann_rows[i]); },
      progress);
  if (error) {
    fs::remove_all(tmp);
    std::rethrow_exception(error);
  }
  if (progress) progress(plan.total, plan.total);
  write_csv_files(tmp, plan, rows, ann_rows);
  fs::rename(tmp, fs::path(out_dir));
}

}  // namespace ranzcr
