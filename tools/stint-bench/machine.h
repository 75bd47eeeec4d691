// The machine stint-bench runs on, as its report's first lines describe it:
// the file system under the bench directory, whether O_DIRECT really is
// direct there, the load average; and dropping the page cache between a
// write and its read.
#ifndef STINT_TOOLS_STINT_BENCH_MACHINE_H_
#define STINT_TOOLS_STINT_BENCH_MACHINE_H_

#include <string>

#include "stint/status.h"

namespace stint {
namespace bench {

// "fstype on source (mounted at mount point)" of the mount that holds `dir`,
// from /proc/self/mountinfo; "unknown" when none matches.
std::string FsTypeOf(const std::string& dir);

struct DirectIoProbe {
  bool write_direct = false, read_direct = false;
  std::string error;
};

// What Env::Default() actually gets on this file system: it silently falls
// back to buffered I/O where O_DIRECT is refused (tmpfs), and a figure
// measured through the page cache must say so.
DirectIoProbe ProbeDirectIo(const std::string& dir);

// Syncs and drops the page cache. Needs root; O_DIRECT reads bypass the
// cache anyway, buffered fallbacks do not.
Status DropCaches();

// /proc/loadavg's 1, 5 and 15 minute figures, or "unknown".
std::string LoadAverage();

}  // namespace bench
}  // namespace stint

#endif  // STINT_TOOLS_STINT_BENCH_MACHINE_H_
