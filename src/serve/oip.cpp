#include "serve/oip.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <simdjson.h>

#include "serve/model_config.h"

namespace kiln::serve {
namespace {

using json = nlohmann::json;
using simdjson::dom::element;
using simdjson::dom::element_type;

template <typename... Args>
[[noreturn]] void bad(const Args&... args) {
  throw BadRequest(detail::concat(args...));
}

// Appends the numbers of a (possibly nested) JSON array.
// `limit`: the smallest magnitude that rounds to infinity in the input's
// datatype (floating types): what NumPy prints for the largest value is a
// little over it, and still that value.
// Nested lists must be rectangular: every list at one depth as long as the
// others, and numbers only at the deepest one.
struct Nesting {
  std::vector<int64_t> lengths;  // by depth
  int leaf_depth = -1;
};

template <typename T>
void flatten(element e, std::vector<T>& out, const std::string& name, const Shape& shape, double limit,
             Nesting& nesting, int depth = 0) {
  if (e.type() != element_type::ARRAY) {
    if (nesting.leaf_depth < 0) nesting.leaf_depth = depth;
    if (nesting.leaf_depth != depth)
      bad("input '", name, "': the nested data is ragged (numbers beside lists at one level); give a flat list, or ",
          "lists nested as the shape ", shape_str(shape));
  }
  switch (e.type()) {
    case element_type::ARRAY:
    {
      simdjson::dom::array items = e.get_array().value_unsafe();
      const auto length = static_cast<int64_t>(items.size());
      if (nesting.lengths.size() <= static_cast<size_t>(depth)) nesting.lengths.push_back(length);
      if (nesting.lengths[static_cast<size_t>(depth)] != length)
        bad("input '", name, "': the nested data is ragged (lists of ", nesting.lengths[static_cast<size_t>(depth)],
            " and of ", length, " values at depth ", depth + 1, "); give a flat list, or lists nested as the shape ",
            shape_str(shape));
      for (element item : items) flatten(item, out, name, shape, limit, nesting, depth + 1);
      return;
    }
    case element_type::BOOL:
      if constexpr (std::is_same_v<T, bool>) {
        out.push_back(e.get_bool().value_unsafe());
        return;
      }
      bad("input '", name, "': numbers expected, got true/false");
    case element_type::INT64:
    case element_type::UINT64:
    case element_type::DOUBLE:
      if constexpr (std::is_same_v<T, bool>) {
        bad("input '", name, "': BOOL data must be true/false");
      } else if constexpr (std::is_integral_v<T>) {
        if (e.type() == element_type::DOUBLE) bad("input '", name, "': integer data expected, got ", e.get_double().value_unsafe());
        // A value the datatype cannot hold is refused, not wrapped around.
        if (e.type() == element_type::UINT64 ||
            e.get_int64().value_unsafe() < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
            e.get_int64().value_unsafe() > static_cast<int64_t>(std::numeric_limits<T>::max()))
          bad("input '", name, "': ", simdjson::to_string(e), " is outside the range of its datatype (",
              std::numeric_limits<T>::min() + 0, " to ", std::numeric_limits<T>::max() + 0, ")");
        out.push_back(static_cast<T>(e.get_int64().value_unsafe()));
      } else {
        double v = 0;
        if (e.get_double().get(v)) bad("input '", name, "': a number does not fit a double");
        // 1e39 as FP32 would be inf: refused, like any value the datatype cannot hold.
        if (std::abs(v) >= limit)
          bad("input '", name, "': ", v, " at ", position_of(static_cast<int64_t>(out.size()), shape),
              " is outside the range of its datatype (it would round to infinity)");
        out.push_back(static_cast<T>(v));
      }
      return;
    default:
      bad("input '", name, "': data must be numbers or nested lists of them");
  }
}

}  // namespace

std::string position_of(int64_t flat, const Shape& shape) {
  Shape at(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] > 0) {
      at[d] = flat % shape[d];
      flat /= shape[d];
    }
  }
  return shape_str(at);
}

