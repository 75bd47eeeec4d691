// stint's own figures in stint-bench: one Variant per io engine x
// compression, each a Checkpointer on its own root. A round saves the state,
// waits until it is durable, loads it back and checks every byte; Summarize
// turns a variant's rounds into medians.
#ifndef STINT_TOOLS_STINT_BENCH_MEASUREMENTS_H_
#define STINT_TOOLS_STINT_BENCH_MEASUREMENTS_H_

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_state.h"
#include "flags.h"
#include "stint/checkpointer.h"
#include "stint/status.h"

namespace stint {
namespace bench {

// The CheckpointOptions every variant shares: the runtime's defaults, except
// where a flag overrides them.
struct BenchOptions {
  uint64_t chunk_size = 0;
  uint64_t io_size = 0;
  unsigned io_depth = 0;
  unsigned threads = 0;           // as given; 0 is the runtime's "auto"
  unsigned threads_resolved = 0;  // what auto means on `cores` cores: cores - 1 (at least 0)
  int zstd_level = 0;
};
BenchOptions ResolveOptions(const Flags& flags, unsigned cores);

struct SaveSample {
  uint64_t step = 0;
  int64_t save_faults = 0;     // minor faults during Save()
  int64_t persist_faults = 0;  // minor faults from Save()'s return to durable
  double call_s = 0;           // Save() wall time: the training thread's stall
  double durable_s = 0;        // Save() call to durable future ready
  SaveStats stats;
};

struct Variant {
  std::string engine;  // requested
  bool compress = false;
  std::string label;
  std::string root;
  std::unique_ptr<Checkpointer> ckpt;
  std::string unavailable;
  std::optional<SaveSample> cold;  // first save: staging pool allocated and faulted in
  std::vector<SaveSample> saves;
  std::vector<double> load_s;
  std::vector<int64_t> load_faults;  // minor faults during Load()
  // Per run, in run order (Summarize): bytes/s of persist+commit, of
  // Save() -> durable, and of Load().
  std::vector<double> persist_bw_runs, durable_bw_runs, restore_bw_runs;
  // Medians.
  double persist_bw = std::nan(""), durable_bw = std::nan(""), restore_bw = std::nan("");
  double stall_s = std::nan(""), snapshot_s = std::nan(""), durable_s = std::nan("");
  double persist_s = std::nan(""), commit_s = std::nan(""), compression = std::nan("");
};

// One variant per --engines x --compress, rooted under `dir`; none is open.
std::vector<Variant> MakeVariants(const Flags& flags, const std::string& dir);

// Opens v's Checkpointer and takes its first, cold save (staging allocation
// and page faults are a first-save cost, reported apart from the medians).
// On failure sets v->unavailable and leaves it closed.
void OpenVariant(const Flags& flags, const BenchState& bs, Variant* v);

// One measured round at `step`: (fork and reap a child first when
// `fork_first`), save until durable, drop the page cache when `drop`, load
// into poisoned destinations and check them; then removes the previous
// step's checkpoint. Appends the samples to *v; returns the first error.
Status MeasureRound(Variant* v, BenchState* bs, uint64_t step, bool drop, bool fork_first);

// Fills v's medians from its rounds; `raw_bytes` is one checkpoint's size.
void Summarize(Variant* v, uint64_t raw_bytes);

}  // namespace bench
}  // namespace stint

#endif  // STINT_TOOLS_STINT_BENCH_MEASUREMENTS_H_
