// Op packages: the example package (examples/custom_op, built against an
// installed Kiln by the custom_op_package fixture) used through every part of
// Kiln, and packages that are wrong on purpose refused with the file, the op
// and the fix, leaving nothing registered.
#include <gtest/gtest.h>
#ifdef KILN_WITH_SERVE
#include <httplib.h>
#endif
#include <onnx/onnx_pb.h>
#include <signal.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "kiln/kiln.h"
#include "kiln/onnx.h"
#include "kiln/op_library.h"
#include "kiln/profiler.h"
#include "kiln/runtime.h"
#include "ops/plugin_host.h"
#include "support/close.h"
#include "support/error_message.h"
#include "support/serve_process.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::message_of;

const OpLibrary& custom_ops() { return load_op_library(KILN_CUSTOM_OPS); }
std::string bad_package(int n) { return std::string(KILN_BAD_PACKAGES) + "/libbad_package_" + std::to_string(n) + ".so"; }

// The CLI's output (stdout and stderr) and exit status.
std::pair<std::string, int> run_cli(const std::string& args, const std::string& env = "") {
  std::string cmd = env + " " KILN_CLI " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  int status = ::pclose(p);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

Tensor rms_norm(const Tensor& x, const Tensor& w, double eps = 1e-6) {
  return call("rms_norm", {x, w}, {{"eps", eps}}).at(0);
}
Tensor swiglu(const Tensor& gate, const Tensor& up) { return call("swiglu", {gate, up}).at(0); }

class GatedMlp : public nn::Cell {
 public:
  GatedMlp() {
    norm_ = register_parameter("norm", rand({8}) + 0.5);
    gate_ = register_cell("gate", std::make_shared<nn::Dense>(8, 12));
    up_ = register_cell("up", std::make_shared<nn::Dense>(8, 12));
  }
  Tensor construct(const Tensor& x) override {
    Tensor h = rms_norm(x, norm_, 1e-5);
    return swiglu((*gate_)(h), (*up_)(h));
  }

 private:
  Tensor norm_;
  std::shared_ptr<nn::Dense> gate_, up_;
};

TEST(OpPackage, LoadsItsOpsMarkedWithThePackage) {
  const OpLibrary& lib = custom_ops();
  EXPECT_EQ(lib.name, "custom_ops");
  EXPECT_EQ(lib.ops, (std::vector<std::string>{"rms_norm", "swiglu"}));
  EXPECT_EQ(&load_op_library(KILN_CUSTOM_OPS), &lib) << "a second load returns the first";
  EXPECT_EQ(op_library_of("rms_norm"), "custom_ops");
  EXPECT_EQ(op_library_of("add"), "");
  const OpDef& s = OpRegistry::instance().get("swiglu");
  EXPECT_TRUE(s.has_tag(kTagElementwise) && s.differentiable());
  EXPECT_EQ(s.dtypes(DeviceType::CPU).size(), 4u) << "float32, float64, float16 and bfloat16 from its formula";
  EXPECT_EQ(OpRegistry::instance().get("rms_norm").dtypes(DeviceType::CPU),
            (std::vector<DType>{DType::Float32, DType::Float64}));

  auto [table, rc] = run_cli("ops --plugin " KILN_CUSTOM_OPS);
  ASSERT_EQ(rc, 0) << table;
  EXPECT_NE(table.find("rms_norm"), std::string::npos);
  EXPECT_NE(table.find("custom_ops"), std::string::npos);
  EXPECT_NE(table.find("com.kiln.custom::RmsNorm"), std::string::npos) << table;
  auto [md, rc2] = run_cli("ops --markdown", "KILN_PLUGIN_PATH=" KILN_CUSTOM_OPS);
  EXPECT_NE(md.find("`swiglu` (package custom_ops)"), std::string::npos);
  auto [plain, rc3] = run_cli("ops");
  EXPECT_EQ(plain.find("rms_norm"), std::string::npos) << "packages load only when asked for";
}

TEST(OpPackage, ComputesAndDifferentiatesLikeItsDefinition) {
  custom_ops();
  Generator gen(5);
  Tensor x = randn({3, 7}, DType::Float64, &gen), w = randn({7}, DType::Float64, &gen);
  Tensor want = mul(div(x, sqrt(add(mean(mul(x, x), {1}, true), scalar_tensor(1e-3, DType::Float64)))), w);
  EXPECT_TRUE(testing::all_close(rms_norm(x, w, 1e-3), want, 1e-12, 1e-12));
  // Gradients against central differences of a weighted sum of the outputs.
  Tensor up = randn({3, 7}, DType::Float64, &gen);
  auto check = [&](const std::function<Tensor(const Tensor&, const Tensor&)>& f, Tensor a, Tensor b) {
    a.set_requires_grad(true);
    b.set_requires_grad(true);
    sum(mul(f(a, b), up)).backward();
    for (Tensor* t : {&a, &b}) {
      Tensor g = t->grad();
      NoGradGuard no_grad;
      for (int64_t i = 0; i < t->numel(); i += 3) {
        double* p = t->data<double>() + i;
        const double h = 1e-6, keep = *p;
        *p = keep + h;
        double hi = sum(mul(f(a, b), up)).item<double>();
        *p = keep - h;
        double lo = sum(mul(f(a, b), up)).item<double>();
        *p = keep;
        EXPECT_NEAR(g.contiguous().data<double>()[i], (hi - lo) / (2 * h), 1e-6) << "element " << i;
      }
    }
  };
  check([](const Tensor& a, const Tensor& b) { return rms_norm(a, b, 1e-3); }, x.clone(), w.clone());
  check(swiglu, randn({3, 7}, DType::Float64, &gen), randn({3, 7}, DType::Float64, &gen));
}

TEST(OpPackage, BadShapesGetTheInferenceFunctionsMessage) {
  custom_ops();
  std::string m = message_of([] { rms_norm(randn({2, 4}), randn({3})); });
  EXPECT_NE(m.find("weight must be a vector of x's last size (4)"), std::string::npos) << m;
  EXPECT_NE(m.find("op 'rms_norm' of package custom_ops"), std::string::npos) << m;
  EXPECT_NE(m.find("float32[2,4], float32[3]"), std::string::npos) << m;
  m = message_of([] { call("rms_norm", {randn({2, 4}), randn({4})}, {{"epsilon", 1.0}}); });
  EXPECT_NE(m.find("epsilon"), std::string::npos) << "attributes are checked against the schema: " << m;
}

TEST(OpPackage, SwigluJoinsElementwiseFusionAndBothOpsRunCompiled) {
  custom_ops();
  Tensor a = randn({4, 16}), b = randn({4, 16}), w = rand({16});
  auto fn = [&](const std::vector<Tensor>& in) {
    Tensor h = rms_norm(in[0], w);
    return std::vector<Tensor>{relu(add(swiglu(mul(h, scalar_tensor(2.0)), in[1]), scalar_tensor(1.0)))};
  };
  jit::CompiledFunction compiled = jit::compile(fn, {a, b});
  EXPECT_TRUE(testing::all_close(compiled({a, b})[0], fn({a, b})[0], 1e-5, 1e-6));
  const std::string report = compiled.report().str();
  EXPECT_NE(report.find("fused 4 elementwise ops into 1 loops"), std::string::npos) << report;
}

TEST(OpPackage, IsProfiledLikeABuiltInOp) {
  custom_ops();
  profiler::start();
  rms_norm(randn({8, 32}), ones({32}));
  profiler::stop();
  bool seen = false;
  for (const auto& r : profiler::records())
    if (r.name == "rms_norm") seen = r.type == "normalization" && r.shapes.find("float32[8, 32]") != std::string::npos;
  EXPECT_TRUE(seen) << profiler::summary();
}

TEST(OpPackage, ExportsToItsOnnxDomainAndTheRuntimeReadsItBack) {
  custom_ops();
  auto net = std::make_shared<GatedMlp>();
  Tensor x = randn({3, 8});
  ExportOptions options;
  options.dynamic_batch = true;
  std::string bytes = export_model_bytes(net, {x}, options);
  ::onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(bytes));
  bool domain = false;
  for (const auto& o : model.opset_import()) domain |= o.domain() == "com.kiln.custom" && o.version() == 1;
  EXPECT_TRUE(domain);
  std::set<std::string> custom;
  for (const auto& n : model.graph().node())
    if (n.domain() == "com.kiln.custom") custom.insert(n.op_type());
  EXPECT_EQ(custom, (std::set<std::string>{"RmsNorm", "SwiGLU"}));
  for (const auto& n : model.graph().node())
    if (n.op_type() == "RmsNorm") {
      EXPECT_EQ(n.attribute(0).name(), "eps");
    }

  InferenceSession session = InferenceSession::from_bytes(bytes);
  Tensor x5 = randn({5, 8});
  EXPECT_TRUE(testing::all_close(session.run({x5})[0], (*net)(x5), 1e-5, 1e-6));

  // A type of the domain that no package reads is listed as unsupported.
  for (auto& n : *model.mutable_graph()->mutable_node())
    if (n.op_type() == "SwiGLU") n.set_op_type("GeGLU");
  std::string m = message_of([&] { InferenceSession::from_bytes(model.SerializeAsString()); });
  EXPECT_NE(m.find("com.kiln.custom::GeGLU"), std::string::npos) << m;
}

