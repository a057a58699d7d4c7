// Notebooks: a Jupyter server per notebook, reached through the studio (its
// kernel's WebSocket too), `kiln` importable in it, its working folder saved
// to the store when it stops and restored when it starts again, and stopped
// by itself when idle.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "kiln/studio.h"
#include "support/job_files.h"
#include "support/studio_fixture.h"

using namespace kiln;
using json = nlohmann::json;
using kiln::testing::fresh_dir;
using kiln::testing::Studio;
using kiln::testing::StudioApi;

namespace {

json wait_for(StudioApi& api, const std::string& name, const std::function<bool(const json&)>& pred, int seconds = 60) {
  json nb;
  for (int i = 0; i < seconds * 10; ++i) {
    nb = api.call("GET", "/api/v1/notebooks/" + name).second;
    if (pred(nb)) return nb;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "notebook " << name << " stayed " << nb.dump();
  return nb;
}

// Runs `code` in the kernel over its WebSocket, through the studio; returns what it printed.
std::string run_in_kernel(int port, const std::string& token, const std::string& path, const std::string& code) {
  namespace websocket = boost::beast::websocket;
  using tcp = boost::asio::ip::tcp;
  boost::asio::io_context io;
  websocket::stream<tcp::socket> ws(io);
  ws.next_layer().connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
  timeval limit{60, 0};
  ::setsockopt(ws.next_layer().native_handle(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  ws.set_option(websocket::stream_base::decorator(
      [&](websocket::request_type& req) { req.set(boost::beast::http::field::authorization, "Bearer " + token); }));
  ws.handshake("127.0.0.1:" + std::to_string(port), path);
  const json request = {
      {"header", {{"msg_id", "run-1"}, {"username", "test"}, {"session", "test"}, {"msg_type", "execute_request"},
                  {"version", "5.3"}, {"date", ""}}},
      {"parent_header", json::object()},
      {"metadata", json::object()},
      {"content", {{"code", code}, {"silent", false}, {"store_history", false}, {"user_expressions", json::object()},
                   {"allow_stdin", false}, {"stop_on_error", true}}},
      {"channel", "shell"},
      {"buffers", json::array()}};
  ws.text(true);
  ws.write(boost::asio::buffer(request.dump()));
  std::string printed;
  for (int i = 0; i < 100; ++i) {
    boost::beast::flat_buffer buffer;
    ws.read(buffer);
    const json message = json::parse(boost::beast::buffers_to_string(buffer.data()), nullptr, false);
    if (!message.is_object() || message["parent_header"].value("msg_id", "") != "run-1") continue;
    const std::string type = message["header"].value("msg_type", "");
    if (type == "stream") printed += message["content"].value("text", "");
    if (type == "error") printed += "error: " + message["content"].value("evalue", "");
    if (type == "status" && message["content"].value("execution_state", "") == "idle") break;
  }
  ws.close(websocket::close_code::normal);
  return printed;
}

}  // namespace

TEST(StudioNotebooks, CodeRunsThroughTheStudioAndTheWorkOutlivesTheNotebook) {
  if (::access("/usr/bin/jupyter-notebook", X_OK) != 0) GTEST_SKIP() << "apt-get install jupyter-notebook";
  auto dir = fresh_dir("notebooks");
  Studio s(dir);
  const std::string token = kiln::testing::create_token(dir, "ann", studio::Scope::Write);
  StudioApi api(s.port, token);
  auto bad = api.call("POST", "/api/v1/notebooks", R"({"name": "x", "spec": "tpu-1"})");
  EXPECT_EQ(bad.first, 400);
  EXPECT_NE(bad.second.dump().find("is not a flavour: the studio offers cpu-N"), std::string::npos) << bad.second.dump();

  auto made = api.call("POST", "/api/v1/notebooks", R"({"name": "nb", "spec": "cpu-1", "idle_timeout_s": 600})");
  ASSERT_EQ(made.first, 201) << made.second.dump();
  json nb = wait_for(api, "nb", [](const json& j) { return j["state"] == "Running" || j["state"] == "Stopped"; });
  ASSERT_EQ(nb["state"], "Running") << nb.dump();
  EXPECT_EQ(nb["spec"]["cpus"], 1);
  EXPECT_EQ(nb["spec"]["memory_mb"], 4096);
  const std::string base = "/api/v1/notebooks/nb/proxy/api/";
  // Files through the studio, with the caller's token: Jupyter's contents API.
  EXPECT_EQ(api.call("GET", base + "contents").first, 200);
  auto put = api.call("PUT", base + "contents/hello.txt", R"({"type": "file", "format": "text", "content": "hi"})");
  ASSERT_EQ(put.first, 201) << put.second.dump();
  // No token, no notebook.
  httplib::Client anonymous("127.0.0.1", s.port);
  EXPECT_EQ(anonymous.Get(base + "contents")->status, 401);

  // Code, through the kernel's WebSocket tunnelled by the studio: a cell that trains W1 for one epoch
  // with kiln and saves the weights in the notebook's folder.
  auto kernel = api.call("POST", base + "kernels", "{}");
  ASSERT_EQ(kernel.first, 201) << kernel.second.dump();
  const std::string cell =
      "import kiln, os\n"
      "from kiln import nn\n"
      "from kiln.dataset import vision\n"
      "data = kiln.dataset.FashionMnistDataset('/usr/share/datasets/fashion-mnist', 'train').map(\n"
      "    [vision.Rescale(1 / 255), vision.HWC2CHW()], 'image').batch(64)\n"
      "net = nn.SequentialCell(nn.Flatten(), nn.Dense(784, 512), nn.ReLU(), nn.Dense(512, 256), nn.ReLU(),\n"
      "                        nn.Dense(256, 10))\n"
      "model = kiln.train.Model(net, loss_fn=nn.CrossEntropyLoss(),\n"
      "                         optimizer=nn.SGD(net.trainable_params(), learning_rate=0.05, momentum=0.9))\n"
      "history = model.train(1, data)\n"
      "kiln.save_checkpoint(net, 'w1.safetensors')\n"
      "print('epochs', len(history), 'loss below 1:', history[0]['loss'] < 1.0, os.environ['KILN_STUDIO_URL'])";
  const std::string printed =
      run_in_kernel(s.port, token, base + "kernels/" + kernel.second["id"].get<std::string>() + "/channels", cell);
  EXPECT_NE(printed.find("epochs 1 loss below 1: True http://127.0.0.1:" + std::to_string(s.port)), std::string::npos)
      << printed;

  // Stopped, its work is in the store; started again, it is back in the folder.
  ASSERT_EQ(api.call("POST", "/api/v1/notebooks/nb/stop").first, 202);
  nb = wait_for(api, "nb", [](const json& j) { return j["state"] == "Stopped"; });
  EXPECT_EQ(nb["reason"], "stopped on request; its work is saved");
  auto saved = api.http.Get("/api/v1/buckets/default-notebooks/objects/nb/hello.txt");
  ASSERT_EQ(saved->status, 200);
  EXPECT_EQ(saved->body, "hi");
  EXPECT_EQ(api.call("GET", "/api/v1/buckets/default-notebooks/objects/nb/w1.safetensors").first, 200);
  EXPECT_EQ(api.call("GET", base + "contents").first, 503);
  ASSERT_EQ(api.call("POST", "/api/v1/notebooks/nb/start").first, 202);
  wait_for(api, "nb", [](const json& j) { return j["state"] == "Running"; });
  auto back = api.call("GET", base + "contents/hello.txt");
  ASSERT_EQ(back.first, 200) << back.second.dump();
  EXPECT_EQ(back.second["content"], "hi");
  auto weights = api.call("GET", base + "contents/w1.safetensors?content=0");
  ASSERT_EQ(weights.first, 200) << weights.second.dump();
  EXPECT_GT(weights.second["size"].get<int64_t>(), (784 * 512 + 512 * 256) * 4);
  EXPECT_EQ(api.call("DELETE", "/api/v1/notebooks/nb").first, 409) << "a running notebook is not deleted";

  // A browser's way in: `kiln notebook open` gives a URL that sets the token as a cookie for this notebook.
  auto listed = s.kiln(token, dir, "notebook list");
  ASSERT_EQ(listed.first, 0) << listed.second;
  EXPECT_NE(listed.second.find("notebook nb               Running   project default      1 CPU cores, 4096 MB"),
            std::string::npos) << listed.second;
  auto opened = s.kiln(token, dir, "notebook open nb");
  ASSERT_EQ(opened.first, 0) << opened.second;
  const std::string url = opened.second.substr(0, opened.second.find('\n'));
  ASSERT_NE(url.find("/api/v1/notebooks/nb/open?token=" + token), std::string::npos) << url;
  httplib::Client browser("127.0.0.1", s.port);
  auto redirect = browser.Get(url.substr(url.find("/api/")));
  ASSERT_EQ(redirect->status, 302);
  const std::string cookie = redirect->get_header_value("Set-Cookie");
  EXPECT_NE(cookie.find("Path=/api/v1/notebooks/nb/; HttpOnly"), std::string::npos) << cookie;
  auto page = browser.Get("/api/v1/notebooks/nb/proxy/tree", {{"Cookie", cookie.substr(0, cookie.find(';'))}});
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("Jupyter"), std::string::npos);

  // Idle for its timeout (no request, no kernel at work), it stops by itself.
  ASSERT_EQ(api.call("POST", "/api/v1/notebooks", R"({"name": "quiet", "spec": "cpu-1", "idle_timeout_s": 2})").first, 201);
  wait_for(api, "quiet", [](const json& j) { return j["state"] == "Running"; });
  json quiet = wait_for(api, "quiet", [](const json& j) { return j["state"] == "Stopped"; });
  EXPECT_EQ(quiet["reason"], "idle for 2 s; its work is saved");
  EXPECT_EQ(api.call("GET", "/api/v1/notebooks").second["notebooks"].size(), 2u);
  ASSERT_EQ(api.call("POST", "/api/v1/notebooks/nb/stop").first, 202);
  wait_for(api, "nb", [](const json& j) { return j["state"] == "Stopped"; });
  EXPECT_EQ(api.call("DELETE", "/api/v1/notebooks/quiet").first, 204);
}
