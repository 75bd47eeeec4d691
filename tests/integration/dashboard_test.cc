// GET /dashboard end to end: a real stintd on loopback with two pools, windows
// (one closed early, one open-ended spot), a finished job, two running ones and
// one that waits; Debian's headless Chromium loads the page with a worker token
// in the URL fragment, and the DOM its script drew is checked against the API:
// a window rectangle per window in its pool's lane, a segment rectangle per
// segment inside the window it holds, the queue rows with their reasons, and a
// metrics table whose values are those of GET /metrics. A screenshot is kept
// as an artefact ($STINT_ARTIFACT_DIR, else the test's temporary directory).
// Prices, budgets and loss curves (issue 33): the teams, pools and jobs
// tables against /v1/teams, /v1/pools and the jobs' figures, and the selected
// job's loss plot (a polyline per segment, a marker where each began) against
// /v1/jobs/{id}/losses, empty and at the server's 4096 points.
//
// The tests that need a browser are skipped (GTEST_SKIP) when no chromium or
// chromium-browser is on $PATH.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#ifdef STINT_HAVE_ZLIB
#include <zlib.h>
#endif

#include "util/stintd_process.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

using nlohmann::json;

// --- Chromium ---

constexpr const char* kNoChromium =
    "no chromium or chromium-browser on $PATH: install Debian's chromium (apt-get install "
    "chromium; "
    "tools/setup.sh lists it) to draw the dashboard";

std::string FindChromium() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  std::vector<std::string> dir_list;
  for (std::string d; std::getline(dirs, d, ':');) dir_list.push_back(d.empty() ? "." : d);
  for (const char* name : {"chromium", "chromium-browser"}) {
    for (const std::string& d : dir_list) {
      const std::string candidate = d + "/" + name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return "";
}

struct BrowserRun {
  int exit_code = -1;  // -1: died of a signal (or never started)
  bool timed_out = false;
  std::string output;
};

// Runs the browser to completion; SIGKILLs it if it has not exited after
// `bound_seconds`. The bound only turns a hung browser into a failure.
BrowserRun RunBrowser(const std::string& binary, const std::vector<std::string>& args,
                      bool merge_stderr, double bound_seconds = 120) {
  BrowserRun run;
  ChildProcess child(binary, args, merge_stderr);
  if (!child.started()) return run;
  const int status = child.WaitAtMost(bound_seconds, &run.timed_out);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.output = child.output();
  return run;
}

std::vector<std::string> BrowserArgs(const std::string& profile_dir, std::vector<std::string> extra,
                                     const std::string& url) {
  std::vector<std::string> args = {"--headless",
                                   "--no-sandbox",
                                   "--disable-gpu",
                                   "--no-first-run",
                                   "--user-data-dir=" + profile_dir,
                                   "--virtual-time-budget=5000"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back(url);
  return args;
}

// --- the serialized DOM, read just enough for these checks ---

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string DecodeEntities(const std::string& s) {
  static const std::map<std::string, uint32_t> kNamed = {
      {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}, {"nbsp", 0xA0}};
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    const size_t semi = s[i] == '&' ? s.find(';', i) : std::string::npos;
    if (semi == std::string::npos || semi - i > 10) {
      out.push_back(s[i]);
      continue;
    }
    const std::string name = s.substr(i + 1, semi - i - 1);
    uint32_t cp = 0;
    if (auto it = kNamed.find(name); it != kNamed.end()) {
      cp = it->second;
    } else if (name.size() > 1 && name[0] == '#') {
      const bool hex = name[1] == 'x' || name[1] == 'X';
      cp =
          static_cast<uint32_t>(std::strtoul(name.c_str() + (hex ? 2 : 1), nullptr, hex ? 16 : 10));
    } else {
      out.push_back(s[i]);
      continue;
    }
    AppendUtf8(cp, &out);
    i = semi;
  }
  return out;
}

std::string StripTags(const std::string& markup) {
  std::string out;
  bool in_tag = false;
  for (char c : markup) {
    if (c == '<') {
      in_tag = true;
    } else if (c == '>') {
      in_tag = false;
    } else if (!in_tag) {
      out.push_back(c);
    }
  }
  return DecodeEntities(out);
}

struct Element {
  std::string tag;
  std::map<std::string, std::string> attrs;  // entities decoded
  std::string inner;                         // markup up to the next close tag of the same name

  std::string Attr(const std::string& name) const {
    auto it = attrs.find(name);
    return it == attrs.end() ? "" : it->second;
  }
  bool Has(const std::string& name) const { return attrs.count(name) > 0; }
  bool HasClass(const std::string& cls) const {
    std::istringstream in(Attr("class"));
    for (std::string c; in >> c;) {
      if (c == cls) return true;
    }
    return false;
  }
  std::string Text() const { return StripTags(inner); }
};

// Chromium writes every attribute double-quoted with &, <, > and " escaped.
// The bodies of <script> and <style> are dropped first, so the page's own
// source is never mistaken for an element it drew.
class Dom {
 public:
  explicit Dom(const std::string& html) {
    size_t pos = 0;
    while (pos < html.size()) {
      size_t open = std::string::npos, close = std::string::npos;
      const char* close_tag = nullptr;
      for (const char* t : {"script", "style"}) {
        const size_t at = html.find(std::string("<") + t, pos);
        if (at < open) {
          open = at;
          close_tag = t;
        }
      }
      if (open == std::string::npos) {
        html_ += html.substr(pos);
        break;
      }
      const size_t body = html.find('>', open);
      close = html.find(std::string("</") + close_tag + ">", open);
      if (body == std::string::npos || close == std::string::npos) {
        html_ += html.substr(pos);
        break;
      }
      html_ += html.substr(pos, body + 1 - pos);
      pos = close;
      html_ += html.substr(pos, std::strlen(close_tag) + 3);
      pos += std::strlen(close_tag) + 3;
    }
  }

  // Every element named `tag`, in document order.
  std::vector<Element> All(const std::string& tag) const {
    std::vector<Element> out;
    const std::string open = "<" + tag;
    for (size_t at = html_.find(open); at != std::string::npos; at = html_.find(open, at + 1)) {
      const size_t after = at + open.size();
      if (after >= html_.size() || std::strchr(" \t\n>/", html_[after]) == nullptr) continue;
      Element e;
      e.tag = tag;
      size_t i = after;
      while (i < html_.size() && html_[i] != '>') {
        if (std::isspace(static_cast<unsigned char>(html_[i])) || html_[i] == '/') {
          i++;
          continue;
        }
        const size_t name_end = html_.find_first_of("= \t\n>/", i);
        if (name_end == std::string::npos) break;
        const std::string name = html_.substr(i, name_end - i);
        i = name_end;
        std::string value;
        if (html_[i] == '=' && i + 1 < html_.size() &&
            (html_[i + 1] == '"' || html_[i + 1] == '\'')) {
          const size_t end = html_.find(html_[i + 1], i + 2);
          if (end == std::string::npos) break;
          value = DecodeEntities(html_.substr(i + 2, end - i - 2));
          i = end + 1;
        }
        e.attrs[name] = value;
      }
      const size_t body = i + 1;
      const size_t close = html_.find("</" + tag + ">", body);
      if (close != std::string::npos) e.inner = html_.substr(body, close - body);
      out.push_back(std::move(e));
    }
    return out;
  }

  // Elements named `tag` with class `cls` (any when empty) whose attribute
  // `attr` is `value`.
  std::vector<Element> Where(const std::string& tag, const std::string& cls,
                             const std::string& attr, const std::string& value) const {
    std::vector<Element> out;
    for (Element& e : All(tag)) {
      if ((cls.empty() || e.HasClass(cls)) && e.Has(attr) && e.Attr(attr) == value)
        out.push_back(std::move(e));
    }
    return out;
  }

  // The markup from the first `begin` to the next `end` after it, as a Dom.
  Dom Section(const std::string& begin, const std::string& end) const {
    const size_t b = html_.find(begin);
    if (b == std::string::npos) return Dom();
    const size_t e = html_.find(end, b);
    Dom d;
    d.html_ = html_.substr(b, e == std::string::npos ? std::string::npos : e - b);
    return d;
  }

  bool empty() const { return html_.empty(); }

 private:
  Dom() = default;
  std::string html_;
};

// A table row's cells by class: each class of a <td> names it, except "num"
// and "detail", which only style it.
std::map<std::string, Element> Cells(const Element& tr) {
  std::map<std::string, Element> out;
  for (Element& td : Dom(tr.inner).All("td")) {
    std::istringstream in(td.Attr("class"));
    for (std::string c; in >> c;) {
      if (c != "num" && c != "detail") out[c] = td;
    }
  }
  return out;
}

// The exact number a cell holds in data-value (the API's, unrounded).
::testing::AssertionResult DataValue(const Element& e, double* v) {
  if (!e.Has("data-value")) return ::testing::AssertionFailure() << "no data-value: " << e.inner;
  if (!ParseDouble(e.Attr("data-value"), v)) {
    return ::testing::AssertionFailure()
           << "data-value \"" << e.Attr("data-value") << "\" is not a number";
  }
  return ::testing::AssertionSuccess();
}

// An SVG polyline's "x,y x,y ..." as strings, exactly as written.
std::vector<std::pair<std::string, std::string>> PolylinePoints(const Element& line) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(line.Attr("points"));
  for (std::string xy; in >> xy;) {
    const size_t comma = xy.find(',');
    out.emplace_back(xy.substr(0, comma), comma == std::string::npos ? "" : xy.substr(comma + 1));
  }
  return out;
}