#ifdef KILN_WITH_SERVE
TEST(OpPackage, KilnServeLoadsItWithPluginOrFromTheRepository) {
  custom_ops();
  fs::path dir = fs::temp_directory_path() / ("kiln_plugin_serve_" + std::to_string(::getpid()));
  fs::create_directories(dir / "repo" / "gated" / "1");
  fs::create_directories(dir / "repo" / "plugins");
  auto net = std::make_shared<GatedMlp>();
  ExportOptions options;
  options.dynamic_batch = true;
  export_model(net, {randn({2, 8})}, (dir / "gated.onnx").string(), options);
  fs::copy_file(dir / "gated.onnx", dir / "repo" / "gated" / "1" / "model.onnx");
  fs::copy_file(KILN_CUSTOM_OPS, dir / "repo" / "plugins" / "libcustom_ops.so");

  Tensor x = randn({2, 8});
  Tensor want = (*net)(x).contiguous();
  nlohmann::json body = {{"inputs", {{{"name", "input"}, {"shape", x.shape()}, {"datatype", "FP32"},
                                       {"data", x.contiguous().to_vector<float>()}}}}};
  auto query = [&](int port, const std::string& model) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    auto res = c.Post("/v2/models/" + model + "/infer", body.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    auto data = nlohmann::json::parse(res->body)["outputs"][0]["data"].get<std::vector<float>>();
    EXPECT_TRUE(testing::all_close(from_vector<float>(data, want.shape()), want, 1e-5, 1e-6));
  };
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--plugin", KILN_CUSTOM_OPS, "--model", (dir / "gated.onnx").string()},
           {"--model-repository", (dir / "repo").string()}}) {
    auto [pid, port] = testing::start_serve_process(args, dir / "serve.log");
    ASSERT_GT(port, 0) << testing::read_all(dir / "serve.log");
    query(port, args[0] == "--plugin" ? "gated" : "gated");
    ::kill(pid, SIGTERM);
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
  // Without the package the model is refused, naming the type and its domain.
  auto [pid, port] = testing::start_serve_process({"--model", (dir / "gated.onnx").string()}, dir / "serve.log");
  EXPECT_EQ(port, 0);
  if (pid > 0) ::kill(pid, SIGKILL), ::waitpid(pid, nullptr, 0);
  EXPECT_NE(testing::read_all(dir / "serve.log").find("com.kiln.custom::RmsNorm"), std::string::npos)
      << testing::read_all(dir / "serve.log");
  fs::remove_all(dir);
}
#endif