namespace {

template <typename T>
Tensor from_json(element data, const Shape& shape, DType dtype, const std::string& name) {
  std::vector<T> values;
  // The shape is only a claim: reserve for it up to what a modest body holds.
  values.reserve(static_cast<size_t>(std::min<int64_t>(numel_of(shape), int64_t{1} << 20)));
  // Halfway between the largest finite value and the next power of two.
  const double limit = dtype == DType::Float32    ? 0x1.ffffffp127
                       : dtype == DType::Float16  ? 65520.0
                       : dtype == DType::BFloat16 ? 0x1.ffp127
                                                  : std::numeric_limits<double>::infinity();
  Nesting nesting;
  flatten(data, values, name, shape, limit, nesting);
  if (static_cast<int64_t>(values.size()) != numel_of(shape))
    bad("input '", name, "': data holds ", values.size(), " values but shape ", shape_str(shape), " needs ", numel_of(shape));
  Tensor t = from_vector(values, shape);
  return t.dtype() == dtype ? t : t.to(dtype);
}

Tensor json_tensor(element data, const Shape& shape, DType dtype, const std::string& name) {
  switch (dtype) {
    case DType::Float32: return from_json<float>(data, shape, dtype, name);
    case DType::Float64:
    case DType::Float16:
    case DType::BFloat16: return from_json<double>(data, shape, dtype, name);
    case DType::Int32: return from_json<int32_t>(data, shape, dtype, name);
    case DType::Int64: return from_json<int64_t>(data, shape, dtype, name);
    case DType::UInt8: return from_json<uint8_t>(data, shape, dtype, name);
    case DType::Bool: return from_json<bool>(data, shape, dtype, name);
    case DType::Int8: return from_json<int8_t>(data, shape, dtype, name);
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
    case DType::Int8: return c.to_vector<int8_t>();
    default: return c.to(DType::Float64).to_vector<double>();
  }
}

// Field `key` of object `o` as the given type, or a BadRequest naming it.
element field(simdjson::dom::object o, const char* key, const std::string& where) {
  element e;
  if (o[key].get(e)) bad(where, " needs \"", key, "\"");
  return e;
}
std::string string_of(element e, const std::string& what) {
  std::string_view v;
  if (e.get_string().get(v)) bad(what, " must be a string");
  return std::string(v);
}
bool flag(simdjson::dom::object o, const char* key) {
  element params, value;
  bool on = false;
  if (o["parameters"].get(params) || params.type() != element_type::OBJECT) return false;
  if (params.get_object().value_unsafe()[key].get(value)) return false;
  return !value.get_bool().get(on) && on;
}

}  // namespace