double Number(const std::string& text) {
  double v = 0;
  EXPECT_TRUE(ParseDouble(text, &v)) << "not a number: \"" << text << "\"";
  return v;
}

// Whether `text` is `value` rounded to the decimals it shows.
::testing::AssertionResult RoundedFrom(const std::string& text, double value) {
  double shown = 0;
  if (!ParseDouble(text, &shown)) return ::testing::AssertionFailure() << "\"" << text << "\"";
  const size_t dot = text.find('.');
  const int decimals = dot == std::string::npos ? 0 : static_cast<int>(text.size() - dot - 1);
  const double half_unit = 0.5 * std::pow(10.0, -decimals);
  if (std::abs(shown - value) > half_unit * (1 + 1e-9)) {
    return ::testing::AssertionFailure() << "\"" << text << "\" is not " << value << " rounded";
  }
  return ::testing::AssertionSuccess();
}

// Polls `fn` without pausing until it holds; the bound only turns a hang
// into a failure. For waits of about one tick of a fast-ticking stintd,
// where Eventually's 20 ms pause would be most of the time spent.
bool Soon(const std::function<bool()>& fn, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (fn()) return true;
  }
  return fn();
}

// --- PNG ---

uint32_t Be32(const std::string& b, size_t at) {
  return (uint32_t(uint8_t(b[at])) << 24) | (uint32_t(uint8_t(b[at + 1])) << 16) |
         (uint32_t(uint8_t(b[at + 2])) << 8) | uint32_t(uint8_t(b[at + 3]));
}

struct Png {
  uint32_t width = 0, height = 0;
  int bit_depth = 0, colour_type = -1, interlace = -1;
  std::string idat;  // the concatenated compressed image data
};

// The chunk structure only; an error names what is wrong.
std::string ReadPng(const std::string& bytes, Png* png) {
  static const char kSignature[] = "\x89PNG\r\n\x1a\n";
  if (bytes.size() < 8 || bytes.compare(0, 8, kSignature, 8) != 0) return "no PNG signature";
  size_t at = 8;
  bool end = false;
  while (!end) {
    if (at + 12 > bytes.size()) return "truncated at byte " + std::to_string(at);
    const uint32_t length = Be32(bytes, at);
    const std::string type = bytes.substr(at + 4, 4);
    if (at + 12 + length > bytes.size()) return "chunk " + type + " runs past the end";
    const std::string data = bytes.substr(at + 8, length);
    if (type == "IHDR") {
      if (length != 13) return "IHDR of " + std::to_string(length) + " bytes";
      png->width = Be32(data, 0);
      png->height = Be32(data, 4);
      png->bit_depth = uint8_t(data[8]);
      png->colour_type = uint8_t(data[9]);
      png->interlace = uint8_t(data[12]);
    } else if (type == "IDAT") {
      png->idat += data;
    } else if (type == "IEND") {
      end = true;
    }
    at += 12 + length;
  }
  if (png->width == 0 || png->height == 0) return "no IHDR";
  if (png->idat.empty()) return "no IDAT";
  return "";
}

#ifdef STINT_HAVE_ZLIB
int Paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

// Decodes 8-bit RGB or RGBA, non-interlaced (what Chromium writes) into
// 0xRRGGBB values.
std::string DecodePixels(const Png& png, std::vector<uint32_t>* rgb) {
  if (png.bit_depth != 8 || (png.colour_type != 2 && png.colour_type != 6) || png.interlace != 0) {
    return "unexpected PNG format: depth " + std::to_string(png.bit_depth) + ", colour type " +
           std::to_string(png.colour_type) + ", interlace " + std::to_string(png.interlace);
  }
  const size_t bpp = png.colour_type == 6 ? 4 : 3, stride = png.width * bpp;
  std::string raw((stride + 1) * png.height, '\0');
  uLongf raw_size = raw.size();
  const int z = uncompress(reinterpret_cast<Bytef*>(raw.data()), &raw_size,
                           reinterpret_cast<const Bytef*>(png.idat.data()), png.idat.size());
  if (z != Z_OK) return "zlib uncompress failed: " + std::to_string(z);
  if (raw_size != raw.size()) {
    return "image data holds " + std::to_string(raw_size) + " bytes, not " +
           std::to_string(raw.size());
  }
  std::vector<uint8_t> prev(stride, 0), cur(stride, 0);
  rgb->clear();
  rgb->reserve(size_t(png.width) * png.height);
  for (uint32_t y = 0; y < png.height; y++) {
    const uint8_t* line = reinterpret_cast<const uint8_t*>(raw.data()) + y * (stride + 1);
    const int filter = line[0];
    for (size_t i = 0; i < stride; i++) {
      const int x = line[1 + i], a = i >= bpp ? cur[i - bpp] : 0, b = prev[i],
                c = i >= bpp ? prev[i - bpp] : 0;
      int v = 0;
      switch (filter) {
        case 0:
          v = x;
          break;
        case 1:
          v = x + a;
          break;
        case 2:
          v = x + b;
          break;
        case 3:
          v = x + (a + b) / 2;
          break;
        case 4:
          v = x + Paeth(a, b, c);
          break;
        default:
          return "row " + std::to_string(y) + " has filter type " + std::to_string(filter);
      }
      cur[i] = static_cast<uint8_t>(v);
    }
    for (size_t px = 0; px < png.width; px++) {
      rgb->push_back((uint32_t(cur[px * bpp]) << 16) | (uint32_t(cur[px * bpp + 1]) << 8) |
                     cur[px * bpp + 2]);
    }
    std::swap(prev, cur);
  }
  return "";
}
#endif

