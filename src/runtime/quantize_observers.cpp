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
  constexpr size_t kSample = 1 << 16;
  for (float f : finite_values(x)) {
    min_ = std::min(min_, static_cast<double>(f));
    max_ = std::max(max_, static_cast<double>(f));
    if (f == 0.0f || counted_++ % stride_ != 0) continue;
    sample_.push_back(std::fabs(f));
    if (sample_.size() == 2 * kSample) {  // full: keep every other one, and take half as many from now on
      for (size_t i = 0; i < kSample; ++i) sample_[i] = sample_[2 * i];
      sample_.resize(kSample);
      stride_ *= 2;
    }
  }
}

void RangeObserver::observe_histogram(const Tensor& x) {
  if (!seen()) return;
  if (hist_.empty()) {
    hist_.assign(kBins, 0.0);
    abs_hist_.assign(kBins, 0.0);
    abs_top_ = std::max(std::fabs(min_), std::fabs(max_));
    if (!sample_.empty()) {
      std::vector<float> s = sample_;
      const size_t at = std::min(s.size() - 1, static_cast<size_t>(0.999 * static_cast<double>(s.size())));
      std::nth_element(s.begin(), s.begin() + static_cast<long>(at), s.end());
      if (s[at] > 0) abs_top_ = std::min(abs_top_, 16.0 * s[at]);
    }
  }
  const std::vector<float> values = finite_values(x);
  add_to(hist_, min_, max_, values, false);
  // Exact zeros (a ReLU's half of the values) stay exact whatever the clip,
  // and as one spike in the first bin they would pull the clip down.
  std::vector<float> nonzero;
  nonzero.reserve(values.size());
  for (float f : values)
    if (f != 0.0f) nonzero.push_back(f);
  add_to(abs_hist_, 0.0, abs_top_, nonzero, true);  // values past the top fall in the last bin
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
  // The search of TensorRT's calibrator (as MXNet and ONNX Runtime write it):
  // for each clip of i bins, p is the histogram up to it with the clipped
  // tail added to its last bin, q the first i bins alone merged into
  // `levels` groups and spread back over p's nonzero bins; both smoothed so
  // that a bin one has and the other lacks costs a bounded amount.
  const double amax = abs_top_;
  double best_kl = std::numeric_limits<double>::infinity();
  int best = kBins;
  std::vector<double> p, q;
  auto smooth = [](std::vector<double>& d) {  // normalized, zero bins given eps taken evenly from the rest
    constexpr double eps = 1e-4;
    double sum = 0;
    int zeros = 0;
    for (double v : d) sum += v, zeros += v <= 0;
    const int nonzero = static_cast<int>(d.size()) - zeros;
    if (sum <= 0 || nonzero == 0) return false;
    const double take = eps * zeros / nonzero;
    for (double& v : d) v = v <= 0 ? eps : std::max(v / sum - take, eps / 10);  // a tiny bin stays above zero
    return true;
  };
  for (int i = levels; i <= kBins; i += 8) {
    p.assign(abs_hist_.begin(), abs_hist_.begin() + i);
    for (int k = i; k < kBins; ++k) p.back() += abs_hist_[k];
    q.assign(static_cast<size_t>(i), 0.0);
    for (int g = 0; g < levels; ++g) {
      const int start = g * i / levels, stop = (g + 1) * i / levels;
      double sum = 0;
      int nonzero = 0;
      for (int k = start; k < stop; ++k) {
        sum += abs_hist_[k];
        nonzero += p[k] > 0;
      }
      for (int k = start; k < stop; ++k)
        if (p[k] > 0) q[k] = sum / nonzero;
    }
    if (!smooth(p) || !smooth(q)) continue;
    double kl = 0;
    for (int k = 0; k < i; ++k) kl += p[k] * std::log(p[k] / q[k]);
    if (kl < best_kl) best_kl = kl, best = i;
  }
  return amax * static_cast<double>(best) / kBins;
}

}  // namespace kiln::runtime
