// User errors throw kiln::Error with a message that names the op, the
// shapes/dtypes involved, the backend and what to do.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "support/error_message.h"

using namespace kiln;

using kiln::testing::message_of;

namespace {
void expect_contains(const std::string& msg, std::initializer_list<const char*> parts) {
  for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in:\n" << msg;
}
}  // namespace

TEST(Errors, ShapeMismatchNamesOpShapesAndBackend) {
  auto msg = message_of([] { add(ones({2, 3}), ones({4})); });
  expect_contains(msg, {"add:", "[2, 3]", "[4]", "cannot be broadcast", "float32", "backend: cpu"});
  msg = message_of([] { matmul(ones({2, 3}), ones({4, 5})); });
  expect_contains(msg, {"matmul", "inner dimensions", "[2, 3]", "[4, 5]"});
  msg = message_of([] { conv2d(ones({1, 3, 8, 8}), ones({4, 2, 3, 3})); });
  expect_contains(msg, {"conv2d", "3 channels", "[4, 2, 3, 3]"});
}

TEST(Errors, DtypeMismatchSaysHowToCast) {
  auto msg = message_of([] { exp(arange(3)); });
  expect_contains(msg, {"exp", "int64", "supported dtypes are float32", ".to(dtype)"});
  msg = message_of([] { call("add", {ones({2}), ones({2}, DType::Float64)}); });
  expect_contains(msg, {"add", "different dtypes", "float32", "float64"});
  msg = message_of([] { cross_entropy(ones({2, 3}), ones({2})); });
  expect_contains(msg, {"cross_entropy", "class indices", "float32"});
}

TEST(Errors, OutOfRangeAxes) {
  auto msg = message_of([] { sum(ones({2, 3}), {2}); });
  expect_contains(msg, {"sum", "axis 2 is out of range", "rank 2", "-2..1"});
  msg = message_of([] { softmax(ones({2, 3}), -3); });
  expect_contains(msg, {"softmax", "axis -3"});
  msg = message_of([] { ones({2}).transpose(0, 1); });
  expect_contains(msg, {"out of range"});
}

TEST(Errors, EmptyTensors) {
  auto msg = message_of([] { amax(zeros({0, 3}), {0}); });
  expect_contains(msg, {"amax", "empty axis"});
  msg = message_of([] { argmax(zeros({3, 0}), 1); });
  expect_contains(msg, {"argmax", "empty axis"});
  msg = message_of([] { zeros({0}).item<float>(); });
  expect_contains(msg, {"item()", "one-element"});
  // Ops that are well defined on empty tensors just work.
  EXPECT_EQ(sum(zeros({0, 3}), {0}).to_vector<float>(), std::vector<float>(3, 0.0f));
  EXPECT_EQ((zeros({0, 3}) + ones({3})).shape(), (Shape{0, 3}));
}

TEST(Errors, BadIndicesAndValues) {
  auto msg = message_of([] { embedding(ones({4, 2}), from_vector<int64_t>({0, 7})); });
  expect_contains(msg, {"embedding", "index 7 is out of range", "size 4"});
  msg = message_of([] { cross_entropy(ones({2, 3}), from_vector<int64_t>({0, 5})); });
  expect_contains(msg, {"target 5", "[0, 3)"});
  msg = message_of([] { arange(4).reshape({3, 2}); });
  expect_contains(msg, {"cannot reshape", "[4]", "[3, 2]"});
  msg = message_of([] { div(arange(3), zeros({3}, DType::Int64)); });
  expect_contains(msg, {"division by zero"});
  msg = message_of([] { call("no_such_op", {}); });
  expect_contains(msg, {"unknown op 'no_such_op'", "kiln ops"});
  msg = message_of([] { call("sofmax", {ones({2})}); });
  expect_contains(msg, {"did you mean 'softmax'"});
  msg = message_of([] { dtype_from_name("float8"); });
  expect_contains(msg, {"unknown dtype 'float8'", "float32"});
}

// A misspelt or mistyped attribute would otherwise be ignored and its
// default used: sum over all axes instead of keeping the dimension.
TEST(Errors, AttributesAreCheckedAgainstTheSchema) {
  auto msg = message_of([] { call("sum", {ones({2, 3})}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", true}}); });
  expect_contains(msg, {"sum", "no attribute 'keepdims'", "did you mean 'keepdim'?", "its attributes are axes, keepdim"});
  msg = message_of([] { call("relu", {ones({2})}, {{"inplace", true}}); });
  expect_contains(msg, {"relu", "no attribute 'inplace'", "this op takes none"});
  msg = message_of([] { call("softmax", {ones({2, 3})}, {{"axis", std::string("last")}}); });
  expect_contains(msg, {"softmax", "attribute 'axis' must be int, got string"});
  // Kinds that read as one another are accepted, as Attrs reads them.
  EXPECT_NO_THROW(call("leaky_relu", {ones({2})}, {{"negative_slope", int64_t{1}}}));
  EXPECT_NO_THROW(call("sum", {ones({2, 3})}, {{"axes", int64_t{1}}, {"keepdim", int64_t{1}}}));
}

TEST(Errors, UndefinedTensorAndWrongInputCount) {
  auto msg = message_of([] { Tensor().shape(); });
  expect_contains(msg, {"undefined Tensor"});
  msg = message_of([] { call("add", {ones({2})}); });
  expect_contains(msg, {"add", "expects 2 inputs, got 1"});
}

// Inputs on two devices are refused before any kernel runs, naming both
// inputs and both devices. (A tensor is marked as on another device here;
// no second backend is needed to check the rule.)
TEST(Errors, InputsOnDifferentDevicesAreNamed) {
  Tensor x = ones({2, 3}), elsewhere = ones({2, 3});
  elsewhere.impl().storage->device = Device{DeviceType::CUDA, 1};
  auto msg = message_of([&] { add(x, elsewhere); });
  elsewhere.impl().storage->device = cpu_device();
  expect_contains(msg, {"add:", "input 'b' is on cuda:1 but input 'a' is on cpu", "share one device"});
}
