// kiln serve end to end, over loopback: the Open Inference Protocol v2
// endpoints, JSON and binary tensors, dynamic batching under concurrent
// clients, every kind of bad request, slow clients, and graceful shutdown.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "kiln/kiln.h"
#include "kiln/runtime.h"
#include "kiln/serve.h"
#include "support/close.h"
#include "support/error_message.h"

namespace {
using namespace kiln;
namespace kt = kiln::testing;
namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kCnn = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/onnx/cnn.onnx";  // dynamic batch
const std::string kMlp = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/onnx/mlp.onnx";  // fixed batch 2

// A repository with the CNN under the name "cnn", versions 1 and 3, and the given config.
fs::path make_repository(const std::string& config) {
  static int counter = 0;
  fs::path root = fs::temp_directory_path() / ("kiln_repo_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  for (const char* v : {"1", "3"}) {
    fs::create_directories(root / "cnn" / v);
    fs::copy_file(kCnn, root / "cnn" / v / "model.onnx", fs::copy_options::overwrite_existing);
  }
  std::ofstream(root / "cnn" / "config.yaml") << config;
  return root;
}

struct Running {
  std::unique_ptr<Server> server;
  int port = 0;
  explicit Running(ServeOptions o) {
    o.port = 0;
    o.host = "127.0.0.1";
    if (o.access_log == "-") o.access_log = "";
    server = std::make_unique<Server>(o);
    port = server->start();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    return c;
  }
};

json infer_body(const Tensor& x) {
  return {{"id", "r1"},
          {"inputs", {{{"name", "input"}, {"shape", x.shape()}, {"datatype", "FP32"}, {"data", x.contiguous().to_vector<float>()}}}}};
}

Tensor output_of(const std::string& body) {
  json j = json::parse(body);
  const json& o = j["outputs"][0];
  return from_vector(o["data"].get<std::vector<float>>(), o["shape"].get<Shape>());
}

Tensor session_output(const Tensor& x) {
  static InferenceSession session(kCnn);
  return session.run({x})[0];
}

TEST(Serve, HealthAndMetadata) {
  ServeOptions o;
  o.model_repository = make_repository("max_batch_size: 8\n").string();
  Running s(o);
  auto c = s.client();
  EXPECT_EQ(c.Get("/v2/health/live")->status, 200);
  EXPECT_EQ(c.Get("/v2/health/ready")->status, 200);
  auto server = json::parse(c.Get("/v2")->body);
  EXPECT_EQ(server["name"], "kiln");
  EXPECT_EQ(server["extensions"][0], "binary_tensor_data");
  auto meta = json::parse(c.Get("/v2/models/cnn")->body);
  EXPECT_EQ(meta["versions"], json({"1", "3"}));
  EXPECT_EQ(meta["inputs"][0]["name"], "input");
  EXPECT_EQ(meta["inputs"][0]["datatype"], "FP32");
  EXPECT_EQ(meta["inputs"][0]["shape"], json({-1, 1, 28, 28}));
  EXPECT_EQ(meta["outputs"][0]["shape"], json({-1, 10}));
  EXPECT_EQ(c.Get("/v2/models/cnn/versions/3")->status, 200);
  EXPECT_EQ(c.Get("/v2/models/cnn/ready")->status, 200);
  auto missing = c.Get("/v2/models/resnet");
  EXPECT_EQ(missing->status, 404);
  EXPECT_NE(missing->body.find("served models: cnn"), std::string::npos) << missing->body;
  EXPECT_EQ(c.Get("/v2/models/cnn/versions/2")->status, 404);
  EXPECT_EQ(c.Get("/nothing/here")->status, 404);
}

TEST(Serve, JsonAndBinaryInferMatchTheSession) {
  ServeOptions o;
  o.model = kCnn;
  Running s(o);
  auto c = s.client();
  Tensor x = rand({3, 1, 28, 28});
  auto res = c.Post("/v2/models/cnn/infer", infer_body(x).dump(), "application/json");
  ASSERT_EQ(res->status, 200) << res->body;
  auto j = json::parse(res->body);
  EXPECT_EQ(j["id"], "r1");
  EXPECT_EQ(j["model_version"], "1");
  EXPECT_TRUE(kt::all_close(output_of(res->body), session_output(x), 1e-6, 1e-6));

  // Binary in and out: a JSON header of Inference-Header-Content-Length bytes, then the raw tensor.
  json header = {{"inputs", {{{"name", "input"}, {"shape", x.shape()}, {"datatype", "FP32"},
                              {"parameters", {{"binary_data_size", x.numel() * 4}}}}}},
                 {"outputs", {{{"name", "output"}, {"parameters", {{"binary_data", true}}}}}}};
  std::string head = header.dump();
  std::string body = head + std::string(static_cast<const char*>(x.raw_data()), x.numel() * 4);
  httplib::Headers h = {{"Inference-Header-Content-Length", std::to_string(head.size())}};
  auto bin = c.Post("/v2/models/cnn/infer", h, body, "application/octet-stream");
  ASSERT_EQ(bin->status, 200) << bin->body;
  size_t json_len = std::stoul(bin->get_header_value("Inference-Header-Content-Length"));
  auto meta = json::parse(bin->body.substr(0, json_len));
  EXPECT_EQ(meta["outputs"][0]["parameters"]["binary_data_size"], 3 * 10 * 4);
  ASSERT_EQ(bin->body.size(), json_len + 120);
  Tensor y = from_buffer(bin->body.data() + json_len, {3, 10}, DType::Float32);
  EXPECT_TRUE(kt::all_close(y, session_output(x), 1e-6, 1e-6));
}

TEST(Serve, BadRequestsGetClearErrorsAndTheServerKeepsServing) {
  ServeOptions o;
  o.model_repository = make_repository("max_batch_size: 4\n").string();
  o.max_body_bytes = 1 << 20;
  Running s(o);
  auto c = s.client();
  auto post = [&](const std::string& body) { return c.Post("/v2/models/cnn/infer", body, "application/json"); };
  auto expect = [&](const std::string& body, int status, const std::string& words) {
    auto r = post(body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << body.substr(0, 80) << " -> " << r->body;
    EXPECT_NE(r->body.find(words), std::string::npos) << r->body;
  };
  expect("{\"inputs\": [", 400, "not valid JSON");
  expect("[1, 2]", 400, "JSON object");
  expect("{\"inputs\": []}", 400, "non-empty");
  Tensor x = rand({2, 1, 28, 28});
  json wrong_shape = infer_body(rand({2, 28, 28}));
  expect(wrong_shape.dump(), 400, "input 'input': expected FP32 [batch, 1, 28, 28] (batch 1 to 4), got FP32 [2, 28, 28]");
  json too_big = infer_body(rand({5, 1, 28, 28}));
  expect(too_big.dump(), 400, "(batch 1 to 4), got FP32 [5, 1, 28, 28]");
  json wrong_type = infer_body(x);
  wrong_type["inputs"][0]["datatype"] = "INT64";
  expect(wrong_type.dump(), 400, "input 'input': integer data expected");
  wrong_type["inputs"][0]["datatype"] = "FP64";
  expect(wrong_type.dump(), 400, "expected FP32 [batch, 1, 28, 28] (batch 1 to 4), got FP64");
  wrong_type["inputs"][0]["datatype"] = "STRING";
  expect(wrong_type.dump(), 400, "datatype 'STRING' is not supported");
  json unknown = infer_body(x);
  unknown["inputs"][0]["name"] = "pixels";
  expect(unknown.dump(), 400, "has no input 'pixels'; its inputs are: input");
  json short_data = infer_body(x);
  short_data["inputs"][0]["data"] = {1.0, 2.0};
  expect(short_data.dump(), 400, "data holds 2 values but shape [2, 1, 28, 28] needs 1568");
  json bad_output = infer_body(x);
  bad_output["outputs"] = {{{"name", "logits"}}};
  expect(bad_output.dump(), 400, "has no output 'logits'");
  auto huge = post(std::string(2 << 20, ' '));
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 413);
  // Still serving, with the right answer.
  auto ok = post(infer_body(x).dump());
  ASSERT_EQ(ok->status, 200);
  EXPECT_TRUE(kt::all_close(output_of(ok->body), session_output(x), 1e-6, 1e-6));
  auto metrics = c.Get("/metrics")->body;
  EXPECT_NE(metrics.find("kiln_inference_requests_total{model=\"cnn\",outcome=\"success\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kiln_inference_requests_total{model=\"cnn\",outcome=\"failure\"} 11"), std::string::npos) << metrics;
}

TEST(Serve, ConcurrentClientsAreBatchedAndAnsweredCorrectly) {
  ServeOptions o;
  o.model_repository =
      make_repository("max_batch_size: 32\ndynamic_batching: {max_queue_delay_microseconds: 3000}\nwarmup: [1, 32]\n")
          .string();
  Running s(o);
  const int clients = 12, each = 8;
  std::vector<int> wrong(clients, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t)
    threads.emplace_back([&, t] {
      auto c = s.client();
      for (int r = 0; r < each; ++r) {
        Tensor x = rand({1 + (t + r) % 3, 1, 28, 28});
        auto res = c.Post("/v2/models/cnn/infer", infer_body(x).dump(), "application/json");
        if (!res || res->status != 200 || !kt::all_close(output_of(res->body), session_output(x), 1e-5, 1e-5)) ++wrong[t];
      }
    });
  for (auto& t : threads) t.join();
  for (int w : wrong) EXPECT_EQ(w, 0);
  auto metrics = s.client().Get("/metrics")->body;
  EXPECT_NE(metrics.find("outcome=\"success\"} " + std::to_string(clients * each)), std::string::npos) << metrics;
  // Fewer batches than requests: some requests shared a batch.
  auto at = metrics.find("kiln_inference_batch_size_count{model=\"cnn\"} ");
  ASSERT_NE(at, std::string::npos);
  int batches = std::stoi(metrics.substr(at + std::strlen("kiln_inference_batch_size_count{model=\"cnn\"} ")));
  EXPECT_LT(batches, clients * each) << metrics;
}

TEST(Serve, AFullQueueAnswers503) {
  ServeOptions o;
  o.model_repository =
      make_repository("max_batch_size: 2\ndynamic_batching: {max_queue_delay_microseconds: 0, max_queue_size: 1}\n").string();
  Running s(o);
  std::atomic<int> ok{0}, unavailable{0};
  std::mutex mu;
  std::string unexpected;  // anything but 200 or "queue is full"
  for (int round = 0; round < 10 && unavailable == 0; ++round) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 32; ++t)
      threads.emplace_back([&] {
        auto res = s.client().Post("/v2/models/cnn/infer", infer_body(rand({2, 1, 28, 28})).dump(), "application/json");
        if (res && res->status == 200) {
          ++ok;
        } else if (res && res->status == 503 && res->body.find("queue is full") != std::string::npos) {
          ++unavailable;
        } else {
          std::lock_guard<std::mutex> lock(mu);
          unexpected += (res ? std::to_string(res->status) + " " + res->body : httplib::to_string(res.error())) + "\n";
        }
      });
    for (auto& t : threads) t.join();
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(unavailable, 0);
  EXPECT_EQ(unexpected, "");
}

