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
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "checkpoint/commit.h"
#include "format/chunk.h"
#include "stint/checkpointer.h"
#include "stint/env.h"
#include "stint/state.h"
#include "stint/status.h"

namespace stint {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

constexpr double kMiB = 1024.0 * 1024.0;

// ---------------------------------------------------------------------------
// Flags

struct Flags {
  std::string dir;  // parent of the bench's own temp dir; empty: /var/tmp
  uint64_t size = uint64_t{1} << 30;
  int runs = 3;
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
  // CheckpointOptions overrides; unset fields keep the runtime's defaults.
  std::optional<uint64_t> chunk_size, io_size;
  std::optional<unsigned> io_depth, threads, staging;
  std::optional<int> zstd_level;
};

constexpr char kUsage[] =
    "usage: stint-bench [flags]\n"
    "  --dir DIR          directory to benchmark (a temp dir is made inside it). Default: /var/tmp\n"
    "  --size SIZE        state size, e.g. 1GiB, 256MiB, 64M. Default: 1GiB\n"
    "  --runs N           measured runs per figure; medians are reported. Default: 3\n"
    "  --quick            --size 256MiB --runs 1 (explicit --size/--runs still win)\n"
    "  --json[=FILE]      also emit every figure as JSON (to stdout, or to FILE)\n"
    "  --engines LIST     io engines to compare: uring,posix. Default: uring,posix\n"
    "  --compress LIST    off,on. Default: off,on\n"
    "  --data KIND        bf16: N(0,0.02) weights rounded to bf16, stored as float32;\n"
    "                     fp32: full-precision N(0,0.02) float32. Default: bf16\n"
    "  --chunk-size SIZE  CheckpointOptions.chunk_size. Default: runtime default\n"
    "  --io-size SIZE     CheckpointOptions.io_size. Default: runtime default\n"
    "  --io-depth N       CheckpointOptions.io_queue_depth. Default: runtime default\n"
    "  --threads N        CheckpointOptions.threads. Default: runtime default\n"
    "  --zstd-level N     CheckpointOptions.zstd_level. Default: runtime default\n"
    "  --python PATH      python for the torch.save reference. Default: <repo>/.venv/bin/python\n"
    "  --torch-ref PATH   torch_save_ref.py. Default: from the source tree\n"
    "  --fork-before-save fork (and reap) a child before every measured save, as a\n"
    "                     fork-started DataLoader does each epoch: shows the copy-on-write\n"
    "                     faults that fork leaves on the staging buffer\n"
    "  --no-fio, --no-torch, --no-drop-caches, --keep (leave files behind)\n";

// "1GiB", "256MiB", "64M" (binary), "1GB" (decimal), "4096".
Result<uint64_t> ParseSize(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || errno != 0) return Status::InvalidArgument("not a size: '" + text + "'");
  std::string unit = end;
  static const std::map<std::string, double> kUnits = {
      {"", 1},           {"B", 1},          {"K", 1024.0},      {"KiB", 1024.0},
      {"M", kMiB},       {"MiB", kMiB},     {"G", kMiB * 1024}, {"GiB", kMiB * 1024},
      {"T", kMiB * kMiB}, {"TiB", kMiB * kMiB}, {"KB", 1e3},    {"MB", 1e6},
      {"GB", 1e9},       {"TB", 1e12}};
  auto it = kUnits.find(unit);
  if (it == kUnits.end() || value < 0) {
    return Status::InvalidArgument("not a size: '" + text + "' (try 1GiB, 256MiB, 4096)");
  }
  return static_cast<uint64_t>(std::llround(value * it->second));
}

Result<int64_t> ParseInt(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0) {
    return Status::InvalidArgument(flag + ": not an integer: '" + text + "'");
  }
  return int64_t(v);
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Result<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  bool size_set = false, runs_set = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string name = arg, value;
    bool has_value = false;
    size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    // Flags that take a value accept "--flag value" too.
    auto need = [&]() -> Result<std::string> {
      if (has_value) return value;
      if (i + 1 >= argc) return Status::InvalidArgument(name + " needs a value");
      return std::string(argv[++i]);
    };
    if (name == "--help" || name == "-h") {
      return Status::Cancelled("help");
    } else if (name == "--quick") {
      f.quick = true;
    } else if (name == "--json") {
      if (has_value) {
        f.json_file = value;
      } else {
        f.json_stdout = true;
      }
    } else if (name == "--no-fio") {
      f.fio = false;
    } else if (name == "--no-torch") {
      f.torch = false;
    } else if (name == "--no-drop-caches") {
      f.drop_caches = false;
    } else if (name == "--keep") {
      f.keep = true;
    } else if (name == "--fork-before-save") {
      f.fork_before_save = true;
    } else if (name == "--dir") {
      STINT_ASSIGN_OR_RETURN(f.dir, need());
    } else if (name == "--python") {
      STINT_ASSIGN_OR_RETURN(f.python, need());
    } else if (name == "--torch-ref") {
      STINT_ASSIGN_OR_RETURN(f.torch_ref, need());
    } else if (name == "--size") {
      STINT_ASSIGN_OR_RETURN(std::string v, need());
      STINT_ASSIGN_OR_RETURN(f.size, ParseSize(v));
      size_set = true;
    } else if (name == "--runs") {
      STINT_ASSIGN_OR_RETURN(std::string v, need());
      STINT_ASSIGN_OR_RETURN(int64_t n, ParseInt(name, v));
      if (n < 1 || n > 1000) return Status::InvalidArgument("--runs must be in [1, 1000]");
      f.runs = int(n);
      runs_set = true;
    } else if (name == "--engines") {
      STINT_ASSIGN_OR_RETURN(std::string v, need());
      f.engines = SplitList(v);
      for (const auto& e : f.engines) {
        if (e != "uring" && e != "posix" && e != "auto") {
          return Status::InvalidArgument("--engines: unknown engine '" + e + "' (uring, posix, auto)");
        }
      }
      if (f.engines.empty()) return Status::InvalidArgument("--engines is empty");
    } else if (name == "--compress") {
      STINT_ASSIGN_OR_RETURN(std::string v, need());
      f.compress.clear();
      for (const auto& c : SplitList(v)) {
        if (c != "on" && c != "off") return Status::InvalidArgument("--compress: on or off, got '" + c + "'");
        f.compress.push_back(c == "on");
      }
      if (f.compress.empty()) return Status::InvalidArgument("--compress is empty");
    } else if (name == "--data") {
      STINT_ASSIGN_OR_RETURN(f.data, need());
      if (f.data != "bf16" && f.data != "fp32") {
        return Status::InvalidArgument("--data: bf16 or fp32, got '" + f.data + "'");
      }
    } else if (name == "--chunk-size" || name == "--io-size") {
      STINT_ASSIGN_OR_RETURN(std::string v, need());
      STINT_ASSIGN_OR_RETURN(uint64_t n, ParseSize(v));
      if (name == "--io-size" && n > (uint64_t{1} << 30)) return Status::InvalidArgument("--io-size must be <= 1GiB");
      (name == "--chunk-size" ? f.chunk_size : f.io_size) = n;
    } else if (name == "--io-depth" || name == "--threads" || name == "--zstd-level") {
      STINT_ASSIGN_OR_RETURN(std::string v, need());
      STINT_ASSIGN_OR_RETURN(int64_t n, ParseInt(name, v));
      if (name == "--zstd-level") {
        f.zstd_level = int(n);
      } else if (n < 0) {
        return Status::InvalidArgument(name + " must not be negative");
      } else {
        (name == "--io-depth" ? f.io_depth : f.threads) = unsigned(n);
      }
    } else {
      return Status::InvalidArgument("unknown flag '" + arg + "'");
    }
  }
  if (f.quick) {
    if (!size_set) f.size = 256u << 20;
    if (!runs_set) f.runs = 1;
  }
  if (f.size < (1u << 20)) return Status::InvalidArgument("--size must be at least 1MiB");
  return f;
}

