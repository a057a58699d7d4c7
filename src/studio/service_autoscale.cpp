// The autoscaler: each sweep of the supervisor samples the requests in flight
// at every version's instances; once a second, a version with autoscaling
// bounds gets the instance count its load wants (services.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kiln/studio.h"
#include "studio/service_state.h"

namespace kiln::studio {
namespace {

// Requests in flight are averaged over this many sweeps (2 s); a decision is made once a second.
constexpr size_t kLoadSamples = 20;
constexpr int64_t kDecideEveryMs = 1000;
constexpr size_t kEventsKept = 20;

}  // namespace

void Services::autoscale(Service& s) {
  const int64_t now = now_ms();
  for (auto& v : s.versions) {
    int in_flight = 0, starting = 0;
    for (const auto& i : v->instances) {
      in_flight += i->outstanding;
      starting += i->ready ? 0 : 1;
    }
    v->in_flight.push_back(in_flight);
    while (v->in_flight.size() > kLoadSamples) v->in_flight.pop_front();
    if (now - v->sampled_ms < kDecideEveryMs) continue;
    const int64_t requests = v->stats->requests, latency_us = v->stats->latency_us;
    const int64_t answered = requests - v->seen_requests;
    v->mean_latency_ms = answered > 0 ? static_cast<double>(latency_us - v->seen_latency_us) / 1000.0 / answered : 0;
    v->seen_requests = requests, v->seen_latency_us = latency_us, v->sampled_ms = now;
    double sum = 0;
    for (int n : v->in_flight) sum += n;
    v->mean_in_flight = sum / static_cast<double>(v->in_flight.size());
    const ServiceVersionSpec& spec = v->spec;
    bool rolling = false;
    for (const auto& w : s.warming) rolling |= w->spec.name == spec.name;
    if (!spec.autoscaled() || rolling) continue;
    const int current = static_cast<int>(v->instances.size());
    int wanted = static_cast<int>(std::ceil(v->mean_in_flight / spec.target_outstanding - 1e-9));
    char why[160];
    std::snprintf(why, sizeof why, "%.1f requests in flight on average, %g per instance wanted", v->mean_in_flight,
                  spec.target_outstanding);
    if (spec.target_latency_ms > 0 && answered > 0 && v->mean_latency_ms > spec.target_latency_ms / 2) {
      // Over the target: one more; within half of it: none fewer.
      const bool over = v->mean_latency_ms > spec.target_latency_ms;
      wanted = std::max(wanted, over ? current + 1 : current);
      if (over)
        std::snprintf(why, sizeof why, "mean latency %.1f ms over the %g ms wanted", v->mean_latency_ms,
                      spec.target_latency_ms);
    }
    wanted = std::clamp(wanted, spec.min_instances, spec.max_instances);
    int next = current;
    if (wanted > current && starting == 0) {  // up at once, once the last ones started are ready
      next = wanted;
    } else if (wanted < current) {  // down one at a time, after fewer have done for a while
      if (v->fewer_since_ms == 0) v->fewer_since_ms = now;
      if (now - v->fewer_since_ms >= spec.scale_down_after_s * 1000LL) next = current - 1, v->fewer_since_ms = now;
    } else {
      v->fewer_since_ms = 0;
    }
    if (next == current) continue;
    std::fprintf(stderr, "kiln studio: service %s: version %s from %d to %d instances: %s\n", s.name.c_str(),
                 spec.name.c_str(), current, next, why);
    s.events.push_back({{"time_ms", now}, {"version", spec.name}, {"from", current}, {"to", next}, {"reason", why}});
    while (s.events.size() > kEventsKept) s.events.pop_front();
    resize(s, *v, next);
    save(s);
  }
}

}  // namespace kiln::studio
