#include "references.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common.h"
#include "format/chunk.h"
#include "machine.h"
#include "process.h"
#include "stint/env.h"
#include "stint/state.h"

namespace stint {
namespace bench {
namespace {

using nlohmann::json;

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
    for (size_t off = 0; off < n; off += chunk)
      pieces.push_back({base + off, std::min<size_t>(chunk, n - off)});
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
  pool->ParallelFor(pieces.size(), [&](size_t i) {
    std::memcpy(dst + pieces[i].dst, pieces[i].src, pieces[i].len);
  });
  return SecondsSince(t0);
}

Result<double> RunFioOnce(const std::string& dir, uint64_t size, const std::string& rw,
                          const std::string& engine, bool preallocate = true) {
  uint64_t bs = std::min<uint64_t>(4u << 20, size);
  std::vector<std::string> argv = {"fio",
                                   "--name=w",
                                   "--directory=" + dir,
                                   "--rw=" + rw,
                                   "--bs=" + std::to_string(bs),
                                   "--direct=1",
                                   "--ioengine=" + engine,
                                   "--iodepth=16",
                                   "--size=" + std::to_string(size / bs * bs),
                                   "--output-format=json"};
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
    return Status::IoError("fio --ioengine=" + engine + ": job error " +
                           std::to_string(job.value("error", 0)));
  }
  const char* key = rw == "write" ? "write" : "read";
  if (!job.contains(key) || !job[key].contains("bw_bytes"))
    return Status::DataLoss("fio: no bw_bytes");
  double bw = job[key]["bw_bytes"].get<double>();
  if (!(bw > 0)) return Status::DataLoss("fio: bw_bytes is 0");
  return bw;
}

std::string ExeDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, size_t(n));
  return p.substr(0, p.rfind('/'));
}

bool IsExecutable(const std::string& p) { return ::access(p.c_str(), X_OK) == 0; }
bool IsReadable(const std::string& p) { return ::access(p.c_str(), R_OK) == 0; }

}  // namespace

FioReference FindFio(const Flags& flags) {
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
  return fio;
}

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
    for (size_t k = 0; k < s.shape.size(); ++k)
      shapes += (k ? "x" : "") + std::to_string(s.shape[k]);
  }
  auto p = RunProcess({python, script, "--size", std::to_string(bs.tensor_bytes), "--dir", dir,
                       "--runs", std::to_string(flags.runs), "--shapes", shapes},
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
    ref.unavailable =
        python + " exited " + std::to_string(p->exit_code) + (why.empty() ? "" : ": " + why);
    return ref;
  }
  ref.raw = *j;
  ref.fsync_s = ref.raw.value("save_fsync_median_seconds", std::nan(""));
  ref.nofsync_s = ref.raw.value("save_nofsync_median_seconds", std::nan(""));
  return ref;
}

void RunCpuRound(const BenchState& bs, uint64_t chunk, int zstd_level, bool zstd, ThreadPool* pool,
                 char* memcpy_dst, CpuReference* ref) {
  // Twice: the first pass of the first run faults the buffer in.
  TimeMemcpyOnly(bs, chunk, pool, memcpy_dst);
  ref->memcpy_s.push_back(TimeMemcpyOnly(bs, chunk, pool, memcpy_dst));
  if (zstd && ref->zstd_error.empty()) {
    auto secs = TimeCompressOnly(bs, chunk, zstd_level, pool, &ref->zstd_stored);
    if (secs.ok()) {
      ref->zstd_bw.push_back(double(bs.tensor_bytes) / *secs);
    } else {
      ref->zstd_error = secs.status().ToString();
    }
  }
}

}  // namespace bench
}  // namespace stint
