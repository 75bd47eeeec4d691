#include "flags.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>

#include "common.h"

namespace stint {
namespace bench {

const char kUsage[] =
    "usage: stint-bench [flags]\n"
    "  --dir DIR          directory to benchmark (a temp dir is made inside it). Default: "
    "/var/tmp\n"
    "  --size SIZE        state size, e.g. 1GiB, 256MiB, 64M. Default: 1GiB\n"
    "  --runs N           measured runs per figure; medians (ratios: of the per-run ratios). "
    "Default: 5\n"
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
    "  --aligned-dests    restore into page-aligned destinations (whole chunks are then\n"
    "                     read straight into them) instead of new float[]\n"
    "  --fork-before-save fork (and reap) a child before every measured save, as a\n"
    "                     fork-started DataLoader does each epoch: shows the copy-on-write\n"
    "                     faults that fork leaves on the staging buffer\n"
    "  --no-fio, --no-torch, --no-drop-caches, --keep (leave files behind)\n";

namespace {

// "1GiB", "256MiB", "64M" (binary), "1GB" (decimal), "4096".
Result<uint64_t> ParseSize(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || errno != 0)
    return Status::InvalidArgument("not a size: '" + text + "'");
  std::string unit = end;
  static const std::map<std::string, double> kUnits = {{"", 1},
                                                       {"B", 1},
                                                       {"K", 1024.0},
                                                       {"KiB", 1024.0},
                                                       {"M", kMiB},
                                                       {"MiB", kMiB},
                                                       {"G", kMiB * 1024},
                                                       {"GiB", kMiB * 1024},
                                                       {"T", kMiB * kMiB},
                                                       {"TiB", kMiB * kMiB},
                                                       {"KB", 1e3},
                                                       {"MB", 1e6},
                                                       {"GB", 1e9},
                                                       {"TB", 1e12}};
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

// What a bare --json (no "=FILE") records: a value no file name has.
constexpr char kJsonToStdout[] = "\x01";

}  // namespace

Result<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  // kUsage is the help text; CLI11 only parses. Every value is taken as
  // text and checked below, so the messages name the flag and the value.
  CLI::App app{"stint-bench"};
  app.set_help_flag("-h,--help");
  auto value = [&](const char* name, std::string* out) {
    return app.add_option(name, *out)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  };
  std::string size, runs, engines, compress, chunk_size, io_size, io_depth, threads, zstd_level;
  std::vector<std::string> json;  // one entry per --json; kJsonToStdout for a bare one
  app.add_flag("--quick", f.quick);
  app.add_flag(std::string("--json{") + kJsonToStdout + "}", json);
  bool no_fio = false, no_torch = false, no_drop_caches = false;
  app.add_flag("--no-fio", no_fio);
  app.add_flag("--no-torch", no_torch);
  app.add_flag("--no-drop-caches", no_drop_caches);
  app.add_flag("--keep", f.keep);
  app.add_flag("--fork-before-save", f.fork_before_save);
  app.add_flag("--aligned-dests", f.aligned_dests);
  value("--dir", &f.dir);
  value("--python", &f.python);
  value("--torch-ref", &f.torch_ref);
  CLI::Option* size_opt = value("--size", &size);
  CLI::Option* runs_opt = value("--runs", &runs);
  CLI::Option* engines_opt = value("--engines", &engines);
  CLI::Option* compress_opt = value("--compress", &compress);
  value("--data", &f.data);
  CLI::Option* chunk_size_opt = value("--chunk-size", &chunk_size);
  CLI::Option* io_size_opt = value("--io-size", &io_size);
  CLI::Option* io_depth_opt = value("--io-depth", &io_depth);
  CLI::Option* threads_opt = value("--threads", &threads);
  CLI::Option* zstd_level_opt = value("--zstd-level", &zstd_level);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return Status::Cancelled("help");
  } catch (const CLI::ParseError& e) {
    return Status::InvalidArgument(e.what());
  }

  f.fio = !no_fio;
  f.torch = !no_torch;
  f.drop_caches = !no_drop_caches;
  for (const std::string& j : json) {
    if (j == kJsonToStdout) {
      f.json_stdout = true;
    } else {
      f.json_file = j;
    }
  }
  const bool size_set = size_opt->count() > 0, runs_set = runs_opt->count() > 0;
  if (size_set) {
    STINT_ASSIGN_OR_RETURN(f.size, ParseSize(size));
  }
  if (runs_set) {
    STINT_ASSIGN_OR_RETURN(int64_t n, ParseInt("--runs", runs));
    if (n < 1 || n > 1000) return Status::InvalidArgument("--runs must be in [1, 1000]");
    f.runs = int(n);
  }
  if (engines_opt->count() > 0) {
    f.engines = SplitList(engines);
    for (const auto& e : f.engines) {
      if (e != "uring" && e != "posix" && e != "auto") {
        return Status::InvalidArgument("--engines: unknown engine '" + e +
                                       "' (uring, posix, auto)");
      }
    }
    if (f.engines.empty()) return Status::InvalidArgument("--engines is empty");
  }
  if (compress_opt->count() > 0) {
    f.compress.clear();
    for (const auto& c : SplitList(compress)) {
      if (c != "on" && c != "off")
        return Status::InvalidArgument("--compress: on or off, got '" + c + "'");
      f.compress.push_back(c == "on");
    }
    if (f.compress.empty()) return Status::InvalidArgument("--compress is empty");
  }
  if (f.data != "bf16" && f.data != "fp32") {
    return Status::InvalidArgument("--data: bf16 or fp32, got '" + f.data + "'");
  }
  if (chunk_size_opt->count() > 0) {
    STINT_ASSIGN_OR_RETURN(f.chunk_size, ParseSize(chunk_size));
  }
  if (io_size_opt->count() > 0) {
    STINT_ASSIGN_OR_RETURN(uint64_t n, ParseSize(io_size));
    if (n > (uint64_t{1} << 30)) return Status::InvalidArgument("--io-size must be <= 1GiB");
    f.io_size = n;
  }
  auto count = [](const char* name, const std::string& text,
                  std::optional<unsigned>* out) -> Status {
    STINT_ASSIGN_OR_RETURN(int64_t n, ParseInt(name, text));
    if (n < 0) return Status::InvalidArgument(std::string(name) + " must not be negative");
    *out = unsigned(n);
    return Status::OK();
  };
  if (io_depth_opt->count() > 0) STINT_RETURN_IF_ERROR(count("--io-depth", io_depth, &f.io_depth));
  if (threads_opt->count() > 0) STINT_RETURN_IF_ERROR(count("--threads", threads, &f.threads));
  if (zstd_level_opt->count() > 0) {
    STINT_ASSIGN_OR_RETURN(int64_t n, ParseInt("--zstd-level", zstd_level));
    f.zstd_level = int(n);
  }

  if (f.quick) {
    if (!size_set) f.size = 256u << 20;
    if (!runs_set) f.runs = 1;
  }
  if (f.size < (1u << 20)) return Status::InvalidArgument("--size must be at least 1MiB");
  return f;
}

}  // namespace bench
}  // namespace stint
