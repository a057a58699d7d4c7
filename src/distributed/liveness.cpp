// Liveness beats through the rendezvous store, and the diagnosis of a failed
// collective from them.
#include "distributed/liveness.h"

#include <map>

#include "distributed/tcp_store.h"
#include "kiln/error.h"

namespace kiln::dist::detail {
namespace {

constexpr std::chrono::milliseconds kBeatEvery(200);
constexpr std::chrono::milliseconds kAskWithin(1500);

std::string beat_key(int rank) { return "kiln/beat/" + std::to_string(rank); }

// "counter|what" as a rank last set it; empty when it never beat.
std::map<int, std::string> read_beats(StoreClient& store, const std::vector<int>& ranks) {
  std::map<int, std::string> beats;
  for (int r : ranks)
    if (store.has(beat_key(r))) {
      auto v = store.get(beat_key(r), kAskWithin);
      beats[r] = std::string(v.begin(), v.end());
    }
  return beats;
}

std::string what_of(const std::string& beat) {
  const size_t bar = beat.find('|');
  return bar == std::string::npos ? beat : beat.substr(bar + 1);
}

}  // namespace

Liveness::Liveness(std::string host, int port, int rank, std::vector<std::string> where)
    : host_(std::move(host)), port_(port), rank_(rank), where_(std::move(where)) {
  thread_ = std::thread([this] { beat(); });
}

Liveness::~Liveness() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Liveness::doing(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  doing_ = what;
}

void Liveness::beat() {
  uint64_t count = 0;
  std::unique_ptr<StoreClient> store;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    const std::string value = std::to_string(++count) + "|" + doing_;
    lock.unlock();
    try {
      if (!store) store = std::make_unique<StoreClient>(host_, port_, kAskWithin);
      store->set(beat_key(rank_), {value.begin(), value.end()});
    } catch (const std::exception&) {
      store.reset();  // rank 0 has gone (or the link): try again next beat
    }
    lock.lock();
    wake_.wait_for(lock, kBeatEvery, [this] { return stopping_; });
  }
}

std::string Liveness::diagnose(const std::vector<int>& ranks, std::chrono::milliseconds settle) const {
  std::vector<int> others;
  for (int r : ranks)
    if (r != rank_) others.push_back(r);
  try {
    StoreClient store(host_, port_, kAskWithin);
    const auto before = read_beats(store, others);
    std::this_thread::sleep_for(settle);
    const auto after = read_beats(store, others);
    std::string silent, busy;
    for (int r : others) {
      auto a = before.find(r), b = after.find(r);
      if (b == after.end() || (a != before.end() && a->second == b->second)) {
        silent += (silent.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " on " + where(r);
      } else {
        busy += (busy.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " in " + what_of(b->second);
      }
    }
    if (!silent.empty()) {
      silent[0] = 'R';
      return silent + " stopped answering (no sign of life for " + std::to_string(settle.count()) +
             " ms): it died, was killed, hangs, or its network link is down; its log says which";
    }
    return "Every other rank is alive (" + busy + "): they called other collectives than this rank, or the "
           "network between the ranks failed while the rendezvous store stayed reachable";
  } catch (const std::exception&) {
    return "Rank 0 on " + where(0) + " stopped answering: the rendezvous store it hosts is unreachable. It died, "
           "was killed, or the link to it is down; its log says which";
  }
}

}  // namespace kiln::dist::detail
