// The CPU backend's graph passes: fusions into oneDNN post-ops and Kiln's
// own fused kernels, oneDNN's blocked layouts with the convolution
// algorithm chosen by timing, weights packed for small GEMMs, and
// elementwise chains as one loop. They make CPU kernels, so only graphs
// whose values live on the CPU get them.
#include "backends/cpu/passes/cpu_passes.h"
#include "graph/elementwise_fusion.h"
#include "graph/passes.h"

namespace kiln::graph {
namespace {

[[maybe_unused]] const bool registered = [] {
  // clang-format off
  register_backend_passes(DeviceType::CPU, {
      {"linear + residual", plain<fuse_linear_residual>},
      {"conv + relu", plain<fuse_conv_activation>},
      {"convolution layouts", choose_conv_layouts, Pass::Inference},
      {"convolution layouts", choose_training_conv_layouts, Pass::Training},
      // (those the layouts left plain: oneDNN's plain kernel is slow on one pixel)
      {"one-pixel convolutions to linear", plain<one_pixel_convolutions_as_linear>, Pass::Inference},
      {"packed linear weights", plain<use_packed_linear_weights>, Pass::Inference},
      {"recurrent weights prepared", plain<use_prepared_recurrent_weights>, Pass::Inference},
      {"attention heads interleaved", plain<write_attention_heads_interleaved>, Pass::Inference},
      {"max pools without indices", plain<pool_values_only>},
      {"int8 layouts", plain<use_int8_layouts>, Pass::Inference},
      {"layer norm + quantize", plain<fuse_layer_norm_quantize>, Pass::Inference},
      {"RMS norms", plain<fuse_rms_norms>, Pass::Inference},
      {"nested selections", plain<fuse_nested_wheres>, Pass::Inference},
      {"elementwise fusion", plain<fuse_elementwise>},  // graph/elementwise_fusion.h, lowered by elementwise_lowering.cpp
  });
  // clang-format on
  return true;
}();

}  // namespace
}  // namespace kiln::graph