// mkdir -p; an error names the component that failed and why.
std::string MakeDirs(const std::string& path) {
  for (size_t at = 1; at <= path.size(); at++) {
    if (at != path.size() && path[at] != '/') continue;
    const std::string prefix = path.substr(0, at);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return "mkdir " + prefix + ": " + std::strerror(errno);
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return path + " is not a directory";
  return "";
}

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = FindChromium();
    daemon_ = std::make_unique<StintdProcess>(STINTD_PATH, dir_.path(), SteadyStintdArgs());
    ASSERT_TRUE(daemon_->Start()) << daemon_->output();
    admin_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAdminToken);
    worker_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kWorkerToken);
  }

  std::string PageUrl(const std::string& fragment) const {
    return daemon_->url() + "/dashboard" + (fragment.empty() ? "" : "#" + fragment);
  }

  // --dump-dom: the DOM after the page's script ran (5 s of virtual time).
  std::string DumpDom(const std::string& url) {
    BrowserRun run =
        RunBrowser(chromium_, BrowserArgs(dir_.Sub("chromium-profile"), {"--dump-dom"}, url),
                   /*merge_stderr=*/false);
    EXPECT_FALSE(run.timed_out) << chromium_ << " did not exit; killed";
    EXPECT_EQ(run.exit_code, 0) << chromium_ << " --dump-dom " << url << " failed";
    EXPECT_NE(run.output.find("</html>"), std::string::npos) << "no document on stdout:\n"
                                                             << run.output;
    return run.output;
  }

  json GetJson(HttpJson& client, const std::string& path) {
    auto r = client.Get(path);
    EXPECT_EQ(r.status, 200) << "GET " << path << ": " << r.text;
    return r.body;
  }
  std::string MetricsText() {
    auto r = worker_->Get("/metrics");
    EXPECT_EQ(r.status, 200) << r.text;
    return r.text;
  }
  json Post(const std::string& path, const json& body, int want) {
    auto r = admin_->Post(path, body);
    EXPECT_EQ(r.status, want) << "POST " << path << " " << body.dump() << ": " << r.text;
    return r.body;
  }
  int64_t Submit(const std::string& name, const std::string& pool, int gpus,
                 const std::string& team = "") {
    json spec = {{"name", name},         {"pool", pool},
                 {"min_gpus", gpus},     {"checkpoint_seconds", 1},
                 {"restart_seconds", 0}, {"checkpoint_interval_seconds", 60}};
    if (!team.empty()) spec["team"] = team;
    return Post("/v1/jobs", spec, 201).value("id", int64_t{0});
  }
  json Job(int64_t id) { return GetJson(*admin_, "/v1/jobs/" + std::to_string(id)); }
  std::string JobState(int64_t id) { return Job(id).value("state", ""); }
  // Registers a worker for the job's segment.
  int64_t Register(int64_t job) {
    auto reg = worker_->Post("/v1/jobs/" + std::to_string(job) + "/workers", {{"name", "w0"}});
    EXPECT_EQ(reg.status, 201) << reg.text;
    const int64_t wid = reg.body.value("worker_id", int64_t{0});
    secrets_[wid] = reg.body.value("worker_secret", "");
    return wid;
  }
  // A client holding the worker's own secret.
  HttpJson As(int64_t wid) { return HttpJson(daemon_->port(), secrets_[wid]); }
  json WorkerPost(int64_t wid, const std::string& what, const json& body) {
    auto r = As(wid).Post("/v1/workers/" + std::to_string(wid) + "/" + what, body);
    EXPECT_EQ(r.status, 200) << what << " " << body.dump() << ": " << r.text;
    return r.body;
  }
  // Registers a worker for the job's segment and heartbeats once.
  int64_t Attach(int64_t job) {
    const int64_t wid = Register(job);
    WorkerPost(wid, "heartbeat", {{"step", 1}});
    return wid;
  }
  // Heartbeats the loss at `step` and waits until a tick merged it into the
  // job's curve: a later heartbeat before that tick would replace it.
  void ReportLoss(int64_t job, int64_t wid, int64_t step, double loss) {
    const std::string path = "/v1/jobs/" + std::to_string(job) + "/losses";
    json curve = GetJson(*worker_, path);
    const size_t before = curve["points"].size();
    WorkerPost(wid, "heartbeat", {{"step", step}, {"loss", loss}, {"samples", 64 * step}});
    ASSERT_TRUE(Eventually([&] {
      curve = GetJson(*worker_, path);
      return curve["points"].size() == before + 1 && curve["points"].back()[0] == step;
    })) << "step "
        << step << " never reached the curve: " << curve.dump();
  }
  // The team named `name` in a GET /v1/teams answer.
  static json Team(const json& teams, const std::string& name) {
    for (const json& t : teams["teams"]) {
      if (t["name"] == name) return t;
    }
    ADD_FAILURE() << "no team " << name << " in " << teams.dump();
    return json::object();
  }

  TempDir dir_;
  std::string chromium_;
  std::unique_ptr<StintdProcess> daemon_;
  std::unique_ptr<HttpJson> admin_, worker_;
  std::map<int64_t, std::string> secrets_;  // worker id -> its worker_secret
};

TEST_F(DashboardTest, ServedWithoutATokenSelfContainedAndTheDataStaysProtected) {
  httplib::Client anonymous("127.0.0.1", daemon_->port());
  auto page = anonymous.Get("/dashboard");
  ASSERT_TRUE(page) << "GET /dashboard: " << httplib::to_string(page.error());
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type").rfind("text/html", 0), 0u)
      << page->get_header_value("Content-Type");
  const std::string& html = page->body;
  EXPECT_NE(html.find("<svg id=\"timeline\""), std::string::npos);
  // Nothing is loaded from elsewhere: the only URLs are the SVG namespace.
  for (const char* scheme : {"http://", "https://"}) {
    for (size_t at = html.find(scheme); at != std::string::npos; at = html.find(scheme, at + 1)) {
      EXPECT_EQ(html.compare(at, 26, "http://www.w3.org/2000/svg"), 0) << html.substr(at, 60);
    }
  }
  for (const char* external : {"<link", " src=", "@import", "url(http", "url(//"}) {
    EXPECT_EQ(html.find(external), std::string::npos) << external;
  }
  // The data views keep their tokens.
  for (const char* path : {"/v1/pools", "/v1/windows", "/v1/jobs", "/v1/queue", "/v1/segments",
                           "/v1/teams", "/metrics"}) {
    auto r = anonymous.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 401) << path;
  }
}

TEST_F(DashboardTest, WithoutAValidTokenThePageSaysSoAndDrawsNothing) {
  if (chromium_.empty()) GTEST_SKIP() << kNoChromium;
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "alpha"}}).status, 201);
  Post("/v1/windows", {{"pool", "alpha"}, {"gpus", 8}, {"end_ms", WallNowMs() + 3600000}}, 201);

  Dom none(DumpDom(PageUrl("")));
  auto status = none.Where("span", "", "id", "status");
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0].Attr("data-state"), "no-token") << status[0].Text();
  EXPECT_NE(status[0].Text().find("#token="), std::string::npos) << status[0].Text();
  auto form = none.Where("form", "", "id", "token-form");
  ASSERT_EQ(form.size(), 1u);
  EXPECT_FALSE(form[0].Has("hidden")) << "the token form is shown";
  EXPECT_TRUE(none.Where("rect", "window", "data-pool", "alpha").empty());

  Dom wrong(DumpDom(PageUrl("token=not-a-token-of-this-server")));
  status = wrong.Where("span", "", "id", "status");
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0].Attr("data-state"), "error") << status[0].Text();
  EXPECT_NE(status[0].Text().find("401"), std::string::npos) << status[0].Text();
  EXPECT_NE(status[0].Text().find("UNAUTHENTICATED"), std::string::npos) << status[0].Text();
  EXPECT_TRUE(wrong.Where("rect", "window", "data-pool", "alpha").empty());
}

// A stint-agent node is a window inside its pool's lane, named after the
// node; an admin's window beside it has no node.
TEST_F(DashboardTest, ANodeIsDrawnInsideItsPoolsLane) {
  if (chromium_.empty()) GTEST_SKIP() << kNoChromium;
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "alpha"}}).status, 201);
  const int64_t admin_window =
      Post("/v1/windows", {{"pool", "alpha"}, {"gpus", 8}, {"end_ms", WallNowMs() + 3600000}}, 201)
          .value("id", int64_t{0});
  HttpJson agent(daemon_->port(), StintdProcess::kAgentToken);
  auto node = agent.Post("/v1/nodes", {{"name", "gpu-host-7"},
                                       {"pool", "alpha"},
                                       {"gpus", {2, 3}},
                                       {"kind", "spot"}});
  ASSERT_EQ(node.status, 201) << node.text;
  const std::string node_window = std::to_string(node.body["window"]["id"].get<int64_t>());

  Dom dom(DumpDom(PageUrl(std::string("token=") + StintdProcess::kWorkerToken)));
  auto drawn = dom.Where("rect", "window", "data-node", "gpu-host-7");
  ASSERT_EQ(drawn.size(), 1u);
  EXPECT_EQ(drawn[0].Attr("data-pool"), "alpha");
  EXPECT_EQ(drawn[0].Attr("data-window"), node_window);
  EXPECT_EQ(drawn[0].Attr("data-gpus"), "2");
  auto labels = dom.Where("text", "window-label", "data-window", node_window);
  ASSERT_EQ(labels.size(), 1u);
  EXPECT_NE(labels[0].Text().find("gpu-host-7"), std::string::npos) << labels[0].Text();
  auto plain = dom.Where("rect", "window", "data-window", std::to_string(admin_window));
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_FALSE(plain[0].Has("data-node"));
}

