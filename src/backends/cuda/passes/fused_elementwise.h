#pragma once
// The CUDA backend's lowering of fused elementwise expressions
// (graph/elementwise_fusion.h): a kernel generated per expression and per
// way its inputs are read (dense, one scalar, broadcast), in which every step
// is the op's own formula functor (ops/elementwise_formulas.h, compiled by
// NVRTC from the same text the CPU and the library's kernels compile), on
// values held in registers; compiled at its first run on a device
// (runtime_compiler.h, cached on disk), launched with the functors the host
// built from the steps' attributes as arguments.
#include <string>
#include <vector>

#include "graph/elementwise_fusion.h"

namespace kiln::cuda {

// How a fused kernel reads one input at output element i.
enum class FusedInput { Dense, Scalar, Broadcast };

// The launch's arguments, one definition for the host and the generated
// source (which carries this text): the inputs' addresses, the output's
// sizes (axes merged where every input allows) and each broadcast input's
// strides over them. Under CUDA's 4 KiB of kernel arguments with twelve functors.
#define KILN_FUSED_ARGS_FIELDS \
  void* out;                   \
  const void* in[16];          \
  long long numel;             \
  int rank;                    \
  long long sizes[16];         \
  long long strides[16][16];
struct FusedArgs {
  KILN_FUSED_ARGS_FIELDS
};
constexpr int kFusedMaxInputs = 16;
constexpr int kFusedMaxRank = 16;
static_assert(graph::kMaxFusedSteps + 1 <= kFusedMaxInputs,
              "an expression's tree of steps has steps + 1 inputs at most");

// The arguments and input kinds of running an expression on `in` into
// `out` (contiguous, the expression's shape); inputs broadcast to it, and
// all of the output's dtype.
struct FusedLaunch {
  FusedArgs args{};
  std::vector<FusedInput> kinds;
};
FusedLaunch plan_fused_launch(const std::vector<Tensor>& in, const Tensor& out);

// The kernel `kiln_fused(FusedArgs, F0 f0, F1 f1, ...)` for an expression
// read as `kinds` says: its text alone, and whole with what it needs before
// it (NVRTC's prelude, the formulas, FusedArgs). Elements are loaded into
// float and stored with kiln_load/kiln_store, which the prelude defines for
// float, kiln_bf16 and kiln_half (16-bit floats rounded once, to nearest even).
std::string fused_kernel_code(const graph::ElementwiseExpression& expression, const std::vector<FusedInput>& kinds);
std::string fused_kernel_source(const graph::ElementwiseExpression& expression, const std::vector<FusedInput>& kinds);
// The formulas' text (src/ops/elementwise_formulas.h, embedded at build
// time) and FusedArgs' declaration, as the generated source has them.
const char* formulas_source();
std::string fused_args_source();

// Each step's functor, built on the host from its attributes: the bytes
// the kernel takes as its arguments f0, f1, ...
class FusedFunctors {
 public:
  explicit FusedFunctors(const graph::ElementwiseExpression& expression);
  void* at(size_t step) { return values_.at(step).bytes; }

 private:
  struct alignas(16) Bytes {
    unsigned char bytes[64];
  };
  std::vector<Bytes> values_;
};

}  // namespace kiln::cuda
