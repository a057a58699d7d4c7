// Kernels run with a context: their device, the stream their work goes to,
// an allocator for scratch memory there, and whether the profiler times
// them; backends give streams, events, stream-ordered copies, pinned host
// memory and allocator statistics per device (trivially on the host ones).
#include <gtest/gtest.h>

#include <vector>

#include "kiln/allocator.h"
#include "kiln/backend.h"
#include "kiln/jit.h"
#include "kiln/profiler.h"
#include "kiln/registry.h"
#include "support/error_message.h"

namespace kiln {
namespace {

const Device kRef{DeviceType::Reference, 0};

// What the probe op's kernels saw, in call order.
std::vector<KernelContext> seen;

void probe_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  KernelContext c = kernel_context();
  seen.push_back(c);
  void* scratch = c.workspace->allocate_on(c.stream, 256);  // scratch memory on the kernel's device
  c.workspace->deallocate_on(c.stream, scratch, 256);
}

// A test-only op whose kernels record their context (its output is left as allocated).
const OpDefiner probe([] {
  OpDef d;
  d.name = "test_kernel_context_probe";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs&) { return in; };
  return d;
}());
KILN_REGISTER_KERNEL("test_kernel_context_probe", CPU, probe_kernel, DType::Float32);
KILN_REGISTER_KERNEL("test_kernel_context_probe", Reference, probe_kernel, DType::Float32);

TEST(KernelContext, KernelsKnowTheirDeviceStreamAndWorkspace) {
  seen.clear();
  call("test_kernel_context_probe", {zeros({4})});
  call("test_kernel_context_probe", {zeros({4}, DType::Float32, kRef)});
  profiler::start();
  call("test_kernel_context_probe", {zeros({4}, DType::Float32, kRef)});
  profiler::stop();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].device, cpu_device());
  EXPECT_EQ(seen[0].workspace, &host_allocator());
  EXPECT_EQ(seen[1].device, kRef);
  EXPECT_EQ(seen[1].stream.device, kRef);
  EXPECT_EQ(seen[1].workspace, &backend(DeviceType::Reference).allocator(0));
  EXPECT_FALSE(seen[1].timed);
  EXPECT_TRUE(seen[2].timed);  // the profiler is on: a device backend would record events
  // Compiled graphs give their kernels the same.
  seen.clear();
  const OpDef& op = OpRegistry::instance().get("test_kernel_context_probe");
  auto fn = jit::compile([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{call1(op, {in[0]})}; },
                         {zeros({4}, DType::Float32, kRef)});
  fn({zeros({4}, DType::Float32, kRef)});
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().device, kRef);
  // Outside a kernel there is no context to give.
  std::string m = testing::message_of([] { kernel_context(); });
  EXPECT_NE(m.find("kernel_context() is for kernels"), std::string::npos) << m;
}

TEST(KernelContext, HostBackendsGiveStreamsEventsAndStreamOrderedCopies) {
  Backend& ref = backend(DeviceType::Reference);
  EXPECT_EQ(ref.type_of_backend(), DeviceType::Reference);
  const Stream s = ref.current_stream(0);
  EXPECT_EQ(s.device, kRef);
  const Event a = ref.record(s);
  Tensor x = arange(0.0, 64.0, 1.0, DType::Float32);
  Tensor y = Tensor::empty({64}, DType::Float32, kRef);
  Tensor z = Tensor::empty({64}, DType::Float32, kRef);
  // Host -> device in stream order, device -> device, device -> pinned host memory.
  copy_between_async(kRef, y.impl().storage->data, cpu_device(), x.raw_data(), 64 * sizeof(float), s);
  copy_between(kRef, z.impl().storage->data, kRef, y.impl().storage->data, 64 * sizeof(float));
  Allocator& pinned = ref.pinned_allocator();
  auto* back = static_cast<float*>(pinned.allocate(64 * sizeof(float)));
  copy_between_async(cpu_device(), back, kRef, z.impl().storage->data, 64 * sizeof(float), s);
  const Event b = ref.record(s);
  ref.wait(s, b);
  ref.synchronize(b);
  EXPECT_GE(ref.elapsed_seconds(a, b), 0.0);
  EXPECT_EQ(std::vector<float>(back, back + 64), x.to_vector<float>());
  pinned.deallocate(back, 64 * sizeof(float));
  // Between two devices of one backend: the backend's copy_across.
  Tensor w = z.to(Device{DeviceType::Reference, 1});
  EXPECT_EQ(w.device(), (Device{DeviceType::Reference, 1}));
  EXPECT_EQ(w.to_vector<float>(), x.to_vector<float>());
}

TEST(KernelContext, AllocatorStatisticsArePerDevice) {
  const AllocatorStats before = allocator_stats(kRef);
  Tensor t = zeros({1000}, DType::Float32, kRef);
  const AllocatorStats during = allocator_stats(kRef);
  EXPECT_EQ(during.bytes_in_use - before.bytes_in_use, 4000);
  EXPECT_GE(during.peak_bytes_in_use, during.bytes_in_use);
  t = Tensor();
  EXPECT_EQ(allocator_stats(kRef).bytes_in_use, before.bytes_in_use);
  EXPECT_GT(allocator_stats(cpu_device()).system_allocations + allocator_stats(cpu_device()).reuses, 0);
}

}  // namespace
}  // namespace kiln