TEST_F(DashboardTest, ChromiumDrawsWindowsSegmentsQueueAndMetrics) {
  if (chromium_.empty()) GTEST_SKIP() << kNoChromium;
  // --- the state: two pools, three windows, four jobs ---
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "alpha"}}).status, 201);
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "beta"}}).status, 201);
  const int64_t now = WallNowMs();
  // Closed before any job exists, so nothing ever runs in it.
  const int64_t closed =
      Post("/v1/windows",
           {{"pool", "alpha"}, {"gpus", 4}, {"start_ms", now - 600000}, {"end_ms", now + 3600000}},
           201)
          .value("id", int64_t{0});
  json closed_view =
      Post("/v1/windows/" + std::to_string(closed) + "/close", {{"lead_seconds", 0}}, 200);
  ASSERT_TRUE(closed_view.value("closed_early", false)) << closed_view.dump();
  ASSERT_FALSE(closed_view.value("open", true)) << closed_view.dump();
  const int64_t alpha =
      Post("/v1/windows", {{"pool", "alpha"}, {"gpus", 8}, {"end_ms", now + 3600000}}, 201)
          .value("id", int64_t{0});
  const int64_t spot =
      Post("/v1/windows",
           {{"pool", "beta"}, {"gpus", 4}, {"kind", "spot"}, {"start_ms", now - 2400000}}, 201)
          .value("id", int64_t{0});
  // Upcoming, in a pool of its own that no job asks for: the default range
  // reaches it, whole (it ended ~5 min ahead before, and cut this and
  // alpha's 1 h window off). The spot window, drawn up to now, started 40
  // min ago, so it stays wide enough for the screenshot's check in the 3 h
  // range.
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "gamma"}}).status, 201);
  const int64_t upcoming = Post("/v1/windows",
                                {{"pool", "gamma"},
                                 {"gpus", 2},
                                 {"start_ms", now + 3600000},
                                 {"end_ms", now + 2 * 3600000}},
                                201)
                               .value("id", int64_t{0});

  // A job that ran in beta and finished: a completed segment.
  const int64_t warmup = Submit("warmup", "beta", 2);
  ASSERT_TRUE(Eventually([&] { return JobState(warmup) == "RUNNING"; }));
  const int64_t warmup_worker = Attach(warmup);
  HttpJson warmup_as(daemon_->port(), secrets_[warmup_worker]);
  auto finished =
      warmup_as.Post("/v1/workers/" + std::to_string(warmup_worker) + "/finished", json::object());
  ASSERT_EQ(finished.status, 200) << finished.text;
  ASSERT_TRUE(Eventually([&] { return JobState(warmup) == "DONE"; }));

  const int64_t train_a = Submit("train-a", "alpha", 4);
  const int64_t train_b = Submit("train-b", "beta", 2);
  const int64_t big = Submit("wait-big", "alpha", 8);  // 4 of alpha's 8 GPUs are held: it waits
  ASSERT_TRUE(
      Eventually([&] { return JobState(train_a) == "RUNNING" && JobState(train_b) == "RUNNING"; }));
  Attach(train_a);
  Attach(train_b);
  json queue;
  ASSERT_TRUE(Eventually([&] {
    queue = GetJson(*worker_, "/v1/queue");
    return queue["pending"].size() == 1 && queue["pending"][0].value("job_id", int64_t{0}) == big &&
           queue["pending"][0].value("reason", "none") != "none" && queue["running"].size() == 2;
  })) << queue.dump();
  const json pending = queue["pending"][0];
  const std::string reason = pending["reason"];

  const json windows = GetJson(*worker_, "/v1/windows")["windows"];
  const json segments = GetJson(*worker_, "/v1/segments")["segments"];
  const json jobs = GetJson(*worker_, "/v1/jobs")["jobs"];
  ASSERT_EQ(windows.size(), 4u);
  ASSERT_EQ(segments.size(), 3u) << segments.dump();
  std::map<int64_t, std::string> job_names, window_pools;
  for (const json& j : jobs) job_names[j["id"]] = j["name"];
  for (const json& w : windows) window_pools[w["id"]] = w["pool"];

  // --- the page, drawn by Chromium ---
  const std::string before_text = MetricsText();
  const std::string dom_text =
      DumpDom(PageUrl(std::string("token=") + StintdProcess::kWorkerToken));
  const std::string after_text = MetricsText();
  const json queue_after = GetJson(*worker_, "/v1/queue");
  ASSERT_EQ(queue_after["pending"].size(), 1u)
      << "the queue changed while Chromium ran: " << queue_after.dump();
  ASSERT_EQ(queue_after["pending"][0]["reason"], reason) << queue_after.dump();
  ASSERT_EQ(queue_after["running"].size(), 2u) << queue_after.dump();

  // The artefacts: the DOM and a screenshot.
  std::string artefacts = dir_.path();
  if (const char* a = std::getenv("STINT_ARTIFACT_DIR"); a != nullptr && *a != '\0') {
    artefacts = a;
    const std::string err = MakeDirs(artefacts);
    ASSERT_TRUE(err.empty()) << "STINT_ARTIFACT_DIR: " << err;
  }
  ASSERT_TRUE(WriteWholeFile(artefacts + "/dashboard.html", dom_text))
      << "cannot write " << artefacts << "/dashboard.html";

  Dom dom(dom_text);
  auto status = dom.Where("span", "", "id", "status");
  ASSERT_EQ(status.size(), 1u) << dom_text;
  ASSERT_EQ(status[0].Attr("data-state"), "ok") << "the page reported: " << status[0].Text();
  ASSERT_EQ(dom.Where("svg", "", "id", "timeline").size(), 1u);
  {
    // The default range holds every window, from its start to its end.
    const Element box = dom.Where("svg", "", "id", "timeline")[0];
    double t0 = 0, t1 = 0;
    ASSERT_TRUE(ParseDouble(box.Attr("data-t0"), &t0)) << box.Attr("data-t0");
    ASSERT_TRUE(ParseDouble(box.Attr("data-t1"), &t1)) << box.Attr("data-t1");
    for (const json& w : windows) {
      EXPECT_LE(t0, w["start_ms"].get<double>()) << w.dump();
      if (!w["end_ms"].is_null()) {
        EXPECT_GE(t1, w["end_ms"].get<double>()) << w.dump();
      }
    }
    EXPECT_EQ(dom.Where("rect", "window", "data-window", std::to_string(upcoming)).size(), 1u);
  }
  EXPECT_EQ(dom.Where("line", "", "id", "now-line").size(), 1u) << "no now line";

  // One lane per pool; one rectangle per window, in its pool's lane, styled
  // by state; its label says its capacity.
  for (const char* pool : {"alpha", "beta"}) {
    EXPECT_EQ(dom.Where("rect", "lane", "data-pool", pool).size(), 1u) << pool;
  }
  for (const json& w : windows) {
    const std::string id = std::to_string(w["id"].get<int64_t>());
    auto rects = dom.Where("rect", "window", "data-window", id);
    ASSERT_EQ(rects.size(), 1u) << "window " << id;
    const Element& r = rects[0];
    EXPECT_EQ(r.Attr("data-pool"), w["pool"]) << id;
    EXPECT_EQ(r.Attr("data-gpus"), std::to_string(w["gpus"].get<int>())) << id;
    EXPECT_EQ(r.Attr("data-state"), w["open"].get<bool>()           ? "open"
                                    : w["start_ms"].get<int64_t>() > now ? "upcoming"
                                                                         : "closed")
        << id;
    EXPECT_EQ(r.HasClass("revoked"), w["closed_early"].get<bool>()) << id;
    EXPECT_EQ(r.HasClass("open-ended"), w["end_ms"].is_null()) << id;
    EXPECT_EQ(r.HasClass(w["kind"].get<std::string>()), true) << id;
    auto labels = dom.Where("text", "window-label", "data-window", id);
    ASSERT_EQ(labels.size(), 1u) << id;
    EXPECT_NE(labels[0].Text().find(std::to_string(w["gpus"].get<int>()) + " GPUs"),
              std::string::npos)
        << labels[0].Text();
  }
  EXPECT_EQ(
      dom.Where("rect", "window", "data-window", std::to_string(closed))[0].Attr("data-state"),
      "closed");
  EXPECT_TRUE(
      dom.Where("rect", "window", "data-window", std::to_string(spot))[0].HasClass("open-ended"));
  EXPECT_EQ(dom.Where("rect", "window", "data-window", std::to_string(alpha))[0].Attr("data-pool"),
            "alpha");

  // One rectangle per segment and window it holds GPUs in, in that window's
  // pool, coloured and labelled by its job.
  std::map<int64_t, std::string> segment_state_of_job;
  for (const json& s : segments) {
    const std::string id = std::to_string(s["id"].get<int64_t>());
    const int64_t job = s["job_id"];
    segment_state_of_job[job] = s["state"];
    auto rects = dom.Where("rect", "segment", "data-segment", id);
    ASSERT_EQ(rects.size(), s["allocs"].size()) << "segment " << id;
    for (size_t i = 0; i < rects.size(); i++) {
      const json& alloc = s["allocs"][i];
      const Element& r = rects[i];
      EXPECT_EQ(r.Attr("data-job"), std::to_string(job));
      EXPECT_EQ(r.Attr("data-window"), std::to_string(alloc["window_id"].get<int64_t>()));
      EXPECT_EQ(r.Attr("data-pool"), window_pools[alloc["window_id"]]);
      EXPECT_EQ(r.Attr("data-gpus"), std::to_string(alloc["gpus"].get<int>()));
      EXPECT_EQ(r.Attr("data-state"), s["state"]);
      EXPECT_TRUE(r.HasClass(s["state"].get<std::string>())) << r.Attr("class");
      EXPECT_FALSE(r.Attr("fill").empty()) << "segment " << id << " is not coloured";
    }
    auto labels = dom.Where("text", "segment-label", "data-segment", id);
    ASSERT_EQ(labels.size(), rects.size()) << id;
    for (const Element& l : labels) EXPECT_EQ(l.Text(), job_names[job]);
  }
  EXPECT_EQ(segment_state_of_job[train_a], "running");
  EXPECT_EQ(segment_state_of_job[train_b], "running");
  EXPECT_EQ(segment_state_of_job[warmup], "completed");
  auto a_rects = dom.Where("rect", "segment", "data-job", std::to_string(train_a));
  ASSERT_EQ(a_rects.size(), 1u);
  EXPECT_EQ(a_rects[0].Attr("data-pool"), "alpha");
  EXPECT_EQ(a_rects[0].Attr("data-window"), std::to_string(alpha));
  auto b_rects = dom.Where("rect", "segment", "data-job", std::to_string(train_b));
  ASSERT_EQ(b_rects.size(), 1u);
  EXPECT_EQ(b_rects[0].Attr("data-pool"), "beta");
  EXPECT_NE(a_rects[0].Attr("fill"), b_rects[0].Attr("fill")) << "two jobs, one colour";
  EXPECT_TRUE(dom.Where("rect", "segment", "data-job", std::to_string(big)).empty())
      << "a waiting job has no segment";

  // The queue: the waiting job with its reason, then the running ones.
  Dom queue_table = dom.Section("<table id=\"queue\"", "</table>");
  ASSERT_FALSE(queue_table.empty());
  EXPECT_EQ(queue_table.All("tr").size(), 1u + 3u) << "header, one pending, two running";
  auto big_rows = queue_table.Where("tr", "", "data-job", std::to_string(big));
  ASSERT_EQ(big_rows.size(), 1u);
  EXPECT_EQ(big_rows[0].Attr("data-state"), "PENDING");
  EXPECT_EQ(big_rows[0].Attr("data-reason"), reason);
  std::map<std::string, std::string> cells;
  for (const Element& td : Dom(big_rows[0].inner).All("td")) cells[td.Attr("class")] = td.Text();
  EXPECT_EQ(cells["name"], "wait-big");
  EXPECT_EQ(cells["priority"], "MEDIUM");
  EXPECT_EQ(cells["state"], "PENDING");
  EXPECT_EQ(cells["gpus"], "8");
  EXPECT_EQ(cells["reason"], reason);
  EXPECT_EQ(cells["detail"], pending["detail"].get<std::string>());
  EXPECT_EQ(cells["planned"] == "unknown", pending["planned_start_ms"].is_null())
      << cells["planned"];
  for (int64_t job : {train_a, train_b}) {
    auto rows = queue_table.Where("tr", "", "data-job", std::to_string(job));
    ASSERT_EQ(rows.size(), 1u) << job;
    EXPECT_EQ(rows[0].Attr("data-state"), "RUNNING");
  }

  // The metrics table holds every stintd_* sample of /metrics, with its
  // value. A sample that did not move while Chromium ran must be equal; a
  // counter that moved must lie between the two answers.
  const std::map<std::string, double> before = ParseMetrics(before_text),
                                      after = ParseMetrics(after_text);
  Dom metrics_table = dom.Section("<table id=\"metrics\"", "</table>");
  std::map<std::string, double> drawn;
  for (const Element& tr : metrics_table.All("tr")) {
    if (!tr.Has("data-metric")) continue;
    const std::string labels = tr.Attr("data-labels");
    const std::string key = tr.Attr("data-metric") + (labels.empty() ? "" : "{" + labels + "}");
    double v = 0, shown = 0;
    ASSERT_TRUE(ParseDouble(tr.Attr("data-value"), &v)) << key << " = " << tr.Attr("data-value");
    for (const Element& td : Dom(tr.inner).All("td")) {
      if (td.HasClass("value")) {
        ASSERT_TRUE(ParseDouble(td.Text(), &shown)) << key << " shows " << td.Text();
        EXPECT_EQ(shown, v) << key << ": shown " << td.Text() << ", data-value "
                            << tr.Attr("data-value");
      }
    }
    EXPECT_TRUE(drawn.emplace(key, v).second) << "two rows for " << key;
  }
  std::set<std::string> want_keys, drawn_keys;
  for (const auto& [k, v] : after) {
    if (k.rfind("stintd_", 0) == 0) want_keys.insert(k);
  }
  for (const auto& [k, v] : drawn) drawn_keys.insert(k);
  EXPECT_EQ(drawn_keys, want_keys);
  int equal = 0, bracketed = 0, moving = 0;
  for (const auto& [key, v] : drawn) {
    auto b = before.find(key), a = after.find(key);
    if (b == before.end() || a == after.end()) continue;  // reported by the key comparison
    if (b->second == a->second) {
      EXPECT_EQ(v, a->second) << key;
      equal++;
    } else if (key.find("_total") != std::string::npos ||
               key == "stintd_oldest_pending_wait_seconds") {
      EXPECT_LE(b->second, v) << key;  // monotone: the page's answer came between the two
      EXPECT_LE(v, a->second) << key;
      bracketed++;
    } else {
      moving++;  // e.g. stintd_plan_seconds: any number will do
    }
  }
  // The numbers this state fixes, equal in both answers and on the page.
  const std::map<std::string, double> fixed = {
      {"stintd_jobs{state=\"PENDING\"}", 1},
      {"stintd_jobs{state=\"RUNNING\"}", 2},
      {"stintd_jobs{state=\"DONE\"}", 1},
      {"stintd_windows_open", 2},
      {"stintd_gpus{state=\"open\"}", 12},
      {"stintd_gpus{state=\"allocated\"}", 6},
      {"stintd_queue_blocked{reason=\"" + reason + "\"}", 1},
      {"stintd_segments_started_total", 3},
  };
  for (const auto& [key, v] : fixed) {
    ASSERT_TRUE(after.count(key)) << key;
    EXPECT_EQ(after.at(key), v) << key;
    EXPECT_EQ(before.at(key), v) << key;
    EXPECT_EQ(drawn[key], v) << key;
  }
  EXPECT_GT(equal, 30) << "too few samples held still to compare";
  std::cout << "dashboard metrics: " << equal << " samples equal to /metrics, " << bracketed
            << " counters between the answers before and after, " << moving
            << " moving gauges present\n";

  // --- the screenshot ---
  const std::string png_path = artefacts + "/dashboard.png";
  std::remove(png_path.c_str());
  BrowserRun shot =
      RunBrowser(chromium_,
                 BrowserArgs(dir_.Sub("chromium-profile"),
                             {"--screenshot=" + png_path, "--window-size=1400,900"},
                             PageUrl(std::string("token=") + StintdProcess::kWorkerToken)),
                 /*merge_stderr=*/true);
  ASSERT_FALSE(shot.timed_out) << chromium_ << " did not exit; killed\n" << shot.output;
  ASSERT_EQ(shot.exit_code, 0) << shot.output;
  const std::string png_bytes = ReadWholeFile(png_path);
  ASSERT_FALSE(png_bytes.empty()) << "no screenshot at " << png_path << "\n" << shot.output;
  Png png;
  const std::string png_error = ReadPng(png_bytes, &png);
  ASSERT_TRUE(png_error.empty()) << png_path << ": " << png_error;
  EXPECT_EQ(png.width, 1400u);
  EXPECT_EQ(png.height, 900u);
