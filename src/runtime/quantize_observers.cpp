#include "runtime/quantize_observers.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/error.h"
#include "kiln/functional.h"

namespace kiln::runtime {
namespace {

std::vector<float> finite_values(const Tensor& x) {
  std::vector<float> v = cast(x, DType::Float32).contiguous().to_vector<float>();
  v.erase(std::remove_if(v.begin(), v.end(), [](float f) { return !std::isfinite(f); }), v.end());
  return v;
}

void add_to(std::vector<double>& hist, double lo, double hi, const std::vector<float>& values, bool absolute) {
  const double width = (hi - lo) / static_cast<double>(hist.size());
  for (float f : values) {
    const double v = absolute ? std::fabs(f) : f;
    int64_t bin = width > 0 ? static_cast<int64_t>((v - lo) / width) : 0;
    bin = std::clamp<int64_t>(bin, 0, static_cast<int64_t>(hist.size()) - 1);
    hist[static_cast<size_t>(bin)] += 1;
  }
}

}  // namespace

void RangeObserver::observe_extremes(const Tensor& x) {
  for (float f : finite_values(x)) {
    min_ = std::min(min_, static_cast<double>(f));
    max_ = std::max(max_, static_cast<double>(f));
  }
}

void RangeObserver::observe_histogram(const Tensor& x) {
  if (!seen()) return;
  if (hist_.empty()) {
    hist_.assign(kBins, 0.0);
    abs_hist_.assign(kBins, 0.0);
  }
  const std::vector<float> values = finite_values(x);
  add_to(hist_, min_, max_, values, false);
  // Exact zeros (a ReLU's half of the values) stay exact whatever the clip,
  // and as one spike in the first bin they would pull the clip down.
  std::vector<float> nonzero;
  nonzero.reserve(values.size());
  for (float f : values)
    if (f != 0.0f) nonzero.push_back(f);
  add_to(abs_hist_, 0.0, std::max(std::fabs(min_), std::fabs(max_)), nonzero, true);
}

std::pair<double, double> RangeObserver::range(const std::string& method, double percentile) const {
  KILN_CHECK(seen(), "no finite value was seen in calibration");
  if (method == "minmax" || hist_.empty()) return {min_, max_};
  if (method == "percentile") return percentile_range(percentile);
  KILN_CHECK(method == "entropy", "unknown calibration method '", method, "': minmax, percentile or entropy");
  const double t = entropy_threshold(min_ >= 0 ? 256 : 128);
  return {std::max(min_, -t), std::min(max_, t)};
}

std::pair<double, double> RangeObserver::percentile_range(double percentile) const {
  KILN_CHECK(percentile > 50 && percentile <= 100, "the percentile must be in (50, 100], got ", percentile);
  double total = 0;
  for (double h : hist_) total += h;
  const double width = (max_ - min_) / kBins, tail = total * (100.0 - percentile) / 100.0;
  double lo = min_, hi = max_, seen = 0;
  for (int i = 0; i < kBins; ++i) {
    seen += hist_[i];
    if (seen > tail) {
      lo = min_ + i * width;
      break;
    }
  }
  seen = 0;
  for (int i = kBins - 1; i >= 0; --i) {
    seen += hist_[i];
    if (seen > tail) {
      hi = min_ + (i + 1) * width;
      break;
    }
  }
  if (min_ >= 0) lo = min_;  // nothing to clip below a ReLU's zero
  return {lo, hi};
}

double RangeObserver::entropy_threshold(int levels) const {
  const double amax = std::max(std::fabs(min_), std::fabs(max_));
  double best_kl = std::numeric_limits<double>::infinity();
  int best = kBins;
  std::vector<double> p, q;
  for (int i = levels; i <= kBins; i += 8) {
    // p: the first i bins, with everything beyond clipped into the last.
    p.assign(abs_hist_.begin(), abs_hist_.begin() + i);
    for (int k = i; k < kBins; ++k) p.back() += abs_hist_[k];
    // q: the first i bins merged into `levels` groups, each group's count
    // spread over its nonzero bins (what quantizing keeps of p).
    q.assign(static_cast<size_t>(i), 0.0);
    for (int g = 0; g < levels; ++g) {
      const int start = g * i / levels, stop = (g + 1) * i / levels;
      double sum = 0;
      int nonzero = 0;
      for (int k = start; k < stop; ++k) {
        sum += abs_hist_[k];
        nonzero += abs_hist_[k] > 0;
      }
      for (int k = start; k < stop; ++k)
        if (abs_hist_[k] > 0) q[k] = sum / nonzero;
    }
    double p_sum = 0, q_sum = 0;
    for (int k = 0; k < i; ++k) p_sum += p[k], q_sum += q[k];
    if (p_sum <= 0 || q_sum <= 0) continue;
    double kl = 0;
    for (int k = 0; k < i; ++k) {
      if (p[k] <= 0) continue;
      const double pk = p[k] / p_sum, qk = std::max(q[k] / q_sum, 1e-12);
      kl += pk * std::log(pk / qk);
    }
    if (kl < best_kl) best_kl = kl, best = i;
  }
  return amax * static_cast<double>(best) / kBins;
}

}  // namespace kiln::runtime