// ---------------------------------------------------------------------------
// Small helpers

double Median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string Printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Printf(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

std::string HumanBytes(double bytes) {
  if (bytes >= kMiB * 1024) return Printf("%.2f GiB", bytes / (kMiB * 1024));
  if (bytes >= kMiB) return Printf("%.1f MiB", bytes / kMiB);
  return Printf("%.0f KiB", bytes / 1024);
}
std::string Rate(double bytes_per_s) {
  return std::isnan(bytes_per_s) ? "n/a" : Printf("%.0f MiB/s", bytes_per_s / kMiB);
}
std::string Secs(double s) { return std::isnan(s) ? "n/a" : Printf("%.3f s", s); }
std::string Ratio(double r) { return std::isnan(r) || std::isinf(r) ? "n/a" : Printf("%.2f", r); }

// JSON has no NaN: a missing figure is null.
json Num(double v) { return std::isnan(v) || std::isinf(v) ? json(nullptr) : json(v); }

// ---------------------------------------------------------------------------
// Subprocesses (fio, python): argv only, never a shell, so paths need no quoting.
//
// posix_spawn, not fork: glibc spawns with CLONE_VM|CLONE_VFORK, so the
// parent's pages are not made copy-on-write. After a fork() every page of
// this multi-GiB process is write-protected, and the next snapshot into the
// (warm) staging buffer takes one fault per 4 KiB page: 0.13 s -> 0.43 s for
// 1 GiB here. That would be the bench measuring itself (see --fork-before-save
// for measuring it on purpose).

struct ProcessResult {
  int exit_code = -1;  // 128+signal when killed
  std::string out, err;
};

Result<ProcessResult> RunProcess(const std::vector<std::string>& argv, int timeout_s) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return StatusFromErrno("pipe", errno);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return StatusFromErrno("pipe", e);
  }
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // dup2 clears O_CLOEXEC on the copies; the originals close at exec.
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    return StatusFromErrno("exec " + argv[0], rc);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ProcessResult r;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  bool timed_out = false;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    int n = ::poll(fds, 2, int(std::min<int64_t>(left, 1000)));
    if (n < 0 && errno != EINTR) break;
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buf[65536];
      ssize_t got = ::read(fds[k].fd, buf, sizeof(buf));
      if (got > 0) {
        sinks[k]->append(buf, size_t(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
      }
    }
  }
  if (timed_out) ::kill(pid, SIGKILL);  // our own child, by pid
  for (auto& p : fds) {
    if (p.fd >= 0) ::close(p.fd);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Status::DeadlineExceeded(argv[0] + " did not finish within " + std::to_string(timeout_s) + " s");
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string LastLine(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

// fio and python may print warnings before their JSON.
Result<json> ParseJsonOutput(const std::string& out, const std::string& what) {
  size_t brace = out.find('{');
  if (brace == std::string::npos) return Status::DataLoss(what + ": no JSON in output");
  json j = json::parse(out.begin() + long(brace), out.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::DataLoss(what + ": output is not valid JSON");
  return j;
}

// ---------------------------------------------------------------------------
// Machine context

std::string RealPath(const std::string& path) {
  char* r = ::realpath(path.c_str(), nullptr);
  if (r == nullptr) return path;
  std::string out = r;
  std::free(r);
  return out;
}

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
    bool inside = path == mp || mp == "/" ||
                  (path.compare(0, mp.size(), mp) == 0 && path.size() > mp.size() && path[mp.size()] == '/');
    if (inside && mp.size() >= best_mp.size()) {
      best_mp = mp;
      best = *(dash + 1) + " on " + *(dash + 2) + " (mounted at " + mp + ")";
    }
  }
  return best;
}

struct DirectIoProbe {
  bool write_direct = false, read_direct = false;
  std::string error;
};

// What Env::Default() actually gets on this file system: it silently falls
// back to buffered I/O where O_DIRECT is refused (tmpfs), and a figure
// measured through the page cache must say so.
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
  char* aligned = block.data() + (kDirectIoAlignment - uintptr_t(block.data()) % kDirectIoAlignment) %
                                     kDirectIoAlignment;
  std::memset(aligned, 0, kDirectIoAlignment);
  Status s = (*w)->PositionedWrite(aligned, kDirectIoAlignment, 0);
  if (!s.ok()) p.error = s.ToString();
  (*w)->Close().IgnoreError();
  auto r = env->NewRandomAccessFile(path, FileOptions{true});
  if (r.ok()) p.read_direct = (*r)->direct_io();
  env->RemoveFile(path).IgnoreError();
  return p;
}

// Needs root; O_DIRECT reads bypass the cache anyway, buffered fallbacks do not.
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

// ---------------------------------------------------------------------------
// The state: a small transformer's weights, so tensor count and size mix
// (big matrices, an embedding, many small vectors) look like a real save.

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  float mean = 0, sigma = 0.02f;
};

