// A backend in a shared library of its own (tests/plugins/twin_backend.cpp):
// loaded at run time, it brings a kind of device Kiln does not name, runs
// the ops it has kernels for on its memory, and everything else on the CPU,
// visibly; libraries that are wrong are refused and leave nothing behind.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/op_library.h"
#include "support/cli_command.h"
#include "support/error_message.h"

namespace kiln {
namespace {

using testing::message_of;

const OpLibrary& twin_library() { return load_op_library(KILN_TWIN_BACKEND); }
Device twin() { return parse_device(twin_library().device); }

struct Counters {
  int64_t kernels = 0, copies = 0;
};
Counters twin_counters() {
  twin_library();
  void* lib = dlopen(KILN_TWIN_BACKEND, RTLD_NOW | RTLD_NOLOAD);
  auto read = reinterpret_cast<void (*)(int64_t*, int64_t*)>(dlsym(lib, "twin_counters"));
  Counters c;
  read(&c.kernels, &c.copies);
  dlclose(lib);
  return c;
}

std::string bad_backend(int n) { return std::string(KILN_BAD_BACKENDS) + "/libbad_backend_" + std::to_string(n) + ".so"; }

TEST(BackendLibrary, BringsAKindOfDeviceKilnDoesNotName) {
  const OpLibrary& lib = twin_library();
  EXPECT_EQ(lib.device, "twin");
  EXPECT_EQ(lib.ops, (std::vector<std::string>{"add", "relu"}));
  const Device d = twin();
  EXPECT_NE(d.type, DeviceType::CPU);
  EXPECT_NE(d.type, DeviceType::CUDA);
  EXPECT_NE(d.type, DeviceType::Reference);
  EXPECT_EQ(parse_device("twin:1"), (Device{d.type, 1}));
  EXPECT_EQ(d.str(), "twin:0");
  EXPECT_NE(message_of([] { parse_device("nothing"); }).find("twin[:N]"), std::string::npos);
  EXPECT_EQ(&load_op_library(KILN_TWIN_BACKEND), &lib) << "a second load returns the first";
  bool listed = false;
  for (const OpLibrary& l : loaded_op_libraries()) listed |= l.device == "twin";
  EXPECT_TRUE(listed);
}

TEST(BackendLibrary, RunsItsKernelsOnItsMemoryAndTheRestOnTheCpuVisibly) {
  manual_seed(3);
  Tensor x = randn({3, 4}), b = randn({4});
  const Counters before = twin_counters();
  Tensor xt = x.to(twin()), bt = b.to(twin());
  EXPECT_EQ(xt.device(), twin());
  EXPECT_EQ(twin_counters().copies - before.copies, 2);
  const int64_t fallbacks = fallback_count();
  Tensor yt = relu(xt + bt);
  EXPECT_EQ(twin_counters().kernels - before.kernels, 2) << "add and relu ran on the library's kernels";
  EXPECT_EQ(fallback_count(), fallbacks);
  EXPECT_EQ(yt.device(), twin());
  EXPECT_EQ(yt.to(cpu_device()).to_vector<float>(), relu(x + b).to_vector<float>());

  // matmul has no twin kernel: it runs on the CPU, counted, with the same values.
  Tensor w = randn({4, 2});
  Tensor zt = matmul(yt, w.to(twin()));
  EXPECT_EQ(fallback_count() - fallbacks, 1);
  EXPECT_EQ(zt.device(), twin());
  EXPECT_EQ(zt.to(cpu_device()).to_vector<float>(), matmul(relu(x + b), w).to_vector<float>());
  set_strict_device(true);
  const std::string strict = message_of([&] { matmul(yt, w.to(twin())); });
  set_strict_device(false);
  EXPECT_NE(strict.find("matmul"), std::string::npos) << strict;
  EXPECT_NE(strict.find("twin"), std::string::npos) << strict;

  // Its memory is a device's: the host reads it only through a copy.
  const std::string read = message_of([&] { yt.raw_data(); });
  EXPECT_NE(read.find("twin:0"), std::string::npos) << read;
  EXPECT_NE(read.find(".to("), std::string::npos) << read;
  EXPECT_FLOAT_EQ(sum(yt).item<float>(), sum(relu(x + b)).item<float>());
}

TEST(BackendLibrary, CreationAndRandomNumbersMatchTheCpu) {
  Generator g(11), h(11);
  EXPECT_EQ(rand({5, 3}, DType::Float32, &g, twin()).to(cpu_device()).to_vector<float>(),
            rand({5, 3}, DType::Float32, &h).to_vector<float>());
  EXPECT_EQ(arange(0.0, 6.0, 1.5, DType::Float32, twin()).to(cpu_device()).to_vector<float>(),
            (std::vector<float>{0, 1.5f, 3, 4.5f}));
  EXPECT_EQ(eye(3, 2, DType::Float32, twin()).to(cpu_device()).to_vector<float>(), eye(3, 2).to_vector<float>());
  EXPECT_EQ(linspace(-1, 1, 5, DType::Float32, twin()).to(cpu_device()).to_vector<float>(),
            linspace(-1, 1, 5).to_vector<float>());
  EXPECT_EQ(randint(0, 7, {9}, DType::Int64, &g, twin()).to(cpu_device()).to_vector<int64_t>(),
            randint(0, 7, {9}, DType::Int64, &h).to_vector<int64_t>());
}

TEST(BackendLibrary, CompiledGraphsPlaceWhatItLacksOnTheCpu) {
  jit::Function fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{relu(matmul(in[0], in[1]) + in[2])}; };
  Tensor x = randn({4, 3}), w = randn({3, 5}), b = randn({5});
  auto compiled = jit::compile(fn, {x.to(twin()), w.to(twin()), b.to(twin())});
  Tensor y = compiled({x.to(twin()), w.to(twin()), b.to(twin())})[0];
  EXPECT_EQ(y.device(), twin());
  const std::vector<float> got = y.to(cpu_device()).to_vector<float>(), want = fn({x, w, b})[0].to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5);
  ASSERT_EQ(compiled.report().on_cpu.size(), 1u) << compiled.report().str();
  EXPECT_NE(compiled.report().on_cpu[0].find("no twin kernel"), std::string::npos) << compiled.report().str();
}

