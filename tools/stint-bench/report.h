// stint-bench's report: every stint figure beside its reference and the
// ratio, as text tables on stdout and, with --json, as one JSON document.
// The text is for people and the JSON for scripts; both come from the same
// BenchResults.
#ifndef STINT_TOOLS_STINT_BENCH_REPORT_H_
#define STINT_TOOLS_STINT_BENCH_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "bench_state.h"
#include "flags.h"
#include "machine.h"
#include "measurements.h"
#include "references.h"

namespace stint {
namespace bench {

// Where and how the bench ran.
struct BenchContext {
  unsigned cores = 0;
  std::string dir;  // the bench's own temp dir
  std::string filesystem;
  DirectIoProbe direct;
  bool drop = false;  // the page cache is dropped before every read
  std::string drop_note;
  std::string load_before, load_after;
  double gen_s = 0;  // generating the state
};

// Everything the report shows, gathered by the run.
struct BenchResults {
  BenchContext context;
  BenchOptions options;
  FioReference fio;
  uint64_t fio_size = 0;  // the fio file: raw bytes rounded up to fio's block
  TorchReference torch;
  CpuReference cpu;
  std::vector<Variant> variants;  // summarized; closed
};

// The first lines, before anything is measured: state, machine, O_DIRECT,
// page cache and options. Flushes stdout.
void PrintContext(const Flags& flags, const BenchState& bs, const BenchContext& context,
                  const BenchOptions& options);

// The references' lines, the four tables and the per-variant breakdown.
void PrintReport(const Flags& flags, const BenchState& bs, const BenchResults& results);

// The last line: the whole bench's time and the load average at its end.
void PrintTotals(double total_s, const std::string& load_after);

// The JSON document, to stdout (--json) and/or to --json=FILE (a write
// error is reported on stderr). Does nothing without --json.
void WriteJson(const Flags& flags, const BenchState& bs, const BenchResults& results);

}  // namespace bench
}  // namespace stint

#endif  // STINT_TOOLS_STINT_BENCH_REPORT_H_
