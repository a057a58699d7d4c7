#include "serve/oip.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "serve/model_config.h"

namespace kiln::serve {
namespace {

using json = nlohmann::json;

template <typename... Args>
[[noreturn]] void bad(const Args&... args) {
  throw BadRequest(detail::concat(args...));
}

// Appends the numbers of a (possibly nested) JSON array.
template <typename T>
void flatten(const json& j, std::vector<T>& out, const std::string& name) {
  if (j.is_array()) {
    for (const auto& e : j) flatten(e, out, name);
    return;
  }
  if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) bad("input '", name, "': BOOL data must be true/false, got ", j.dump());
    out.push_back(j.get<bool>());
  } else {
    if (!j.is_number()) bad("input '", name, "': data must be numbers, got ", j.dump().substr(0, 40));
    if constexpr (std::is_integral_v<T>) {
      if (!j.is_number_integer()) bad("input '", name, "': integer data expected, got ", j.dump());
    }
    out.push_back(j.get<T>());
  }
}

template <typename T>
Tensor from_json(const json& data, const Shape& shape, DType dtype, const std::string& name) {
  std::vector<T> values;
  values.reserve(static_cast<size_t>(numel_of(shape)));
  flatten(data, values, name);
  if (static_cast<int64_t>(values.size()) != numel_of(shape))
    bad("input '", name, "': data holds ", values.size(), " values but shape ", shape_str(shape), " needs ", numel_of(shape));
  Tensor t = from_vector(values, shape);
  return t.dtype() == dtype ? t : t.to(dtype);
}

Tensor json_tensor(const json& data, const Shape& shape, DType dtype, const std::string& name) {
  switch (dtype) {
    case DType::Float32: return from_json<float>(data, shape, dtype, name);
    case DType::Float64:
    case DType::Float16:
    case DType::BFloat16: return from_json<double>(data, shape, dtype, name);
    case DType::Int32: return from_json<int32_t>(data, shape, dtype, name);
    case DType::Int64: return from_json<int64_t>(data, shape, dtype, name);
    case DType::UInt8: return from_json<uint8_t>(data, shape, dtype, name);
    case DType::Bool: return from_json<bool>(data, shape, dtype, name);
  }
  bad("input '", name, "': unsupported datatype");
}

json tensor_json(const Tensor& t) {
  Tensor c = t.contiguous();
  switch (c.dtype()) {
    case DType::Float32: return c.to_vector<float>();
    case DType::Int32: return c.to_vector<int32_t>();
    case DType::Int64: return c.to_vector<int64_t>();
    case DType::UInt8: return c.to_vector<uint8_t>();
    case DType::Bool: return c.to_vector<bool>();
    default: return c.to(DType::Float64).to_vector<double>();
  }
}

bool binary_param(const json& item) {
  return item.contains("parameters") && item["parameters"].is_object() &&
         item["parameters"].value("binary_data", false);
}

}  // namespace

