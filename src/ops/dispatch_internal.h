#pragma once
// What the graph executor shares with the eager dispatcher.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/backend.h"
#include "kiln/registry.h"

namespace kiln {

const char* op_category(const OpDef& op);
// After an op that writes inputs in place (OpDef::writes): bumps their storage
// versions, which saved-tensor checks and folded inference graphs watch.
void bump_written_versions(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs);
// Events around a kernel on a device that queues its work (one whose memory
// the host cannot read), for the profile's device time; nothing elsewhere or
// when not profiling.
class DeviceTimer {
 public:
  DeviceTimer(Device device, bool profiling);
  // The device's time from the start to now, read when the profile is (null
  // when not timed).
  std::function<int64_t()> stop() const;

 private:
  Backend* backend_ = nullptr;
  Event start_;
};

// Adds one op's record to the running profile (op is null for fused kernels).
void record_profile(const OpDef* op, const std::string& name, Device device, const std::vector<Tensor>& inputs,
                    const std::vector<Tensor>& outputs, int64_t start_ns, bool fallback = false,
                    std::function<int64_t()> device_ns = nullptr);

// An op about to run a CPU kernel for want of one on `device` (`why`: the
// backend's reason when it has a kernel that does not take this call):
// refused under strict_device, otherwise warned about once per op, backend
// and reason. count_fallback() counts each such call (fallback_count()).
void allow_fallback(const OpDef& op, Device device, DType dtype, const std::string& why = {});
// The device backend's kernel for this call, or null where it has none or
// its backend does not take the call (the reason in *why). `inputs`: each
// input's dtype, in order, nullopt for an omitted optional one.
KernelFn device_kernel(const OpDef& op, Device device, const std::vector<std::optional<DType>>& inputs, DType dtype,
                       const Attrs& attrs, std::string* why);
void count_fallback();
// Runs the CPU kernel `cpu` for a call on `device`, whose memory the host
// cannot read: on host copies of the inputs, with the outputs (and the
// inputs the op writes) copied back; counts the fallback. `widen`: `cpu` is
// the float32 kernel of a half-precision call (run_widened on the copies).
void run_on_cpu(const OpDef& op, KernelFn cpu, const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
                const Attrs& attrs, Device device, bool widen = false);

// Calls a device's kernel takes once inputs are widened: int32 indices
// where the kernel declares that input int64 only (Indices), and, for
// float16/bfloat16 calls of an op whose kernel stops at float32, the
// half-precision inputs to float32 as well (Float32). widening_kernel gives
// that kernel and how (null where neither applies; `inputs`: each input's
// dtype, as device_kernel takes them, unread on the CPU, where it is always
// Float32); run_widened runs it on the widened copies, made on the inputs'
// device, and rounds the outputs, and the inputs the op writes, back
// (kernel_widening.cpp).
enum class Widening { None, Indices, Float32 };
KernelFn widening_kernel(const OpDef& op, Device device, const std::vector<std::optional<DType>>& inputs, DType dtype,
                         const Attrs& attrs, Widening* how = nullptr);
void run_widened(const OpDef& op, KernelFn kernel, Widening how, const std::vector<Tensor>& inputs,
                 std::vector<Tensor>& outputs, const Attrs& attrs);

namespace detail {
// Levenshtein distance, for "did you mean" in errors about names.
size_t edit_distance(const std::string& a, const std::string& b);
}  // namespace detail

}  // namespace kiln
