// Which passes a graph gets: the generic ones, then its backend's own.
#include <array>

#include "graph/passes.h"

namespace kiln::graph {

const std::vector<Pass>& generic_passes() {
  static const std::vector<Pass> passes = {
      {"dead code", plain<eliminate_dead_code>},
      {"common subexpressions", plain<eliminate_common_subexpressions>},
      {"constant folding", plain<fold_constants>},
      {"algebraic simplification", plain<simplify_algebra>},
      // Folding makes constants equal and ops the same (a table's rows taken as a slice).
      {"common subexpressions, after folding", plain<eliminate_common_subexpressions>},
      {"GELU recognition", plain<recognize_gelu>, Pass::Inference},
      {"batch norm folding", plain<fold_batch_norm>, Pass::Inference},
      {"views folded", plain<fold_views>, Pass::Inference},
      {"convolution taps in padding", plain<drop_taps_in_padding>, Pass::Inference},
      {"padding into pools", plain<fold_padding_into_pools>, Pass::Inference},
      {"matmul + bias to linear", plain<matmul_bias_to_linear>, Pass::Inference},
      {"scales into linear layers", plain<fold_scales_into_linears>, Pass::Inference},
      {"parallel linear merge", plain<merge_parallel_linears>, Pass::Inference},
      {"attention fusion", plain<fuse_attention>, Pass::Inference},
      {"conv bias gradient", plain<fuse_conv_bias_grad>},
      {"max-pool + relu gradient", plain<fuse_pool_relu_grad>},
  };
  return passes;
}

namespace {
std::array<std::vector<Pass>, kNumDeviceTypes>& by_backend() {
  static std::array<std::vector<Pass>, kNumDeviceTypes> table;
  return table;
}
}  // namespace

void register_backend_passes(DeviceType backend, std::vector<Pass> passes) {
  auto& list = by_backend()[static_cast<int>(backend)];
  list.insert(list.end(), passes.begin(), passes.end());
}

const std::vector<Pass>& backend_passes(DeviceType backend) { return by_backend()[static_cast<int>(backend)]; }

}  // namespace kiln::graph
