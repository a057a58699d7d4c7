// Op packages that are wrong on purpose, one per BAD_CASE, for the loader's
// refusals (plugin_test.cpp). Each is built as its own library.
#include <kiln/plugin.h>

#include <stdexcept>

namespace {

[[maybe_unused]] void copy_kernel(kiln::plugin::KernelContext& k) {
  kiln::plugin::Tensor x = k.input(0).contiguous(), y = k.output(0);
  const float* in = x.data<float>();
  float* out = y.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i];
}

// A valid op, defined first: a refused package must not leave it behind.
[[maybe_unused]] kiln::plugin::OpBuilder& good_op(kiln::plugin::Registry& reg, const char* name) {
  return reg.op(name)
      .inputs({"x"})
      .outputs({"y"})
      .infer([](kiln::plugin::InferContext& c) { c.set_output(0, c.input(0)); })
      .kernel("cpu", kiln::plugin::DType::Float32, copy_kernel);
}

}  // namespace

#if BAD_CASE == 1  // an op named like a built-in one
KILN_PLUGIN(bad_clash, reg) {
  good_op(reg, "bad_clash_first");
  good_op(reg, "add");
}
#elif BAD_CASE == 2  // a kernel for a dtype Kiln does not have
KILN_PLUGIN(bad_dtype, reg) {
  good_op(reg, "bad_dtype_first");
  good_op(reg, "bad_dtype_op").kernel("cpu", static_cast<kiln::plugin::DType>(42), copy_kernel);
}
#elif BAD_CASE == 3  // an inference function that throws when called
KILN_PLUGIN(bad_infer, reg) {
  reg.op("bad_infer_op")
      .inputs({"x"})
      .outputs({"y"})
      .infer([](kiln::plugin::InferContext&) -> void { throw std::runtime_error("rank 3 is not handled yet"); })
      .kernel("cpu", kiln::plugin::DType::Float32, copy_kernel);
}
#elif BAD_CASE == 4  // registration that fails half way
KILN_PLUGIN(bad_register, reg) {
  good_op(reg, "bad_register_first");
  throw std::runtime_error("the licence file is missing");
}
#elif BAD_CASE == 5  // built for another ABI version
extern "C" __attribute__((visibility("default"))) uint32_t kiln_plugin_abi_version(void) { return 99; }
extern "C" __attribute__((visibility("default"))) const char* kiln_plugin_name(void) { return "bad_abi"; }
extern "C" __attribute__((visibility("default"))) int kiln_plugin_register(const kiln_host_api*, kiln_registrar*,
                                                                          kiln_status*) {
  return KILN_ERROR;
}
#elif BAD_CASE == 6  // a shared library that is no package at all
extern "C" __attribute__((visibility("default"))) int some_function(void) { return 1; }
#elif BAD_CASE == 7  // a package with an accelerator kernel this build has no backend for
KILN_PLUGIN(cuda_ready, reg) {
  good_op(reg, "cuda_ready_copy").kernel("cuda", kiln::plugin::DType::Float32, copy_kernel);
}
#endif