TEST(Serve, SlowClientsDoNotBlockOthers) {
  ServeOptions o;
  o.model = kCnn;
  Running s(o);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(s.port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  std::string partial = "POST /v2/models/cnn/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{\"inp";
  ASSERT_GT(::write(fd, partial.data(), partial.size()), 0);  // and then nothing more for a while
  Tensor x = rand({1, 1, 28, 28});
  auto res = s.client().Post("/v2/models/cnn/infer", infer_body(x).dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  ::close(fd);
  EXPECT_EQ(s.client().Get("/v2/health/live")->status, 200);
}

// A loopback connection that sends raw bytes and reads what comes back.
struct RawConnection {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  explicit RawConnection(int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawConnection() { ::close(fd); }
  void send(const std::string& bytes) { ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size())); }
  // Reads until `count` occurrences of `marker` have arrived (or the peer closes or stalls).
  std::string read_until(const std::string& marker, int count = 1) {
    std::string got;
    char buf[4096];
    auto occurrences = [&] {
      int n = 0;
      for (size_t at = got.find(marker); at != std::string::npos; at = got.find(marker, at + 1)) ++n;
      return n;
    };
    while (occurrences() < count) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }
};

TEST(Serve, HttpDetailsClientsRelyOn) {
  ServeOptions o;
  o.model = kCnn;
  Running s(o);
  // A known route with the wrong method: 405 naming the right one.
  auto c = s.client();
  auto wrong = c.Get("/v2/models/cnn/infer");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(wrong->get_header_value("Allow"), "POST");
  EXPECT_NE(wrong->body.find("use POST"), std::string::npos) << wrong->body;
  // Percent-encoded paths are decoded; a query string is ignored.
  EXPECT_EQ(c.Get("/v2/models/%63nn?verbose=1")->status, 200);

  // Two requests in one write: two answers, in order.
  RawConnection pipelined(s.port);
  pipelined.send("GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\nGET /v2/models/nope HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string both = pipelined.read_until("HTTP/1.1 ", 2);
  size_t first = both.find("HTTP/1.1 200"), second = both.find("HTTP/1.1 404");
  EXPECT_NE(first, std::string::npos) << both;
  EXPECT_NE(second, std::string::npos) << both;
  EXPECT_LT(first, second) << both;

  // Expect: 100-continue (curl sends it for bodies over 1 KiB): the interim
  // answer comes before the body is sent, then the real one.
  Tensor x = rand({1, 1, 28, 28});
  std::string body = infer_body(x).dump();
  RawConnection careful(s.port);
  std::string head = "POST /v2/models/cnn/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n";
  head.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n\r\n");
  careful.send(head);
  EXPECT_EQ(careful.read_until("\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  careful.send(body);
  std::string answer = careful.read_until("\"outputs\"");
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;

  // Not HTTP: 400, and the connection closes.
  RawConnection garbage(s.port);
  garbage.send("HELLO THERE\r\n\r\n");
  std::string refused = garbage.read_until("\"}");
  EXPECT_EQ(refused.rfind("HTTP/1.1 400", 0), 0u) << refused;
  EXPECT_NE(refused.find("malformed HTTP request"), std::string::npos) << refused;
  EXPECT_EQ(c.Get("/v2/health/live")->status, 200);
}

TEST(Serve, ShutdownDrainsInFlightRequests) {
  ServeOptions o;
  // A long queue delay keeps the request in flight while shutdown starts.
  o.model_repository =
      make_repository("max_batch_size: 8\ndynamic_batching: {max_queue_delay_microseconds: 400000}\n").string();
  Running s(o);
  int status = 0;
  std::thread request([&] {
    auto res = s.client().Post("/v2/models/cnn/infer", infer_body(rand({1, 1, 28, 28})).dump(), "application/json");
    status = res ? res->status : -1;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t0 = std::chrono::steady_clock::now();
  s.server->shutdown();
  request.join();
  EXPECT_EQ(status, 200);
  EXPECT_FALSE(s.server->ready());
  EXPECT_GT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(150)) << "shutdown did not wait";
  EXPECT_FALSE(s.client().Get("/v2/health/live")) << "still listening after shutdown";
}

TEST(Serve, BadRepositoriesAreRefusedAtStart) {
  ServeOptions o;
  o.model_repository = make_repository("max_batch_size: 8\nbatching: yes\n").string();
  std::string msg = kt::message_of([&] { Running s(o); });
  EXPECT_NE(msg.find("unknown key 'batching'"), std::string::npos) << msg;
  fs::path fixed = make_repository("max_batch_size: 8\n");
  fs::copy_file(kMlp, fixed / "cnn" / "1" / "model.onnx", fs::copy_options::overwrite_existing);
  o.model_repository = fixed.string();
  msg = kt::message_of([&] { Running s(o); });
  EXPECT_NE(msg.find("has no dynamic batch axis"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--dynamic-batch"), std::string::npos) << msg;
  ServeOptions none;
  none.model = "/nonexistent.onnx";
  EXPECT_NE(kt::message_of([&] { Running s(none); }).find("is not a file"), std::string::npos);
}

TEST(Serve, AccessLogHasOneLinePerRequest) {
  ServeOptions o;
  o.model = kCnn;
  fs::path log = fs::temp_directory_path() / ("kiln_access_" + std::to_string(::getpid()) + ".log");
  fs::remove(log);
  o.access_log = log.string();
  {
    Running s(o);
    auto c = s.client();
    c.Get("/v2/health/ready");
    c.Post("/v2/models/cnn/infer", "{", "application/json");
  }
  std::ifstream f(log);
  std::string first, second;
  std::getline(f, first);
  std::getline(f, second);
  EXPECT_NE(first.find("127.0.0.1 GET /v2/health/ready 200"), std::string::npos) << first;
  EXPECT_NE(second.find("POST /v2/models/cnn/infer 400"), std::string::npos) << second;
}

}  // namespace

namespace {

// The real `kiln serve` process: SIGTERM while a request is in flight; the
// request is answered and the process exits 0.
TEST(ServeProcess, SigtermDrainsAndExits) {
  fs::path repo = make_repository("max_batch_size: 8\ndynamic_batching: {max_queue_delay_microseconds: 400000}\n");
  fs::path log = repo / "serve.log";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stderr);
    ::execl(KILN_CLI, KILN_CLI, "serve", "--model-repository", repo.c_str(), "--host", "127.0.0.1", "--port", "0",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int port = 0;
  for (int i = 0; i < 300 && port == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream f(log);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto at = text.find("ready on 127.0.0.1:");
    if (at != std::string::npos) port = std::atoi(text.c_str() + at + std::strlen("ready on 127.0.0.1:"));
  }
  ASSERT_GT(port, 0) << "kiln serve did not become ready";
  int status = 0;
  std::thread request([&] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    auto res = c.Post("/v2/models/cnn/infer", infer_body(rand({1, 1, 28, 28})).dump(), "application/json");
    status = res ? res->status : -1;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::kill(pid, SIGTERM);
  request.join();
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  std::ifstream f(log);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("SIGTERM received; finishing in-flight requests"), std::string::npos) << text;
  EXPECT_NE(text.find("POST /v2/models/cnn/infer 200"), std::string::npos) << text;
}

}  // namespace
