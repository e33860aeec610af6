#include "data/dataset_index.h"

#include <algorithm>
#include <filesystem>
#include <unordered_map>
#include <unordered_set>

#include "core/check.h"
#include "core/printable.h"
#include "data/csv.h"

namespace fs = std::filesystem;

namespace ranzcr {
namespace {

constexpr size_t kMaxListed = 5;

// Collects offenders of one kind and throws one error naming the first few.
class Offenders {
 public:
  explicit Offenders(std::string what) : what_(std::move(what)) {}
  void add(const std::string& item) {
    if (items_.size() < kMaxListed) items_.push_back(item);
    ++count_;
  }
  void throw_if_any(const std::string& context) const {
    if (count_ == 0) return;
    std::string list;
    for (size_t i = 0; i < items_.size(); ++i) list += (i ? ", " : "") + items_[i];
    if (count_ > items_.size()) list += ", ...";
    RANZCR_FAIL(context, ": ", count_, " ", what_, ": ", list);
  }

 private:
  std::string what_;
  std::vector<std::string> items_;
  size_t count_ = 0;
};

}  // namespace

DatasetIndex DatasetIndex::subset(const std::vector<int64_t>& rows) const {
  DatasetIndex out;
  out.label_names = label_names;
  const size_t c = num_labels();
  for (int64_t r : rows) {
    out.ids.push_back(ids[r]);
    out.groups.push_back(groups[r]);
    out.image_paths.push_back(image_paths[r]);
    if (!labels.empty())
      out.labels.insert(out.labels.end(), labels.begin() + r * c, labels.begin() + (r + 1) * c);
  }
  return out;
}

IndexOptions index_options(const DataConfig& data) {
  IndexOptions o;
  o.id_column = data.id_column;
  o.group_column = data.group_column;
  o.label_columns = data.label_columns;
  o.image_ext = data.image_ext;
  return o;
}

std::string train_csv_path(const DataConfig& data) {
  return (fs::path(data.root) / data.train_csv).string();
}

DatasetIndex load_train_index(const DataConfig& data, const IndexOptions& options) {
  return load_index(train_csv_path(data), (fs::path(data.root) / data.image_dir).string(), options);
}

DatasetIndex load_index(const std::string& csv_path, const std::string& image_dir,
                        const IndexOptions& options) {
  const CsvTable table = read_csv(csv_path);
  const int id_col = table.column(options.id_column);
  int group_col = options.group_column.empty() ? -1 : table.column(options.group_column);

  std::vector<std::string> label_names = options.label_columns;
  if (options.with_labels && label_names.empty()) {
    for (const auto& h : table.header)
      if (h != options.id_column && h != options.group_column) label_names.push_back(h);
  }
  Offenders missing_cols("required columns missing (header has: " + [&] {
    std::string h;
    for (size_t c = 0; c < table.header.size() && c < 20; ++c)
      h += (c ? ", " : "") + printable(table.header[c]);
    return table.header.size() > 20 ? h + ", ... (" + std::to_string(table.header.size()) + " columns)" : h;
  }() + ")");
  if (id_col < 0) missing_cols.add("'" + printable(options.id_column) + "' (data.id_column)");
  std::vector<int> label_cols;
  for (const auto& name : label_names) {
    label_cols.push_back(table.column(name));
    if (options.with_labels && label_cols.back() < 0) missing_cols.add("'" + printable(name) + "'");
  }
  missing_cols.throw_if_any(csv_path);
  RANZCR_CHECK(!options.with_labels || !label_names.empty(), csv_path,
               ": no label columns (every column is the id or the group column)");

  DatasetIndex index;
  index.label_names = label_names;
  Offenders bad_labels("label values other than 0/1");
  Offenders bad_ids("rows with an empty id");
  Offenders dup_ids("duplicate ids");
  Offenders missing_images("images missing from " + image_dir + " (expected <id>" + options.image_ext + ")");
  std::unordered_set<std::string> seen;
  for (size_t r = 0; r < table.rows.size(); ++r) {
    const auto& row = table.rows[r];
    const std::string where = "line " + std::to_string(table.row_lines[r]);
    const std::string& id = row[id_col];
    if (id.empty()) bad_ids.add(where);
    if (!seen.insert(id).second) dup_ids.add("'" + printable(id) + "' (" + where + ")");
    if (options.with_labels) {
      for (size_t k = 0; k < label_cols.size(); ++k) {
        const std::string& v = row[label_cols[k]];
        if (v == "0" || v == "1" || v == "0.0" || v == "1.0") {
          index.labels.push_back(v[0] == '1' ? 1.0f : 0.0f);
        } else {
          bad_labels.add(where + " column '" + printable(label_names[k]) + "' = '" + printable(v) + "'");
          index.labels.push_back(0.0f);
        }
      }
    }
    const std::string path = (fs::path(image_dir) / (id + options.image_ext)).string();
    if (options.check_images_exist && !id.empty() && !fs::exists(path))
      missing_images.add(printable(id + options.image_ext));
    index.ids.push_back(id);
    index.groups.push_back(group_col >= 0 ? row[group_col] : std::string());
    index.image_paths.push_back(path);
  }
  bad_ids.throw_if_any(csv_path);
  dup_ids.throw_if_any(csv_path);
  bad_labels.throw_if_any(csv_path);
  RANZCR_CHECK(!options.check_images_exist || fs::is_directory(image_dir),
               "image folder not found: ", image_dir);
  missing_images.throw_if_any(csv_path);
  RANZCR_CHECK(index.size() > 0, csv_path, ": no data rows");
  return index;
}

DatasetIndex index_from_folder(const std::string& image_dir, const std::string& image_ext) {
  RANZCR_CHECK(fs::is_directory(image_dir), "image folder not found: ", image_dir);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(image_dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.size() > image_ext.size() &&
        name.compare(name.size() - image_ext.size(), image_ext.size(), image_ext) == 0)
      names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  RANZCR_CHECK(!names.empty(), "no ", image_ext, " images in ", image_dir, " (check data.image_ext)");
  DatasetIndex index;
  for (const auto& name : names) {
    index.ids.push_back(name.substr(0, name.size() - image_ext.size()));
    index.groups.emplace_back();
    index.image_paths.push_back((fs::path(image_dir) / name).string());
  }
  return index;
}

}  // namespace ranzcr
