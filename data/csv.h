// Minimal RFC 4180 CSV reading and writing (quoted fields, embedded commas, quotes and newlines).
#pragma once

#include <string>
#include <vector>

namespace ranzcr {

struct CsvTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<int> row_lines;  // 1-based file line where each row starts
  /// Index of `name` in the header, or -1.
  int column(const std::string& name) const;
};

/// Reads a CSV file with a header row. Throws std::runtime_error if the file is missing or malformed
/// (unterminated quote, a row whose field count differs from the header's).
CsvTable read_csv(const std::string& path);

/// Quotes a field when it contains a comma, a quote or a newline.
std::string csv_escape(const std::string& field);

}  // namespace ranzcr