InferRequest parse_infer_request(const std::string& body, long long header_length) {
  if (header_length > static_cast<long long>(body.size()))
    bad("Inference-Header-Content-Length (", header_length, ") is larger than the body (", body.size(), " bytes)");
  size_t json_len = header_length >= 0 ? static_cast<size_t>(header_length) : body.size();
  json j;
  try {
    j = json::parse(body.begin(), body.begin() + static_cast<long>(json_len));
  } catch (const json::exception& e) {
    bad("the request body is not valid JSON: ", e.what());
  }
  if (!j.is_object()) bad("the request body must be a JSON object with an \"inputs\" list");
  InferRequest r;
  try {
    if (j.contains("id")) r.id = j["id"].get<std::string>();
    if (!j.contains("inputs") || !j["inputs"].is_array() || j["inputs"].empty())
      bad("the request needs a non-empty \"inputs\" list of {name, shape, datatype, data}");
    if (j.contains("parameters") && j["parameters"].is_object())
      r.binary_by_default = j["parameters"].value("binary_data_output", false);
    size_t offset = json_len;
    for (const auto& in : j["inputs"]) {
      if (!in.is_object() || !in.contains("name") || !in.contains("shape") || !in.contains("datatype"))
        bad("each input needs \"name\", \"shape\" and \"datatype\"");
      std::string name = in["name"].get<std::string>();
      Shape shape = in["shape"].get<Shape>();
      for (int64_t d : shape)
        if (d < 0) bad("input '", name, "': shape ", shape_str(shape), " has a negative size");
      if (numel_of(shape) > (int64_t{1} << 31)) bad("input '", name, "': shape ", shape_str(shape), " is too large");
      DType dtype;
      try {
        dtype = dtype_of_oip(in["datatype"].get<std::string>());
      } catch (const Error& e) {
        bad("input '", name, "': ", e.what());
      }
      long long binary_size = -1;
      if (in.contains("parameters") && in["parameters"].is_object() && in["parameters"].contains("binary_data_size"))
        binary_size = in["parameters"]["binary_data_size"].get<long long>();
      if (binary_size >= 0) {
        size_t need = static_cast<size_t>(numel_of(shape)) * dtype_size(dtype);
        if (header_length < 0) bad("input '", name, "' has binary data but no Inference-Header-Content-Length header");
        if (static_cast<size_t>(binary_size) != need)
          bad("input '", name, "': binary_data_size is ", binary_size, " but shape ", shape_str(shape), " of ",
              in["datatype"].get<std::string>(), " needs ", need, " bytes");
        if (offset + need > body.size()) bad("input '", name, "': the body ends before its binary data (truncated)");
        Tensor t = Tensor::empty(shape, dtype);
        if (need) std::memcpy(t.raw_data(), body.data() + offset, need);
        offset += need;
        r.inputs.emplace_back(name, t);
        continue;
      }
      if (!in.contains("data")) bad("input '", name, "' has neither \"data\" nor binary_data_size");
      r.inputs.emplace_back(name, json_tensor(in["data"], shape, dtype, name));
    }
    if (header_length >= 0 && offset != body.size())
      bad("the body has ", body.size() - offset, " bytes after the binary inputs it declares");
    if (j.contains("outputs")) {
      if (!j["outputs"].is_array()) bad("\"outputs\" must be a list of {name}");
      for (const auto& out : j["outputs"]) {
        if (!out.is_object() || !out.contains("name")) bad("each requested output needs a \"name\"");
        r.outputs.push_back(out["name"].get<std::string>());
        r.binary_outputs.push_back(binary_param(out) || r.binary_by_default);
      }
    }
  } catch (const json::exception& e) {
    bad("malformed request: ", e.what());
  }
  return r;
}

InferResponse make_infer_response(const std::string& model, const std::string& version, const std::string& id,
                                  const std::vector<std::pair<std::string, Tensor>>& outputs,
                                  const std::vector<bool>& binary) {
  json j;
  j["model_name"] = model;
  j["model_version"] = version;
  if (!id.empty()) j["id"] = id;
  j["outputs"] = json::array();
  std::string tail;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i].second;
    json o = {{"name", outputs[i].first}, {"datatype", oip_datatype(t.dtype())}, {"shape", t.shape()}};
    if (binary[i]) {
      Tensor c = t.contiguous();
      size_t bytes = static_cast<size_t>(c.numel()) * c.element_size();
      o["parameters"] = {{"binary_data_size", bytes}};
      tail.append(static_cast<const char*>(c.raw_data()), bytes);
    } else {
      o["data"] = tensor_json(t);
    }
    j["outputs"].push_back(std::move(o));
  }
  InferResponse r;
  r.body = j.dump();
  if (!tail.empty()) {
    r.header_length = static_cast<long long>(r.body.size());
    r.body += tail;
  }
  return r;
}

}  // namespace kiln::serve
