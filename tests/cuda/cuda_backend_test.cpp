// The CUDA backend library (libkiln_cuda, -DKILN_CUDA=on): it loads
// into CUDA's slot; without a GPU, asking for one says so; with one, tensors
// go there and back unchanged, ops without a CUDA kernel run on the CPU
// visibly (the kernels: cuda_kernels_test.cpp), a steady loop stops calling
// cudaMalloc, running out of memory says what was asked and what is held,
// and copies in stream order through pinned memory arrive by the events
// recorded after them.
#include <gtest/gtest.h>

#include "cuda/gpus.h"
#include "kiln/backend.h"
#include "kiln/kiln.h"
#include "support/error_message.h"

namespace kiln {
namespace {

using testing::gpus;
using testing::message_of;

TEST(CudaBackend, LoadsIntoCudasSlot) {
  const OpLibrary& lib = load_op_library(KILN_CUDA_BACKEND);
  EXPECT_EQ(lib.device, "cuda");
  EXPECT_EQ(parse_device("cuda:0"), (Device{DeviceType::CUDA, 0}));
  EXPECT_NE(find_backend(DeviceType::CUDA), nullptr);
}

TEST(CudaBackend, WithoutAGpuAskingForOneSaysSo) {
  if (gpus() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  const std::string m = message_of([] { randn({2, 3}).to(parse_device("cuda")); });
  EXPECT_NE(m.find("cuda:0: this machine has no CUDA device"), std::string::npos) << m;
  EXPECT_NE(m.find("run on device cpu"), std::string::npos) << m;
}

TEST(CudaBackend, TensorsGoThereAndBackUnchanged) {
  NEEDS_A_GPU();
  manual_seed(1);
  const Device cuda = parse_device("cuda");
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16, DType::Int64, DType::Bool}) {
    Tensor x = (randn({7, 33}) * 4).to(dtype);
    Tensor there = x.to(cuda);
    EXPECT_EQ(there.device(), cuda);
    EXPECT_EQ(there.to(cpu_device()).to(DType::Float64).to_vector<double>(), x.to(DType::Float64).to_vector<double>())
        << dtype_name(dtype);
  }
  const std::string m = message_of([&] { randn({2}).to(Device{DeviceType::CUDA, gpus()}); });
  EXPECT_NE(m.find("this machine has " + std::to_string(gpus()) + " CUDA device"), std::string::npos) << m;
}

TEST(CudaBackend, OpsWithoutAKernelRunOnTheCpuVisibly) {
  NEEDS_A_GPU();
  manual_seed(2);
  const Device cuda = parse_device("cuda");
  Tensor x = randn({5, 8});
  const int64_t fallbacks = fallback_count();
  Tensor y = cumsum(x.to(cuda), 1);  // (no CUDA kernel)
  EXPECT_EQ(y.device(), cuda);
  EXPECT_GT(fallback_count(), fallbacks);
  EXPECT_EQ(y.to(cpu_device()).to_vector<float>(), cumsum(x, 1).to_vector<float>());
  set_strict_device(true);
  const std::string strict = message_of([&] { cumsum(x.to(cuda), 1); });
  set_strict_device(false);
  EXPECT_NE(strict.find("cumsum"), std::string::npos) << strict;
}

TEST(CudaBackend, ASteadyLoopStopsCallingCudaMalloc) {
  NEEDS_A_GPU();
  const Device cuda = parse_device("cuda");
  Tensor host = randn({256, 256});
  for (int i = 0; i < 3; ++i) host.to(cuda);
  const int64_t before = allocator_stats(cuda).system_allocations;
  for (int i = 0; i < 20; ++i) host.to(cuda);
  EXPECT_EQ(allocator_stats(cuda).system_allocations, before);
  EXPECT_GT(allocator_stats(cuda).reuses, 0);
}

TEST(CudaBackend, RunningOutOfMemorySaysWhatWasAskedAndWhatIsHeld) {
  NEEDS_A_GPU();
  const Device cuda = parse_device("cuda");
  Tensor held = zeros({1 << 20}).to(cuda);
  const std::string m = message_of([&] { get_allocator(cuda)->allocate(size_t{1} << 50); });
  EXPECT_NE(m.find("out of memory on cuda:0: a request of"), std::string::npos) << m;
  EXPECT_NE(m.find("tensors hold"), std::string::npos) << m;
  EXPECT_NE(m.find("smaller batch size"), std::string::npos) << m;
  EXPECT_EQ(sum(held).item<float>(), 0.0f) << "what was held is unharmed";
}

TEST(CudaBackend, CopiesInStreamOrderThroughPinnedMemory) {
  NEEDS_A_GPU();
  const Device cuda = parse_device("cuda");
  Backend& b = backend(DeviceType::CUDA);
  const size_t n = 1 << 20, bytes = n * sizeof(float);
  auto* pinned_in = static_cast<float*>(b.pinned_allocator().allocate(bytes));
  auto* pinned_out = static_cast<float*>(b.pinned_allocator().allocate(bytes));
  for (size_t i = 0; i < n; ++i) pinned_in[i] = static_cast<float>(i % 1000);
  void* device = get_allocator(cuda)->allocate(bytes);
  const Stream stream = b.current_stream(0);
  const Event start = b.record(stream);
  b.copy_from_host_async(device, pinned_in, bytes, stream);
  b.copy_to_host_async(pinned_out, device, bytes, stream);
  const Event end = b.record(stream);
  b.synchronize(end);
  for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(pinned_out[i], pinned_in[i]) << i;
  EXPECT_GT(b.elapsed_seconds(start, end), 0.0);
  get_allocator(cuda)->deallocate(device, bytes);
  b.pinned_allocator().deallocate(pinned_in, bytes);
  b.pinned_allocator().deallocate(pinned_out, bytes);
}

}  // namespace
}  // namespace kiln
