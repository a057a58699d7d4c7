#pragma once
// Loads tests/golden/op_golden.json (written by make_op_golden.py with PyTorch)
// into tensors and attributes.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/op_library.h"

namespace kiln::testing {

struct GoldenTensor {
  bool present = false;
  DType dtype = DType::Float64;
  Shape shape;
  std::vector<double> values;
  Tensor to_tensor(DType as) const;  // values converted to `as`
};

struct GoldenCase {
  std::string name, op;
  DType dtype = DType::Float32;  // the dtype the case is run in
  Attrs attrs;
  std::vector<GoldenTensor> inputs;
  std::vector<GoldenTensor> outputs;
  GoldenTensor upstream;                                // gradient fed to outputs[0]
  std::vector<std::pair<int, GoldenTensor>> grads;      // expected input gradients
  std::vector<Tensor> make_inputs() const;
};

const std::vector<GoldenCase>& golden_cases();
// Case `index`'s name as a test name: "relu.0.float32" -> "relu_0_float32".
std::string golden_test_name(int index);
// The indices of every case, or of those with expected gradients, for a
// parameterized suite.
std::vector<int> golden_case_indices(bool with_gradients = false);

// Tolerances for comparing a result computed in `dtype` with a float64 reference.
struct Tolerance {
  double rtol, atol;
};
Tolerance forward_tolerance(DType dtype);
Tolerance gradient_tolerance(DType dtype);

// Empty when close; otherwise a description of the first mismatches.
std::string compare(const Tensor& actual, const std::vector<double>& expected, const Shape& shape, Tolerance tol);

// The case run with its inputs on `device` (a backend's seam): empty when
// every output (for ops that write their input, that input) stays there
// and has PyTorch's values; otherwise what differs.
std::string forward_mismatch_on(const GoldenCase& c, Device device);
// The same for the input gradients, backward run from the inputs on `device`.
std::string gradient_mismatch_on(const GoldenCase& c, Device device);

}  // namespace kiln::testing