std::vector<TensorSpec> PlanModel(uint64_t bytes) {
  const int64_t elems = int64_t(bytes / sizeof(float));
  const int layers = 4;
  // Matrices get ~3/4 of the parameters (48 d^2 for 4 layers), the embedding the rest.
  int64_t d = int64_t(std::sqrt(0.75 * double(elems) / 48.0));
  d = d >= 128 ? d / 64 * 64 : std::max<int64_t>(8, d / 8 * 8);
  int64_t positions = d >= 512 ? 1024 : 64;
  int64_t vocab = 0;
  for (;; d = std::max<int64_t>(8, d / 2)) {
    int64_t fixed = layers * (12 * d * d + 13 * d) + positions * d + 2 * d;
    vocab = (elems - fixed) / d;
    if (vocab >= 1 || d == 8) break;
  }
  vocab = std::max<int64_t>(vocab, 1);
  std::vector<TensorSpec> t;
  t.push_back({"embed.tokens.weight", {vocab, d}, 0, 0.02f});
  t.push_back({"embed.positions.weight", {positions, d}, 0, 0.02f});
  for (int l = 0; l < layers; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    t.push_back({p + "ln1.weight", {d}, 1.0f, 0.05f});
    t.push_back({p + "ln1.bias", {d}, 0, 0.01f});
    t.push_back({p + "attn.qkv.weight", {3 * d, d}, 0, 0.02f});
    t.push_back({p + "attn.qkv.bias", {3 * d}, 0, 0.01f});
    t.push_back({p + "attn.proj.weight", {d, d}, 0, 0.02f});
    t.push_back({p + "attn.proj.bias", {d}, 0, 0.01f});
    t.push_back({p + "ln2.weight", {d}, 1.0f, 0.05f});
    t.push_back({p + "ln2.bias", {d}, 0, 0.01f});
    t.push_back({p + "mlp.fc1.weight", {4 * d, d}, 0, 0.02f});
    t.push_back({p + "mlp.fc1.bias", {4 * d}, 0, 0.01f});
    t.push_back({p + "mlp.fc2.weight", {d, 4 * d}, 0, 0.02f});
    t.push_back({p + "mlp.fc2.bias", {d}, 0, 0.01f});
  }
  t.push_back({"final_ln.weight", {d}, 1.0f, 0.05f});
  t.push_back({"final_ln.bias", {d}, 0, 0.01f});
  return t;
}

// Acklam's rational approximation of the normal quantile (|rel err| < 1.2e-9).
double NormalQuantile(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01,  -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double e[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  const double lo = 0.02425;
  auto tail = [&](double q) {
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((e[0] * q + e[1]) * q + e[2]) * q + e[3]) * q + 1);
  };
  if (p < lo) return tail(std::sqrt(-2 * std::log(p)));
  if (p > 1 - lo) return -tail(std::sqrt(-2 * std::log(1 - p)));
  double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

// Normal samples from a quantile table with linear interpolation: ~1 ns per
// value instead of ~15 ns for std::normal_distribution, which matters for
// filling gigabytes on two cores. Tails are cut at ~4.3 sigma.
class FastNormal {
 public:
  FastNormal() : table_(kEntries + 1) {
    for (size_t k = 0; k <= kEntries; ++k) table_[k] = float(NormalQuantile((k + 0.5) / (kEntries + 1)));
  }
  // splitmix64 seeded per block, so the data does not depend on the thread count.
  void Fill(float* out, size_t n, uint64_t seed, float mean, float sigma, bool bf16) const {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; ++i) {
      uint64_t z = (s += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      uint32_t hi = uint32_t(z >> 48), frac = uint32_t(z >> 32) & 0xFFFF;
      float x = table_[hi] + (table_[hi + 1] - table_[hi]) * float(frac) * (1.0f / 65536);
      float v = mean + sigma * x;
      if (bf16) {  // round to nearest even bf16, keep as float32 (low 16 bits zero)
        uint32_t u;
        std::memcpy(&u, &v, 4);
        u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
        std::memcpy(&v, &u, 4);
      }
      out[i] = v;
    }
  }

 private:
  static constexpr size_t kEntries = 65536;
  std::vector<float> table_;
};

struct BenchState {
  std::vector<TensorSpec> specs;
  std::vector<std::unique_ptr<float[]>> data;  // what is saved
  std::vector<std::unique_ptr<float[]>> dest;  // what restore fills
  State state;
  std::vector<TensorDest> dests;
  uint64_t tensor_bytes = 0, blob_bytes = 0;
  std::string description;
};

// Runs fn(i) for i in [0, n) on every core (the generator and the checks are
// the bench's own work, not the runtime's).
void ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  unsigned workers = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < n;) fn(i);
    });
  }
  for (auto& t : threads) t.join();
}

BenchState BuildState(uint64_t bytes, const std::string& data_kind) {
  BenchState bs;
  bs.specs = PlanModel(bytes);
  const bool bf16 = data_kind == "bf16";
  bs.description = bf16 ? "N(0,0.02) weights (LayerNorm ~N(1,0.05)) rounded to bf16, stored as float32"
                        : "full-precision float32 N(0,0.02) weights (LayerNorm ~N(1,0.05))";
  struct Block {
    size_t tensor;
    size_t begin, len;
  };
  std::vector<Block> blocks;
  constexpr size_t kBlock = 1u << 20;
  for (size_t t = 0; t < bs.specs.size(); ++t) {
    size_t n = size_t(NumElements(bs.specs[t].shape));
    bs.data.emplace_back(new float[n]);
    bs.dest.emplace_back(new float[n]);
    bs.tensor_bytes += n * sizeof(float);
    for (size_t b = 0; b < n; b += kBlock) blocks.push_back({t, b, std::min(kBlock, n - b)});
  }
  FastNormal gen;
  ParallelFor(blocks.size(), [&](size_t i) {
    const Block& b = blocks[i];
    const TensorSpec& s = bs.specs[b.tensor];
    gen.Fill(bs.data[b.tensor].get() + b.begin, b.len, (uint64_t(b.tensor) << 32) + b.begin, s.mean,
             s.sigma, bf16);
    std::memset(bs.dest[b.tensor].get() + b.begin, 0, b.len * sizeof(float));  // fault the pages in now
  });
  for (size_t t = 0; t < bs.specs.size(); ++t) {
    const TensorSpec& s = bs.specs[t];
    bs.state.tensors.push_back({s.name, DType::kFloat32, s.shape, {}, {}, bs.data[t].get()});
    bs.dests.push_back({s.name, DType::kFloat32, s.shape, {}, {}, bs.dest[t].get()});
  }
  // A trainer also saves its RNG and a little metadata next to the weights.
  std::mt19937_64 rng(42);
  std::ostringstream rng_state;
  rng_state << rng;
  bs.state.blobs["rng.mt19937_64"] = rng_state.str();
  bs.state.blobs["trainer.json"] = R"({"step": 1000, "lr": 0.0003, "epoch": 2, "sampler_cursor": 123456})";
  for (const auto& [name, blob] : bs.state.blobs) bs.blob_bytes += blob.size();
  return bs;
}

// Poisons the restore destinations so a load that skips bytes cannot pass.
void PoisonDests(BenchState* bs) {
  ParallelFor(bs->specs.size(), [&](size_t t) {
    std::memset(bs->dest[t].get(), 0xA5, size_t(NumElements(bs->specs[t].shape)) * sizeof(float));
  });
}