#ifdef STINT_HAVE_ZLIB
  std::vector<uint32_t> pixels;
  const std::string decode_error = DecodePixels(png, &pixels);
  ASSERT_TRUE(decode_error.empty()) << png_path << ": " << decode_error;
  std::map<uint32_t, size_t> colours;
  for (uint32_t p : pixels) colours[p]++;
  EXPECT_GE(colours.size(), 32u) << "a screenshot of few colours: the page did not draw";
  // The fills of an open hard window and an open spot window (see the page's CSS).
  EXPECT_GT(colours[0xddf4ff], 1000u) << "no open window in the screenshot";
  EXPECT_GT(colours[0xfff8c5], 1000u) << "no spot window in the screenshot";
#else
  EXPECT_GT(png.idat.size(), 10000u) << "built without zlib: only the compressed size is checked";
#endif
  std::cout << "dashboard screenshot: " << png_path << " (" << png_bytes.size() << " bytes)"
            << (artefacts == dir_.path()
                    ? "; removed with the test's directory, set STINT_ARTIFACT_DIR to keep it"
                    : "")
            << "\n";
  RecordProperty("dashboard_png", png_path);
}

// Issue 33: prices, a budget and a loss curve across two segments. A job of
// team "vision" ran in a priced pool, reported losses at steps 1-4, a
// checkpoint at 3 and acked (step 4 is lost), started again from step 3,
// reported 4-7 and finished; a second job of the team keeps running, so the
// team spends. The teams, pools and jobs tables show the server's numbers
// (data-value exact, the text rounded), and the finished job, selected by
// #job=, has a polyline per segment, a marker at each segment's start step,
// and its figures per segment.
TEST_F(DashboardTest, ChromiumDrawsSpendPricesCostsAndALossCurveAcrossSegments) {
  if (chromium_.empty()) GTEST_SKIP() << kNoChromium;
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "priced"}, {"price_per_gpu_hour", 30}}).status,
            201);
  Post("/v1/pools/priced/price", {{"price_per_gpu_hour", 36}}, 200);
  ASSERT_EQ(
      admin_
          ->Post("/v1/pools", {{"name", "cheap"}, {"pricing", "spot"}, {"price_per_gpu_hour", 12}})
          .status,
      201);
  auto put =
      admin_->Put("/v1/teams/vision",
                  {{"guaranteed_gpus", 0}, {"budget", 500}, {"budget_period_seconds", 86400}});
  ASSERT_EQ(put.status, 200) << put.text;
  put = admin_->Put("/v1/teams/research", {{"guaranteed_gpus", 2}});
  ASSERT_EQ(put.status, 200) << put.text;
  Post("/v1/windows", {{"pool", "priced"}, {"gpus", 8}, {"end_ms", WallNowMs() + 3600000}}, 201);

  const int64_t train = Submit("train", "priced", 2, "vision");
  ASSERT_TRUE(Eventually([&] { return JobState(train) == "RUNNING"; }));
  const int64_t first_segment = Job(train)["segment_id"];
  int64_t wid = Register(train);
  const std::vector<std::pair<int64_t, double>> first = {{1, 3.0}, {2, 2.6}, {3, 2.3}, {4, 2.1}};
  for (const auto& [step, loss] : first) {
    ASSERT_NO_FATAL_FAILURE(ReportLoss(train, wid, step, loss));
  }
  WorkerPost(wid, "checkpoint", {{"step", 3}, {"seconds", 0.5}});
  WorkerPost(wid, "ack", {{"step", 3}});
  ASSERT_TRUE(Eventually([&] {
    const json j = Job(train);
    return j["state"] == "RUNNING" && j["segment_id"] != first_segment;
  })) << Job(train).dump();
  const int64_t second_segment = Job(train)["segment_id"];
  wid = Register(train);
  const std::vector<std::pair<int64_t, double>> second = {{4, 2.2}, {5, 2.0}, {6, 1.8}, {7, 1.7}};
  for (const auto& [step, loss] : second) {
    ASSERT_NO_FATAL_FAILURE(ReportLoss(train, wid, step, loss));
  }
  WorkerPost(wid, "checkpoint", {{"step", 7}, {"seconds", 0.5}});
  WorkerPost(wid, "finished", json::object());
  ASSERT_TRUE(Eventually([&] { return JobState(train) == "DONE"; }));

  const int64_t burner = Submit("burner", "priced", 2, "vision");
  ASSERT_TRUE(Eventually([&] { return JobState(burner) == "RUNNING"; }));
  Attach(burner);

  // A finished job's curve and figures no longer move; the team's spend does.
  const std::string id = std::to_string(train);
  const json curve = GetJson(*worker_, "/v1/jobs/" + id + "/losses");
  ASSERT_EQ(curve["points"].size(), first.size() + second.size()) << curve.dump();
  ASSERT_EQ(curve["segments"].size(), 2u) << curve.dump();
  std::map<int64_t, int64_t> start_step;  // segment -> the step it began at
  for (const json& seg : curve["segments"]) start_step[seg["id"]] = seg["start_step"];
  ASSERT_EQ(start_step.count(first_segment), 1u) << curve.dump();
  ASSERT_EQ(start_step.count(second_segment), 1u) << curve.dump();
  EXPECT_EQ(start_step[first_segment], 0);
  EXPECT_EQ(start_step[second_segment], 3) << "the second segment resumed from the checkpoint";
  const json figures = Job(train)["figures"];
  ASSERT_EQ(figures["segments"].size(), 2u) << figures.dump();
  const json pools = GetJson(*worker_, "/v1/pools")["pools"];
  const json team_before = Team(GetJson(*worker_, "/v1/teams"), "vision");
  const double burner_cost_before = Job(burner)["cost"];

  const std::string dom_text =
      DumpDom(PageUrl(std::string("token=") + StintdProcess::kWorkerToken + "&job=" + id));
  const json team_after = Team(GetJson(*worker_, "/v1/teams"), "vision");
  const double burner_cost_after = Job(burner)["cost"];
  ASSERT_EQ(Job(train)["figures"], figures) << "a finished job's figures moved";
  Dom dom(dom_text);
  auto status = dom.Where("span", "", "id", "status");
  ASSERT_EQ(status.size(), 1u) << dom_text;
  ASSERT_EQ(status[0].Attr("data-state"), "ok") << "the page reported: " << status[0].Text();

  // Pools: pricing and the price in force.
  Dom pool_table = dom.Section("<table id=\"pools\"", "</table>");
  for (const json& p : pools) {
    auto rows = pool_table.Where("tr", "", "data-pool", p["name"]);
    ASSERT_EQ(rows.size(), 1u) << p.dump();
    EXPECT_EQ(rows[0].Attr("data-pricing"), p["pricing"]);
    auto cells = Cells(rows[0]);
    double price = 0;
    ASSERT_TRUE(DataValue(cells["price"], &price));
    EXPECT_EQ(price, p["price_per_gpu_hour"].get<double>()) << p.dump();
  }
  auto priced = Cells(pool_table.Where("tr", "", "data-pool", "priced").at(0));
  EXPECT_EQ(priced["pricing"].Text(), "on-demand");
  EXPECT_EQ(priced["price"].Text(), "36.00");
  EXPECT_NE(priced["history"].Text().find("2 prices"), std::string::npos)
      << priced["history"].Text();
  EXPECT_EQ(Cells(pool_table.Where("tr", "", "data-pool", "cheap").at(0))["pricing"].Text(),
            "spot");

  // Teams: vision's budget, what it spent (between the answers before and
  // after the page's), what is left of that, the burn of the running job,
  // and the forecast: spent plus that burn to the period's end, whose
  // second part only shrinks as time passes.
  Dom team_table = dom.Section("<table id=\"teams\"", "</table>");
  auto vision_rows = team_table.Where("tr", "", "data-team", "vision");
  ASSERT_EQ(vision_rows.size(), 1u);
  auto vision = Cells(vision_rows[0]);
  double budget = 0, spent = 0, left = 0, per_hour = 0, forecast = 0, period_end = 0;
  ASSERT_TRUE(DataValue(vision["budget"], &budget));
  ASSERT_TRUE(DataValue(vision["spent"], &spent));
  ASSERT_TRUE(DataValue(vision["left"], &left));
  ASSERT_TRUE(DataValue(vision["spend-per-hour"], &per_hour));
  ASSERT_TRUE(DataValue(vision["forecast"], &forecast));
  ASSERT_TRUE(DataValue(vision["period-end"], &period_end));
  EXPECT_EQ(budget, 500);
  EXPECT_EQ(vision["budget"].Text(), "500.00");
  EXPECT_LE(team_before["spent"].get<double>(), spent);
  EXPECT_LE(spent, team_after["spent"].get<double>());
  EXPECT_GT(spent, 0) << "train's two segments were charged";
  EXPECT_EQ(left, 500 - spent);
  EXPECT_TRUE(RoundedFrom(vision["spent"].Text(), spent));
  EXPECT_TRUE(RoundedFrom(vision["left"].Text(), left));
  EXPECT_EQ(per_hour, team_after["spend_per_hour"].get<double>());
  EXPECT_EQ(per_hour, team_before["spend_per_hour"].get<double>());
  EXPECT_NEAR(per_hour, 2 * 36, 1e-9) << "burner's 2 GPUs at 36 per GPU-hour";
  EXPECT_TRUE(RoundedFrom(vision["spend-per-hour"].Text(), per_hour));
  const double ahead = forecast - spent;
  const double tolerance = 1e-9 * forecast;
  EXPECT_LE(team_after["forecast"].get<double>() - team_after["spent"].get<double>(),
            ahead + tolerance);
  EXPECT_LE(ahead,
            team_before["forecast"].get<double>() - team_before["spent"].get<double>() + tolerance);
  EXPECT_TRUE(RoundedFrom(vision["forecast"].Text(), forecast));
  EXPECT_EQ(period_end, team_after["period_end_ms"].get<double>());
  EXPECT_EQ(vision_rows[0].HasClass("over"), forecast > budget);
  EXPECT_NE(vision["cost-by-job"].Text().find("train #" + id), std::string::npos)
      << vision["cost-by-job"].Text();
  auto research_rows = team_table.Where("tr", "", "data-team", "research");
  ASSERT_EQ(research_rows.size(), 1u);
  auto research = Cells(research_rows[0]);
  EXPECT_EQ(research["budget"].Text(), "none");
  EXPECT_FALSE(research["budget"].Has("data-value"));
  EXPECT_EQ(research["left"].Text(), "-");

  // Jobs: cost and efficiency.
  Dom job_table = dom.Section("<table id=\"jobs\"", "</table>");
  auto train_rows = job_table.Where("tr", "", "data-job", id);
  ASSERT_EQ(train_rows.size(), 1u);
  EXPECT_TRUE(train_rows[0].HasClass("selected"));
  auto train_cells = Cells(train_rows[0]);
  double cost = 0, efficiency = 0, kept = 0;
  ASSERT_TRUE(DataValue(train_cells["cost"], &cost));
  ASSERT_TRUE(DataValue(train_cells["efficiency"], &efficiency));
  ASSERT_TRUE(DataValue(train_cells["kept"], &kept));
  EXPECT_EQ(cost, figures["cost"].get<double>());
  EXPECT_GT(cost, 0);
  EXPECT_TRUE(RoundedFrom(train_cells["cost"].Text(), cost));
  EXPECT_EQ(efficiency, figures["efficiency"].get<double>());
  EXPECT_GT(efficiency, 0);
  char percent[32];
  std::snprintf(percent, sizeof(percent), "%.1f%%", efficiency * 100);
  EXPECT_EQ(train_cells["efficiency"].Text(), percent);
  EXPECT_EQ(kept, 7) << "steps 1-3 kept by the first segment, 4-7 by the second";
  auto burner_rows = job_table.Where("tr", "", "data-job", std::to_string(burner));
  ASSERT_EQ(burner_rows.size(), 1u);
  auto burner_cells = Cells(burner_rows[0]);
  double burner_cost = 0, burner_efficiency = 0;
  ASSERT_TRUE(DataValue(burner_cells["cost"], &burner_cost));
  EXPECT_LE(burner_cost_before, burner_cost);
  EXPECT_LE(burner_cost, burner_cost_after);
  EXPECT_TRUE(RoundedFrom(burner_cells["cost"].Text(), burner_cost));
  ASSERT_TRUE(DataValue(burner_cells["efficiency"], &burner_efficiency));
  EXPECT_EQ(burner_efficiency, 0) << "no checkpoint: no kept step";
  EXPECT_EQ(burner_cells["efficiency"].Text(), "0.0%");

  // The selected job's panel and loss plot.
  auto panel = dom.Where("section", "", "id", "job-panel");
  ASSERT_EQ(panel.size(), 1u);
  EXPECT_FALSE(panel[0].Has("hidden"));
  Dom plot = dom.Section("<svg id=\"loss-plot\"", "</svg>");
  ASSERT_FALSE(plot.empty());
  auto box = plot.Where("svg", "", "id", "loss-plot");
  ASSERT_EQ(box.size(), 1u);
  EXPECT_EQ(box[0].Attr("data-job"), id);
  EXPECT_EQ(box[0].Attr("data-state"), "drawn");
  EXPECT_EQ(box[0].Attr("data-points"), "8");
  EXPECT_EQ(box[0].Attr("data-segments"), "2");
  std::map<int64_t, Element> line_of;  // segment -> its polyline
  for (Element& line : plot.All("polyline")) {
    if (!line.HasClass("loss-line")) continue;
    const int64_t seg = static_cast<int64_t>(Number(line.Attr("data-segment")));
    EXPECT_TRUE(line_of.emplace(seg, line).second) << "two polylines for segment " << seg;
  }
  ASSERT_EQ(line_of.size(), 2u) << "one polyline per segment";
  ASSERT_EQ(line_of.count(first_segment), 1u);
  ASSERT_EQ(line_of.count(second_segment), 1u);
  EXPECT_NE(line_of[first_segment].Attr("stroke"), line_of[second_segment].Attr("stroke"));
  for (const auto& [seg, line] : line_of) {
    EXPECT_EQ(line.Attr("data-points"), "4") << seg;
    auto xy = PolylinePoints(line);
    ASSERT_EQ(xy.size(), 4u) << line.Attr("points");
    for (size_t i = 1; i < xy.size(); i++) {
      EXPECT_LT(Number(xy[i - 1].first), Number(xy[i].first)) << "steps go right";
      EXPECT_LT(Number(xy[i - 1].second), Number(xy[i].second)) << "a falling loss goes down";
    }
  }
  std::map<int64_t, Element> marker_of;  // segment -> its boundary marker
  for (Element& line : plot.All("line")) {
    if (!line.HasClass("segment-boundary")) continue;
    const int64_t seg = static_cast<int64_t>(Number(line.Attr("data-segment")));
    EXPECT_TRUE(marker_of.emplace(seg, line).second) << "two markers for segment " << seg;
  }
  ASSERT_EQ(marker_of.size(), 2u) << "one marker per segment";
  for (const auto& [seg, marker] : marker_of) {
    ASSERT_EQ(start_step.count(seg), 1u) << seg;
    EXPECT_EQ(marker.Attr("data-step"), std::to_string(start_step[seg]));
    EXPECT_EQ(marker.Attr("x1"), marker.Attr("x2")) << "vertical";
  }
  // The second segment's marker stands at step 3, where the first
  // segment's third point is; its own points begin right of it.
  const auto first_points = PolylinePoints(line_of[first_segment]);
  const auto second_points = PolylinePoints(line_of[second_segment]);
  EXPECT_EQ(marker_of[second_segment].Attr("x1"), first_points[2].first);
  EXPECT_LT(Number(marker_of[second_segment].Attr("x1")), Number(second_points[0].first));
  EXPECT_EQ(second_points[0].first, first_points[3].first) << "both reported step 4";
  EXPECT_LT(Number(marker_of[first_segment].Attr("x1")), Number(first_points[0].first));
  std::set<std::string> axes;
  for (const Element& t : plot.All("text")) {
    if (t.HasClass("axis-label")) axes.insert(t.Text());
  }
  EXPECT_EQ(axes, (std::set<std::string>{"step", "loss"}));

  // The figures, per segment and for the job.
  Dom figure_table = dom.Section("<table id=\"job-figures\"", "</table>");
  std::vector<std::pair<std::string, json>> want;
  for (const json& g : figures["segments"]) {
    want.emplace_back(std::to_string(g["segment_id"].get<int64_t>()), g);
  }
  want.emplace_back("job", figures);
  for (const auto& [key, g] : want) {
    auto rows = figure_table.Where("tr", "", "data-segment", key);
    ASSERT_EQ(rows.size(), 1u) << key;
    auto cells = Cells(rows[0]);
    for (const auto& [cls, field] :
         std::vector<std::pair<std::string, std::string>>{{"held", "held_gpu_seconds"},
                                                          {"useful", "useful_gpu_seconds"},
                                                          {"restart", "restart_gpu_seconds"},
                                                          {"checkpoint", "checkpoint_gpu_seconds"},
                                                          {"lost", "lost_gpu_seconds"},
                                                          {"kept", "kept_steps"},
                                                          {"efficiency", "efficiency"},
                                                          {"cost", "cost"}}) {
      double v = 0;
      ASSERT_TRUE(DataValue(cells[cls], &v)) << key << " " << cls;
      EXPECT_EQ(v, g[field].get<double>()) << key << " " << cls;
      EXPECT_FALSE(cells[cls].Text().empty()) << key << " " << cls;
    }
  }
  EXPECT_GT(figures["segments"][0]["lost_gpu_seconds"].get<double>(), 0)
      << "step 4 of the first segment was lost";
}

