// stint-bench: how close a stint checkpoint comes to what the disk and the
// usual alternative can do, measured in one run on one directory.
//
//   stint-bench [--dir DIR] [--size 1GiB] [--runs 3] [--quick] [--json[=FILE]]
//
// Every stint figure is printed beside its reference and the ratio:
//   persist throughput    vs fio O_DIRECT sequential write on the same dir
//   restore throughput    vs fio O_DIRECT sequential read of the fio file
//   training-thread stall vs a synchronous torch.save (+ fsync) of the same state
//   io_uring vs posix engine, zstd on vs off.
// Figures are medians over --runs; the reference and stint samples of one run
// are taken back to back, so slow phases of a shared machine hit both.
//
// Why references instead of absolute numbers: a GB/s figure says nothing on a
// machine whose disk is unknown, a ratio to fio says how much of the disk the
// runtime leaves unused.
//
// The parts: flags.h (command line), bench_state.h (what is saved),
// machine.h (the report's context), references.h (fio, torch.save, CPU
// only), measurements.h (stint's variants), report.h (tables and JSON).
// This file runs them in order.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_pool.h"
#include "bench_state.h"
#include "common.h"
#include "flags.h"
#include "machine.h"
#include "measurements.h"
#include "references.h"
#include "report.h"
#include "stint/env.h"
#include "stint/status.h"

namespace stint {
namespace bench {
namespace {

int Run(const Flags& flags) {
  Env* env = Env::Default();
  std::string parent = flags.dir.empty() ? "/var/tmp" : flags.dir;
  if (!env->IsDirectory(parent)) {
    std::fprintf(stderr, "stint-bench: --dir %s is not a directory\n", parent.c_str());
    return 2;
  }
  std::string tmpl = parent + "/stint-bench-XXXXXX";
  std::vector<char> tbuf(tmpl.begin(), tmpl.end());
  tbuf.push_back('\0');
  if (::mkdtemp(tbuf.data()) == nullptr) {
    std::fprintf(stderr, "stint-bench: mkdtemp in %s: %s\n", parent.c_str(), std::strerror(errno));
    return 2;
  }
  const std::string dir = tbuf.data();
  auto start = Clock::now();

  // --- context ---
  BenchResults results;
  BenchContext& context = results.context;
  context.dir = dir;
  context.cores = std::thread::hardware_concurrency();
  context.filesystem = FsTypeOf(dir);
  context.direct = ProbeDirectIo(dir);
  context.drop_note = "not attempted (--no-drop-caches)";
  if (flags.drop_caches) {
    Status d = DropCaches();
    context.drop = d.ok();
    context.drop_note =
        d.ok() ? "yes (echo 3 > /proc/sys/vm/drop_caches before every read)"
               : "failed (" + d.ToString() + "); O_DIRECT reads bypass the cache anyway";
  }
  const bool drop = context.drop;
  results.options = ResolveOptions(flags, context.cores);
  const BenchOptions& options = results.options;

  auto tgen = Clock::now();
  BenchState bs = BuildState(flags.size, flags.data, flags.aligned_dests);
  context.gen_s = SecondsSince(tgen);
  const uint64_t raw_bytes = bs.raw_bytes();
  context.load_before = LoadAverage();
  PrintContext(flags, bs, context, options);

  // --- variants: open, and one cold save each ---
  std::vector<Variant>& variants = results.variants;
  variants = MakeVariants(flags, dir);
  for (auto& v : variants) OpenVariant(flags, bs, &v);

  // --- measured rounds: the CPU references, fio, then every variant, back to back ---
  FioReference& fio = results.fio;
  fio = FindFio(flags);
  const uint64_t fio_bs = 4u << 20;  // fio's --bs; the file is a whole number of blocks
  results.fio_size = std::max<uint64_t>((raw_bytes + fio_bs - 1) / fio_bs * fio_bs, fio_bs);
  bool any_zstd =
      std::find(flags.compress.begin(), flags.compress.end(), true) != flags.compress.end();
  ThreadPool cpu_pool(
      options.threads_resolved);  // persist's pool size; the caller makes it +1 as in persist
  std::unique_ptr<char[]> memcpy_dst(new char[bs.tensor_bytes]);
  for (int r = 0; r < flags.runs; ++r) {
    RunCpuRound(bs, options.chunk_size, options.zstd_level, any_zstd, &cpu_pool, memcpy_dst.get(),
                &results.cpu);
    if (fio.unavailable.empty()) {
      Status s = RunFioRound(dir, results.fio_size, drop, &fio);
      if (!s.ok()) fio.unavailable = s.ToString();
    }
    for (auto& v : variants) {
      if (!v.unavailable.empty()) continue;
      Status s = MeasureRound(&v, &bs, uint64_t(r) + 1, drop, flags.fork_before_save);
      if (!s.ok()) {
        v.unavailable = s.ToString();
        v.ckpt.reset();
      }
    }
    std::fprintf(stderr, "stint-bench: run %d/%d done (%.0f s)\n", r + 1, flags.runs,
                 SecondsSince(start));
  }
  memcpy_dst.reset();
  for (auto& v : variants) {
    v.ckpt.reset();  // joins its persist thread, frees its staging pool
    if (v.unavailable.empty()) Summarize(&v, raw_bytes);
  }

  // --- torch.save reference, last: it needs the memory the variants held ---
  if (!flags.torch) {
    results.torch.unavailable = "skipped (--no-torch)";
  } else {
    results.torch = RunTorchReference(flags, bs, dir);
  }

  // --- report ---
  PrintReport(flags, bs, results);
  context.load_after = LoadAverage();
  PrintTotals(SecondsSince(start), context.load_after);
  WriteJson(flags, bs, results);

  if (flags.keep) {
    std::fprintf(stderr, "stint-bench: files kept in %s\n", dir.c_str());
  } else {
    Status s = RemoveRecursively(env, dir);
    if (!s.ok())
      std::fprintf(stderr, "stint-bench: cleanup of %s: %s\n", dir.c_str(), s.ToString().c_str());
  }
  bool any = false;
  for (const auto& v : variants) any = any || v.unavailable.empty();
  return any ? 0 : 1;
}

}  // namespace
}  // namespace bench
}  // namespace stint

int main(int argc, char** argv) {
  auto flags = stint::bench::ParseFlags(argc, argv);
  if (!flags.ok()) {
    if (flags.status().code() == stint::Code::kCancelled) {
      std::fputs(stint::bench::kUsage, stdout);
      return 0;
    }
    std::fprintf(stderr, "stint-bench: %s\n%s", flags.status().message().c_str(),
                 stint::bench::kUsage);
    return 2;
  }
  return stint::bench::Run(*flags);
}