Status CheckRestored(const BenchState& bs, const LoadResult& r) {
  std::vector<char> bad(bs.specs.size(), 0);
  ParallelFor(bs.specs.size(), [&](size_t t) {
    size_t n = size_t(NumElements(bs.specs[t].shape)) * sizeof(float);
    bad[t] = std::memcmp(bs.data[t].get(), bs.dest[t].get(), n) != 0;
  });
  for (size_t t = 0; t < bad.size(); ++t) {
    if (bad[t]) return Status::DataLoss("restored tensor '" + bs.specs[t].name + "' differs from what was saved");
  }
  if (r.blobs != bs.state.blobs) return Status::DataLoss("restored blobs differ from what was saved");
  return Status::OK();
}

// ---------------------------------------------------------------------------
// CPU reference for compression: the same chunks through the runtime's own
// ZstdCompress + Xxh3 on as many threads as persist gets, with warm output
// buffers and no I/O. A zstd persist can at best match it; how far below it
// lands is what the pipeline (allocation, ordering, I/O) costs.

Result<double> TimeCompressOnly(const BenchState& bs, uint64_t chunk, int level, ThreadPool* pool,
                                uint64_t* stored_out) {
  struct Piece {
    const char* src;
    size_t len;
  };
  std::vector<Piece> pieces;
  for (size_t t = 0; t < bs.specs.size(); ++t) {
    const char* base = reinterpret_cast<const char*>(bs.data[t].get());
    size_t n = size_t(NumElements(bs.specs[t].shape)) * sizeof(float);
    for (size_t off = 0; off < n; off += chunk) pieces.push_back({base + off, std::min<size_t>(chunk, n - off)});
  }
  std::vector<uint64_t> stored(pieces.size(), 0);
  std::vector<Status> errors(pieces.size());
  auto t0 = Clock::now();
  pool->ParallelFor(pieces.size(), [&](size_t i) {
    // One buffer per thread, kept across calls: no page faults in the timing.
    thread_local std::vector<char> out;
    if (out.size() < ZstdBound(chunk)) out.resize(ZstdBound(chunk));
    auto n = ZstdCompress(pieces[i].src, pieces[i].len, out.data(), out.size(), level);
    if (!n.ok()) {
      errors[i] = n.status();
      return;
    }
    stored[i] = std::min<uint64_t>(*n, pieces[i].len);  // persist keeps raw when zstd does not help
    volatile uint64_t h = Xxh3(out.data(), *n);
    (void)h;
  });
  double secs = SecondsSince(t0);
  for (const auto& e : errors) STINT_RETURN_IF_ERROR(e);
  *stored_out = 0;
  for (uint64_t n : stored) *stored_out += n;
  return secs;
}

// CPU reference for the stall: a snapshot is at heart a copy of the state into
// staging memory, so the copy of the same tensors into a warm buffer on the
// same number of threads is the floor for Save()'s stall.
double TimeMemcpyOnly(const BenchState& bs, uint64_t chunk, ThreadPool* pool, char* dst) {
  struct Piece {
    const char* src;
    uint64_t dst;
    size_t len;
  };
  std::vector<Piece> pieces;
  uint64_t cursor = 0;
  for (size_t t = 0; t < bs.specs.size(); ++t) {
    const char* base = reinterpret_cast<const char*>(bs.data[t].get());
    size_t n = size_t(NumElements(bs.specs[t].shape)) * sizeof(float);
    for (size_t off = 0; off < n; off += chunk) {
      pieces.push_back({base + off, cursor, std::min<size_t>(chunk, n - off)});
      cursor += pieces.back().len;
    }
  }
  auto t0 = Clock::now();
  pool->ParallelFor(pieces.size(), [&](size_t i) { std::memcpy(dst + pieces[i].dst, pieces[i].src, pieces[i].len); });
  return SecondsSince(t0);
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a.empty() ? "unknown" : a + " " + b + " " + c;
}

// ---------------------------------------------------------------------------
// fio reference

struct FioReference {
  std::string engine;  // "io_uring", or "psync" after a fallback
  std::string version;
  std::string unavailable;  // why, when fio could not run
  std::vector<double> write_bw, read_bw;  // bytes/s per run
  // --fallocate=none: fio then extends the file with every write, as stint's
  // persist does (it writes a fresh, empty file). ext4 runs extending O_DIRECT
  // writes synchronously under the inode lock, so this is the ceiling for a
  // writer that does not preallocate.
  std::vector<double> write_extending_bw;
  std::string note;
};

Result<double> RunFioOnce(const std::string& dir, uint64_t size, const std::string& rw,
                          const std::string& engine, bool preallocate = true) {
  uint64_t bs = std::min<uint64_t>(4u << 20, size);
  std::vector<std::string> argv = {"fio", "--name=w", "--directory=" + dir, "--rw=" + rw,
                                   "--bs=" + std::to_string(bs), "--direct=1",
                                   "--ioengine=" + engine, "--iodepth=16",
                                   "--size=" + std::to_string(size / bs * bs), "--output-format=json"};
  if (rw == "write") argv.push_back("--end_fsync=1");
  if (!preallocate) argv.push_back("--fallocate=none");
  STINT_ASSIGN_OR_RETURN(ProcessResult p, RunProcess(argv, 600));
  if (p.exit_code != 0) {
    std::string why = LastLine(p.err.empty() ? p.out : p.err);
    return Status::IoError("fio --rw=" + rw + " --ioengine=" + engine + " exited " +
                           std::to_string(p.exit_code) + (why.empty() ? "" : ": " + why));
  }
  STINT_ASSIGN_OR_RETURN(json j, ParseJsonOutput(p.out, "fio"));
  if (!j.contains("jobs") || !j["jobs"].is_array() || j["jobs"].empty()) {
    return Status::DataLoss("fio: JSON has no jobs");
  }
  const json& job = j["jobs"][0];
  if (job.value("error", 0) != 0) {
    return Status::IoError("fio --ioengine=" + engine + ": job error " + std::to_string(job.value("error", 0)));
  }
  const char* key = rw == "write" ? "write" : "read";
  if (!job.contains(key) || !job[key].contains("bw_bytes")) return Status::DataLoss("fio: no bw_bytes");
  double bw = job[key]["bw_bytes"].get<double>();
  if (!(bw > 0)) return Status::DataLoss("fio: bw_bytes is 0");
  return bw;
}

// One write and one read of a fresh fio file; the file is removed after.
Status RunFioRound(const std::string& dir, uint64_t size, bool drop, FioReference* ref) {
  auto w = RunFioOnce(dir, size, "write", ref->engine);
  if (!w.ok() && ref->engine == "io_uring" && ref->write_bw.empty()) {
    ref->note = "io_uring refused (" + w.status().message() + "); psync (queue depth 1) used";
    ref->engine = "psync";
    w = RunFioOnce(dir, size, "write", ref->engine);
  }
  Status result = w.status();
  if (w.ok()) {
    ref->write_bw.push_back(*w);
    if (drop) DropCaches().IgnoreError();  // reported once, in the context lines
    auto r = RunFioOnce(dir, size, "read", ref->engine);
    if (r.ok()) ref->read_bw.push_back(*r);
    result = r.status();
  }
  Env::Default()->RemoveFile(dir + "/w.0.0").IgnoreError();
  if (result.ok()) {
    auto x = RunFioOnce(dir, size, "write", ref->engine, /*preallocate=*/false);
    if (x.ok()) ref->write_extending_bw.push_back(*x);
    result = x.status();
    Env::Default()->RemoveFile(dir + "/w.0.0").IgnoreError();
  }
  return result;
}

