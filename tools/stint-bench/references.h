// What stint-bench holds each stint figure against, measured in the same run
// on the same directory and state:
//   fio           O_DIRECT sequential write and read (the disk's ceiling)
//   torch.save    a synchronous save (+ fsync) of the same tensors, in python
//   CPU only      the snapshot's memcpy and zstd+xxh3 on persist's threads,
//                 no I/O (the floor for the stall, the ceiling for zstd)
// A reference that cannot run says why in `unavailable` instead of failing
// the bench.
#ifndef STINT_TOOLS_STINT_BENCH_REFERENCES_H_
#define STINT_TOOLS_STINT_BENCH_REFERENCES_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "bench_state.h"
#include "flags.h"
#include "stint/status.h"

namespace stint {
namespace bench {

struct FioReference {
  std::string engine;  // "io_uring", or "psync" after a fallback
  std::string version;
  std::string unavailable;                // why, when fio could not run
  std::vector<double> write_bw, read_bw;  // bytes/s per run
  // --fallocate=none: fio then extends the file with every write, as stint's
  // persist does (it writes a fresh, empty file). ext4 runs extending O_DIRECT
  // writes synchronously under the inode lock, so this is the ceiling for a
  // writer that does not preallocate.
  std::vector<double> write_extending_bw;
  std::string note;
};

// A FioReference for the io_uring engine with fio's version, or with
// `unavailable` set when --no-fio was given or fio does not run.
FioReference FindFio(const Flags& flags);

// One write and one read of a fresh fio file of `size` bytes in `dir`, then
// an extending (--fallocate=none) write; each appends its bandwidth to *ref.
// The page cache is dropped before the read when `drop`. Falls back to psync
// (noted in ref->note) when the first io_uring write is refused. The file is
// removed after. Returns the first error.
Status RunFioRound(const std::string& dir, uint64_t size, bool drop, FioReference* ref);

struct TorchReference {
  std::string unavailable;  // why, when there is no figure
  nlohmann::json raw;
  double fsync_s = std::nan(""), nofsync_s = std::nan("");
};

// Runs torch_save_ref.py (--torch-ref, else from the source tree or beside
// the binary) under --python (else the project venv, else python3) on the
// same tensor shapes as `bs`, --runs times, in `dir`.
TorchReference RunTorchReference(const Flags& flags, const BenchState& bs, const std::string& dir);

struct CpuReference {
  std::vector<double> memcpy_s;  // per run: the tensors copied into a warm buffer
  std::vector<double> zstd_bw;   // per run: tensor bytes / compress+hash seconds
  uint64_t zstd_stored = 0;      // what the chunks compress to (raw where zstd does not help)
  std::string zstd_error;        // why the zstd figure stopped, if it did
};

// One run of the CPU references on `pool` (persist's thread count) in
// `chunk`-sized pieces: the memcpy into `memcpy_dst` (tensor_bytes long),
// and when `zstd` the compression at `zstd_level`.
void RunCpuRound(const BenchState& bs, uint64_t chunk, int zstd_level, bool zstd, ThreadPool* pool,
                 char* memcpy_dst, CpuReference* ref);

}  // namespace bench
}  // namespace stint

#endif  // STINT_TOOLS_STINT_BENCH_REFERENCES_H_
