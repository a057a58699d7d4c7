#include "kiln/registry.h"

#include <algorithm>
#include <mutex>

#include "ops/dispatch_internal.h"
#include "ops/elementwise_math.h"

namespace kiln {
namespace {

struct PendingKernel {
  std::string op;
  DeviceType backend;
  DType dtype;
  Kernel kernel;
};

// Kernels may register before their op is defined (static initialisation
// order across files is unspecified); they wait here until it is.
std::vector<PendingKernel>& pending_kernels() {
  static std::vector<PendingKernel> v;
  return v;
}

}  // namespace

std::string tags_str(uint32_t tags) {
  static const std::pair<OpTag, const char*> kNames[] = {
      {kTagElementwise, "elementwise"}, {kTagReduction, "reduction"}, {kTagView, "view"},
      {kTagNondifferentiable, "nondifferentiable"}, {kTagFusible, "fusible"}, {kTagRandom, "random"},
      {kTagBackward, "backward"}, {kTagLoss, "loss"}, {kTagTransfer, "transfer"},
      {kTagCollective, "collective"}};
  std::string s;
  for (auto& [t, n] : kNames) {
    if (tags & t) {
      if (!s.empty()) s += ",";
      s += n;
    }
  }
  return s;
}

const char* autocast_name(Autocast rule) {
  switch (rule) {
    case Autocast::FromTags: return "from tags";
    case Autocast::Keep: return "keep";
    case Autocast::Lower: return "lower";
    case Autocast::Float32: return "float32";
  }
  return "?";
}

std::vector<DType> OpDef::dtypes(DeviceType backend) const {
  std::vector<DType> out;
  for (int d = 0; d < kNumDTypes; ++d)
    if (kernels[static_cast<int>(backend)][d]) out.push_back(static_cast<DType>(d));
  return out;
}

OpRegistry& OpRegistry::instance() {
  static auto* r = new OpRegistry();
  return *r;
}

namespace {

// "axis:int=-1" -> {axis, int}; "min:float?" -> {min, float}; "stride" -> {stride, any}.
OpDef::AttrSpec parse_attr_spec(const std::string& op, const std::string& text) {
  size_t colon = text.find(':');
  OpDef::AttrSpec spec{text.substr(0, colon), ""};
  if (colon != std::string::npos) {
    size_t end = text.find_first_of("=? ", colon + 1);
    spec.kind = text.substr(colon + 1, end == std::string::npos ? std::string::npos : end - colon - 1);
  }
  static const char* kKinds[] = {"", "int", "ints", "float", "floats", "bool", "string", "strings", "dtype"};
  KILN_ASSERT(std::find(std::begin(kKinds), std::end(kKinds), spec.kind) != std::end(kKinds), "op '", op,
              "' declares attribute '", text, "' of unknown kind '", spec.kind, "'");
  return spec;
}

}  // namespace

OpDef& OpRegistry::define(OpDef def) {
  KILN_ASSERT(!ops_.count(def.name), "op '", def.name, "' is defined twice");
  KILN_ASSERT(static_cast<bool>(def.infer), "op '", def.name, "' has no infer function");
  def.attr_specs.clear();
  for (const auto& text : def.attrs) def.attr_specs.push_back(parse_attr_spec(def.name, text));
  auto owned = std::make_unique<OpDef>(std::move(def));
  OpDef& ref = *owned;
  ops_[ref.name] = std::move(owned);
  auto& pending = pending_kernels();
  for (auto it = pending.begin(); it != pending.end();) {
    if (it->op == ref.name) {
      ref.kernels[static_cast<int>(it->backend)][static_cast<int>(it->dtype)] = it->kernel;
      it = pending.erase(it);
    } else {
      ++it;
    }
  }
  for (int b = 0; b < kNumDeviceTypes; ++b) give_math_kernel(ref, static_cast<DeviceType>(b));
  return ref;
}

// Fills only empty slots: a kernel of the op's own always wins, since
// register_kernel overwrites whatever is there.
void OpRegistry::give_math_kernel(OpDef& op, DeviceType backend) {
  if (!op.math || !runners_[static_cast<int>(backend)]) return;
  KILN_ASSERT(op.math.kernel, "op '", op.name, "' has math without a kernel (build it with detail::elementwise_math)");
  for (DType d : runner_dtypes_[static_cast<int>(backend)]) {
    Kernel& slot = op.kernels[static_cast<int>(backend)][static_cast<int>(d)];
    if (!slot.fn) slot = Kernel(op.math.kernel);
  }
}

void OpRegistry::register_block_runner(DeviceType backend, BlockRunner runner, const std::vector<DType>& dtypes) {
  runners_[static_cast<int>(backend)] = runner;
  runner_dtypes_[static_cast<int>(backend)] = dtypes;
  for (auto& [_, op] : ops_) give_math_kernel(*op, backend);
}

BlockRunner OpRegistry::block_runner(DeviceType backend) const { return runners_[static_cast<int>(backend)]; }

const OpDef* OpRegistry::find(const std::string& name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second.get();
}

const OpDef& OpRegistry::get(const std::string& name) const {
  if (const OpDef* op = find(name)) return *op;
  std::string best;
  size_t best_d = 4;
  for (auto& [n, _] : ops_) {
    size_t d = detail::edit_distance(name, n);
    if (d < best_d) {
      best_d = d;
      best = n;
    }
  }
  KILN_FAIL("unknown op '", name, "'", best.empty() ? "" : "; did you mean '" + best + "'?",
            " (`kiln ops` lists every registered op)");
}


void OpRegistry::register_kernel(const std::string& op, DeviceType backend, DType dtype, Kernel kernel) {
  auto it = ops_.find(op);
  if (it == ops_.end()) {
    pending_kernels().push_back({op, backend, dtype, kernel});
    return;
  }
  it->second->kernels[static_cast<int>(backend)][static_cast<int>(dtype)] = kernel;
}

std::vector<const OpDef*> OpRegistry::all() const {
  std::vector<const OpDef*> out;
  for (auto& [_, op] : ops_) out.push_back(op.get());
  KILN_ASSERT(pending_kernels().empty(), "kernel registered for undefined op '",
              pending_kernels().empty() ? "" : pending_kernels().front().op, "'");
  return out;
}

KernelRegistrar::KernelRegistrar(const char* op, DeviceType backend, std::initializer_list<DType> dtypes,
                                 Kernel kernel) {
  for (DType d : dtypes) OpRegistry::instance().register_kernel(op, backend, d, kernel);
}

}  // namespace kiln

namespace kiln::detail {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

void run_math(const ElementwiseMath& math, const std::vector<Tensor>& in, std::vector<Tensor>& out,
              const Attrs& attrs) {
  DeviceType backend = out.at(0).device().type;
  BlockRunner runner = OpRegistry::instance().block_runner(backend);
  KILN_CHECK(runner, "the ", device_type_name(backend), " backend has no runner for elementwise math");
  runner(math, in, out, attrs);
}

}  // namespace kiln::detail