// ---------------------------------------------------------------------------
// torch.save reference

struct TorchReference {
  std::string unavailable;  // why, when there is no figure
  json raw;
  double fsync_s = std::nan(""), nofsync_s = std::nan("");
};

std::string ExeDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, size_t(n));
  return p.substr(0, p.rfind('/'));
}

bool IsExecutable(const std::string& p) { return ::access(p.c_str(), X_OK) == 0; }
bool IsReadable(const std::string& p) { return ::access(p.c_str(), R_OK) == 0; }

TorchReference RunTorchReference(const Flags& flags, const BenchState& bs, const std::string& dir) {
  TorchReference ref;
  std::string python = flags.python;
  if (python.empty()) {
    for (const std::string& c : {std::string(STINT_SOURCE_ROOT) + "/.venv/bin/python",
                                 ExeDir() + "/../../../.venv/bin/python"}) {
      if (IsExecutable(c)) {
        python = c;
        break;
      }
    }
    if (python.empty()) python = "python3";
  } else if (!IsExecutable(python)) {
    ref.unavailable = "python '" + python + "' is not executable";
    return ref;
  }
  std::string script = flags.torch_ref;
  if (script.empty()) {
    for (const std::string& c : {std::string(STINT_BENCH_SOURCE_DIR) + "/torch_save_ref.py",
                                 ExeDir() + "/torch_save_ref.py"}) {
      if (IsReadable(c)) {
        script = c;
        break;
      }
    }
  }
  if (script.empty() || !IsReadable(script)) {
    ref.unavailable = "torch_save_ref.py not found (pass --torch-ref)";
    return ref;
  }
  // The same tensor shapes as the stint state, so both save the same thing.
  std::string shapes;
  for (const auto& s : bs.specs) {
    if (!shapes.empty()) shapes += ",";
    for (size_t k = 0; k < s.shape.size(); ++k) shapes += (k ? "x" : "") + std::to_string(s.shape[k]);
  }
  auto p = RunProcess({python, script, "--size", std::to_string(bs.tensor_bytes), "--dir", dir, "--runs",
                       std::to_string(flags.runs), "--shapes", shapes},
                      600);
  if (!p.ok()) {
    ref.unavailable = p.status().ToString();
    return ref;
  }
  auto j = ParseJsonOutput(p->out, python);
  if (j.ok() && j->contains("error")) {
    ref.unavailable = (*j)["error"].get<std::string>();
    return ref;
  }
  if (p->exit_code != 0 || !j.ok()) {
    std::string why = LastLine(p->err.empty() ? p->out : p->err);
    ref.unavailable = python + " exited " + std::to_string(p->exit_code) + (why.empty() ? "" : ": " + why);
    return ref;
  }
  ref.raw = *j;
  ref.fsync_s = ref.raw.value("save_fsync_median_seconds", std::nan(""));
  ref.nofsync_s = ref.raw.value("save_nofsync_median_seconds", std::nan(""));
  return ref;
}

// ---------------------------------------------------------------------------
// stint variants

// Minor page faults of the whole process so far: a snapshot into a warm
// staging buffer takes almost none, one into fresh memory takes one per page.
int64_t MinorFaults() {
  struct rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

struct SaveSample {
  uint64_t step = 0;
  int64_t save_faults = 0;     // minor faults during Save()
  int64_t persist_faults = 0;  // minor faults from Save()'s return to durable
  double call_s = 0;      // Save() wall time: the training thread's stall
  double durable_s = 0;   // Save() call to durable future ready
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
  // Medians.
  double persist_bw = std::nan(""), durable_bw = std::nan(""), restore_bw = std::nan("");
  double stall_s = std::nan(""), snapshot_s = std::nan(""), durable_s = std::nan("");
  double persist_s = std::nan(""), commit_s = std::nan(""), compression = std::nan("");
};

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
    if (Clock::now() > deadline) return Status::Internal("no SaveStats for step " + std::to_string(step));
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
  STINT_RETURN_IF_ERROR(CheckRestored(*bs, *loaded).WithContext("load step " + std::to_string(step)));
  v->load_s.push_back(load_s);
  // Only the newest checkpoint is kept, so a run needs ~2x --size of disk per
  // variant, not keep_last x; the runtime's retention is not what is measured.
  return RemoveRecursively(Env::Default(), v->root + "/" + StepDirName(step - 1));
}