// Refused packages name the file and the reason, and leave nothing behind.
void expect_refused(int n, const std::vector<std::string>& phrases, const std::string& left_out) {
  std::string m = message_of([&] { load_op_library(bad_package(n)); });
  EXPECT_NE(m.find(fs::canonical(bad_package(n)).string()), std::string::npos) << m;
  for (const auto& p : phrases) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' missing from: " << m;
  if (!left_out.empty()) {
    EXPECT_EQ(OpRegistry::instance().find(left_out), nullptr) << left_out << " stayed registered";
  }
  for (const OpLibrary& lib : loaded_op_libraries()) EXPECT_NE(lib.path, fs::canonical(bad_package(n)).string());
}

TEST(OpPackage, ClashingNamesAreRefusedAndNothingStays) {
  expect_refused(1, {"op 'add' of package bad_clash", "clashes with the op of that name defined by Kiln itself",
                     "rename"},
                 "bad_clash_first");
}

TEST(OpPackage, KernelsForUnknownDtypesAreRefused) {
  expect_refused(2, {"op 'bad_dtype_op'", "dtype 42", "KILN_FLOAT32"}, "bad_dtype_first");
}

TEST(OpPackage, FailedRegistrationLeavesNothing) {
  expect_refused(4, {"failed its registration", "the licence file is missing"}, "bad_register_first");
}

