// Loading a checkpoint into a cell, with a report of everything that did not
// line up: nothing is skipped or cast without being listed.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>

#include "kiln/autograd.h"
#include "kiln/caller_language.h"
#include "kiln/io.h"
#include "kiln/migrate.h"

namespace kiln::io {
namespace {

std::string describe(const std::string& name, DType dtype, const Shape& shape) {
  std::string out = name;
  out += " ";
  out += dtype_name(dtype);
  out += shape_str(shape);
  return out;
}

void section(std::string& out, const char* title, const std::vector<std::string>& items) {
  if (items.empty()) return;
  out += "\n  ";
  out += title;
  out += " (" + std::to_string(items.size()) + "):";
  for (const auto& i : items) out += "\n    " + i;
}


// One tensor of a file: what it is, and how to copy it into a cell's tensor.
struct FileEntry {
  std::string name;
  DType dtype;
  Shape shape;
  std::function<void(Tensor& dst)> copy_into;
};

LoadReport load_entries(nn::Cell& cell, const std::string& path, std::vector<FileEntry> entries,
                        const LoadOptions& options) {
  io::NamedTensors wanted = cell.parameters_and_names();
  for (auto& b : cell.buffers_and_names()) wanted.push_back(b);
  std::map<std::string, const FileEntry*> in_file;
  for (const auto& e : entries)
    if (e.name.rfind("optimizer/", 0) != 0) in_file[e.name] = &e;

  LoadReport report;
  std::vector<std::pair<Tensor, const FileEntry*>> plan;
  for (auto& [name, t] : wanted) {
    auto it = in_file.find(name);
    if (it == in_file.end()) {
      report.missing.push_back(describe(name, t.dtype(), t.shape()));
      continue;
    }
    const auto* e = it->second;
    in_file.erase(it);
    if (e->shape != t.shape()) {
      report.shape_mismatches.push_back(name + ": " + shape_str(t.shape()) + " in the cell, " + shape_str(e->shape) +
                                        " in the file");
      continue;
    }
    if (e->dtype != t.dtype())
      report.converted.push_back(name + ": " + dtype_name(e->dtype) + " in the file, " + dtype_name(t.dtype()) +
                                 " in the cell");
    plan.emplace_back(t, e);
  }
  for (auto& [name, e] : in_file) report.unexpected.push_back(describe(name, e->dtype, e->shape));

  if (options.strict && !report.clean())
    KILN_FAIL("cannot load '", path, "' into ", cell.type_name(), " (strict): nothing was loaded; ", report.str(),
              "\nfix the names (kiln ckpt diff shows both lists), or load only what matches: ",
              in_caller_language("LoadOptions{.strict = false}, or --no-strict on kiln eval",
                                 "load_checkpoint(file, net, strict=False)"));
  NoGradGuard guard;
  for (auto& [t, e] : plan) {
    Tensor dst = t;
    e->copy_into(dst);
    report.loaded.push_back(e->name);
  }
  if (!options.strict && options.print_report && !report.clean())
    std::fprintf(stderr, "kiln: loaded '%s' into %s non-strictly: %s\n", path.c_str(), cell.type_name().c_str(),
                 report.str().c_str());
  return report;
}

}  // namespace


std::string LoadReport::str() const {
  std::string out = std::to_string(loaded.size()) + " tensor(s) loaded";
  section(out, "missing from the file", missing);
  section(out, "in the file but not in the cell", unexpected);
  section(out, "shape mismatches (not loaded)", shape_mismatches);
  section(out, "dtype conversions", converted);
  return out;
}

LoadReport load_checkpoint(nn::Cell& cell, const std::string& path, const LoadOptions& options) {
  if (!is_mindspore_checkpoint(path)) return load_checkpoint(cell, MappedSafetensors(path), options);
  // MindSpore's names are taken the Kiln way (bn.gamma is bn.weight), its
  // 1-D convolution weights reshaped, and its optimizer state passed over.
  MindsporeCheckpoint ckpt = load_mindspore_checkpoint(path);
  const std::vector<TensorInfo> targets = infos_of(cell);
  std::map<std::string, Shape> target_shape;
  for (const auto& t : targets) target_shape[t.name] = t.shape;
  std::vector<FileEntry> entries;
  for (auto& [name, t] : ckpt.tensors) {
    if (is_mindspore_optimizer_state(name)) continue;
    std::string kiln_name = target_shape.count(name) ? name : kiln_name_for_mindspore(name, targets);
    Tensor value = t;
    auto it = target_shape.find(kiln_name);
    if (it != target_shape.end() && mindspore_layout_differs(value.shape(), it->second)) value = value.reshape(it->second);
    entries.push_back({kiln_name, value.dtype(), value.shape(),
                       [value](Tensor& dst) { dst.copy_(value.to(dst.dtype()).to(dst.device())); }});
  }
  return load_entries(cell, path, std::move(entries), options);
}

LoadReport load_checkpoint(nn::Cell& cell, const MappedSafetensors& file, const LoadOptions& options) {
  std::vector<FileEntry> entries;
  for (const auto& e : file.entries())
    entries.push_back({e.name, e.dtype, e.shape, [&file, &e](Tensor& dst) {
                         if (e.dtype == dst.dtype() && dst.is_contiguous() && dst.device() == cpu_device()) {
                           file.copy_out(e, dst.raw_data());  // parameters are contiguous: one copy from the mapping
                         } else {
                           // (a parameter on a device: through a host tensor)
                           dst.copy_(file.tensor(e).to(dst.dtype()).to(dst.device()));
                         }
                       }});
  return load_entries(cell, file.path(), std::move(entries), options);
}

void load_cell(nn::Cell& cell, const std::string& path) { load_checkpoint(cell, path, {.strict = true}); }

}  // namespace kiln::io
