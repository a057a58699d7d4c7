// Joining a job: rank 0 hosts the rendezvous store, every rank registers
// there, rank 0 gives the verdict (everyone came, or who did not), and the
// ranks connect to each other over Gloo's TCP transport.
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <csignal>

#include "distributed/job.h"

namespace kiln::dist {

namespace {

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

std::string joined_key(int rank) { return "kiln/joined/" + std::to_string(rank); }

// Rank 0: waits for every rank to register, then sets the verdict the
// others wait for. On a timeout the verdict names the missing ranks; the
// store stays up until the ranks that came have read it (a few seconds at
// most), then this rank throws the same message.
void join_or_name_the_missing(detail::Job& job) {
  const Place& p = job.place;
  std::vector<std::string> everyone;
  for (int r = 0; r < p.world_size; ++r) everyone.push_back(joined_key(r));
  try {
    job.store->wait(everyone, job.timeout);
    job.store->set("kiln/verdict", {'o', 'k'});
    return;
  } catch (const Error&) {
  }
  detail::StoreClient ask(job.host, job.port, std::chrono::milliseconds(5000));  // the first client is out of step now
  std::string missing;
  std::vector<int> came;
  for (int r = 0; r < p.world_size; ++r) {
    if (ask.has(everyone[static_cast<size_t>(r)])) {
      if (r != 0) came.push_back(r);
    } else {
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  std::string hosts;
  for (const auto& name : p.hosts) hosts += (hosts.empty() ? " (the job's hosts: " : ", ") + name;
  if (!hosts.empty()) hosts += ")";
  const std::string message = ::kiln::detail::concat(
      "dist: rank(s) ", missing, " of ", p.world_size, " did not join within ", job.timeout.count(), " ms", hosts,
      ". Check that they were started, with WORLD_SIZE=", p.world_size, " and MASTER_ADDR:MASTER_PORT=", job.host, ":",
      job.port, " like the others, and that their logs show no earlier error");
  ask.set("kiln/verdict", {message.begin(), message.end()});
  for (int r : came) {
    try {
      ask.get("kiln/read/" + std::to_string(r), std::chrono::milliseconds(2000));
    } catch (const Error&) {
      break;  // that rank went away: nobody else is waiting long for the store
    }
  }
  throw Error(message);
}

void await_verdict(detail::Job& job) {
  constexpr std::chrono::milliseconds kVerdictGrace(5000);  // rank 0 started first: its timeout ends earlier
  std::vector<char> verdict;
  try {
    verdict = job.store->get("kiln/verdict", job.timeout + kVerdictGrace);
  } catch (const Error& e) {
    KILN_FAIL("dist: rank 0 did not say within ", (job.timeout + kVerdictGrace).count(), " ms whether all ",
              job.place.world_size, " ranks joined (", e.what(), "); check rank 0's log");
  }
  job.store->set("kiln/read/" + std::to_string(job.place.rank), {'1'});
  const std::string said(verdict.begin(), verdict.end());
  KILN_CHECK(said == "ok", said);
}

std::shared_ptr<ProcessGroup> join_over_gloo(const Place& place, const InitOptions& options) {
  // Gloo writes to its peers' sockets without MSG_NOSIGNAL: a rank that dies
  // would kill this one with SIGPIPE instead of failing its collective with
  // a message. Writes to a closed socket report EPIPE instead.
  std::signal(SIGPIPE, SIG_IGN);
  auto job = std::make_shared<detail::Job>();
  job->place = place;
  job->timeout = options.timeout;
  const Place& p = job->place;
  job->host = p.master_addr;  // the place always has one (127.0.0.1 and a default port unless set)
  if (p.rank == 0) job->server = std::make_unique<detail::StoreServer>(p.master_port);
  job->port = job->server ? job->server->port() : p.master_port;
  job->store = std::make_unique<detail::StoreClient>(job->host, job->port, job->timeout);
  // Every rank says it arrived (and from where). Rank 0 waits for them all
  // and gives its verdict: "ok", or which ranks did not come; the others
  // wait for the verdict, so every rank names the missing ones, not only
  // rank 0 (whose store the others would find closed).
  const std::string me = host_name() + " (" + job->store->local_address() + ")";
  job->store->set(joined_key(p.rank), {me.begin(), me.end()});
  if (p.rank == 0) join_or_name_the_missing(*job);
  else await_verdict(*job);
  std::vector<std::string> where;
  for (int r = 0; r < p.world_size; ++r) {
    auto v = job->store->get(joined_key(r));
    where.emplace_back(v.begin(), v.end());
  }
  job->liveness = std::make_unique<detail::Liveness>(job->host, job->port, p.rank, where);
  gloo::transport::tcp::attr attr;
  attr.hostname = job->store->local_address();  // the interface that reaches rank 0 reaches the others too
  job->device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(p.rank, p.world_size);
  context->setTimeout(job->timeout);
  gloo::rendezvous::PrefixStore prefixed("kiln/gloo", *job->store);
  try {
    context->connectFullMesh(prefixed, job->device);
  } catch (const std::exception& e) {
    KILN_FAIL("dist: rank ", p.rank, " could not connect to the other ranks within ", job->timeout.count(), " ms: ",
              e.what(), ". ", job->liveness->diagnose([&] {
                std::vector<int> all(static_cast<size_t>(p.world_size));
                for (int r = 0; r < p.world_size; ++r) all[static_cast<size_t>(r)] = r;
                return all;
              }(), std::min(job->timeout, std::chrono::milliseconds(1500))));
  }
  return make_world(std::move(job), std::move(context));
}

// Loading libkiln_distributed makes "gloo" a backend dist::init accepts.
const bool registered = [] {
  register_backend("gloo", join_over_gloo);
  return true;
}();

}  // namespace

}  // namespace kiln::dist