TEST(OpPackage, OtherAbiVersionsAndForeignLibrariesAreRefused) {
  expect_refused(5, {"plugin ABI version 99", "loads plugin ABI version 1", "Rebuild the package"}, "");
  expect_refused(6, {"is not a Kiln op package", "kiln_plugin_abi_version", "KILN_PLUGIN"}, "");
  std::string m = message_of([] { load_op_library("/nonexistent/libnothing.so"); });
  EXPECT_NE(m.find("/nonexistent/libnothing.so: no such file"), std::string::npos) << m;
  fs::path fake = fs::temp_directory_path() / ("kiln_fake_" + std::to_string(::getpid()) + ".so");
  std::ofstream(fake) << "not a library\n";
  m = message_of([&] { load_op_library(fake.string()); });
  EXPECT_NE(m.find("cannot be loaded"), std::string::npos) << m;
  fs::remove(fake);
  auto [out, rc] = run_cli("ops", "KILN_PLUGIN_PATH=/nonexistent/dir");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("KILN_PLUGIN_PATH names /nonexistent/dir, which does not exist"), std::string::npos) << out;
}

TEST(OpPackage, AThrowingInferenceFunctionNamesTheOpAndTheFix) {
  load_op_library(bad_package(3));
  std::string m = message_of([] { call("bad_infer_op", {randn({2, 2})}); });
  EXPECT_NE(m.find("op 'bad_infer_op' of package bad_infer"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 3 is not handled yet"), std::string::npos) << m;
  EXPECT_NE(m.find("fix the inference function in the package"), std::string::npos) << m;
}

TEST(OpPackage, AcceleratorKernelsWaitForTheirBackend) {
  const OpLibrary& lib = load_op_library(bad_package(7));
  EXPECT_EQ(lib.unused_kernels, (std::vector<std::string>{"cuda: cuda_ready_copy float32"}));
  Tensor x = randn({3});
  EXPECT_TRUE(testing::all_close(call("cuda_ready_copy", {x}).at(0), x, 0, 0));
}

// A package kernel asks for its stream (CUDA kernels launch on it); outside
// a kernel there is none, and last_error says why.
TEST(OpPackage, TheKernelStreamIsThereOnlyInsideAKernel) {
  const kiln_host_api api = plugin_host::base_api();
  ASSERT_GE(api.struct_size, offsetof(kiln_host_api, kernel_stream) + sizeof(void*));
  EXPECT_EQ(api.kernel_stream(), nullptr);
  EXPECT_NE(std::string(api.last_error()).find("kernel"), std::string::npos) << api.last_error();
}

}  // namespace
}  // namespace kiln
