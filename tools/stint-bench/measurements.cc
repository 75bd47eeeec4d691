#include "measurements.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "checkpoint/commit.h"
#include "common.h"
#include "machine.h"
#include "stint/env.h"

namespace stint {
namespace bench {
namespace {

// Minor page faults of the whole process so far: a snapshot into a warm
// staging buffer takes almost none, one into fresh memory takes one per page.
int64_t MinorFaults() {
  struct rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

CheckpointOptions VariantOptions(const Flags& f, const Variant& v) {
  CheckpointOptions o;  // defaults, except what is compared or overridden by a flag
  o.root = v.root;
  o.job_id = "stint-bench";
  o.io_engine = v.engine;
  o.compress = v.compress;
  if (f.chunk_size) o.chunk_size = *f.chunk_size;
  if (f.io_size) o.io_size = unsigned(*f.io_size);
  if (f.io_depth) o.io_queue_depth = *f.io_depth;
  if (f.threads) o.threads = *f.threads;
  if (f.zstd_level) o.zstd_level = *f.zstd_level;
  return o;
}

Result<SaveSample> SaveOnce(Variant* v, const BenchState& bs, uint64_t step) {
  SaveSample s;
  s.step = step;
  int64_t f0 = MinorFaults();
  auto t0 = Clock::now();
  auto handle = v->ckpt->Save(step, bs.state);
  s.call_s = SecondsSince(t0);
  int64_t f1 = MinorFaults();
  s.save_faults = f1 - f0;
  if (!handle.ok()) return handle.status().WithContext("save step " + std::to_string(step));
  STINT_RETURN_IF_ERROR(handle->staged.get());
  Status durable = handle->durable.get();
  s.durable_s = SecondsSince(t0);
  s.persist_faults = MinorFaults() - f1;
  STINT_RETURN_IF_ERROR(durable.WithContext("persist step " + std::to_string(step)));
  // The persist thread fulfils `durable` before it returns the staging buffer
  // and records stats().last, so right after durable.get() the stats may
  // still describe the previous save. Wait (briefly) for them: that also
  // waits for the buffer, so the next save reuses it instead of allocating
  // a second, cold one.
  auto deadline = Clock::now() + std::chrono::seconds(5);
  for (;;) {
    CheckpointerStats st = v->ckpt->stats();
    if (st.last && st.last->step == step) {
      s.stats = *st.last;
      return s;
    }
    if (Clock::now() > deadline)
      return Status::Internal("no SaveStats for step " + std::to_string(step));
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// A child that exits at once: all it leaves behind is the parent's pages
// write-protected for copy-on-write, which is the effect being measured.
Status ForkAndReap() {
  pid_t pid = ::fork();
  if (pid < 0) return StatusFromErrno("fork", errno);
  if (pid == 0) ::_exit(0);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return StatusFromErrno("waitpid", errno);
  }
  return Status::OK();
}

}  // namespace

BenchOptions ResolveOptions(const Flags& flags, unsigned cores) {
  CheckpointOptions defaults;
  BenchOptions o;
  o.chunk_size = flags.chunk_size.value_or(defaults.chunk_size);
  o.io_size = flags.io_size.value_or(defaults.io_size);
  o.io_depth = flags.io_depth.value_or(defaults.io_queue_depth);
  o.threads = flags.threads.value_or(defaults.threads);
  o.threads_resolved = o.threads != 0 ? o.threads : std::max(1u, cores) - 1;
  o.zstd_level = flags.zstd_level.value_or(defaults.zstd_level);
  return o;
}

std::vector<Variant> MakeVariants(const Flags& flags, const std::string& dir) {
  std::vector<Variant> variants;
  for (const auto& e : flags.engines) {
    for (bool c : flags.compress) {
      Variant v;
      v.engine = e;
      v.compress = c;
      v.label = e + (c ? ", zstd" : ", raw");
      v.root = dir + "/ckpt-" + e + (c ? "-zstd" : "-raw");
      variants.push_back(std::move(v));
    }
  }
  return variants;
}

void OpenVariant(const Flags& flags, const BenchState& bs, Variant* v) {
  auto opened = Checkpointer::Open(VariantOptions(flags, *v));
  if (!opened.ok()) {
    v->unavailable = opened.status().ToString();
    return;
  }
  v->ckpt = std::move(*opened);
  auto cold = SaveOnce(v, bs, 0);
  if (!cold.ok()) {
    v->unavailable = cold.status().ToString();
    v->ckpt.reset();
    return;
  }
  v->cold = *cold;
}

Status MeasureRound(Variant* v, BenchState* bs, uint64_t step, bool drop, bool fork_first) {
  if (fork_first) STINT_RETURN_IF_ERROR(ForkAndReap());
  STINT_ASSIGN_OR_RETURN(SaveSample s, SaveOnce(v, *bs, step));
  v->saves.push_back(s);
  if (drop) DropCaches().IgnoreError();  // reported once, in the context lines
  PoisonDests(bs);
  LoadOptions lo;
  lo.step = step;
  int64_t f0 = MinorFaults();
  auto t0 = Clock::now();
  auto loaded = v->ckpt->Load(bs->dests, lo);
  double load_s = SecondsSince(t0);
  v->load_faults.push_back(MinorFaults() - f0);
  if (!loaded.ok()) return loaded.status().WithContext("load step " + std::to_string(step));
  STINT_RETURN_IF_ERROR(
      CheckRestored(*bs, *loaded).WithContext("load step " + std::to_string(step)));
  v->load_s.push_back(load_s);
  // Only the newest checkpoint is kept, so a run needs ~2x --size of disk per
  // variant, not keep_last x; the runtime's retention is not what is measured.
  return RemoveRecursively(Env::Default(), v->root + "/" + StepDirName(step - 1));
}

void Summarize(Variant* v, uint64_t raw_bytes) {
  std::vector<double>& persist_bw = v->persist_bw_runs;
  std::vector<double>& durable_bw = v->durable_bw_runs;
  std::vector<double>& restore = v->restore_bw_runs;
  persist_bw.clear(), durable_bw.clear(), restore.clear();
  std::vector<double> stall, snap, durable, persist, commit, comp;
  for (const auto& s : v->saves) {
    double raw = double(s.stats.raw_bytes);
    persist_bw.push_back(raw / (s.stats.persist_seconds + s.stats.commit_seconds));
    durable_bw.push_back(raw / s.durable_s);
    stall.push_back(s.call_s);
    snap.push_back(s.stats.snapshot_seconds);
    durable.push_back(s.durable_s);
    persist.push_back(s.stats.persist_seconds);
    commit.push_back(s.stats.commit_seconds);
    comp.push_back(raw / double(s.stats.stored_bytes));
  }
  for (double l : v->load_s) restore.push_back(double(raw_bytes) / l);
  v->persist_bw = Median(persist_bw);
  v->durable_bw = Median(durable_bw);
  v->stall_s = Median(stall);
  v->snapshot_s = Median(snap);
  v->durable_s = Median(durable);
  v->persist_s = Median(persist);
  v->commit_s = Median(commit);
  v->compression = Median(comp);
  v->restore_bw = Median(restore);
}

}  // namespace bench
}  // namespace stint
