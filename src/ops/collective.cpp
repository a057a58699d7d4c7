// Collective ops: an all-reduce as a value (differentiable), and the
// all-reduce of a buffer in place, started and waited for as two ops, so
// that a compiled training step issues its gradient all-reduces where the
// gradients become ready and waits for them only before the update. The
// start queues the reduction on the group's communication thread (or a
// GPU's communication stream) and returns; the wait blocks until it is done
// (or orders the caller's stream after it). Both write their input, which
// keeps them in the graph, in order, with the buffer alive from one to the
// other.
#include <map>
#include <mutex>

#include "kiln/backend.h"
#include "kiln/dist.h"
#include "ops/collective_kernels.h"
#include "ops/op_helpers.h"

namespace kiln {
namespace {

std::mutex pending_mutex;
std::map<const void*, dist::Work> pending;  // by buffer

dist::ReduceOp reduce_op_of(const std::string& name) {
  if (name == "sum") return dist::ReduceOp::Sum;
  if (name == "mean") return dist::ReduceOp::Mean;
  if (name == "max") return dist::ReduceOp::Max;
  if (name == "min") return dist::ReduceOp::Min;
  KILN_FAIL("all-reduce: op must be sum, mean, max or min, got '", name, "'");
}

// The devices process groups move (Gloo: the CPU; NCCL: CUDA). Elsewhere a
// fallback through the CPU would start a reduction of a copy and hand the
// buffer back before it ends.
void check_group_device(const char* op, const Device& device) {
  KILN_CHECK(device.type == DeviceType::CPU || device.type == DeviceType::CUDA, op,
             " takes a CPU or CUDA buffer (the devices process groups move), got one on ", device.str());
}

OpDef collective(const char* name, std::vector<std::string> attrs) {
  OpDef d;
  d.name = name;
  d.inputs = {"x"};
  d.outputs = {};
  d.attrs = std::move(attrs);
  d.infer = [name](const std::vector<TensorMeta>& in, const Attrs&) -> std::vector<TensorMeta> {
    check_group_device(name, in[0].device);
    return {};
  };
  d.writes = {0};
  d.tags = kTagNondifferentiable | kTagCollective;
  d.category = "communication";
  return d;
}

OpDefiner d_all_reduce([] {
  OpDef d;
  d.name = "all_reduce";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = {"group:int", "op:string=sum"};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs&) -> std::vector<TensorMeta> {
    check_group_device("all_reduce", in[0].device);
    return {in[0]};
  };
  d.grad = [](const GradContext& c, const std::vector<Tensor>& g) -> std::vector<Tensor> {
    KILN_CHECK(c.attrs.get_string("op", "sum") == "sum", "all_reduce has a gradient for op sum only, not '",
               c.attrs.get_string("op", "sum"), "'");
    return {all_reduce(g[0].contiguous(), c.attrs.get_int("group", -1), "sum")};
  };
  d.tags = kTagCollective;
  d.category = "communication";
  return d;
}());

OpDefiner d_start(collective("all_reduce_start", {"group:int", "op:string=sum"}));
OpDefiner d_wait(collective("all_reduce_wait", {}));

KILN_REGISTER_KERNEL("all_reduce_start", CPU, detail::all_reduce_start_kernel, KILN_COLLECTIVE_DTYPES);
KILN_REGISTER_KERNEL("all_reduce_wait", CPU, detail::all_reduce_wait_kernel, KILN_COLLECTIVE_DTYPES);
KILN_REGISTER_KERNEL("all_reduce", CPU, detail::all_reduce_kernel, KILN_COLLECTIVE_DTYPES);

}  // namespace

// (Buffers are known by their address in their device's memory.)
void detail::all_reduce_start_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& a) {
  auto group = dist::group_of_handle(a.get_int("group", -1));
  dist::Work work = group->all_reduce_async(in[0], reduce_op_of(a.get_string("op", "sum")));
  std::lock_guard<std::mutex> lock(pending_mutex);
  KILN_CHECK(pending.emplace(in[0].device_data(), work).second,
             "all_reduce_start: this buffer's previous all-reduce was not waited for; call all_reduce_wait first");
}

void detail::all_reduce_wait_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs&) {
  dist::Work work;
  {
    std::lock_guard<std::mutex> lock(pending_mutex);
    auto it = pending.find(in[0].device_data());
    KILN_CHECK(it != pending.end(), "all_reduce_wait: no all-reduce of this buffer was started");
    work = it->second;
    pending.erase(it);
  }
  work.wait();
}

// The out-of-place, synchronous all-reduce, differentiable for sums: the
// gradient of every rank's input is the sum of the ranks' output gradients
// (synchronized batch norm's statistics go through it).
void detail::all_reduce_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  copy_between(out[0].device(), out[0].device_data(), in[0].device(), in[0].device_data(),
               static_cast<size_t>(in[0].numel()) * in[0].element_size());
  dist::group_of_handle(a.get_int("group", -1))->all_reduce(out[0], reduce_op_of(a.get_string("op", "sum")));
}

void all_reduce_start(const Tensor& buffer, int64_t group, const std::string& op) {
  call("all_reduce_start", {buffer}, Attrs().set("group", group).set("op", op));
}

void all_reduce_wait(const Tensor& buffer) { call("all_reduce_wait", {buffer}); }

Tensor all_reduce(const Tensor& x, int64_t group, const std::string& op) {
  return call1(OpRegistry::instance().get("all_reduce"), {x.contiguous()}, Attrs().set("group", group).set("op", op));
}

}  // namespace kiln
