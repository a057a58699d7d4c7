// `kiln ops`: the operator coverage table, generated from the registry.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iomanip>
#include <iostream>

#include "kiln/backend.h"
#include "kiln/kiln.h"
#include "kiln/op_library.h"
#include "kiln/runtime.h"

namespace kiln::cli {
namespace {

std::string dtype_list(const OpDef& op, DeviceType backend) {
  std::string s;
  for (DType t : op.dtypes(backend)) s += std::string(s.empty() ? "" : " ") + dtype_name(t);
  return s.empty() ? "-" : s;
}

std::string backends(const OpDef& op) {
  std::string s;
  for (int b = 0; b < kNumDeviceTypes; ++b) {
    const auto type = static_cast<DeviceType>(b);
    if (op.dtypes(type).empty() || (b > 0 && !find_backend(type))) continue;  // (a package's kernels wait for theirs)
    s += std::string(s.empty() ? "" : " ") + device_type_name(static_cast<DeviceType>(b));
  }
  return s.empty() ? "-" : s;
}

// The backends in this build where the op has no kernel and runs on the CPU
// instead (views excepted: on a backend in host memory they share the CPU's;
// half precision widening to a float32 kernel there stays there).
std::string falls_back_on(const OpDef& op) {
  std::string s;
  // (An op that decomposes runs as its ops where its kernel is missing.)
  if (op.has_tag(kTagView) || op.dtypes(DeviceType::CPU).empty() || op.decompose) return "-";
  for (int b = 1; b < kNumDeviceTypes; ++b) {
    auto type = static_cast<DeviceType>(b);
    if (!find_backend(type)) continue;
    std::string missing;  // CPU dtypes without a kernel on this backend, and calls its kernels do not accept
    std::string calls;
    for (DType d : op.dtypes(DeviceType::CPU)) {
      const Kernel& k = op.kernels[b][static_cast<int>(d)];
      // A half-precision call widens to the backend's float32 kernel where it has one.
      const bool widens =
          (d == DType::Float16 || d == DType::BFloat16) && op.kernels[b][static_cast<int>(DType::Float32)].fn;
      if (!k.fn && !widens)
        missing += std::string(missing.empty() ? "" : " ") + dtype_name(d);
      else if (k.accepts && *k.refuses && calls.find(k.refuses) == std::string::npos)
        calls += std::string(calls.empty() ? "" : ", ") + k.refuses;
      for (size_t i = 0; k.fn && i < k.input_dtypes.size(); ++i) {  // dtypes declared per input
        if (k.input_dtypes[i].empty() || i >= op.inputs.size()) continue;
        std::string list;
        for (DType t : k.input_dtypes[i]) list += (list.empty() ? "" : " or ") + std::string(dtype_name(t));
        const std::string call = op.input_name(i) + " other than " + list;
        if (calls.find(call) == std::string::npos) calls += (calls.empty() ? "" : ", ") + call;
      }
    }
    if (!calls.empty()) missing += (missing.empty() ? "" : ", ") + calls;
    if (missing.empty()) continue;
    s += std::string(s.empty() ? "" : "; ") + device_type_name(type);
    if (!op.dtypes(type).empty()) s += " (" + missing + ")";
  }
  return s.empty() ? "-" : s;
}

// The ONNX op types an op's export writer may emit; "-" when export refuses it.
std::string onnx_types(const OpDef& op) {
  if (!op.onnx) return "-";
  std::string s;
  for (const auto& t : op.onnx.types) s += (s.empty() ? "" : " ") + t;
  return s;
}

// The ONNX op types an op's own reader takes; "-" when it has none (the
// runtime may still load the type as a composition of other ops).
std::string onnx_import_types(const OpDef& op) {
  if (!op.onnx_import) return "-";
  std::string s;
  for (const auto& t : op.onnx_import.types) s += (s.empty() ? "" : " ") + t;
  return s;
}

// The ONNX op types (default domain) InferenceSession converts to Kiln ops.
void print_onnx_imports(std::ostream& os, bool markdown) {
  auto ops = supported_onnx_ops();
  if (markdown) os << "\n## ONNX import\n\nThe inference runtime loads these " << ops.size()
                   << " ONNX op types (default domain, opsets 6 to 28); `kiln ops --onnx` lists them too.\n\n";
  std::string line;
  for (const auto& op : ops) {
    std::string item = markdown ? "`" + op + "`" : op;
    if (!line.empty() && line.size() + item.size() + 2 > 100) {
      os << line << ",\n";
      line.clear();
    }
    line += (line.empty() ? "" : ", ") + item;
  }
  os << line << "\n";
  if (!markdown) os << ops.size() << " ONNX op types\n";
}

// The MindSpore primitives a MindIR model may apply, with the op reading each.
void print_mindspore_imports(std::ostream& os, bool markdown) {
  const auto primitives = supported_mindspore_primitives();
  if (markdown)
    os << "\n## MindSpore primitives (MindIR import)\n\nA MindIR model may apply these " << primitives.size()
       << " primitives; each is read by the op named beside it (bookkeeping ones only route values). "
       << "`kiln ops --mindspore` lists them too.\n\n| primitive | read by |\n|---|---|\n";
  for (const auto& [primitive, op] : primitives) {
    const std::string by = op.empty() ? "(bookkeeping)" : op;
    if (markdown) os << "| `" << primitive << "` | " << (op.empty() ? by : "`" + by + "`") << " |\n";
    else os << std::left << std::setw(16) << primitive << by << "\n";
  }
  if (!markdown) os << primitives.size() << " MindSpore primitives\n";
}

// The ops that run as a program of other ops where a backend lacks their
// kernel (OpDef::decompose), as a list for the table's header.
std::string decomposing_ops() {
  std::string s;
  for (const OpDef* op : OpRegistry::instance().all())
    if (op->decompose) s += (s.empty() ? "`" : ", `") + op->name + "`";
  return s;
}

void print_markdown(std::ostream& os) {
  auto ops = OpRegistry::instance().all();
  os << "# Operator coverage\n\n"
     << "Generated by `kiln ops --markdown` from the op registry; CI fails when this file is stale.\n\n"
     << ops.size() << " ops. Backends: `cpu`; `reference` (plain loops for a few ops, which prove the backend "
     << "seam); and `cuda` where the CUDA backend's library is built (`libkiln_cuda.so` beside libkiln.so, "
     << "`-DKILN_CUDA=on`; this file comes from such a build). An op with no kernel on its tensors' backend, or "
        "a call its kernel "
     << "does not take (in parentheses), runs on the CPU, with a warning and a `fallback` mark in profiles (an error "
        "under `KILN_STRICT_DEVICE=1`); an op that decomposes ("
     << decomposing_ops()
     << ") runs there as its ops "
        "instead. "
     << "A float16 or bfloat16 call of an op whose kernels on its backend stop at float32 runs that backend's float32 "
     << "kernel on widened copies and rounds the results. ONNX: the op types "
     << "`kiln export` writes for the op (opsets 13 to 17); `-` where export refuses it. Reads: the ONNX op types the "
     << "op's own reader imports (the runtime loads the others listed below as compositions of ops). Autocast: "
     << "what the op computes in inside an autocast scope: `lower` takes float32 inputs in its float16 or bfloat16, "
     << "`float32` takes half-precision inputs in float32, `keep` computes in its inputs' dtypes.\n\n"
     << "| op | inputs | backends | falls back to cpu on | cpu dtypes | grad | autocast | ONNX | reads | tags |\n"
     << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const OpDef* op : ops) {
    const std::string package = op_library_of(op->name);
    std::string inputs;
    for (auto& i : op->inputs) inputs += std::string(inputs.empty() ? "" : ", ") + i;
    os << "| `" << op->name << "`" << (package.empty() ? std::string() : detail::concat(" (package ", package, ")"))
       << " | " << inputs << " | " << backends(*op) << " | " << falls_back_on(*op) << " | "
       << dtype_list(*op, DeviceType::CPU) << " | " << (op->differentiable() ? "yes" : "no") << " | "
       << autocast_name(op->autocast_rule()) << " | " << onnx_types(*op) << " | " << onnx_import_types(*op) << " | "
       << tags_str(op->tags) << " |\n";
  }
  print_onnx_imports(os, true);
  print_mindspore_imports(os, true);
}

void print_table(std::ostream& os) {
  auto ops = OpRegistry::instance().all();
  // Columns as wide as their widest cell, so long ONNX forms stay readable.
  std::vector<std::vector<std::string>> rows = {
      {"op", "package", "backends", "cpu fallback on", "grad", "onnx", "cpu dtypes"}};
  for (const OpDef* op : ops) {
    const std::string package = op_library_of(op->name);
    rows.push_back({op->name, package.empty() ? "kiln" : package, backends(*op), falls_back_on(*op),
                    op->differentiable() ? "yes" : "no", onnx_types(*op), dtype_list(*op, DeviceType::CPU)});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  for (const auto& r : rows) {
    for (size_t c = 0; c + 1 < r.size(); ++c) os << std::left << std::setw(static_cast<int>(width[c] + 2)) << r[c];
    os << r.back() << "\n";
  }
  os << ops.size() << " ops\n";
}

}  // namespace

void add_ops_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("ops", "List the registered operators (backends, dtypes, gradient, ONNX)");
  static bool markdown = false, onnx = false, mindspore = false;
  cmd->add_flag("--markdown", markdown, "Write the table as Markdown (the content of docs/ops.md)");
  cmd->add_flag("--onnx", onnx, "List the ONNX op types the inference runtime loads");
  cmd->add_flag("--mindspore", mindspore, "List the MindSpore primitives a MindIR model may apply");
  cmd->callback([] {
    // The backend libraries installed beside libkiln load first, so that their kernels show.
    for (DeviceType t : device_types()) find_backend(t);
    if (onnx)
      print_onnx_imports(std::cout, false);
    else if (mindspore)
      print_mindspore_imports(std::cout, false);
    else if (markdown)
      print_markdown(std::cout);
    else
      print_table(std::cout);
  });
}

}  // namespace kiln::cli
