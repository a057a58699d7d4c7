#pragma once
// The launches of the kernels that take every dtype (convert_kernels.cu):
// casts, comparisons, where, the triangles, the finiteness check, fills and
// padding. Plain values
// and C++17, as elementwise_launch.h.
#include <cstdint>

#include "backends/cuda/elementwise_launch.h"

namespace kiln::cuda {

// Every storage type, in DType's order.
enum class AnyDType { Float32, Float64, Float16, BFloat16, Int32, Int64, UInt8, Bool, Int8 };

// y = x converted as the CPU converts (16-bit floats through float; to bool,
// x != 0), in the geometry's layouts.
void launch_cast(const MapCall& call, AnyDType from, AnyDType to);

// bool y = a <op> b (in[0], in[1], both of `operands`' type; the 16-bit
// floats compared as float).
enum class Comparison { Eq, Ne, Lt, Le, Gt, Ge };
void launch_compare(const MapCall& call, AnyDType operands, Comparison op);

// y = cond ? a : b: in[0] bool, in[1], in[2] and y of `dtype`.
void launch_where(const MapCall& call, AnyDType dtype);

// y = x where the element's column minus its row is at most `diagonal`
// (lower) or at least it (upper), else 0; y dense [..., rows, cols].
void launch_triangle(const MapCall& call, AnyDType dtype, int64_t rows, int64_t cols, int64_t diagonal, bool lower);

// Sets the device bool *flag to false where an element of x (walked by the
// geometry's operand 0) is inf or NaN; integers are always finite.
void launch_clear_if_non_finite(const MapGeometry& g, AnyDType dtype, const void* x, bool* flag, void* stream);

// n dense elements set to `value`, converted as a cast from float64.
void launch_fill(void* y, int64_t n, AnyDType dtype, double value, void* stream);

// Padding of dense x [shape] into dense y [padded] as the CPU's pad: each
// position of y reads the position of x its mode maps it to (reflect about
// the edge, replicate the edge, wrap around), or `value` (constant).
enum class PadMode { Constant, Reflect, Replicate, Circular };
struct PadCall {
  static constexpr int kMaxRank = 8;
  AnyDType dtype = AnyDType::Float32;
  PadMode mode = PadMode::Constant;
  int rank = 0;
  int64_t shape[kMaxRank] = {}, padded[kMaxRank] = {}, before[kMaxRank] = {};
  double value = 0;
  void* stream = nullptr;
};
void launch_pad(const PadCall& call, const void* x, void* y);
// The gradient of x from y's, zeroed first: in constant mode a gather (any
// floating dtype); in the others, positions that read the same element add
// up there (float32 and float64).
void launch_pad_backward(const PadCall& call, const void* grad_y, void* grad_x);

}  // namespace kiln::cuda
