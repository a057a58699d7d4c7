// kiln serve with its models on a device other than the CPU: the reference
// backend stands in for a GPU here (its memory the host cannot read, so the
// server must stage inputs and copy outputs back as it would for CUDA).
// Batched and unbatched requests match the CPU's answers, each model's
// memory on its device is measured, and a budget holds it.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "kiln/kiln.h"
#include "support/close.h"
#include "support/error_message.h"
#include "support/serve_fixture.h"

namespace {
using namespace kiln;
namespace kt = kiln::testing;
using kt::infer_body, kt::make_repository, kt::output_of, kt::Running, kt::session_output;

std::atomic<int> g_reference_calls{0};
void count_reference_calls(const OpDef&, const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs)
    if (t.defined() && t.device().type == DeviceType::Reference) {
      ++g_reference_calls;
      return;
    }
}

// The value of a metric line `name{model="cnn"} V`, or -1.
double metric(const std::string& page, const std::string& line_start) {
  const auto at = page.find(line_start + " ");
  return at == std::string::npos ? -1 : std::stod(page.substr(at + line_start.size() + 1));
}

TEST(ServeOnADevice, BatchedRequestsRunThereAndMatchTheCpu) {
  g_reference_calls = 0;
  set_dispatch_observer(count_reference_calls);
  struct Unset {
    ~Unset() { set_dispatch_observer(nullptr); }
  } unset;
  ServeOptions o;
  o.model_repository = make_repository(
                           "max_batch_size: 4\ndynamic_batching: {max_queue_delay_microseconds: 2000}\n"
                           "warmup: [1, 4]\ndevice: reference\n")
                           .string();
  Running s(o);
  EXPECT_GT(g_reference_calls.load(), 0) << "the model's warm-up traced nothing on the device";
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t)
    clients.emplace_back([&, t] {
      auto c = s.client();
      for (int r = 0; r < 3; ++r) {
        const Tensor x = rand({1 + (t + r) % 2, 1, 28, 28});
        auto res = c.Post("/v2/models/cnn/infer", infer_body(x).dump(), "application/json");
        if (!res || res->status != 200 || !kt::all_close(output_of(res->body), session_output(x), 1e-4, 1e-4))
          ++wrong[t];
      }
    });
  for (auto& t : clients) t.join();
  for (int w : wrong) EXPECT_EQ(w, 0);
  // The weights and the compiled graphs' buffers are on the device, and counted.
  const std::string page = s.client().Get("/metrics")->body;
  EXPECT_GT(metric(page, "kiln_model_memory_bytes{model=\"cnn\"}"), 10000) << page;
}

TEST(ServeOnADevice, TheServersDeviceServesModelsThatNameNone) {
  ServeOptions o;
  o.model_repository = make_repository("max_batch_size: 0\n").string();  // unbatched: each request as it comes
  o.device = "reference";
  Running s(o);
  const Tensor x = rand({3, 1, 28, 28});
  auto res = s.client().Post("/v2/models/cnn/infer", infer_body(x).dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_TRUE(kt::all_close(output_of(res->body), session_output(x), 1e-4, 1e-4));
  // What the model holds on the device, counted.
  EXPECT_GT(metric(s.client().Get("/metrics")->body, "kiln_model_memory_bytes{model=\"cnn\"}"), 0);
}

TEST(ServeOnADevice, AModelOverItsMemoryBudgetDoesNotLoad) {
  ServeOptions o;
  o.model_repository =
      make_repository("max_batch_size: 4\nwarmup: [4]\ndevice: reference\nmemory_budget_mb: 0.01\n").string();
  const std::string what = kt::message_of([&] { Running s(o); });
  EXPECT_NE(what.find("model 'cnn' holds"), std::string::npos) << what;
  EXPECT_NE(what.find("on reference:0 once loaded and warmed up, over its memory_budget_mb of 0.01"), std::string::npos)
      << what;
  EXPECT_NE(what.find("max_batch_size"), std::string::npos) << what;  // what to change
  // Within a budget that fits, it serves.
  o.model_repository =
      make_repository("max_batch_size: 4\nwarmup: [4]\ndevice: reference\nmemory_budget_mb: 64\n").string();
  Running s(o);
  const Tensor x = rand({2, 1, 28, 28});
  auto res = s.client().Post("/v2/models/cnn/infer", infer_body(x).dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

TEST(ServeOnADevice, BadDeviceSettingsAreRefusedClearly) {
  ServeOptions o;
  o.model_repository = make_repository("device: nosuch\n").string();
  std::string what = kt::message_of([&] { Running s(o); });
  EXPECT_NE(what.find("nosuch"), std::string::npos) << what;
  EXPECT_NE(what.find("model 'cnn'"), std::string::npos) << what;
  o.model_repository = make_repository("memory_budget_mb: -5\n").string();
  what = kt::message_of([&] { Running s(o); });
  EXPECT_NE(what.find("memory_budget_mb must be >= 0"), std::string::npos) << what;
}

}  // namespace
