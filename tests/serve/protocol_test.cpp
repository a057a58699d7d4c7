// kiln serve where a lenient reading would hurt: values the model or the
// datatype cannot take, request framing two parties could read differently,
// internal messages and client bytes that must not leak into answers or logs,
// and refusals that must still be counted.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "support/close.h"
#include "support/serve_fixture.h"

namespace {
using namespace kiln;
namespace kt = kiln::testing;
namespace fs = std::filesystem;
using json = nlohmann::json;
using kt::infer_body, kt::kCnn, kt::kMlp, kt::make_repository, kt::RawConnection, kt::Running;

httplib::Result post_binary(const Running& s, const Tensor& x) {
  json header = {{"inputs", {{{"name", "input"}, {"shape", x.shape()}, {"datatype", "FP32"},
                              {"parameters", {{"binary_data_size", x.numel() * 4}}}}}}};
  std::string head = header.dump();
  std::string body = head + std::string(static_cast<const char*>(x.raw_data()), x.numel() * 4);
  return s.client().Post("/v2/models/cnn/infer", {{"Inference-Header-Content-Length", std::to_string(head.size())}}, body,
                         "application/octet-stream");
}

// JSON has no inf or NaN: they come back as null, read here as NaN.
Tensor output_with_nulls(const std::string& body) {
  json o = json::parse(body)["outputs"][0];
  std::vector<float> values;
  for (const auto& v : o["data"]) values.push_back(v.is_null() ? std::numeric_limits<float>::quiet_NaN() : v.get<float>());
  return from_vector(values, o["shape"].get<Shape>());
}

// The model run node by node, non-finite values made NaN as in a JSON answer.
Tensor eager_output(const Tensor& x) {
  SessionOptions o;
  o.optimization_level = 0;
  Tensor y = InferenceSession(kCnn, o).run({x})[0].contiguous();
  for (int64_t i = 0; i < y.numel(); ++i)
    if (!std::isfinite(y.data<float>()[i])) y.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
  return y;
}

// Sends raw bytes and returns the whole answer (the server closes after refusals).
std::string raw_exchange(const Running& s, const std::string& request) {
  RawConnection c(s.port);
  c.send(request);
  return c.read_until("\"}");
}

TEST(ServeInput, NonFiniteValuesAreRefusedUnlessTheConfigAllowsThem) {
  for (bool allowed : {false, true}) {
    ServeOptions o;
    o.model_repository = make_repository(allowed ? "allow_non_finite: true\n" : "").string();
    Running s(o);
    for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
      Tensor x = rand({2, 1, 28, 28});
      x.data<float>()[28 * 28 + 14 * 28 + 14] = bad;  // [1, 0, 14, 14]
      auto r = post_binary(s, x);
      ASSERT_TRUE(r);
      if (allowed) {
        // Run node by node: the same answer each time, and for the row alone.
        ASSERT_EQ(r->status, 200) << r->body;
        Tensor reference = eager_output(x);
        for (int repeat = 0; repeat < 2; ++repeat)
          EXPECT_TRUE(kt::all_close(output_with_nulls(post_binary(s, x)->body), reference, 1e-4, 1e-4, true)) << bad;
        EXPECT_TRUE(kt::all_close(output_with_nulls(r->body), reference, 1e-4, 1e-4, true)) << bad;
        Tensor row = x.slice(0, 1, 2).contiguous();
        EXPECT_TRUE(kt::all_close(output_with_nulls(post_binary(s, row)->body), reference.slice(0, 1, 2), 1e-4, 1e-4, true))
            << bad;
        continue;
      }
      EXPECT_EQ(r->status, 400) << r->body;
      EXPECT_NE(r->body.find(std::string("input 'input' holds ") + (std::isnan(bad) ? "NaN" : "inf") +
                             " at [1, 0, 14, 14]"),
                std::string::npos)
          << r->body;
      EXPECT_NE(r->body.find("allow_non_finite: true"), std::string::npos) << r->body;
    }
    fs::remove_all(o.model_repository);
  }
}

