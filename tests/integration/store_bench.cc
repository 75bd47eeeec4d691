// store_bench [DIR] [SECONDS]: how many durable Save() transactions per
// second stintd's SQLite store achieves on the disk holding DIR (default: a
// temporary directory under $TMPDIR or /var/tmp), for the smallest change
// there is: one job row (the shape of a progress report), then one KV put.
// A measurement, not a test: it prints numbers and asserts nothing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "stintd/store/store.h"
#include "util/temp_dir.h"

namespace {

using Clock = std::chrono::steady_clock;

// Runs `op` for `seconds`, then prints the rate and latency percentiles.
bool Measure(const char* what, double seconds, const std::function<stint::Status(int64_t)>& op) {
  std::vector<double> us;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  for (int64_t i = 0; Clock::now() < end; ++i) {
    const auto t0 = Clock::now();
    stint::Status s = op(i);
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
      return false;
    }
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  const double total = std::chrono::duration<double>(Clock::now() - start).count();
  std::sort(us.begin(), us.end());
  auto pct = [&](double p) { return us[std::min(us.size() - 1, size_t(p * us.size()))]; };
  std::printf("%-28s %8zu ops  %8.0f ops/s  p50 %7.0f us  p99 %7.0f us  max %7.0f us\n", what,
              us.size(), us.size() / total, pct(0.50), pct(0.99), us.back());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  stint::TempDir tmp;
  const std::string dir = argc > 1 && argv[1][0] != '\0' ? argv[1] : tmp.path();
  const double seconds = argc > 2 ? std::atof(argv[2]) : 5.0;
  const std::string path = dir + "/store_bench.db";
  std::remove(path.c_str());
  auto store = stint::stintd::Store::Open(path);
  if (!store.ok()) {
    std::fprintf(stderr, "open: %s\n", store.status().ToString().c_str());
    return 1;
  }
  std::printf("%s (SQLite WAL, synchronous=FULL), %.1f s per case\n", path.c_str(), seconds);

  // A cluster of realistic size, so the b-trees are not trivially small.
  stint::stintd::ClusterState s;
  stint::stintd::Changes all;
  for (int64_t id = 1; id <= 2000; ++id) {
    stint::stintd::Job j;
    j.id = id;
    j.name = "job-" + std::to_string(id);
    j.team = "team";
    s.jobs[id] = j;
    all.jobs.insert(id);
  }
  all.counters = true;
  stint::Status st = (*store)->Save(s, all);
  if (!st.ok()) {
    std::fprintf(stderr, "setup: %s\n", st.ToString().c_str());
    return 1;
  }

  bool ok = true;
  ok &= Measure("Save (one job row)", seconds, [&](int64_t i) {
    const int64_t id = 1 + i % 2000;
    s.jobs[id].last_step = i;
    stint::stintd::Changes c;
    c.jobs.insert(id);
    return (*store)->Save(s, c);
  });
  ok &= Measure("Save (job row + counters)", seconds, [&](int64_t i) {
    const int64_t id = 1 + i % 2000;
    s.jobs[id].last_step = i;
    s.counters.acks = i;
    stint::stintd::Changes c;
    c.jobs.insert(id);
    c.counters = true;
    return (*store)->Save(s, c);
  });
  ok &= Measure("PutKv (64-byte value)", seconds, [&](int64_t i) {
    return (*store)->PutKv(stint::stintd::KvRecord{1 + i % 64, "rank/" + std::to_string(i % 8),
                                                   std::string(64, 'v'), i, i});
  });
  store->reset();
  std::remove(path.c_str());
  return ok ? 0 : 1;
}
