#include "data/csv.h"

#include "core/check.h"

#include <fstream>
#include <sstream>

namespace ranzcr {

int CsvTable::column(const std::string& name) const {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return static_cast<int>(i);
  return -1;
}

CsvTable read_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  RANZCR_CHECK(in, "CSV file not found or unreadable: ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();

  CsvTable table;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false, field_started = false;
  int line = 1, row_line = 1;
  size_t i = 0;
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) i = 3;  // UTF-8 byte order mark
  auto end_row = [&] {
    row.push_back(field);
    field.clear();
    field_started = false;
    const bool blank = row.size() == 1 && row[0].empty();
    if (!blank) {
      if (table.header.empty()) {
        table.header = row;
      } else {
        RANZCR_CHECK(row.size() == table.header.size(), path, ":", row_line, ": expected ",
                     table.header.size(), " fields like the header, got ", row.size());
        table.rows.push_back(row);
        table.row_lines.push_back(row_line);
      }
    }
    row.clear();
  };
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        if (c == '\n') ++line;
        field += c;
      }
    } else if (c == '"' && !field_started) {
      quoted = field_started = true;
    } else if (c == ',') {
      row.push_back(field);
      field.clear();
      field_started = false;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      end_row();
      row_line = ++line;
    } else {
      field += c;
      field_started = true;
    }
  }
  RANZCR_CHECK(!quoted, path, ":", row_line, ": unterminated quoted field");
  if (field_started || !row.empty()) end_row();
  RANZCR_CHECK(!table.header.empty(), path, ": empty CSV file (expected a header row)");
  return table;
}

std::string csv_escape(const std::string& field) {
  if (field.find_first_of(",\"\n\r") == std::string::npos) return field;
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace ranzcr
