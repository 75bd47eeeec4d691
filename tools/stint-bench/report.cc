#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "common.h"

namespace stint {
namespace bench {
namespace {

using nlohmann::json;

std::string Printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Printf(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

std::string Rate(double bytes_per_s) {
  return std::isnan(bytes_per_s) ? "n/a" : Printf("%.0f MiB/s", bytes_per_s / kMiB);
}
std::string Secs(double s) { return std::isnan(s) ? "n/a" : Printf("%.3f s", s); }
std::string Ratio(double r) { return std::isnan(r) || std::isinf(r) ? "n/a" : Printf("%.2f", r); }

// JSON has no NaN: a missing figure is null.
json Num(double v) { return std::isnan(v) || std::isinf(v) ? json(nullptr) : json(v); }

double Div(double a, double b) { return b == 0 ? std::nan("") : a / b; }

// The references' medians; NaN where a reference did not run.
struct ReferenceMedians {
  double fio_w, fio_r, fio_x, memcpy_only, zstd_only;
};

ReferenceMedians MediansOf(const BenchResults& r) {
  const FioReference& fio = r.fio;
  ReferenceMedians m;
  m.memcpy_only = Median(r.cpu.memcpy_s);
  m.fio_w = fio.unavailable.empty() ? Median(fio.write_bw) : std::nan("");
  m.fio_r = fio.unavailable.empty() ? Median(fio.read_bw) : std::nan("");
  m.fio_x = fio.unavailable.empty() ? Median(fio.write_extending_bw) : std::nan("");
  m.zstd_only = r.cpu.zstd_bw.empty() ? std::nan("") : Median(r.cpu.zstd_bw);
  return m;
}

// The lowest and highest ratio of one run's stint figure to the same run's
// reference (runs are taken back to back, so a slow phase of a shared
// machine hits both); NaN when no run has both.
struct RatioRange {
  double lo = std::nan(""), hi = std::nan("");
};

RatioRange RangeOf(const std::vector<double>& stint, const std::vector<double>& reference) {
  RatioRange r;
  for (size_t i = 0; i < std::min(stint.size(), reference.size()); ++i) {
    const double x = Div(stint[i], reference[i]);
    if (std::isnan(x) || std::isinf(x)) continue;
    r.lo = std::isnan(r.lo) ? x : std::min(r.lo, x);
    r.hi = std::isnan(r.hi) ? x : std::max(r.hi, x);
  }
  return r;
}

// The median of the per-run ratios: each run's stint figure over the same
// run's reference, so a slow phase of the disk that hits both cancels out
// instead of skewing one median against the other. `fallback` (the ratio
// of the medians) when no run has both.
double PairedRatio(const std::vector<double>& stint, const std::vector<double>& reference,
                   double fallback) {
  std::vector<double> ratios;
  for (size_t i = 0; i < std::min(stint.size(), reference.size()); ++i) {
    const double x = Div(stint[i], reference[i]);
    if (!std::isnan(x) && !std::isinf(x)) ratios.push_back(x);
  }
  return ratios.empty() ? fallback : Median(ratios);
}

std::string RangeText(const RatioRange& r) {
  return std::isnan(r.lo) ? "" : Printf("%.2f-%.2f", r.lo, r.hi);
}

json RangeJson(const RatioRange& r) {
  return std::isnan(r.lo) ? json(nullptr) : json::array({r.lo, r.hi});
}

struct Row {
  std::string figure, stint, reference, ref_value, ratio;
  std::string runs = "";  // the per-run ratios' range, where runs pair up
};

void PrintTable(const std::string& title, const std::vector<Row>& rows) {
  Row head{"figure", "stint", "reference", "value", "ratio", "runs"};
  size_t w[6] = {head.figure.size(),    head.stint.size(), head.reference.size(),
                 head.ref_value.size(), head.ratio.size(), head.runs.size()};
  for (const auto& r : rows) {
    w[0] = std::max(w[0], r.figure.size());
    w[1] = std::max(w[1], r.stint.size());
    w[2] = std::max(w[2], r.reference.size());
    w[3] = std::max(w[3], r.ref_value.size());
    w[4] = std::max(w[4], r.ratio.size());
    w[5] = std::max(w[5], r.runs.size());
  }
  std::printf("\n%s\n", title.c_str());
  auto line = [&](const Row& r) {
    std::printf("  %-*s  %*s  %-*s  %*s  %*s  %*s\n", int(w[0]), r.figure.c_str(), int(w[1]),
                r.stint.c_str(), int(w[2]), r.reference.c_str(), int(w[3]), r.ref_value.c_str(),
                int(w[4]), r.ratio.c_str(), int(w[5]), r.runs.c_str());
  };
  line(head);
  for (const auto& r : rows) line(r);
}

struct Tables {
  std::vector<Row> persist, restore, stall, cmp;
};

Tables BuildTables(const Flags& flags, const BenchState& bs, const BenchResults& r) {
  const ReferenceMedians m = MediansOf(r);
  const double fio_w = m.fio_w, fio_r = m.fio_r, fio_x = m.fio_x, memcpy_only = m.memcpy_only;
  const FioReference& fio = r.fio;
  const TorchReference& torch = r.torch;
  const unsigned threads_resolved = r.options.threads_resolved;
  const uint64_t raw_bytes = bs.raw_bytes();
  auto find = [&](const std::string& e, bool c) -> const Variant* {
    for (const auto& v : r.variants) {
      if (v.engine == e && v.compress == c && v.unavailable.empty()) return &v;
    }
    return nullptr;
  };
  std::string fio_label = fio.unavailable.empty() ? "fio " + fio.engine : "fio";
  Tables t;
  std::vector<Row>& persist_rows = t.persist;
  std::vector<Row>& restore_rows = t.restore;
  std::vector<Row>& stall_rows = t.stall;
  std::vector<Row>& cmp_rows = t.cmp;
  for (const auto& v : r.variants) {
    if (!v.unavailable.empty()) continue;
    std::string engine_note = v.saves.empty() ? "" : " [" + v.saves.back().stats.engine + "]";
    persist_rows.push_back(
        {"persist " + v.label + engine_note + " (persist+commit)", Rate(v.persist_bw),
         fio_label + " O_DIRECT write", Rate(fio_w),
         Ratio(PairedRatio(v.persist_bw_runs, fio.write_bw, Div(v.persist_bw, fio_w))),
         RangeText(RangeOf(v.persist_bw_runs, fio.write_bw))});
    persist_rows.push_back(
        {"  Save() call -> durable, " + v.label, Rate(v.durable_bw), fio_label + " O_DIRECT write",
         Rate(fio_w), Ratio(PairedRatio(v.durable_bw_runs, fio.write_bw, Div(v.durable_bw, fio_w))),
         RangeText(RangeOf(v.durable_bw_runs, fio.write_bw))});
    if (!v.compress) {
      persist_rows.push_back({"  same persist, " + v.label, Rate(v.persist_bw),
                              fio_label + " --fallocate=none", Rate(fio_x),
                              Ratio(Div(v.persist_bw, fio_x))});
    }
    restore_rows.push_back(
        {"restore " + v.label + " (Checkpointer::Load)", Rate(v.restore_bw),
         fio_label + " O_DIRECT read", Rate(fio_r),
         Ratio(PairedRatio(v.restore_bw_runs, fio.read_bw, Div(v.restore_bw, fio_r))),
         RangeText(RangeOf(v.restore_bw_runs, fio.read_bw))});
    stall_rows.push_back({"stall " + v.label + " (Save() returns)", Secs(v.stall_s),
                          "torch.save + fsync", Secs(torch.fsync_s),
                          Ratio(Div(v.stall_s, torch.fsync_s))});
    stall_rows.push_back({"  same stall", Secs(v.stall_s), "torch.save, no fsync",
                          Secs(torch.nofsync_s), Ratio(Div(v.stall_s, torch.nofsync_s))});
    stall_rows.push_back({"  same stall", Secs(v.stall_s),
                          Printf("memcpy to warm buffer, %u+1 thr", threads_resolved),
                          Secs(memcpy_only), Ratio(Div(v.stall_s, memcpy_only))});
    stall_rows.push_back({"  time to durable, " + v.label, Secs(v.durable_s), "torch.save + fsync",
                          Secs(torch.fsync_s), Ratio(Div(v.durable_s, torch.fsync_s))});
    if (v.cold) {
      stall_rows.push_back({"  first save's stall (cold staging)", Secs(v.cold->call_s),
                            "torch.save + fsync", Secs(torch.fsync_s),
                            Ratio(Div(v.cold->call_s, torch.fsync_s))});
    }
  }
  if (fio.unavailable.empty()) {
    cmp_rows.push_back({"fio write: extending / preallocated file", Rate(fio_x),
                        "fio default (fallocate)", Rate(fio_w), Ratio(Div(fio_x, fio_w))});
  }
  for (bool c : {false, true}) {
    const Variant* u = find("uring", c);
    const Variant* p = find("posix", c);
    if (u == nullptr || p == nullptr) continue;
    std::string tag = c ? "zstd" : "raw";
    cmp_rows.push_back({"persist uring/posix, " + tag, Rate(u->persist_bw), "posix",
                        Rate(p->persist_bw), Ratio(Div(u->persist_bw, p->persist_bw))});
    cmp_rows.push_back({"restore uring/posix, " + tag, Rate(u->restore_bw), "posix",
                        Rate(p->restore_bw), Ratio(Div(u->restore_bw, p->restore_bw))});
  }
  const double zstd_only = m.zstd_only;
  for (const auto& e : flags.engines) {
    const Variant* on = find(e, true);
    const Variant* off = find(e, false);
    if (on == nullptr || off == nullptr) continue;
    cmp_rows.push_back({"persist zstd/raw, " + e, Rate(on->persist_bw), "raw",
                        Rate(off->persist_bw), Ratio(Div(on->persist_bw, off->persist_bw))});
    cmp_rows.push_back({"restore zstd/raw, " + e, Rate(on->restore_bw), "raw",
                        Rate(off->restore_bw), Ratio(Div(on->restore_bw, off->restore_bw))});
    cmp_rows.push_back({"stall zstd/raw, " + e, Secs(on->stall_s), "raw", Secs(off->stall_s),
                        Ratio(Div(on->stall_s, off->stall_s))});
    cmp_rows.push_back({"persist zstd / CPU-only zstd+xxh3, " + e, Rate(on->persist_bw),
                        Printf("compress only, %u+1 threads", threads_resolved), Rate(zstd_only),
                        Ratio(Div(on->persist_bw, zstd_only))});
    uint64_t stored = on->saves.empty() ? 0 : on->saves.back().stats.stored_bytes;
    cmp_rows.push_back({"zstd compression ratio (raw/stored), " + e, HumanBytes(stored), "raw",
                        HumanBytes(raw_bytes), Ratio(on->compression)});
  }
  return t;
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

}  // namespace

void PrintContext(const Flags& flags, const BenchState& bs, const BenchContext& context,
                  const BenchOptions& options) {
  const uint64_t raw_bytes = bs.raw_bytes();
  std::printf(
      "stint-bench: %s state (%zu float32 tensors + %zu blobs, %llu bytes), %d run(s), medians"
      " (\"ratio\": the median of the per-run ratios where runs pair up with their reference;"
      " \"runs\": the lowest-highest of those)\n",
      HumanBytes(raw_bytes).c_str(), bs.specs.size(), bs.state.blobs.size(),
      (unsigned long long)raw_bytes, flags.runs);
  std::printf("  data:      %s (generated in %.1f s)\n", bs.description.c_str(), context.gen_s);
  std::printf(
      "  machine:   %u cores, load average %s (other work on the machine skews every figure);\n"
      "             dir %s: %s\n",
      context.cores, context.load_before.c_str(), context.dir.c_str(), context.filesystem.c_str());
  const DirectIoProbe& direct = context.direct;
  std::printf("  O_DIRECT:  write %s, read %s (WritableFile/RandomAccessFile::direct_io())%s\n",
              direct.write_direct ? "yes" : "NO (buffered fallback)",
              direct.read_direct ? "yes" : "NO",
              direct.error.empty() ? "" : ("; probe error: " + direct.error).c_str());
  std::printf("  drop page cache: %s\n", context.drop_note.c_str());
  std::printf(
      "  options:   chunk_size %s, io_size %s, io_queue_depth %u, threads %u%s, zstd level %d, "
      "staging 2x snapshot; others default\n",
      HumanBytes(options.chunk_size).c_str(), HumanBytes(options.io_size).c_str(), options.io_depth,
      options.threads_resolved,
      options.threads == 0 ? " (auto: cores - 1, + the calling thread)" : "", options.zstd_level);
  if (flags.fork_before_save)
    std::printf("  fork:      a child is forked and reaped before every measured save\n");
  std::fflush(stdout);
}

void PrintReport(const Flags& flags, const BenchState& bs, const BenchResults& results) {
  const FioReference& fio = results.fio;
  const TorchReference& torch = results.torch;
  const std::vector<Variant>& variants = results.variants;
  const uint64_t fio_size = results.fio_size;
  std::printf("  fio:       %s\n",
              fio.unavailable.empty()
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
    std::printf("             spread over runs: write %s, read %s, extending write %s\n",
                mm(fio.write_bw).c_str(), fio.read_bw.empty() ? "n/a" : mm(fio.read_bw).c_str(),
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
    if (!v.unavailable.empty())
      std::printf("  variant %s: unavailable (%s)\n", v.label.c_str(), v.unavailable.c_str());
  }

  const Tables t = BuildTables(flags, bs, results);
  PrintTable(
      "1. persist throughput: raw bytes / (persist+commit) from SaveStats, and / wall time from "
      "the\n"
      "   Save() call to durable (that one includes the snapshot); higher is better",
      t.persist);
  PrintTable("2. restore throughput (raw bytes / Load() time), higher is better", t.restore);
  PrintTable("3. training-thread stall of an async save, lower is better", t.stall);
  PrintTable("4. engine and compression", t.cmp);
  std::printf("\n  breakdown (medians): ");
  for (const auto& v : variants) {
    if (!v.unavailable.empty()) continue;
    std::vector<double> sf, pf, lf;
    for (const auto& s : v.saves) {
      sf.push_back(double(s.save_faults));
      pf.push_back(double(s.persist_faults));
    }
    for (int64_t f : v.load_faults) lf.push_back(double(f));
    std::printf(
        "\n    %-13s snapshot %.3f s, persist %.3f s, commit %.3f s, load %.3f s; "
        "minor faults: first Save() %lld, then Save() %.0f, persist %.0f, Load() %.0f",
        v.label.c_str(), v.snapshot_s, v.persist_s, v.commit_s, Median(v.load_s),
        v.cold ? (long long)v.cold->save_faults : -1LL, Median(sf), Median(pf), Median(lf));
  }
  if (!results.cpu.zstd_error.empty())
    std::printf("\n  CPU-only zstd reference failed: %s", results.cpu.zstd_error.c_str());
}

void PrintTotals(double total_s, const std::string& load_after) {
  std::printf("\n  total bench time %.0f s; load average at the end %s\n", total_s,
              load_after.c_str());
}

void WriteJson(const Flags& flags, const BenchState& bs, const BenchResults& results) {
  if (!flags.json_stdout && flags.json_file.empty()) return;
  const BenchContext& c = results.context;
  const BenchOptions& opts = results.options;
  const ReferenceMedians m = MediansOf(results);
  const FioReference& fio = results.fio;
  const TorchReference& torch = results.torch;
  json j;
  j["context"] = {{"cores", c.cores},
                  {"dir", c.dir},
                  {"filesystem", c.filesystem},
                  {"o_direct_write", c.direct.write_direct},
                  {"o_direct_read", c.direct.read_direct},
                  {"drop_caches", c.drop},
                  {"drop_caches_note", c.drop_note},
                  {"runs", flags.runs},
                  {"fork_before_save", flags.fork_before_save},
                  {"load_average_start", c.load_before},
                  {"load_average_end", c.load_after}};
  j["memcpy_cpu_only"] = {{"seconds", results.cpu.memcpy_s},
                          {"median_seconds", Num(m.memcpy_only)},
                          {"threads", opts.threads_resolved + 1}};
  if (!results.cpu.zstd_bw.empty()) {
    j["zstd_cpu_only"] = {{"bw_bytes", results.cpu.zstd_bw},
                          {"bw_median", Num(m.zstd_only)},
                          {"stored_bytes", results.cpu.zstd_stored},
                          {"threads", opts.threads_resolved + 1},
                          {"level", opts.zstd_level}};
  }
  j["options"] = {{"chunk_size", opts.chunk_size},
                  {"io_size", opts.io_size},
                  {"io_queue_depth", opts.io_depth},
                  {"threads", opts.threads},
                  {"threads_resolved", opts.threads_resolved},
                  {"zstd_level", opts.zstd_level}};
  json tensors = json::array();
  for (const auto& s : bs.specs) tensors.push_back({{"name", s.name}, {"shape", s.shape}});
  j["state"] = {{"raw_bytes", bs.raw_bytes()}, {"tensor_bytes", bs.tensor_bytes},
                {"blob_bytes", bs.blob_bytes}, {"tensors", tensors},
                {"data", bs.description},      {"data_kind", flags.data}};
  if (fio.unavailable.empty()) {
    j["fio"] = {{"engine", fio.engine},
                {"version", fio.version},
                {"size", results.fio_size},
                {"write_bw_bytes", fio.write_bw},
                {"read_bw_bytes", fio.read_bw},
                {"write_bw_median", Num(m.fio_w)},
                {"read_bw_median", Num(m.fio_r)},
                {"note", fio.note},
                {"write_extending_bw_bytes", fio.write_extending_bw},
                {"write_extending_bw_median", Num(m.fio_x)}};
  } else {
    j["fio"] = {{"unavailable", fio.unavailable}};
  }
  j["torch_save"] =
      torch.unavailable.empty() ? torch.raw : json{{"unavailable", torch.unavailable}};
  json vs = json::array();
  for (const auto& v : results.variants) {
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
    o["median"] = {
        {"persist_bw_bytes", Num(v.persist_bw)},  {"save_to_durable_bw_bytes", Num(v.durable_bw)},
        {"restore_bw_bytes", Num(v.restore_bw)},  {"stall_seconds", Num(v.stall_s)},
        {"snapshot_seconds", Num(v.snapshot_s)},  {"time_to_durable_seconds", Num(v.durable_s)},
        {"persist_seconds", Num(v.persist_s)},    {"commit_seconds", Num(v.commit_s)},
        {"compression_ratio", Num(v.compression)}};
    o["ratio"] = {
        {"persist_vs_fio_write",
         Num(PairedRatio(v.persist_bw_runs, results.fio.write_bw, Div(v.persist_bw, m.fio_w)))},
        {"persist_vs_fio_write_extending", Num(Div(v.persist_bw, m.fio_x))},
        {"save_to_durable_vs_fio_write",
         Num(PairedRatio(v.durable_bw_runs, results.fio.write_bw, Div(v.durable_bw, m.fio_w)))},
        {"restore_vs_fio_read",
         Num(PairedRatio(v.restore_bw_runs, results.fio.read_bw, Div(v.restore_bw, m.fio_r)))},
        {"stall_vs_torch_save_fsync", Num(Div(v.stall_s, torch.fsync_s))},
        {"stall_vs_torch_save_nofsync", Num(Div(v.stall_s, torch.nofsync_s))},
        {"durable_vs_torch_save_fsync", Num(Div(v.durable_s, torch.fsync_s))},
        {"stall_vs_memcpy", Num(Div(v.stall_s, m.memcpy_only))}};
    // The per-run ratios' [lowest, highest]: how far one invocation's runs agree.
    o["ratio_range_over_runs"] = {
        {"persist_vs_fio_write", RangeJson(RangeOf(v.persist_bw_runs, results.fio.write_bw))},
        {"save_to_durable_vs_fio_write",
         RangeJson(RangeOf(v.durable_bw_runs, results.fio.write_bw))},
        {"restore_vs_fio_read", RangeJson(RangeOf(v.restore_bw_runs, results.fio.read_bw))}};
    vs.push_back(o);
  }
  j["variants"] = vs;
  json cmp = json::array();
  for (const auto& r : BuildTables(flags, bs, results).cmp) {
    cmp.push_back(
        {{"figure", r.figure}, {"value", r.stint}, {"reference", r.ref_value}, {"ratio", r.ratio}});
  }
  j["comparisons"] = cmp;
  std::string text = j.dump(2, ' ', false, json::error_handler_t::replace);
  if (flags.json_stdout) std::printf("%s\n", text.c_str());
  if (!flags.json_file.empty()) {
    std::ofstream out(flags.json_file);
    out << text << "\n";
    if (!out) std::fprintf(stderr, "stint-bench: cannot write %s\n", flags.json_file.c_str());
  }
}

}  // namespace bench
}  // namespace stint