// Before any loss is reported the plot says so; without #job= no job panel
// is shown.
TEST_F(DashboardTest, TheLossPlotSaysSoBeforeAnyLossIsReported) {
  if (chromium_.empty()) GTEST_SKIP() << kNoChromium;
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "alpha"}}).status, 201);
  Post("/v1/windows", {{"pool", "alpha"}, {"gpus", 2}, {"end_ms", WallNowMs() + 3600000}}, 201);
  const int64_t job = Submit("quiet", "alpha", 2);
  ASSERT_TRUE(Eventually([&] { return JobState(job) == "RUNNING"; }));
  Attach(job);  // a step, no loss
  const std::string token = std::string("token=") + StintdProcess::kWorkerToken;

  Dom dom(DumpDom(PageUrl(token + "&job=" + std::to_string(job))));
  auto status = dom.Where("span", "", "id", "status");
  ASSERT_EQ(status.size(), 1u);
  ASSERT_EQ(status[0].Attr("data-state"), "ok") << status[0].Text();
  auto box = dom.Where("svg", "", "id", "loss-plot");
  ASSERT_EQ(box.size(), 1u);
  EXPECT_EQ(box[0].Attr("data-job"), std::to_string(job));
  EXPECT_EQ(box[0].Attr("data-state"), "empty");
  EXPECT_EQ(box[0].Attr("data-points"), "0");
  Dom plot = dom.Section("<svg id=\"loss-plot\"", "</svg>");
  EXPECT_TRUE(plot.All("polyline").empty());
  bool said = false;
  for (const Element& t : plot.All("text")) {
    said = said || t.Text().find("no loss reported yet") != std::string::npos;
  }
  EXPECT_TRUE(said) << "no \"no loss reported yet\" note";
  // Its figures still have its running segment.
  const json segment_id = Job(job)["segment_id"];
  Dom figure_table = dom.Section("<table id=\"job-figures\"", "</table>");
  EXPECT_EQ(figure_table.Where("tr", "", "data-segment", segment_id.dump()).size(), 1u);

  Dom none(DumpDom(PageUrl(token)));
  auto panel = none.Where("section", "", "id", "job-panel");
  ASSERT_EQ(panel.size(), 1u);
  EXPECT_TRUE(panel[0].Has("hidden")) << "no job selected, no panel";
  EXPECT_EQ(none.Where("tr", "", "data-job", std::to_string(job)).size(), 2u)
      << "the job is in the queue and the jobs tables";
}

