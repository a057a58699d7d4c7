// The process-group seam in libkiln: backends register by name, init picks
// one, and a program without libkiln_distributed is told what to link.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "kiln/dist.h"
#include "support/error_message.h"

namespace kiln {
namespace {

// One rank alone: every collective is the identity, done at once. Counts
// how many of them the synchronous forms marked as waited for at once.
class SoloGroup final : public dist::ProcessGroup {
 public:
  explicit SoloGroup(dist::Place place) : place_(std::move(place)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const dist::Place& place() const override { return place_; }
  const std::vector<int>& ranks() const override { return ranks_; }
  std::chrono::milliseconds timeout() const override { return std::chrono::seconds(1); }
  std::string backend() const override { return "solo"; }
  Stats stats() const override { return {collectives_, 0, 0}; }
  dist::Work all_reduce_async(Tensor, dist::ReduceOp) override { return done(); }
  dist::Work broadcast_async(Tensor, int) override { return done(); }
  dist::Work all_gather_async(Tensor out, Tensor in) override {
    out.copy_(in.reshape(out.shape()));
    return done();
  }
  dist::Work reduce_scatter_async(Tensor out, Tensor in, dist::ReduceOp) override {
    out.copy_(in);
    return done();
  }
  dist::Work barrier_async() override { return done(); }
  std::shared_ptr<dist::ProcessGroup> new_group(const std::vector<int>&) override {
    return std::make_shared<SoloGroup>(place_);
  }
  int waited_at_once = 0;

 private:
  dist::Work done() {
    ++collectives_;
    if (take_waited_at_once()) ++waited_at_once;
    return {};
  }
  dist::Place place_;
  std::vector<int> ranks_{0};
  int64_t collectives_ = 0;
};

TEST(DistBackends, ARegisteredBackendIsWhatInitMakes) {
  dist::register_backend("solo", [](const dist::Place& place, const dist::InitOptions&) {
    return std::make_shared<SoloGroup>(place);
  });
  auto names = dist::registered_backends();
  EXPECT_NE(std::find(names.begin(), names.end(), "solo"), names.end());
  dist::InitOptions options;
  options.backend = "solo";
  options.place.rank = 0;
  options.place.world_size = 1;
  auto group = dist::init(options);
  ASSERT_EQ(group->backend(), "solo");
  auto& solo = dynamic_cast<SoloGroup&>(*group);
  Tensor t = full({3}, 2.0);
  group->all_reduce(t);                 // synchronous: waited for at once
  group->all_reduce_async(t).wait();    // asynchronous: not
  Tensor gathered = group->all_gather(t);
  EXPECT_EQ(gathered.shape(), (Shape{1, 3}));
  EXPECT_EQ(gathered.to_vector<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ(group->stats().collectives, 3);
  EXPECT_EQ(solo.waited_at_once, 2);
  // Ops find the group again from the number that stands for it in their attributes.
  EXPECT_EQ(dist::group_of_handle(dist::handle_of(group)), group);
}

TEST(DistBackends, WithoutTheDistributedLibraryInitSaysWhatToLink) {
  // This test program links libkiln alone: Gloo lives in libkiln_distributed.
  auto names = dist::registered_backends();
  ASSERT_EQ(std::find(names.begin(), names.end(), "gloo"), names.end());
  std::string m = testing::message_of([] { dist::init(); });
  EXPECT_NE(m.find("libkiln_distributed"), std::string::npos) << m;
  EXPECT_NE(m.find("Kiln::distributed"), std::string::npos) << m;
  setenv("KILN_BACKEND_PATH", "/nonexistent", 1);  // (a CUDA build has libkiln_nccl beside libkiln)
  m = testing::message_of([] {
    dist::InitOptions options;
    options.backend = "nccl";
    dist::init(options);
  });
  unsetenv("KILN_BACKEND_PATH");
  EXPECT_NE(m.find("comes with the CUDA backend"), std::string::npos) << m;
}

}  // namespace
}  // namespace kiln
