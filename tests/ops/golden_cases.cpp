#include "ops/golden_cases.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace kiln::testing {
namespace {

GoldenTensor parse_tensor(const nlohmann::json& j, DType case_dtype) {
  GoldenTensor t;
  if (j.is_null()) return t;
  t.present = true;
  std::string d = j.at("dtype");
  t.dtype = d == "out" ? DType::Float64 : dtype_from_name(d);
  t.shape = j.at("shape").get<Shape>();
  for (auto& v : j.at("data")) t.values.push_back(v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>());
  return t;
}

Attrs parse_attrs(const nlohmann::json& j) {
  Attrs a;
  for (auto& item : j) {
    std::string name = item[0], kind = item[1];
    const auto& v = item[2];
    if (kind == "int") a.set(name, v.get<int64_t>());
    else if (kind == "float") a.set(name, v.get<double>());
    else if (kind == "bool") a.set(name, v.get<bool>());
    else if (kind == "string") a.set(name, v.get<std::string>());
    else if (kind == "ints") a.set(name, v.get<std::vector<int64_t>>());
    else if (kind == "floats") a.set(name, v.get<std::vector<double>>());
    else if (kind == "dtype") a.set(name, dtype_from_name(v.get<std::string>()));
    else throw std::runtime_error("unknown attribute kind " + kind);
  }
  return a;
}

void load_file(const std::string& path, std::vector<GoldenCase>& cases) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open golden cases " + path);
  nlohmann::json doc = nlohmann::json::parse(f);
  for (auto& c : doc.at("cases")) {
    GoldenCase g;
    g.name = c.at("name");
    g.op = c.at("op");
    g.dtype = dtype_from_name(c.at("dtype"));
    g.attrs = parse_attrs(c.at("attrs"));
    for (auto& i : c.at("inputs")) g.inputs.push_back(parse_tensor(i, g.dtype));
    for (auto& o : c.at("outputs")) g.outputs.push_back(parse_tensor(o, g.dtype));
    if (c.contains("upstream")) {
      g.upstream = parse_tensor(c.at("upstream"), g.dtype);
      for (auto& [k, v] : c.at("grads").items()) g.grads.emplace_back(std::stoi(k), parse_tensor(v, g.dtype));
    }
    cases.push_back(std::move(g));
  }
}

// Kiln's cases, and an op package's: the packages KILN_PLUGIN_PATH names are
// loaded and the files KILN_EXTRA_GOLDEN lists (':'-separated) join the
// suite, so a package's ops are checked like built-in ones.
std::vector<GoldenCase> load() {
  load_op_libraries_from_environment();
  std::vector<GoldenCase> cases;
  load_file(std::string(KILN_GOLDEN_DIR) + "/op_golden.json", cases);
  std::stringstream extra(std::getenv("KILN_EXTRA_GOLDEN") ? std::getenv("KILN_EXTRA_GOLDEN") : "");
  for (std::string path; std::getline(extra, path, ':');)
    if (!path.empty()) load_file(path, cases);
  return cases;
}

}  // namespace

Tensor GoldenTensor::to_tensor(DType as) const {
  Tensor t = from_vector<double>(values, shape);
  return t.to(as);
}

std::vector<Tensor> GoldenCase::make_inputs() const {
  std::vector<Tensor> out;
  for (auto& t : inputs) out.push_back(t.present ? t.to_tensor(t.dtype) : Tensor());
  return out;
}

const std::vector<GoldenCase>& golden_cases() {
  static const std::vector<GoldenCase> cases = load();
  return cases;
}

std::string golden_test_name(int index) {
  std::string n = golden_cases()[static_cast<size_t>(index)].name;
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

std::vector<int> golden_case_indices(bool with_gradients) {
  std::vector<int> idx;
  for (size_t i = 0; i < golden_cases().size(); ++i)
    if (!with_gradients || !golden_cases()[i].grads.empty()) idx.push_back(static_cast<int>(i));
  return idx;
}

Tolerance forward_tolerance(DType d) {
  switch (d) {
    case DType::Float64: return {1e-7, 1e-9};
    case DType::Float32: return {1e-4, 1e-5};
    case DType::Float16: return {1e-2, 1e-2};
    case DType::BFloat16: return {3e-2, 3e-2};
    default: return {0, 0};
  }
}

Tolerance gradient_tolerance(DType d) {
  switch (d) {
    case DType::Float64: return {1e-7, 1e-9};
    case DType::Float32: return {1e-4, 1e-5};
    case DType::Float16: return {3e-2, 3e-2};
    case DType::BFloat16: return {8e-2, 8e-2};
    default: return {0, 0};
  }
}

std::string compare(const Tensor& actual, const std::vector<double>& expected, const Shape& shape, Tolerance tol) {
  std::ostringstream os;
  if (actual.shape() != shape) {
    os << "shape " << shape_str(actual.shape()) << " != expected " << shape_str(shape);
    return os.str();
  }
  std::vector<double> got = actual.to(DType::Float64).to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double a = got[i], e = expected[i];
    bool ok = (std::isnan(a) && std::isnan(e)) || std::fabs(a - e) <= tol.atol + tol.rtol * std::fabs(e);
    if (!ok && bad++ < 5) os << "  [" << i << "] got " << a << " expected " << e << "\n";
  }
  if (bad) os << "  " << bad << " of " << got.size() << " elements differ (rtol " << tol.rtol << ", atol " << tol.atol << ")";
  return os.str();
}

namespace {
std::vector<Tensor> inputs_on(const GoldenCase& c, Device device) {
  std::vector<Tensor> inputs = c.make_inputs();
  for (Tensor& t : inputs)
    if (t.defined()) t = t.to(device);
  return inputs;
}
}  // namespace

std::string forward_mismatch_on(const GoldenCase& c, Device device) {
  std::vector<Tensor> inputs = inputs_on(c, device);
  std::vector<Tensor> out = call(c.op, inputs, c.attrs);
  if (out.empty()) out.push_back(inputs[0]);  // ops that write their input (assign)
  if (out.size() < c.outputs.size()) return "fewer outputs than PyTorch's";
  std::string diff;
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    if (!(out[i].device() == device)) diff += "output " + std::to_string(i) + " left " + device.str() + "\n";
    const std::string d =
        compare(out[i].to(cpu_device()), c.outputs[i].values, c.outputs[i].shape, forward_tolerance(c.dtype));
    if (!d.empty()) diff += "output " + std::to_string(i) + ":\n" + d + "\n";
  }
  return diff;
}

std::string gradient_mismatch_on(const GoldenCase& c, Device device) {
  std::vector<Tensor> inputs = inputs_on(c, device);
  for (auto& [k, _] : c.grads) inputs[static_cast<size_t>(k)].set_requires_grad(true);
  const Tensor y = call(c.op, inputs, c.attrs)[0];
  sum(y * c.upstream.to_tensor(y.dtype()).to(device)).backward();
  std::string diff;
  for (auto& [k, expected] : c.grads) {
    const std::string input = "gradient of input " + std::to_string(k);
    const Tensor g = inputs[static_cast<size_t>(k)].grad();
    if (!g.defined()) {
      diff += input + " did not arrive\n";
      continue;
    }
    if (!(g.device() == device)) diff += input + " left " + device.str() + "\n";
    const std::string d = compare(g.to(cpu_device()), expected.values, expected.shape, gradient_tolerance(c.dtype));
    if (!d.empty()) diff += input + ":\n" + d + "\n";
  }
  return diff;
}

}  // namespace kiln::testing
