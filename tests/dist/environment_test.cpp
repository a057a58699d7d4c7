// A rank's place, read from torchrun's, Slurm's and ModelArts' variables.
#include <gtest/gtest.h>

#include <cstdlib>

#include "kiln/dist.h"
#include "kiln/error.h"
#include "support/error_message.h"

namespace {
using namespace kiln;
using dist::expand_host_list;
using kiln::testing::message_of;
using dist::place_from;
using Hosts = std::vector<std::string>;

TEST(DistEnvironment, NoLauncherIsOneProcess) {
  dist::Place p = place_from({});
  EXPECT_EQ(p.source, "none");
  EXPECT_EQ(p.rank, 0);
  EXPECT_EQ(p.world_size, 1);
  EXPECT_EQ(p.master_addr, "127.0.0.1");
  EXPECT_EQ(p.master_port, 29500);
}

TEST(DistEnvironment, Torchrun) {
  dist::Place p = place_from({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                              {"MASTER_ADDR", "10.0.0.2"}, {"MASTER_PORT", "12345"}});
  EXPECT_EQ(p.source, "torchrun");
  EXPECT_EQ(p.rank, 5);
  EXPECT_EQ(p.world_size, 8);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_world_size, 4);
  EXPECT_EQ(p.master_addr, "10.0.0.2");
  EXPECT_EQ(p.master_port, 12345);
}

TEST(DistEnvironment, SlurmExpandsTheNodeListAndPicksItsFirstNodeAsMaster) {
  dist::Place p = place_from({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"},
                              {"SLURM_TASKS_PER_NODE", "2(x3)"}, {"SLURM_JOB_NODELIST", "gpu[07-08],cpu3"},
                              {"SLURM_JOB_ID", "4242"}});
  EXPECT_EQ(p.source, "slurm");
  EXPECT_EQ(p.rank, 5);
  EXPECT_EQ(p.world_size, 6);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_world_size, 2);
  EXPECT_EQ(p.hosts, (Hosts{"gpu07", "gpu08", "cpu3"}));
  EXPECT_EQ(p.master_addr, "gpu07");
  EXPECT_EQ(p.master_port, 24242);  // from the job id, so two jobs on one node do not collide
  // Uneven nodes: the third one runs a single task.
  dist::Place q = place_from({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "5"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "2"},
                              {"SLURM_TASKS_PER_NODE", "2(x2),1"}, {"SLURM_JOB_NODELIST", "n[1-3]"}});
  EXPECT_EQ(q.local_world_size, 1);
}

TEST(DistEnvironment, ModelArts) {
  dist::Place p = place_from({{"VC_TASK_INDEX", "1"}, {"VC_WORKER_NUM", "3"},
                              {"VC_WORKER_HOSTS", "job-worker-0.svc,job-worker-1.svc,job-worker-2.svc"}});
  EXPECT_EQ(p.source, "modelarts");
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(p.world_size, 3);
  EXPECT_EQ(p.master_addr, "job-worker-0.svc");
  EXPECT_EQ(p.hosts.size(), 3u);
  EXPECT_NE(message_of([] { place_from({{"VC_TASK_INDEX", "0"}, {"VC_WORKER_NUM", "3"}, {"VC_WORKER_HOSTS", "a,b"}}); })
                .find("VC_WORKER_HOSTS lists 2 hosts but VC_WORKER_NUM=3"),
            std::string::npos);
}

TEST(DistEnvironment, ExplicitValuesWinAndMasterAddrOverridesSlurm) {
  dist::PlaceOverrides o;
  o.rank = 0;
  o.master_port = 4000;
  dist::Place p = place_from({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1234"}}, o);
  EXPECT_EQ(p.rank, 0);
  EXPECT_EQ(p.master_port, 4000);
  dist::Place s = place_from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n[1-2]"},
                              {"MASTER_ADDR", "login1"}});
  EXPECT_EQ(s.master_addr, "login1");
}

TEST(DistEnvironment, MalformedValuesNameTheVariable) {
  EXPECT_NE(message_of([] { place_from({{"RANK", "two"}}); }).find("RANK='two' is not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(message_of([] { place_from({{"RANK", "4"}, {"WORLD_SIZE", "4"}}); }).find("rank 4 is outside a world of 4 ranks"),
            std::string::npos);
  EXPECT_NE(message_of([] { place_from({{"RANK", "0"}, {"MASTER_PORT", "70000"}}); }).find("not a TCP port"),
            std::string::npos);
  EXPECT_NE(message_of([] {
              place_from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODEID", "3"}, {"SLURM_TASKS_PER_NODE", "1(x2)"}});
            }).find("SLURM_NODEID=3 but SLURM_TASKS_PER_NODE='1(x2)' lists 2 nodes"),
            std::string::npos);
}

TEST(DistEnvironment, HostListExpansion) {
  EXPECT_EQ(expand_host_list("node[1-3,7]"), (Hosts{"node1", "node2", "node3", "node7"}));
  EXPECT_EQ(expand_host_list("a,b[08-10]-ib,c"), (Hosts{"a", "b08-ib", "b09-ib", "b10-ib", "c"}));
  EXPECT_EQ(expand_host_list("single"), (Hosts{"single"}));
  EXPECT_NE(message_of([] { expand_host_list("node[1-3"); }).find("unclosed '['"), std::string::npos);
  EXPECT_NE(message_of([] { expand_host_list("node[5-2]"); }).find("runs backwards"), std::string::npos);
  EXPECT_NE(message_of([] { expand_host_list("node[a-b]"); }).find("is not a non-negative integer"), std::string::npos);
  EXPECT_NE(message_of([] { expand_host_list("a,,b"); }).find("empty entry"), std::string::npos);
}

}  // namespace

namespace {

// A backend this build lacks is refused at once, before any rank listens or
// connects, with what to use instead.
TEST(DistEnvironment, BackendsThisBuildLacksAreRefusedWithTheAlternative) {
  auto init_with = [](const std::string& backend) {
    dist::InitOptions o;
    o.backend = backend;
    o.place.world_size = 2;  // would wait for a second rank if it got that far
    o.place.rank = 1;
    o.timeout = std::chrono::milliseconds(100);
    return message_of([&] { dist::init(o); });
  };
  // (Where libkiln_nccl is not: a CUDA build has it beside libkiln.)
  setenv("KILN_BACKEND_PATH", "/nonexistent", 1);
  std::string msg = init_with("nccl");
  unsetenv("KILN_BACKEND_PATH");
  EXPECT_NE(msg.find("backend 'nccl' needs libkiln_nccl, which this build of Kiln does not have"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("'gloo'"), std::string::npos) << msg;
  msg = init_with("mpi");
  EXPECT_NE(msg.find("backend 'mpi' is not in this build"), std::string::npos) << msg;
  msg = init_with("ucc");
  EXPECT_NE(msg.find("unknown backend 'ucc'; Kiln's backends are 'gloo'"), std::string::npos) << msg;
}

}  // namespace
