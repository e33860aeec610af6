#include "data/csv.h"

#include "tests/test_util.h"

namespace ranzcr {
namespace {

TEST(Csv, ReadsQuotedFieldsAndLineNumbers) {
  test::TempDir dir;
  test::write_file(dir / "a.csv", "id,label,data\r\nx,1,\"[[1, 2],\n [3, 4]]\"\ny,0,\"say \"\"hi\"\"\"\n\n");
  const CsvTable t = read_csv(dir / "a.csv");
  ASSERT_EQ(t.header, (std::vector<std::string>{"id", "label", "data"}));
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0][2], "[[1, 2],\n [3, 4]]");
  EXPECT_EQ(t.rows[1][2], "say \"hi\"");
  EXPECT_EQ(t.row_lines, (std::vector<int>{2, 4}));
  EXPECT_EQ(t.column("label"), 1);
  EXPECT_EQ(t.column("nope"), -1);
}

TEST(Csv, RejectsRaggedRowsAndMissingFiles) {
  test::TempDir dir;
  test::write_file(dir / "bad.csv", "a,b\n1,2\n3\n");
  try {
    read_csv(dir / "bad.csv");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.csv:3: expected 2 fields"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_csv(dir / "missing.csv"), std::runtime_error);
  test::write_file(dir / "q.csv", "a,b\n\"1,2\n");
  EXPECT_THROW(read_csv(dir / "q.csv"), std::runtime_error);
}

TEST(Csv, EscapeRoundTrips) {
  EXPECT_EQ(csv_escape("plain"), "plain");
  EXPECT_EQ(csv_escape("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_escape("q\""), "\"q\"\"\"");
}

}  // namespace
}  // namespace ranzcr