// A curve as long as stintd keeps (kMaxLossPoints, 4096 points) is drawn
// whole, as one polyline, within the page's refresh. stintd ticks every
// millisecond here: a tick merges one loss per worker, so the curve takes
// 4096 ticks to build.
TEST_F(DashboardTest, ALossCurveOf4096PointsIsDrawnWhole) {
  if (chromium_.empty()) GTEST_SKIP() << kNoChromium;
  constexpr int kPoints = 4096;
  daemon_->Kill(SIGTERM);
  std::vector<std::string> args = SteadyStintdArgs();
  for (size_t i = 0; i + 1 < args.size(); i++) {
    if (args[i] == "--tick-seconds") args[i + 1] = "0.001";
  }
  daemon_ = std::make_unique<StintdProcess>(STINTD_PATH, dir_.path(), args);
  ASSERT_TRUE(daemon_->Start()) << daemon_->output();
  admin_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAdminToken);
  worker_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kWorkerToken);
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "alpha"}}).status, 201);
  Post("/v1/windows", {{"pool", "alpha"}, {"gpus", 2}, {"end_ms", WallNowMs() + 3600000}}, 201);
  const int64_t job = Submit("long", "alpha", 2);
  ASSERT_TRUE(Eventually([&] { return JobState(job) == "RUNNING"; }));
  const int64_t wid = Register(job);
  HttpJson as_worker = As(wid);
  const std::string beat = "/v1/workers/" + std::to_string(wid) + "/heartbeat";
  const std::string job_path = "/v1/jobs/" + std::to_string(job);
  const auto started = std::chrono::steady_clock::now();
  for (int step = 1; step <= kPoints; step++) {
    // A noisy falling curve.
    const double loss = 4.0 / (1.0 + step / 256.0) + 0.05 * ((step * 7919) % 13) / 13.0;
    auto r = as_worker.Post(beat, {{"step", step}, {"loss", loss}});
    ASSERT_EQ(r.status, 200) << r.text;
    ASSERT_TRUE(Soon(
        [&] {
          const json j = worker_->Get(job_path).body;
          return j.is_object() && j.value("last_step", int64_t{0}) >= step;
        },
        10))
        << "step " << step << " was not merged";
  }
  const json curve = GetJson(*worker_, job_path + "/losses");
  ASSERT_EQ(curve["points"].size(), size_t{kPoints});
  std::cout << "dashboard: " << kPoints << " loss points reported in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()
            << " s\n";

  const auto drawn = std::chrono::steady_clock::now();
  Dom dom(DumpDom(PageUrl(std::string("token=") + StintdProcess::kWorkerToken +
                          "&job=" + std::to_string(job))));
  std::cout << "dashboard: the page with them drawn in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - drawn).count()
            << " s (5 s of virtual time)\n";
  auto status = dom.Where("span", "", "id", "status");
  ASSERT_EQ(status.size(), 1u);
  ASSERT_EQ(status[0].Attr("data-state"), "ok") << status[0].Text();
  auto box = dom.Where("svg", "", "id", "loss-plot");
  ASSERT_EQ(box.size(), 1u);
  EXPECT_EQ(box[0].Attr("data-state"), "drawn");
  EXPECT_EQ(box[0].Attr("data-points"), std::to_string(kPoints));
  Dom plot = dom.Section("<svg id=\"loss-plot\"", "</svg>");
  auto lines = plot.All("polyline");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].Attr("data-points"), std::to_string(kPoints));
  const auto xy = PolylinePoints(lines[0]);
  ASSERT_EQ(xy.size(), size_t{kPoints});
  EXPECT_LT(Number(xy.front().first), Number(xy.back().first));
  EXPECT_EQ(plot.All("circle").size(), 0u) << "no element per point";
}

}  // namespace
}  // namespace stint