void Summarize(Variant* v, uint64_t raw_bytes) {
  std::vector<double> persist_bw, durable_bw, stall, snap, durable, persist, commit, comp, restore;
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

json SampleJson(const SaveSample& s) {
  return {{"step", s.step},
          {"save_call_seconds", s.call_s},
          {"time_to_durable_seconds", s.durable_s},
          {"snapshot_seconds", s.stats.snapshot_seconds},
          {"persist_seconds", s.stats.persist_seconds},
          {"commit_seconds", s.stats.commit_seconds},
          {"raw_bytes", s.stats.raw_bytes},
          {"stored_bytes", s.stats.stored_bytes},
          {"engine", s.stats.engine},
          {"minor_faults_in_save", s.save_faults},
          {"minor_faults_in_persist", s.persist_faults}};
}

// ---------------------------------------------------------------------------
// Report

struct Row {
  std::string figure, stint, reference, ref_value, ratio;
};

void PrintTable(const std::string& title, const std::vector<Row>& rows) {
  Row head{"figure", "stint", "reference", "value", "ratio"};
  size_t w[5] = {head.figure.size(), head.stint.size(), head.reference.size(), head.ref_value.size(),
                 head.ratio.size()};
  for (const auto& r : rows) {
    w[0] = std::max(w[0], r.figure.size());
    w[1] = std::max(w[1], r.stint.size());
    w[2] = std::max(w[2], r.reference.size());
    w[3] = std::max(w[3], r.ref_value.size());
    w[4] = std::max(w[4], r.ratio.size());
  }
  std::printf("\n%s\n", title.c_str());
  auto line = [&](const Row& r) {
    std::printf("  %-*s  %*s  %-*s  %*s  %*s\n", int(w[0]), r.figure.c_str(), int(w[1]), r.stint.c_str(),
                int(w[2]), r.reference.c_str(), int(w[3]), r.ref_value.c_str(), int(w[4]), r.ratio.c_str());
  };
  line(head);
  for (const auto& r : rows) line(r);
}

double Div(double a, double b) { return b == 0 ? std::nan("") : a / b; }

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
  unsigned cores = std::thread::hardware_concurrency();
  std::string fs = FsTypeOf(dir);
  DirectIoProbe direct = ProbeDirectIo(dir);
  std::string drop_note = "not attempted (--no-drop-caches)";
  bool drop = false;
  if (flags.drop_caches) {
    Status d = DropCaches();
    drop = d.ok();
    drop_note = d.ok() ? "yes (echo 3 > /proc/sys/vm/drop_caches before every read)"
                       : "failed (" + d.ToString() + "); O_DIRECT reads bypass the cache anyway";
  }
  CheckpointOptions defaults;
  uint64_t chunk = flags.chunk_size.value_or(defaults.chunk_size);
  uint64_t io_size = flags.io_size.value_or(defaults.io_size);
  unsigned io_depth = flags.io_depth.value_or(defaults.io_queue_depth);
  unsigned threads = flags.threads.value_or(defaults.threads);
  unsigned threads_resolved = threads != 0 ? threads : std::max(1u, cores) - 1;
  int zstd_level = flags.zstd_level.value_or(defaults.zstd_level);

  auto tgen = Clock::now();
  BenchState bs = BuildState(flags.size, flags.data);
  double gen_s = SecondsSince(tgen);
  const uint64_t raw_bytes = bs.tensor_bytes + bs.blob_bytes;

  std::printf("stint-bench: %s state (%zu float32 tensors + %zu blobs, %llu bytes), %d run(s), medians\n",
              HumanBytes(double(raw_bytes)).c_str(), bs.specs.size(), bs.state.blobs.size(),
              (unsigned long long)raw_bytes, flags.runs);
  std::printf("  data:      %s (generated in %.1f s)\n", bs.description.c_str(), gen_s);
  std::string load_before = LoadAverage();
  std::printf("  machine:   %u cores, load average %s (other work on the machine skews every figure);\n"
              "             dir %s: %s\n",
              cores, load_before.c_str(), dir.c_str(), fs.c_str());
  std::printf("  O_DIRECT:  write %s, read %s (WritableFile/RandomAccessFile::direct_io())%s\n",
              direct.write_direct ? "yes" : "NO (buffered fallback)", direct.read_direct ? "yes" : "NO",
              direct.error.empty() ? "" : ("; probe error: " + direct.error).c_str());
  std::printf("  drop page cache: %s\n", drop_note.c_str());
  std::printf("  options:   chunk_size %s, io_size %s, io_queue_depth %u, threads %u%s, zstd level %d, "
              "staging 2x snapshot; others default\n",
              HumanBytes(double(chunk)).c_str(), HumanBytes(double(io_size)).c_str(), io_depth,
              threads_resolved, threads == 0 ? " (auto: cores - 1, + the calling thread)" : "", zstd_level);
  if (flags.fork_before_save) std::printf("  fork:      a child is forked and reaped before every measured save\n");
  std::fflush(stdout);

  // --- variants: open, and one cold save each (staging allocation and page
  // faults are a first-save cost, reported apart from the medians) ---
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
  for (auto& v : variants) {
    auto opened = Checkpointer::Open(VariantOptions(flags, v));
    if (!opened.ok()) {
      v.unavailable = opened.status().ToString();
      continue;
    }
    v.ckpt = std::move(*opened);
    auto cold = SaveOnce(&v, bs, 0);
    if (!cold.ok()) {
      v.unavailable = cold.status().ToString();
      v.ckpt.reset();
      continue;
    }
    v.cold = *cold;
  }

  // --- measured rounds: fio then every variant, back to back ---
  FioReference fio;
  fio.engine = "io_uring";
  if (!flags.fio) fio.unavailable = "skipped (--no-fio)";
  if (flags.fio) {
    auto p = RunProcess({"fio", "--version"}, 30);
    if (!p.ok() || p->exit_code != 0) {
      fio.unavailable = p.ok() ? "fio not runnable: " + LastLine(p->err) : p.status().ToString();
    } else {
      fio.version = LastLine(p->out);
    }
  }
  const uint64_t fio_bs = 4u << 20;  // fio's --bs; the file is a whole number of blocks
  uint64_t fio_size = std::max<uint64_t>((raw_bytes + fio_bs - 1) / fio_bs * fio_bs, fio_bs);
  bool any_zstd = std::find(flags.compress.begin(), flags.compress.end(), true) != flags.compress.end();
  ThreadPool cpu_pool(threads_resolved);  // persist's pool size; the caller makes it +1 as in persist
  std::vector<double> zstd_only_bw, memcpy_only_s;
  std::unique_ptr<char[]> memcpy_dst(new char[bs.tensor_bytes]);
  uint64_t zstd_only_stored = 0;
  std::string zstd_only_error;
  for (int r = 0; r < flags.runs; ++r) {
    // Twice: the first pass of the first run faults the buffer in.
    TimeMemcpyOnly(bs, chunk, &cpu_pool, memcpy_dst.get());
    memcpy_only_s.push_back(TimeMemcpyOnly(bs, chunk, &cpu_pool, memcpy_dst.get()));
    if (any_zstd && zstd_only_error.empty()) {
      auto secs = TimeCompressOnly(bs, chunk, zstd_level, &cpu_pool, &zstd_only_stored);
      if (secs.ok()) {
        zstd_only_bw.push_back(double(bs.tensor_bytes) / *secs);
      } else {
        zstd_only_error = secs.status().ToString();
      }
    }
    if (fio.unavailable.empty()) {
      Status s = RunFioRound(dir, fio_size, drop, &fio);
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
    std::fprintf(stderr, "stint-bench: run %d/%d done (%.0f s)\n", r + 1, flags.runs, SecondsSince(start));
  }
  memcpy_dst.reset();
  const double memcpy_only = Median(memcpy_only_s);
  for (auto& v : variants) {
    v.ckpt.reset();  // joins its persist thread, frees its staging pool
    if (v.unavailable.empty()) Summarize(&v, raw_bytes);
  }
  const double fio_w = fio.unavailable.empty() ? Median(fio.write_bw) : std::nan("");
  const double fio_r = fio.unavailable.empty() ? Median(fio.read_bw) : std::nan("");
  const double fio_x = fio.unavailable.empty() ? Median(fio.write_extending_bw) : std::nan("");

  // --- torch.save reference, last: it needs the memory the variants held ---
  TorchReference torch;
  if (!flags.torch) {
    torch.unavailable = "skipped (--no-torch)";
  } else {
    torch = RunTorchReference(flags, bs, dir);
  }

  // --- report ---
  auto find = [&](const std::string& e, bool c) -> const Variant* {
    for (const auto& v : variants) {
      if (v.engine == e && v.compress == c && v.unavailable.empty()) return &v;
    }
    return nullptr;
  };
  std::string fio_label = fio.unavailable.empty() ? "fio " + fio.engine : "fio";
  std::printf("  fio:       %s\n", fio.unavailable.empty()
                                       ? (fio.version + ", --bs=4M --direct=1 --ioengine=" + fio.engine +
                                          " --iodepth=16 --size=" + std::to_string(fio_size) +
                                          (fio.note.empty() ? "" : "; " + fio.note))
                                             .c_str()
                                       : ("unavailable (" + fio.unavailable + ")").c_str());
  if (fio.unavailable.empty() && fio.write_bw.size() > 1) {
    auto mm = [](const std::vector<double>& v) {
      return Printf("%.0f-%.0f MiB/s", *std::min_element(v.begin(), v.end()) / kMiB,
                    *std::max_element(v.begin(), v.end()) / kMiB);
    };
    std::printf("             spread over runs: write %s, read %s, extending write %s\n", mm(fio.write_bw).c_str(),
                fio.read_bw.empty() ? "n/a" : mm(fio.read_bw).c_str(),
                fio.write_extending_bw.empty() ? "n/a" : mm(fio.write_extending_bw).c_str());
  }
  if (torch.unavailable.empty()) {
    std::printf("  torch.save reference: torch %s, %d tensors, same shapes; median of %d\n",
                torch.raw.value("torch_version", "?").c_str(), torch.raw.value("tensors", 0),
                torch.raw.value("runs", 0));
  } else {
    std::printf("  torch.save reference: unavailable (%s)\n", torch.unavailable.c_str());
  }
  for (const auto& v : variants) {
    if (!v.unavailable.empty()) std::printf("  variant %s: unavailable (%s)\n", v.label.c_str(), v.unavailable.c_str());
  }

  std::vector<Row> persist_rows, restore_rows, stall_rows, cmp_rows;
  for (const auto& v : variants) {
    if (!v.unavailable.empty()) continue;
    std::string engine_note = v.saves.empty() ? "" : " [" + v.saves.back().stats.engine + "]";
    persist_rows.push_back({"persist " + v.label + engine_note + " (persist+commit)", Rate(v.persist_bw),
                            fio_label + " O_DIRECT write", Rate(fio_w), Ratio(Div(v.persist_bw, fio_w))});
    persist_rows.push_back({"  Save() call -> durable, " + v.label, Rate(v.durable_bw), fio_label + " O_DIRECT write",
                            Rate(fio_w), Ratio(Div(v.durable_bw, fio_w))});
    if (!v.compress) {
      persist_rows.push_back({"  same persist, " + v.label, Rate(v.persist_bw), fio_label + " --fallocate=none",
                              Rate(fio_x), Ratio(Div(v.persist_bw, fio_x))});
    }
    restore_rows.push_back({"restore " + v.label + " (Checkpointer::Load)", Rate(v.restore_bw),
                            fio_label + " O_DIRECT read", Rate(fio_r), Ratio(Div(v.restore_bw, fio_r))});
    stall_rows.push_back({"stall " + v.label + " (Save() returns)", Secs(v.stall_s), "torch.save + fsync",
                          Secs(torch.fsync_s), Ratio(Div(v.stall_s, torch.fsync_s))});
    stall_rows.push_back({"  same stall", Secs(v.stall_s), "torch.save, no fsync", Secs(torch.nofsync_s),
                          Ratio(Div(v.stall_s, torch.nofsync_s))});
    stall_rows.push_back({"  same stall", Secs(v.stall_s), Printf("memcpy to warm buffer, %u+1 thr", threads_resolved),
                          Secs(memcpy_only), Ratio(Div(v.stall_s, memcpy_only))});
    stall_rows.push_back({"  time to durable, " + v.label, Secs(v.durable_s), "torch.save + fsync",
                          Secs(torch.fsync_s), Ratio(Div(v.durable_s, torch.fsync_s))});
    if (v.cold) {
      stall_rows.push_back({"  first save's stall (cold staging)", Secs(v.cold->call_s), "torch.save + fsync",
                            Secs(torch.fsync_s), Ratio(Div(v.cold->call_s, torch.fsync_s))});
    }
  }
  if (fio.unavailable.empty()) {
    cmp_rows.push_back({"fio write: extending / preallocated file", Rate(fio_x), "fio default (fallocate)",
                        Rate(fio_w), Ratio(Div(fio_x, fio_w))});
  }
  for (bool c : {false, true}) {
    const Variant* u = find("uring", c);
    const Variant* p = find("posix", c);
    if (u == nullptr || p == nullptr) continue;
    std::string tag = c ? "zstd" : "raw";
    cmp_rows.push_back({"persist uring/posix, " + tag, Rate(u->persist_bw), "posix", Rate(p->persist_bw),
                        Ratio(Div(u->persist_bw, p->persist_bw))});
    cmp_rows.push_back({"restore uring/posix, " + tag, Rate(u->restore_bw), "posix", Rate(p->restore_bw),
                        Ratio(Div(u->restore_bw, p->restore_bw))});
  }
  const double zstd_only = zstd_only_bw.empty() ? std::nan("") : Median(zstd_only_bw);
  for (const auto& e : flags.engines) {
    const Variant* on = find(e, true);
    const Variant* off = find(e, false);
    if (on == nullptr || off == nullptr) continue;
    cmp_rows.push_back({"persist zstd/raw, " + e, Rate(on->persist_bw), "raw", Rate(off->persist_bw),
                        Ratio(Div(on->persist_bw, off->persist_bw))});
    cmp_rows.push_back({"restore zstd/raw, " + e, Rate(on->restore_bw), "raw", Rate(off->restore_bw),
                        Ratio(Div(on->restore_bw, off->restore_bw))});
    cmp_rows.push_back({"stall zstd/raw, " + e, Secs(on->stall_s), "raw", Secs(off->stall_s),
                        Ratio(Div(on->stall_s, off->stall_s))});
    cmp_rows.push_back({"persist zstd / CPU-only zstd+xxh3, " + e, Rate(on->persist_bw),
                        Printf("compress only, %u+1 threads", threads_resolved), Rate(zstd_only), Ratio(Div(on->persist_bw, zstd_only))});
    double stored = on->saves.empty() ? 0 : double(on->saves.back().stats.stored_bytes);
    cmp_rows.push_back({"zstd compression ratio (raw/stored), " + e, HumanBytes(stored), "raw",
                        HumanBytes(double(raw_bytes)), Ratio(on->compression)});
  }
  PrintTable("1. persist throughput: raw bytes / (persist+commit) from SaveStats, and / wall time from the\n"
             "   Save() call to durable (that one includes the snapshot); higher is better", persist_rows);
  PrintTable("2. restore throughput (raw bytes / Load() time), higher is better", restore_rows);
  PrintTable("3. training-thread stall of an async save, lower is better", stall_rows);
  PrintTable("4. engine and compression", cmp_rows);
  std::printf("\n  breakdown (medians): ");
  for (const auto& v : variants) {
    if (!v.unavailable.empty()) continue;
    std::vector<double> sf, pf, lf;
    for (const auto& s : v.saves) {
      sf.push_back(double(s.save_faults));
      pf.push_back(double(s.persist_faults));
    }
    for (int64_t f : v.load_faults) lf.push_back(double(f));
    std::printf("\n    %-13s snapshot %.3f s, persist %.3f s, commit %.3f s, load %.3f s; "
                "minor faults: first Save() %lld, then Save() %.0f, persist %.0f, Load() %.0f",
                v.label.c_str(), v.snapshot_s, v.persist_s, v.commit_s, Median(v.load_s),
                v.cold ? (long long)v.cold->save_faults : -1LL, Median(sf), Median(pf), Median(lf));
  }
  if (!zstd_only_error.empty()) std::printf("\n  CPU-only zstd reference failed: %s", zstd_only_error.c_str());
  std::string load_after = LoadAverage();
  std::printf("\n  total bench time %.0f s; load average at the end %s\n", SecondsSince(start), load_after.c_str());

  // --- JSON ---
  if (flags.json_stdout || !flags.json_file.empty()) {
    json j;
    j["context"] = {{"cores", cores},
                    {"dir", dir},
                    {"filesystem", fs},
                    {"o_direct_write", direct.write_direct},
                    {"o_direct_read", direct.read_direct},
                    {"drop_caches", drop},
                    {"drop_caches_note", drop_note},
                    {"runs", flags.runs},
                    {"fork_before_save", flags.fork_before_save},
                    {"load_average_start", load_before},
                    {"load_average_end", load_after}};
    j["memcpy_cpu_only"] = {{"seconds", memcpy_only_s}, {"median_seconds", Num(memcpy_only)},
                            {"threads", threads_resolved + 1}};
    if (!zstd_only_bw.empty()) {
      j["zstd_cpu_only"] = {{"bw_bytes", zstd_only_bw}, {"bw_median", Num(zstd_only)}, {"stored_bytes", zstd_only_stored},
                            {"threads", threads_resolved + 1}, {"level", zstd_level}};
    }
    j["options"] = {{"chunk_size", chunk},     {"io_size", io_size},       {"io_queue_depth", io_depth},
                    {"threads", threads},       {"threads_resolved", threads_resolved},
                    {"zstd_level", zstd_level}};
    json tensors = json::array();
    for (const auto& s : bs.specs) tensors.push_back({{"name", s.name}, {"shape", s.shape}});
    j["state"] = {{"raw_bytes", raw_bytes}, {"tensor_bytes", bs.tensor_bytes}, {"blob_bytes", bs.blob_bytes},
                  {"tensors", tensors},     {"data", bs.description},           {"data_kind", flags.data}};
    if (fio.unavailable.empty()) {
      j["fio"] = {{"engine", fio.engine},          {"version", fio.version},     {"size", fio_size},
                  {"write_bw_bytes", fio.write_bw}, {"read_bw_bytes", fio.read_bw},
                  {"write_bw_median", Num(fio_w)},   {"read_bw_median", Num(fio_r)}, {"note", fio.note},
                  {"write_extending_bw_bytes", fio.write_extending_bw}, {"write_extending_bw_median", Num(fio_x)}};
    } else {
      j["fio"] = {{"unavailable", fio.unavailable}};
    }
    j["torch_save"] = torch.unavailable.empty() ? torch.raw : json{{"unavailable", torch.unavailable}};
    json vs = json::array();
    for (const auto& v : variants) {
      json o = {{"engine", v.engine}, {"compress", v.compress}};
      if (!v.unavailable.empty()) {
        o["unavailable"] = v.unavailable;
        vs.push_back(o);
        continue;
      }
      if (v.cold) o["cold_save"] = SampleJson(*v.cold);
      json saves = json::array();
      for (const auto& s : v.saves) saves.push_back(SampleJson(s));
      o["saves"] = saves;
      o["load_seconds"] = v.load_s;
      o["load_minor_faults"] = v.load_faults;
      o["median"] = {{"persist_bw_bytes", Num(v.persist_bw)},
                     {"save_to_durable_bw_bytes", Num(v.durable_bw)},
                     {"restore_bw_bytes", Num(v.restore_bw)},
                     {"stall_seconds", Num(v.stall_s)},
                     {"snapshot_seconds", Num(v.snapshot_s)},
                     {"time_to_durable_seconds", Num(v.durable_s)},
                     {"persist_seconds", Num(v.persist_s)},
                     {"commit_seconds", Num(v.commit_s)},
                     {"compression_ratio", Num(v.compression)}};
      o["ratio"] = {{"persist_vs_fio_write", Num(Div(v.persist_bw, fio_w))},
                    {"persist_vs_fio_write_extending", Num(Div(v.persist_bw, fio_x))},
                    {"save_to_durable_vs_fio_write", Num(Div(v.durable_bw, fio_w))},
                    {"restore_vs_fio_read", Num(Div(v.restore_bw, fio_r))},
                    {"stall_vs_torch_save_fsync", Num(Div(v.stall_s, torch.fsync_s))},
                    {"stall_vs_torch_save_nofsync", Num(Div(v.stall_s, torch.nofsync_s))},
                    {"durable_vs_torch_save_fsync", Num(Div(v.durable_s, torch.fsync_s))},
                    {"stall_vs_memcpy", Num(Div(v.stall_s, memcpy_only))}};
      vs.push_back(o);
    }
    j["variants"] = vs;
    json cmp = json::array();
    for (const auto& r : cmp_rows) cmp.push_back({{"figure", r.figure}, {"value", r.stint}, {"reference", r.ref_value}, {"ratio", r.ratio}});
    j["comparisons"] = cmp;
    std::string text = j.dump(2, ' ', false, json::error_handler_t::replace);
    if (flags.json_stdout) std::printf("%s\n", text.c_str());
    if (!flags.json_file.empty()) {
      std::ofstream out(flags.json_file);
      out << text << "\n";
      if (!out) std::fprintf(stderr, "stint-bench: cannot write %s\n", flags.json_file.c_str());
    }
  }

  if (flags.keep) {
    std::fprintf(stderr, "stint-bench: files kept in %s\n", dir.c_str());
  } else {
    Status s = RemoveRecursively(env, dir);
    if (!s.ok()) std::fprintf(stderr, "stint-bench: cleanup of %s: %s\n", dir.c_str(), s.ToString().c_str());
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
    std::fprintf(stderr, "stint-bench: %s\n%s", flags.status().message().c_str(), stint::bench::kUsage);
    return 2;
  }
  return stint::bench::Run(*flags);
}