TEST(ServeInput, ValuesOutsideTheDatatypeAreRefused) {
  ServeOptions o;
  o.model = kCnn;
  Running s(o);
  auto c = s.client();
  json body = infer_body(zeros({1, 1, 28, 28}));
  body["inputs"][0]["data"][5] = 1e39;  // no float holds it
  auto r = c.Post("/v2/models/cnn/infer", body.dump(), "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("1e+39 at [0, 0, 0, 5] is outside the range of its datatype"), std::string::npos) << r->body;
  json ints = {{"inputs", {{{"name", "input"}, {"shape", {2}}, {"datatype", "INT32"}, {"data", {1, 3000000000LL}}}}}};
  r = c.Post("/v2/models/cnn/infer", ints.dump(), "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("3000000000 is outside the range of its datatype"), std::string::npos) << r->body;
  body["inputs"][0]["data"][5] = 3e38;  // large, but a float
  EXPECT_EQ(c.Post("/v2/models/cnn/infer", body.dump(), "application/json")->status, 200);
  // The largest float as NumPy prints it is a little over its exact value, and still that float.
  std::string text = body.dump();
  const std::string largest = "3.4028235e+38";
  text.replace(text.find("3e+38"), 5, largest);
  r = c.Post("/v2/models/cnn/infer", text, "application/json");
  EXPECT_EQ(r->status, 200) << r->body;
  text.replace(text.find(largest), largest.size(), "3.4028236e+38");  // rounds to inf
  EXPECT_EQ(c.Post("/v2/models/cnn/infer", text, "application/json")->status, 400);
}

TEST(ServeInput, RaggedNestedDataIsRefused) {
  ServeOptions o;
  o.model = kMlp;
  Running s(o);
  auto c = s.client();
  auto post = [&](const json& data, const json& shape) {
    json body = {{"inputs", {{{"name", "input"}, {"shape", shape}, {"datatype", "FP32"}, {"data", data}}}}};
    return c.Post("/v2/models/mlp/infer", body.dump(), "application/json");
  };
  const std::vector<float> row(28, 0.5f), short_row(27, 0.5f), long_row(29, 0.5f);
  std::vector<std::vector<float>> rows(28, row), uneven(28, row);
  uneven[3] = short_row, uneven[4] = long_row;  // 784 values, but not 28 rows of 28
  const json image = json::array({rows}), bad_image = json::array({uneven});
  auto r = post({image, bad_image}, {2, 1, 28, 28});
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("ragged (lists of 28 and of 27 values at depth 4)"), std::string::npos) << r->body;
  json mixed = json::array({image, 0.5});
  r = post(mixed, {2, 1, 28, 28});
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("ragged"), std::string::npos) << r->body;
  r = post({image, image}, {2, 1, 28, 28});
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(post(std::vector<float>(2 * 784, 0.5f), {2, 1, 28, 28})->status, 200);
}

TEST(ServeProtocol, FramingIsReadStrictly) {
  ServeOptions o;
  o.model = kCnn;
  Running s(o);
  // A header length with trailing junk is not a length.
  Tensor x = rand({1, 1, 28, 28});
  std::string json_body = infer_body(x).dump();
  auto r = s.client().Post("/v2/models/cnn/infer", {{"Inference-Header-Content-Length", std::to_string(json_body.size()) + "junk"}},
                           json_body, "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("is not a non-negative whole number"), std::string::npos) << r->body;
  // Transfer-Encoding other than chunked, or beside Content-Length: refused.
  std::string answer = raw_exchange(
      s, "POST /v2/models/cnn/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer;
  EXPECT_NE(answer.find("Transfer-Encoding 'xchunked' is not supported"), std::string::npos) << answer;
  answer = raw_exchange(
      s, "POST /v2/models/cnn/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n2\r\n{}\r\n0\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer;
  // All the headers together, not each one, are held to 64 KiB.
  std::string many = "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 10000; ++i) many += "X-Filler-" + std::to_string(i) + ": 0\r\n";
  answer = raw_exchange(s, many + "\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 431", 0), 0u) << answer.substr(0, 200);
  // Version 00001 is not version 1.
  EXPECT_EQ(s.client().Get("/v2/models/cnn/versions/00001")->status, 404);
  EXPECT_EQ(s.client().Get("/v2/models/cnn/versions/1")->status, 200);
  // Refusals of the HTTP layer are counted by code (once written, a moment
  // after the client has them).
  std::string metrics;
  for (int i = 0; i < 100; ++i) {
    metrics = s.client().Get("/metrics")->body;
    if (metrics.find("kiln_http_responses_total{code=\"431\"}") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(metrics.find("kiln_http_responses_total{code=\"431\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kiln_http_responses_total{code=\"400\"} 3"), std::string::npos) << metrics;
}

TEST(ServeProtocol, ClientBytesNeitherBreakAnswersNorForgeLogLines) {
  fs::path log = fs::temp_directory_path() / ("kiln_access_" + std::to_string(::getpid()) + ".log");
  fs::remove(log);
  ServeOptions o;
  o.model = kCnn;
  o.access_log = log.string();
  Running s(o);
  auto c = s.client();
  // Not UTF-8 once decoded: a 404 with a valid JSON body, no library's exception text.
  auto r = c.Get("/v2/models/%FF");
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(json::accept(r->body)) << r->body;
  EXPECT_EQ(r->body.find("exception"), std::string::npos) << r->body;
  r = c.Get("/x%0d%0a2099-01-01T00:00:00Z%20evil%20GET%20/admin%20200");
  EXPECT_EQ(r->status, 404);
  s.server->shutdown();
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  // One line per request, escaped; a request's line is written once its
  // answer has gone out, so two lines may land in either order.
  ASSERT_EQ(lines.size(), 2u);
  auto logged = [&](const std::string& text) {
    return std::count_if(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
  };
  EXPECT_EQ(logged("/v2/models/\\xff 404"), 1) << lines[0] << "\n" << lines[1];
  EXPECT_EQ(logged("/x\\x0d\\x0a2099-01-01T00:00:00Z\\x20evil\\x20GET\\x20/admin\\x20200 404"), 1)
      << lines[0] << "\n" << lines[1];
  for (const std::string& l : lines) {
    EXPECT_EQ(l.rfind("2099", 0), std::string::npos) << l;
    // time, address, method, path, status, bytes in, bytes out, duration: no field a client can add
    EXPECT_EQ(std::count(l.begin(), l.end(), ' '), 7) << l;
  }
  fs::remove(log);
}

}  // namespace
