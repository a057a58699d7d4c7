// Data the host may not touch: the reference backend keeps its tensors out
// of the host's reach (handles, not addresses), as a GPU does. Host code
// that reads them through the checked path copies them first (counted and
// profiled) or is refused with the fix; code that skips the path faults, so
// every test that runs on the reference backend catches a host read of
// device memory.
#include <gtest/gtest.h>

#include <functional>

#include "core/device_memory.h"
#include "kiln/backend.h"
#include "kiln/functional.h"
#include "kiln/profiler.h"
#include "support/close.h"
#include "support/error_message.h"

namespace kiln::testing {
namespace {

const Device kRef{DeviceType::Reference, 0};

TEST(HostAccess, ReferenceMemoryIsNotHostMemory) {
  EXPECT_FALSE(backend(DeviceType::Reference).host_memory());
  EXPECT_FALSE(detail::host_readable(kRef));
  EXPECT_TRUE(detail::host_readable(cpu_device()));
}

TEST(HostAccess, RawReadsOfDeviceMemoryAreRefusedWithTheFix) {
  Tensor x = arange(6, DType::Float32).to(kRef);
  std::string m = message_of([&] { x.raw_data(); });
  EXPECT_NE(m.find("on reference:0 from the host"), std::string::npos) << m;
  EXPECT_NE(m.find(".to(kiln::cpu_device())"), std::string::npos) << m;
  m = message_of([&] { x.data<float>(); });
  EXPECT_NE(m.find("float32[6] tensor on reference:0"), std::string::npos) << m;
  // A view of it is still device memory.
  m = message_of([&] { x.reshape({2, 3}).transpose(0, 1).raw_data(); });
  EXPECT_NE(m.find("reference:0"), std::string::npos) << m;
}

TEST(HostAccess, ReadingValuesCopiesThemCountedAndProfiled) {
  Tensor x = arange(6, DType::Float32).reshape({2, 3}).to(kRef);
  // Each read copies the tensor to the host once.
  auto copies_of = [](const std::function<void()>& read) {
    const int64_t before = detail::host_read_copies();
    read();
    return detail::host_read_copies() - before;
  };
  profiler::start();
  EXPECT_EQ(copies_of([&] { EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5})); }), 1);
  EXPECT_EQ(copies_of([&] { EXPECT_EQ(x.transpose(0, 1).to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5})); }), 1);
  EXPECT_EQ(copies_of([&] { EXPECT_EQ(sum(x).item<float>(), 15.0f); }), 1);
  EXPECT_EQ(copies_of([&] { EXPECT_NE(x.str().find("[3.0000, 4.0000, 5.0000]"), std::string::npos) << x.str(); }), 1);
  profiler::stop();
  int transfers = 0;
  for (const auto& r : profiler::records()) transfers += r.name == "to_device";
  EXPECT_EQ(transfers, 4);
}

TEST(HostAccess, AHostReadThatSkipsTheCheckFaults) {
  Tensor x = full({16}, 1.0, DType::Float32).to(kRef);
  const void* handle = x.impl().storage->data;
  EXPECT_DEATH(
      {
        volatile float v = *static_cast<const volatile float*>(handle);
        (void)v;
      },
      "");
}

TEST(HostAccess, KernelsAndCopiesReachItThroughTheirBackend) {
  Tensor a = randn({3, 4}), b = randn({4, 2});
  Tensor y = matmul(a.to(kRef), b.to(kRef));  // the reference kernel decodes its handles
  EXPECT_EQ(y.device(), kRef);
  EXPECT_TRUE(all_close(y.to(cpu_device()), matmul(a, b), 1e-5, 1e-6));
  Tensor x = randn({2, 3});
  Tensor moved = x.to(kRef).to(kRef).to(cpu_device());
  EXPECT_EQ(moved.to_vector<float>(), x.to_vector<float>());
}

}  // namespace
}  // namespace kiln::testing