TEST(BackendLibrary, WrongLibrariesAreRefusedAndLeaveNothing) {
  const std::string unknown_op = message_of([] { load_op_library(bad_backend(1)); });
  EXPECT_NE(unknown_op.find("no_such_op"), std::string::npos) << unknown_op;
  EXPECT_NE(unknown_op.find("twin_bad"), std::string::npos) << unknown_op;
  EXPECT_NE(message_of([] { parse_device("twin_bad"); }).find("unknown device"), std::string::npos)
      << "a refused library's kind of device is not registered";
  const std::string no_backend = message_of([] { load_op_library(bad_backend(2)); });
  EXPECT_NE(no_backend.find("registered no backend"), std::string::npos) << no_backend;
  for (const OpLibrary& l : loaded_op_libraries()) EXPECT_NE(l.device.rfind("twin_", 0), 0u) << l.path;
}

TEST(BackendLibrary, TheCliLoadsItFromThePluginPath) {
  ::setenv("KILN_PLUGIN_PATH", KILN_TWIN_BACKEND, 1);
  auto [status, out] = testing::run_kiln("ops");
  ::unsetenv("KILN_PLUGIN_PATH");
  ASSERT_EQ(status, 0) << out;
  auto row = [&](const std::string& op) {
    const size_t at = out.find("\n" + op + " ");
    return at == std::string::npos ? std::string() : out.substr(at + 1, out.find('\n', at + 1) - at - 1);
  };
  EXPECT_NE(row("add").find("twin"), std::string::npos) << "its kernels are listed: " << row("add");
  EXPECT_NE(row("matmul").find("twin"), std::string::npos) << "and where it falls back: " << row("matmul");
}

}  // namespace
}  // namespace kiln
