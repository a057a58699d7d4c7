#pragma once
// What calibration sees of one activation: its extremes over every batch,
// and a histogram of the values, from which the clipping range is chosen.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::runtime {

class RangeObserver {
 public:
  // First pass: the extremes.
  void observe_extremes(const Tensor& x);
  // Second pass (percentile and entropy): a histogram over those extremes.
  void observe_histogram(const Tensor& x);
  bool seen() const { return min_ <= max_; }
  // The range to quantize: [min, max], or clipped by the method.
  std::pair<double, double> range(const std::string& method, double percentile) const;

 private:
  static constexpr int kBins = 2048;
  std::pair<double, double> percentile_range(double percentile) const;
  // The clip T of |x| with the least KL divergence to its quantized
  // histogram at `levels` levels (histogram of |x| over [0, max|x|]).
  double entropy_threshold(int levels) const;
  double min_ = 1e300, max_ = -1e300;
  std::vector<double> hist_;      // kBins over [min_, max_]
  std::vector<double> abs_hist_;  // kBins over [0, abs_top_]
  // The entropy histogram's top: max |x|, or, where a few spikes lie far
  // out, 16 times |x|'s 99.9th percentile, so that the bulk of the values
  // spans enough bins for the search to clip close to it.
  double abs_top_ = 0;
  std::vector<float> sample_;  // |x| of every stride_-th nonzero value seen by observe_extremes
  int64_t stride_ = 1, counted_ = 0;
};

}  // namespace kiln::runtime
