// Subprocesses of stint-bench (fio, python): argv only, never a shell, so
// paths need no quoting; stdout and stderr are captured whole.
//
// posix_spawn, not fork: glibc spawns with CLONE_VM|CLONE_VFORK, so the
// parent's pages are not made copy-on-write. After a fork() every page of
// this multi-GiB process is write-protected, and the next snapshot into the
// (warm) staging buffer takes one fault per 4 KiB page: 0.13 s -> 0.43 s for
// 1 GiB here. That would be the bench measuring itself (see --fork-before-save
// for measuring it on purpose).
#ifndef STINT_TOOLS_STINT_BENCH_PROCESS_H_
#define STINT_TOOLS_STINT_BENCH_PROCESS_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stint/status.h"

namespace stint {
namespace bench {

struct ProcessResult {
  int exit_code = -1;  // 128+signal when killed
  std::string out, err;
};

// Runs argv[0] (looked up in PATH) to completion. A child still running after
// timeout_s is SIGKILLed and DeadlineExceeded returned; a failed spawn returns
// the errno's status. Otherwise OK, whatever the exit code.
Result<ProcessResult> RunProcess(const std::vector<std::string>& argv, int timeout_s);

// The last non-blank line of `text` (trailing newlines and spaces dropped).
std::string LastLine(const std::string& text);

// The JSON object in `out` from its first '{' on: fio and python may print
// warnings before their JSON. DataLoss, naming `what`, when there is none.
Result<nlohmann::json> ParseJsonOutput(const std::string& out, const std::string& what);

}  // namespace bench
}  // namespace stint

#endif  // STINT_TOOLS_STINT_BENCH_PROCESS_H_