InferRequest parse_infer_request(const std::string& body, long long header_length, int64_t max_batch,
                                 const std::string& max_batch_source) {
  if (header_length > static_cast<long long>(body.size()))
    bad("Inference-Header-Content-Length (", header_length, ") is larger than the body (", body.size(), " bytes)");
  size_t json_len = header_length >= 0 ? static_cast<size_t>(header_length) : body.size();
  // Small bodies reuse this thread's parser and its buffers; a large one gets
  // a parser of its own, so its buffers (several times its size) go with it.
  thread_local simdjson::dom::parser reused;
  simdjson::dom::parser own;
  simdjson::dom::parser& parser = json_len <= (size_t{1} << 20) ? reused : own;
  simdjson::padded_string text(body.data(), json_len);
  element doc;
  if (auto err = parser.parse(text).get(doc)) bad("the request body is not valid JSON: ", simdjson::error_message(err));
  if (doc.type() != element_type::OBJECT) bad("the request body must be a JSON object with an \"inputs\" list");
  simdjson::dom::object root = doc.get_object().value_unsafe();
  InferRequest r;
  element id;
  if (!root["id"].get(id)) r.id = string_of(id, "\"id\"");
  element inputs;
  simdjson::dom::array input_list;
  if (root["inputs"].get(inputs) || inputs.get_array().get(input_list) || input_list.size() == 0)
    bad("the request needs a non-empty \"inputs\" list of {name, shape, datatype, data}");
  r.binary_by_default = flag(root, "binary_data_output");
  size_t offset = json_len;
  for (element in : input_list) {
    if (in.type() != element_type::OBJECT) bad("each input must be an object with \"name\", \"shape\" and \"datatype\"");
    simdjson::dom::object o = in.get_object().value_unsafe();
    std::string name = string_of(field(o, "name", "each input"), "an input's \"name\"");
    std::string where = "input '" + name + "'";
    element shape_e = field(o, "shape", where);
    simdjson::dom::array dims;
    if (shape_e.get_array().get(dims)) bad(where, ": \"shape\" must be a list of sizes");
    Shape shape;
    for (element d : dims) {
      int64_t v = 0;
      if (d.get_int64().get(v) || v < 0) bad(where, ": shape sizes must be non-negative integers");
      shape.push_back(v);
    }
    if (checked_numel(shape, int64_t{1} << 31) < 0)
      bad(where, ": shape ", shape_str(shape), " is too large (more than 2^31 elements)");
    if (!shape.empty() && shape[0] > max_batch)
      throw TooLarge(detail::concat(where, ": a batch of ", shape[0], " is more than this server runs in one request (",
                                    max_batch, ", ", max_batch_source, "); split it into smaller requests"));
    std::string datatype = string_of(field(o, "datatype", where), where + ": \"datatype\"");
    DType dtype;
    try {
      dtype = dtype_of_oip(datatype);
    } catch (const Error& e) {
      bad(where, ": ", e.what());
    }
    element params, size_e;
    long long binary_size = -1;
    if (!o["parameters"].get(params) && params.type() == element_type::OBJECT &&
        !params.get_object().value_unsafe()["binary_data_size"].get(size_e)) {
      int64_t v = 0;
      if (size_e.get_int64().get(v) || v < 0) bad(where, ": binary_data_size must be a non-negative integer");
      binary_size = v;
    }
    if (binary_size >= 0) {
      size_t need = static_cast<size_t>(numel_of(shape)) * dtype_size(dtype);
      if (header_length < 0) bad(where, " has binary data but no Inference-Header-Content-Length header");
      if (static_cast<size_t>(binary_size) != need)
        bad(where, ": binary_data_size is ", binary_size, " but shape ", shape_str(shape), " of ", datatype, " needs ",
            need, " bytes");
      if (offset + need > body.size()) bad(where, ": the body ends before its binary data (truncated)");
      Tensor t = Tensor::empty(shape, dtype);
      if (need) std::memcpy(t.raw_data(), body.data() + offset, need);
      offset += need;
      r.inputs.emplace_back(name, t);
      continue;
    }
    element data;
    if (o["data"].get(data)) bad(where, " has neither \"data\" nor binary_data_size");
    r.inputs.emplace_back(name, json_tensor(data, shape, dtype, name));
  }
  if (header_length >= 0 && offset != body.size())
    bad("the body has ", body.size() - offset, " bytes after the binary inputs it declares");
  element outputs;
  if (!root["outputs"].get(outputs)) {
    simdjson::dom::array output_list;
    if (outputs.get_array().get(output_list)) bad("\"outputs\" must be a list of {name}");
    for (element out : output_list) {
      if (out.type() != element_type::OBJECT) bad("each requested output must be an object with a \"name\"");
      simdjson::dom::object o = out.get_object().value_unsafe();
      r.outputs.push_back(string_of(field(o, "name", "each requested output"), "an output's \"name\""));
      r.binary_outputs.push_back(flag(o, "binary_data") || r.binary_by_default);
    }
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
