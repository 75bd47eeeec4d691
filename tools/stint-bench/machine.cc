#include "machine.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "stint/env.h"

namespace stint {
namespace bench {
namespace {

std::string RealPath(const std::string& path) {
  char* r = ::realpath(path.c_str(), nullptr);
  if (r == nullptr) return path;
  std::string out = r;
  std::free(r);
  return out;
}

}  // namespace

// /proc/self/mountinfo: "... mount_point ... - fstype source ...". Longest
// mount point that contains the path wins.
std::string FsTypeOf(const std::string& dir) {
  std::string path = RealPath(dir);
  std::ifstream in("/proc/self/mountinfo");
  std::string line, best_mp, best = "unknown";
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::vector<std::string> fields;
    for (std::string f; ss >> f;) fields.push_back(f);
    auto dash = std::find(fields.begin(), fields.end(), "-");
    if (fields.size() < 5 || dash == fields.end() || dash + 2 >= fields.end()) continue;
    const std::string& mp = fields[4];
    bool inside =
        path == mp || mp == "/" ||
        (path.compare(0, mp.size(), mp) == 0 && path.size() > mp.size() && path[mp.size()] == '/');
    if (inside && mp.size() >= best_mp.size()) {
      best_mp = mp;
      best = *(dash + 1) + " on " + *(dash + 2) + " (mounted at " + mp + ")";
    }
  }
  return best;
}

DirectIoProbe ProbeDirectIo(const std::string& dir) {
  DirectIoProbe p;
  Env* env = Env::Default();
  std::string path = dir + "/.odirect-probe";
  auto w = env->NewWritableFile(path, FileOptions{true});
  if (!w.ok()) {
    p.error = w.status().ToString();
    return p;
  }
  p.write_direct = (*w)->direct_io();
  std::vector<char> block(kDirectIoAlignment * 2);
  char* aligned =
      block.data() +
      (kDirectIoAlignment - uintptr_t(block.data()) % kDirectIoAlignment) % kDirectIoAlignment;
  std::memset(aligned, 0, kDirectIoAlignment);
  Status s = (*w)->PositionedWrite(aligned, kDirectIoAlignment, 0);
  if (!s.ok()) p.error = s.ToString();
  (*w)->Close().IgnoreError();
  auto r = env->NewRandomAccessFile(path, FileOptions{true});
  if (r.ok()) p.read_direct = (*r)->direct_io();
  env->RemoveFile(path).IgnoreError();
  return p;
}
Status DropCaches() {
  ::sync();
  int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return StatusFromErrno("open /proc/sys/vm/drop_caches", errno);
  ssize_t n = ::write(fd, "3\n", 2);
  int e = errno;
  ::close(fd);
  if (n != 2) return StatusFromErrno("write /proc/sys/vm/drop_caches", e);
  return Status::OK();
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a.empty() ? "unknown" : a + " " + b + " " + c;
}

}  // namespace bench
}  // namespace stint
