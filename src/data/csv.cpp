// CSV: RFC 4180 fields (quotes, doubled quotes inside), one record per line.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "kiln/data/readers.h"

namespace kiln::data {
namespace {

std::vector<std::string> split_record(const std::string& line, char delim, const std::string& path, int64_t line_no) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char ch = line[i];
    if (quoted) {
      if (ch == '"' && i + 1 < line.size() && line[i + 1] == '"') fields.back() += '"', ++i;
      else if (ch == '"') quoted = false;
      else fields.back() += ch;
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == delim) {
      fields.emplace_back();
    } else if (ch != '\r') {
      fields.back() += ch;
    }
  }
  KILN_CHECK(!quoted, "'", path, "' line ", line_no, ": a quoted field is not closed");
  return fields;
}

bool parse_double(const std::string& text, double& out) {
  size_t b = text.find_first_not_of(" \t"), e = text.find_last_not_of(" \t");
  if (b == std::string::npos) return false;
  const char* first = text.data() + b;
  const char* last = text.data() + e + 1;
  auto [ptr, ec] = std::from_chars(first, last, out);
  return ec == std::errc() && ptr == last;
}

}  // namespace

CsvData load_csv(const std::string& path, const CsvOptions& options) {
  std::ifstream f(path);
  KILN_CHECK(f.good(), "load_csv: cannot open '", path, "'");
  std::vector<std::vector<std::string>> rows;
  std::vector<int64_t> line_numbers;
  std::vector<std::string> header;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(f, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto fields = split_record(line, options.delimiter, path, line_no);
    if (options.has_header && header.empty()) {
      header = std::move(fields);
      continue;
    }
    rows.push_back(std::move(fields));
    line_numbers.push_back(line_no);
  }
  KILN_CHECK(!rows.empty(), "load_csv: '", path, "' has no data rows");
  size_t columns = header.empty() ? rows[0].size() : header.size();
  KILN_CHECK(columns >= 2, "load_csv: '", path, "' needs at least one feature column and a label column, found ",
             columns, " column(s); is the delimiter '", options.delimiter, "' right?");
  if (header.empty())
    for (size_t c = 0; c < columns; ++c) {
      std::string name = "c";  // appended, not "c" + ...: GCC 12 warns falsely (-Wrestrict) on the latter
      name += std::to_string(c);
      header.push_back(name);
    }
  size_t label_col = columns - 1;
  if (!options.label_column.empty()) {
    auto it = std::find(header.begin(), header.end(), options.label_column);
    if (it == header.end()) {
      std::string names;
      for (auto& h : header) names += (names.empty() ? "" : ", ") + h;
      KILN_FAIL("load_csv: '", path, "' has no column '", options.label_column, "'; its columns are: ", names);
    }
    label_col = static_cast<size_t>(it - header.begin());
  }
  int64_t n = static_cast<int64_t>(rows.size());
  int64_t features = static_cast<int64_t>(columns) - 1;
  CsvData out;
  for (size_t c = 0; c < columns; ++c)
    if (c != label_col) out.feature_names.push_back(header[c]);
  Tensor x = Tensor::empty({n, features}, DType::Float32);
  float* px = x.data<float>();
  std::vector<double> numeric_labels(static_cast<size_t>(n));
  bool labels_numeric = true, labels_whole = true;
  for (int64_t r = 0; r < n; ++r) {
    const auto& row = rows[static_cast<size_t>(r)];
    KILN_CHECK(row.size() == columns, "load_csv: '", path, "' line ", line_numbers[static_cast<size_t>(r)], " has ",
               row.size(), " fields, expected ", columns);
    int64_t j = 0;
    for (size_t c = 0; c < columns; ++c) {
      if (c == label_col) continue;
      double v;
      KILN_CHECK(parse_double(row[c], v), "load_csv: '", path, "' line ", line_numbers[static_cast<size_t>(r)],
                 ", column '", header[c], "': '", row[c], "' is not a number");
      px[r * features + j++] = static_cast<float>(v);
    }
    double v;
    if (labels_numeric && parse_double(row[label_col], v)) {
      numeric_labels[static_cast<size_t>(r)] = v;
      labels_whole = labels_whole && v == std::floor(v);
    } else {
      labels_numeric = false;
    }
  }
  Tensor y;
  if (options.regression) {
    KILN_CHECK(labels_numeric, "load_csv: '", path, "': regression needs numeric values in column '", header[label_col], "'");
    y = Tensor::empty({n}, DType::Float32);
    for (int64_t r = 0; r < n; ++r) y.data<float>()[r] = static_cast<float>(numeric_labels[static_cast<size_t>(r)]);
  } else if (labels_numeric) {
    KILN_CHECK(labels_whole, "load_csv: '", path, "': column '", header[label_col],
               "' holds fractional numbers; set regression for real-valued targets");
    y = Tensor::empty({n}, DType::Int64);
    for (int64_t r = 0; r < n; ++r) y.data<int64_t>()[r] = static_cast<int64_t>(numeric_labels[static_cast<size_t>(r)]);
  } else {
    std::set<std::string> names;
    for (auto& row : rows) names.insert(row[label_col]);
    out.class_names.assign(names.begin(), names.end());
    std::map<std::string, int64_t> index;
    for (size_t i = 0; i < out.class_names.size(); ++i) index[out.class_names[i]] = static_cast<int64_t>(i);
    y = Tensor::empty({n}, DType::Int64);
    for (int64_t r = 0; r < n; ++r) y.data<int64_t>()[r] = index[rows[static_cast<size_t>(r)][label_col]];
  }
  out.data = TensorDataset(x, y);
  return out;
}

}  // namespace kiln::data
