#include "serve/model_config.h"

#include "io/yaml_section.h"

namespace kiln::serve {
namespace {

using detail::YamlSection;

std::vector<TensorSpec> tensor_specs(const YAML::Node& list, const char* key, const std::string& source) {
  KILN_CHECK(list.IsSequence(), source, ": ", key, " must be a list of {name, datatype, shape}");
  std::vector<TensorSpec> specs;
  for (size_t i = 0; i < list.size(); ++i) {
    std::string where = key;
    where += "[";
    where += std::to_string(i);
    where += "]";
    YamlSection t(list[i], where, {"name", "datatype", "shape"}, source);
    TensorSpec spec;
    t.read("name", spec.name);
    t.read("datatype", spec.datatype);
    t.read("shape", spec.shape);
    KILN_CHECK(!spec.name.empty(), source, ": ", where, ".name is required");
    if (!spec.datatype.empty()) dtype_of_oip(spec.datatype);
    specs.push_back(spec);
  }
  return specs;
}

}  // namespace

const char* oip_datatype(DType d) {
  switch (d) {
    case DType::Float32: return "FP32";
    case DType::Float64: return "FP64";
    case DType::Float16: return "FP16";
    case DType::BFloat16: return "BF16";
    case DType::Int32: return "INT32";
    case DType::Int64: return "INT64";
    case DType::UInt8: return "UINT8";
    case DType::Bool: return "BOOL";
    case DType::Int8: return "INT8";
  }
  return "?";
}

DType dtype_of_oip(const std::string& datatype) {
  for (DType d : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64,
                  DType::UInt8, DType::Bool, DType::Int8})
    if (datatype == oip_datatype(d)) return d;
  KILN_FAIL("datatype '", datatype, "' is not supported; use one of FP32, FP64, FP16, BF16, INT32, INT64, UINT8, INT8, BOOL");
}

ModelConfig parse_model_config(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    KILN_FAIL(source, ": not valid YAML: ", e.what());
  }
  ModelConfig c;
  if (!root || root.IsNull()) return c;
  YamlSection s(root, "the model config",
                {"name", "max_batch_size", "inputs", "outputs", "dynamic_batching", "instance_count", "warmup",
                 "allow_non_finite", "batch_invariant", "device", "memory_budget_mb"},
                source);
  s.read("allow_non_finite", c.allow_non_finite);
  s.read("batch_invariant", c.batch_invariant);
  s.read("name", c.name);
  s.read("device", c.device);
  s.read("memory_budget_mb", c.memory_budget_mb);
  KILN_CHECK(c.memory_budget_mb >= 0, source, ": memory_budget_mb must be >= 0 (0: no budget), got ",
             c.memory_budget_mb);
  s.read("max_batch_size", c.max_batch_size);
  KILN_CHECK(c.max_batch_size >= 0, source, ": max_batch_size must be >= 0, got ", c.max_batch_size);
  if (s["inputs"]) c.inputs = tensor_specs(s["inputs"], "inputs", source);
  if (s["outputs"]) c.outputs = tensor_specs(s["outputs"], "outputs", source);
  if (s["dynamic_batching"]) {
    KILN_CHECK(c.max_batch_size > 0, source, ": dynamic_batching needs max_batch_size > 0");
    c.dynamic_batching = true;
    if (!s["dynamic_batching"].IsMap()) {
      bool on = true;
      s.read("dynamic_batching", on);
      c.dynamic_batching = on;
    } else {
      YamlSection d(s["dynamic_batching"], "dynamic_batching",
                    {"max_queue_delay_microseconds", "preferred_batch_size", "max_queue_size"}, source);
      d.read("max_queue_delay_microseconds", c.max_queue_delay_us);
      d.read("preferred_batch_size", c.preferred_batch_sizes);
      d.read("max_queue_size", c.max_queue_size);
      KILN_CHECK(c.max_queue_delay_us >= 0 && c.max_queue_size > 0, source,
                 ": dynamic_batching needs max_queue_delay_microseconds >= 0 and max_queue_size > 0");
      for (int64_t b : c.preferred_batch_sizes)
        KILN_CHECK(b > 0 && b <= c.max_batch_size, source, ": preferred_batch_size ", b,
                   " must be in 1..max_batch_size (", c.max_batch_size, ")");
    }
  }
  s.read("instance_count", c.instance_count);
  KILN_CHECK(c.instance_count >= 1 && c.instance_count <= 64, source, ": instance_count must be 1 to 64");
  if (s["warmup"]) {
    if (s["warmup"].IsScalar()) {
      bool on = true;
      s.read("warmup", on);
      if (!on) c.warmup_batch_sizes.clear();
    } else {
      s.read("warmup", c.warmup_batch_sizes);
    }
  }
  for (int64_t b : c.warmup_batch_sizes)
    KILN_CHECK(b > 0 && (c.max_batch_size == 0 || b <= c.max_batch_size), source, ": warmup batch size ", b,
               " must be in 1..max_batch_size");
  return c;
}

}  // namespace kiln::serve
