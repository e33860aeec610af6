#include "data/dataset_index.h"

#include "tests/test_util.h"

namespace ranzcr {
namespace {

std::string error_of(const std::string& csv, const std::string& images, const IndexOptions& o = {}) {
  try {
    load_index(csv, images, o);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

class DatasetIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ / "img");
    for (const char* id : {"a", "b", "c"}) test::write_file(dir_ / (std::string("img/") + id + ".jpg"), "x");
  }
  test::TempDir dir_;
};

TEST_F(DatasetIndexTest, LoadsLabelsAndDefaultsLabelColumns) {
  test::write_file(dir_ / "t.csv", "StudyInstanceUID,L1,L2,PatientID\na,1,0,p1\nb,0,1,p1\nc,1,1,p2\n");
  const DatasetIndex idx = load_index(dir_ / "t.csv", dir_ / "img", IndexOptions{});
  EXPECT_EQ(idx.label_names, (std::vector<std::string>{"L1", "L2"}));
  EXPECT_EQ(idx.labels, (std::vector<float>{1, 0, 0, 1, 1, 1}));
  EXPECT_EQ(idx.groups, (std::vector<std::string>{"p1", "p1", "p2"}));
  EXPECT_EQ(idx.image_paths[2], dir_ / "img/c.jpg");
  const DatasetIndex sub = idx.subset({2, 0});
  EXPECT_EQ(sub.ids, (std::vector<std::string>{"c", "a"}));
  EXPECT_EQ(sub.labels, (std::vector<float>{1, 1, 1, 0}));
}

TEST_F(DatasetIndexTest, ListsOffenders) {
  test::write_file(dir_ / "bad.csv", "StudyInstanceUID,L1,PatientID\na,2,p\nb,yes,p\nc,1,p\n");
  const std::string e = error_of(dir_ / "bad.csv", dir_ / "img");
  EXPECT_NE(e.find("2 label values other than 0/1"), std::string::npos) << e;
  EXPECT_NE(e.find("line 2 column 'L1' = '2'"), std::string::npos) << e;
  EXPECT_NE(e.find("line 3 column 'L1' = 'yes'"), std::string::npos) << e;

  test::write_file(dir_ / "dup.csv", "StudyInstanceUID,L1\na,1\na,0\n");
  EXPECT_NE(error_of(dir_ / "dup.csv", dir_ / "img").find("1 duplicate ids: 'a' (line 3)"),
            std::string::npos);

  test::write_file(dir_ / "miss.csv", "StudyInstanceUID,L1\na,1\nzz,0\nyy,1\n");
  const std::string m = error_of(dir_ / "miss.csv", dir_ / "img");
  EXPECT_NE(m.find("2 images missing"), std::string::npos) << m;
  EXPECT_NE(m.find("zz.jpg, yy.jpg"), std::string::npos) << m;

  IndexOptions o;
  o.label_columns = {"L1", "L9"};
  test::write_file(dir_ / "cols.csv", "StudyInstanceUID,L1\na,1\n");
  const std::string c = error_of(dir_ / "cols.csv", dir_ / "img", o);
  EXPECT_NE(c.find("1 required columns missing"), std::string::npos) << c;
  EXPECT_NE(c.find("'L9'"), std::string::npos) << c;
  o.id_column = "image";
  EXPECT_NE(error_of(dir_ / "cols.csv", dir_ / "img", o).find("'image' (data.id_column)"), std::string::npos);
}

TEST_F(DatasetIndexTest, IndexFromFolderIsSorted) {
  const DatasetIndex idx = index_from_folder(dir_ / "img", ".jpg");
  EXPECT_EQ(idx.ids, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(idx.labels.empty());
  EXPECT_THROW(index_from_folder(dir_ / "img", ".png"), std::runtime_error);
  EXPECT_THROW(index_from_folder(dir_ / "nope", ".jpg"), std::runtime_error);
}

}  // namespace
}  // namespace ranzcr
