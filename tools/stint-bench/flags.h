// stint-bench's command line: the flags, their defaults and the usage text.
// Parsed by CLI11 like the other tools; the values are checked here, so
// Run() gets only flags it can use.
#ifndef STINT_TOOLS_STINT_BENCH_FLAGS_H_
#define STINT_TOOLS_STINT_BENCH_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stint/status.h"

namespace stint {
namespace bench {

struct Flags {
  std::string dir;  // parent of the bench's own temp dir; empty: /var/tmp
  uint64_t size = uint64_t{1} << 30;
  int runs = 5;
  bool quick = false;
  bool json_stdout = false;
  std::string json_file;
  std::string python;     // empty: the project venv, then python3
  std::string torch_ref;  // empty: torch_save_ref.py from the source tree or beside the binary
  std::vector<std::string> engines = {"uring", "posix"};
  std::vector<bool> compress = {false, true};
  std::string data = "bf16";  // "bf16" or "fp32"
  bool fio = true;
  bool torch = true;
  bool drop_caches = true;
  bool keep = false;
  bool fork_before_save = false;
  bool aligned_dests = false;
  // CheckpointOptions overrides; unset fields keep the runtime's defaults.
  std::optional<uint64_t> chunk_size, io_size;
  std::optional<unsigned> io_depth, threads, staging;
  std::optional<int> zstd_level;
};

// The --help text, also printed after a usage error.
extern const char kUsage[];

// On success returns the flags with --quick applied. Returns Cancelled for
// --help and InvalidArgument (its message names the flag) for a usage error.
Result<Flags> ParseFlags(int argc, char** argv);

}  // namespace bench
}  // namespace stint

#endif  // STINT_TOOLS_STINT_BENCH_FLAGS_H_
