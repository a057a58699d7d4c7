#include "kiln/metrics.h"

#include <iomanip>
#include <sstream>

#include "kiln/functional.h"

namespace kiln::train::metrics {

double top_k_accuracy(const Tensor& logits, const Tensor& labels, int64_t k) {
  KILN_CHECK(logits.dim() == 2 && labels.dim() == 1 && labels.size(0) == logits.size(0), "top_k_accuracy expects logits",
             " [N, C] and labels [N], got ", logits.meta_str(), " and ", labels.meta_str());
  KILN_CHECK(k >= 1, "top_k_accuracy: k must be >= 1, got ", k);
  int64_t n = logits.size(0), c = logits.size(1);
  if (n == 0) return 0.0;
  auto v = logits.to(DType::Float64).to_vector<double>();
  auto y = labels.to(DType::Int64).to_vector<int64_t>();
  int64_t hits = 0;
  for (int64_t i = 0; i < n; ++i) {
    KILN_CHECK(y[i] >= 0 && y[i] < c, "label ", y[i], " at row ", i, " is not a class index in [0, ", c, ")");
    double target = v[i * c + y[i]];
    int64_t above = 0;
    for (int64_t j = 0; j < c; ++j)
      if (j != y[i] && v[i * c + j] >= target) ++above;
    hits += above < k;
  }
  return static_cast<double>(hits) / static_cast<double>(n);
}

ConfusionMatrix::ConfusionMatrix(int64_t num_classes) : n_(num_classes), counts_(num_classes * num_classes, 0) {
  KILN_CHECK(num_classes > 0, "ConfusionMatrix needs at least one class");
}

void ConfusionMatrix::update(const Tensor& out, const Tensor& labels) {
  Tensor pred = out.dim() == labels.dim() + 1 ? argmax(out, -1) : out;
  auto p = pred.to(DType::Int64).to_vector<int64_t>();
  auto y = labels.to(DType::Int64).to_vector<int64_t>();
  KILN_CHECK(p.size() == y.size(), "ConfusionMatrix: ", p.size(), " predictions but ", y.size(), " labels");
  for (size_t i = 0; i < p.size(); ++i) {
    KILN_CHECK(y[i] >= 0 && y[i] < n_ && p[i] >= 0 && p[i] < n_, "ConfusionMatrix: class ", (y[i] < 0 || y[i] >= n_ ? y[i] : p[i]),
               " is outside [0, ", n_, ")");
    counts_[y[i] * n_ + p[i]]++;
  }
}

int64_t ConfusionMatrix::total() const {
  int64_t t = 0;
  for (int64_t v : counts_) t += v;
  return t;
}

double ConfusionMatrix::accuracy() const {
  int64_t diag = 0;
  for (int64_t c = 0; c < n_; ++c) diag += count(c, c);
  return total() ? static_cast<double>(diag) / static_cast<double>(total()) : 0.0;
}

double ConfusionMatrix::precision(int64_t c) const {
  int64_t predicted = 0;
  for (int64_t l = 0; l < n_; ++l) predicted += count(l, c);
  return predicted ? static_cast<double>(count(c, c)) / static_cast<double>(predicted) : 0.0;
}

double ConfusionMatrix::recall(int64_t c) const {
  int64_t actual = 0;
  for (int64_t p = 0; p < n_; ++p) actual += count(c, p);
  return actual ? static_cast<double>(count(c, c)) / static_cast<double>(actual) : 0.0;
}

double ConfusionMatrix::f1(int64_t c) const {
  double p = precision(c), r = recall(c);
  return p + r > 0 ? 2 * p * r / (p + r) : 0.0;
}

double ConfusionMatrix::macro_f1() const {
  double s = 0;
  for (int64_t c = 0; c < n_; ++c) s += f1(c);
  return s / static_cast<double>(n_);
}

std::string ConfusionMatrix::str() const {
  std::ostringstream os;
  os << "label\\pred";
  for (int64_t p = 0; p < n_; ++p) os << std::setw(7) << p;
  os << "\n";
  for (int64_t l = 0; l < n_; ++l) {
    os << std::setw(10) << l;
    for (int64_t p = 0; p < n_; ++p) os << std::setw(7) << count(l, p);
    os << "\n";
  }
  return os.str();
}

namespace {
// [N, T, C] and [N, T] to [N*T, C] and [N*T].
std::pair<Tensor, Tensor> rows_of(const Tensor& outputs, const Tensor& labels) {
  KILN_CHECK(outputs.dim() == labels.dim() + 1 && outputs.dim() >= 2, "metrics expect outputs [N, C] or [N, T, C] ",
             "with labels [N] or [N, T], got ", outputs.meta_str(), " and ", labels.meta_str());
  return {outputs.reshape({-1, outputs.shape().back()}), labels.reshape({-1})};
}
}  // namespace

void Accuracy::update(const Tensor& outputs, const Tensor& labels) {
  auto [out, y] = rows_of(outputs, labels);
  int64_t n = y.numel();
  if (k_ == 1) hits_ += static_cast<double>(sum(cast(eq(argmax(out, -1), y.to(DType::Int64)), DType::Int64)).item<int64_t>());
  else hits_ += top_k_accuracy(out, y, k_) * static_cast<double>(n);
  total_ += n;
}

void Accuracy::set_counts(const std::vector<double>& c) {
  KILN_CHECK(c.size() == 2, "Accuracy takes 2 counts (hits, total), got ", c.size());
  hits_ = c[0];
  total_ = static_cast<int64_t>(c[1]);
}

void ConfusionMatrix::set_counts(const std::vector<double>& c) {
  KILN_CHECK(c.size() == counts_.size(), "a confusion matrix of ", n_, " classes takes ", counts_.size(), " counts, got ",
             c.size());
  for (size_t i = 0; i < c.size(); ++i) counts_[i] = static_cast<int64_t>(c[i]);
}

std::vector<std::pair<std::string, double>> Accuracy::results() const {
  double value = total_ ? hits_ / static_cast<double>(total_) : 0.0;
  return {{k_ == 1 ? std::string("accuracy") : "top" + std::to_string(k_) + "_accuracy", value}};
}

std::vector<std::pair<std::string, double>> ClassificationReport::results() const {
  // Macro averages over the classes that occur (as a label or a prediction),
  // as scikit-learn does: a 10-class model tested on 2 classes is not
  // penalised for the 8 it never saw.
  double p = 0, r = 0, f = 0;
  int64_t present = 0;
  for (int64_t c = 0; c < num_classes_; ++c) {
    int64_t seen = 0;
    for (int64_t o = 0; o < num_classes_; ++o) seen += matrix_.count(c, o) + matrix_.count(o, c);
    if (seen == 0) continue;
    ++present;
    p += matrix_.precision(c);
    r += matrix_.recall(c);
    f += matrix_.f1(c);
  }
  double n = static_cast<double>(std::max<int64_t>(present, 1));
  return {{"precision", p / n}, {"recall", r / n}, {"f1", f / n}};
}

}  // namespace kiln::train::metrics
