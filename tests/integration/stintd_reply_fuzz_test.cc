// No stored string can break a stintd reply (issue 41, item 4): a real
// stintd on loopback takes arbitrary bytes (ill-formed UTF-8, NULs, control
// characters, characters cut at a limit, huge strings) in every field a
// user, an agent or a worker supplies, in bodies, paths and query strings,
// and every listing route still answers 200 with valid UTF-8 JSON, and
// stintctl still lists the jobs. The bytes come from fixed seeds: a failure
// reproduces.
#include <cctype>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/strings.h"
#include "util/stintd_process.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

#ifndef STINTCTL_PATH
#error "STINTCTL_PATH must name the stintctl binary"
#endif

namespace stint {
namespace {

using nlohmann::json;

constexpr const char* kBlock = "\xE2\x96\x88";  // U+2588 FULL BLOCK, tqdm's bar: 3 bytes

// `raw` as a JSON string literal that keeps its bytes: quotes, backslashes
// and control bytes are escaped, every other byte goes as it is (so stintd's
// parser sees ill-formed UTF-8 as sent).
std::string Literal(const std::string& raw) {
  std::string out = "\"";
  for (unsigned char c : raw) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// `raw` percent-encoded whole, for a path segment or a query value.
std::string Pct(const std::string& raw) {
  std::string out;
  for (unsigned char c : raw) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// Hostile strings from a seed.
class Hostile {
 public:
  explicit Hostile(uint32_t seed) : rng_(seed) {}

  int Below(int n) { return static_cast<int>(rng_() % static_cast<uint32_t>(n)); }

  std::string Next() {
    switch (Below(7)) {
      case 0:  // any bytes: mostly ill-formed UTF-8, NULs and controls
        return RandomBytes(Below(80));
      case 1:  // well-formed, from every length of character
        return WellFormed(Below(80));
      case 2: {  // a 3-byte character across a 4 KiB (or 32-byte) cut
        const size_t at = Below(2) == 0 ? 4096 : 32;
        std::string s(at - 1 - Below(2), 'x');
        for (int i = 0; i < 3; i++) s += kBlock;
        return s;
      }
      case 3:  // huge
        return Below(2) == 0 ? WellFormed(20000 + Below(20000)) : RandomBytes(100000);
      case 4:  // a character cut at the end
        return WellFormed(Below(20)) + std::string(kBlock, 2);
      case 5:  // short, plausible names
        return std::string("n") + std::to_string(Below(1000));
      default:
        return "";
    }
  }

 private:
  std::string RandomBytes(int n) {
    std::string s;
    for (int i = 0; i < n; i++) s += static_cast<char>(rng_() & 0xFF);
    return s;
  }
  std::string WellFormed(int chars) {
    static const char* const kChars[] = {"a",
                                         "\x00",
                                         "\x1b",
                                         "\x7f",
                                         "\"",
                                         "\\",
                                         "\n",
                                         "\xC3\xA9",
                                         kBlock,
                                         "\xE2\x80\xA8",
                                         "\xF0\x9F\x98\x80"};
    std::string s;
    for (int i = 0; i < chars; i++) {
      const char* c = kChars[Below(sizeof(kChars) / sizeof(kChars[0]))];
      s.append(c, c[0] == '\0' ? 1 : std::strlen(c));
    }
    return s;
  }

  std::mt19937 rng_;
};

class StintdReplyFuzzTest : public ::testing::Test {
 protected:
  // stintd, the pool "p" and the node "n1" (4 GPUs) registered in it;
  // `crash_limit` as --crash-limit (0: crashes never fail a job).
  void Start(int crash_limit) {
    std::vector<std::string> args = SteadyStintdArgs();
    args.insert(args.end(),
                {"--crash-limit", std::to_string(crash_limit), "--node-ttl-seconds", "600"});
    daemon_ = std::make_unique<StintdProcess>(STINTD_PATH, dir_.path(), args);
    ASSERT_TRUE(daemon_->Start()) << daemon_->output();
    admin_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAdminToken);
    worker_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kWorkerToken);
    agent_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAgentToken);
    ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
    auto node = agent_->Post(
        "/v1/nodes",
        {{"name", "n1"}, {"pool", "p"}, {"gpus", {0, 1, 2, 3}}, {"end_ms", WallNowMs() + 3600000}});
    ASSERT_EQ(node.status, 201) << node.text;
  }

  // A job launched on n1 (one GPU), evaluated at every checkpoint, once it
  // runs there: its id and its segment's.
  void StartJobOnNode(int64_t* job, int64_t* segment) {
    auto r = admin_->Post("/v1/jobs", {{"name", "train"},
                                       {"pool", "p"},
                                       {"min_gpus", 1},
                                       {"launch", {{"command", {"/bin/true"}}}},
                                       {"eval", {{"command", {"/bin/true"}}}}});
    ASSERT_EQ(r.status, 201) << r.text;
    *job = r.body.value("id", int64_t{0});
    json j;
    ASSERT_TRUE(Eventually([&] {
      j = admin_->Get("/v1/jobs/" + std::to_string(*job)).body;
      return j.is_object() && j.value("state", "") == "RUNNING" &&
             !j.value("segments", json::array()).empty() &&
             !j["segments"][0].value("placement", json::array()).empty();
    })) << j.dump();
    *segment = j.value("segment_id", int64_t{0});
  }

  json Heartbeat(const json& body) {
    auto r = agent_->PostRaw("/v1/nodes/n1/heartbeat", body.dump());
    EXPECT_EQ(r.status, 200) << r.text;
    return r.body;
  }

  // Every listing route, and each job's own, answers 200 with valid UTF-8
  // JSON (HttpJson's parse refuses ill-formed UTF-8), to an admin and to a
  // worker; /metrics and the dashboard page are valid UTF-8 text.
  void ExpectEveryListingReadable(const std::string& when) {
    std::vector<std::string> paths = {"/v1/jobs",  "/v1/nodes", "/v1/windows",  "/v1/pools",
                                      "/v1/teams", "/v1/queue", "/v1/segments", "/v1/price-rules"};
    auto jobs = admin_->Get("/v1/jobs");
    ASSERT_TRUE(jobs.status == 200 && jobs.body.is_object())
        << when << ": GET /v1/jobs: " << jobs.status << " " << jobs.text.substr(0, 300);
    for (const json& j : jobs.body.value("jobs", json::array())) {
      const std::string id = std::to_string(j.value("id", int64_t{0}));
      for (const char* sub : {"", "/losses", "/logs"}) paths.push_back("/v1/jobs/" + id + sub);
    }
    for (HttpJson* client : {admin_.get(), worker_.get()}) {
      for (const std::string& path : paths) {
        auto r = client->Get(path);
        ASSERT_EQ(r.status, 200) << when << ": GET " << path << ": " << r.text.substr(0, 300);
        ASSERT_FALSE(r.body.is_discarded())
            << when << ": GET " << path << " is not valid UTF-8 JSON";
      }
    }
    for (const char* path : {"/metrics", "/dashboard"}) {
      auto r = admin_->Get(path);
      ASSERT_EQ(r.status, 200) << when << ": GET " << path;
      ASSERT_TRUE(IsValidUtf8(r.text)) << when << ": GET " << path << " is not valid UTF-8";
    }
  }

  // An admin client on a connection of its own: a request whose target is
  // too long is answered 414 with the rest of it unread, and the connection
  // it came on is of no further use.
  std::unique_ptr<HttpJson> OwnConnection() {
    return std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAdminToken);
  }

  RunResult Ctl(const std::vector<std::string>& command) {
    std::vector<std::string> args = {"--url", daemon_->url(), "--token",
                                     StintdProcess::kAdminToken};
    args.insert(args.end(), command.begin(), command.end());
    return RunProgram(STINTCTL_PATH, args, /*merge_stderr=*/false);
  }

  TempDir dir_;
  std::unique_ptr<StintdProcess> daemon_;
  std::unique_ptr<HttpJson> admin_, worker_, agent_;
};

// The trigger: a worker killed in the middle of a tqdm line, its last line
// a run of 3-byte block characters, one of them across the 4 KiB stintd
// keeps of a message, until the crash-loop limit. Before, the cut split the
// character, the job's message was stored ill-formed, and GET /v1/jobs (and
// stintctl jobs list, and the dashboard) answered 500 to everyone.
TEST_F(StintdReplyFuzzTest, AMessageCutInsideACharacterLeavesTheJobListReadable) {
  ASSERT_NO_FATAL_FAILURE(Start(/*crash_limit=*/3));
  int64_t job = 0, segment = 0;
  ASSERT_NO_FATAL_FAILURE(StartJobOnNode(&job, &segment));
  // "rank 0: " and a bar whose block characters start at byte 4088: the
  // third, at bytes 4094..4096, crosses the cut.
  std::string line = "rank 0: ";
  line += std::string(4088 - line.size(), ' ');
  for (int i = 0; i < 10; i++) line += kBlock;
  json j;
  for (int crash = 0; crash < 3; crash++) {
    Heartbeat({{"running", {segment}},
               {"crashed", {{{"segment_id", segment}, {"exit_code", 1}, {"message", line}}}}});
  }
  ASSERT_TRUE(Eventually([&] {
    j = admin_->Get("/v1/jobs/" + std::to_string(job)).body;
    return j.is_object() && j.value("state", "") == "FAILED";
  })) << j.dump().substr(0, 300);
  auto list = admin_->Get("/v1/jobs");
  ASSERT_EQ(list.status, 200) << list.text.substr(0, 300);
  ASSERT_EQ(list.body["jobs"].size(), 1u);
  const std::string message = list.body["jobs"][0].value("message", "");
  EXPECT_EQ(message.rfind("crash loop: ", 0), 0u) << message.substr(0, 100);
  // Cut before the character that crossed the limit, not inside it: no
  // replacement character stands in for half of one.
  EXPECT_EQ(message.find("\xEF\xBF\xBD"), std::string::npos);
  const std::string kept_end = std::string(10, ' ') + kBlock + kBlock;
  EXPECT_EQ(message.substr(message.size() - std::min(message.size(), kept_end.size())), kept_end);
  const RunResult listed = Ctl({"jobs", "list"});
  EXPECT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_NE(listed.output.find("FAILED"), std::string::npos) << listed.output;
  ASSERT_NO_FATAL_FAILURE(ExpectEveryListingReadable("after the crash loop"));
}

// Hostile bytes everywhere a caller supplies a string; every fuzzed request
// is answered (never 500, never a dropped connection: stintd lives), and
// every listing stays readable.
TEST_F(StintdReplyFuzzTest, HostileBytesInEveryFieldLeaveEveryReplyValid) {
  ASSERT_NO_FATAL_FAILURE(Start(/*crash_limit=*/0));
  int64_t job = 0, segment = 0;
  ASSERT_NO_FATAL_FAILURE(StartJobOnNode(&job, &segment));
  const std::string job_path = "/v1/jobs/" + std::to_string(job);
  auto reg = worker_->Post(job_path + "/workers", {{"name", "w0"}});
  ASSERT_EQ(reg.status, 201) << reg.text;
  HttpJson self(daemon_->port(), reg.body.value("worker_secret", ""));
  const std::string worker_path = "/v1/workers/" + std::to_string(reg.body.value("worker_id", 0));

  // Each round draws from its own seed, so that what it sends does not
  // depend on how earlier rounds were answered: round N reproduces alone.
  constexpr uint32_t kSeed = 20261207;
  Hostile h(kSeed);
  std::set<int64_t> evals;  // evaluations the node was given to run
  int64_t step = 0, log_offset = 0;
  std::vector<int64_t> fuzz_jobs;
  // A field of a request body. In three rounds of four every field is
  // well-formed (made so, NULs and controls kept), so that the request gets
  // past the parser to what stores it; in the fourth, fields are as
  // generated.
  bool raw = false;
  auto field = [&](const std::string& s) { return Literal(raw ? s : ValidUtf8Prefix(s)); };
  auto f = [&] { return field(h.Next()); };
  const int kRounds = 400;
  for (int round = 0; round < kRounds; round++) {
    std::string what;  // the request, for a failure's message
    HttpJson::Response r;
    h = Hostile(kSeed + round);
    raw = h.Below(4) == 0;
    switch (h.Below(13)) {
      case 0:
        what = "POST /v1/pools";
        r = admin_->PostRaw("/v1/pools", "{\"name\":" + f() + ",\"description\":" + f() + "}");
        break;
      case 1:
        what = "POST /v1/windows";
        r = admin_->PostRaw("/v1/windows",
                            "{\"pool\":" + (h.Below(2) ? std::string("\"p\"") : f()) +
                                ",\"gpus\":1,\"end_ms\":" + std::to_string(WallNowMs() + 3600000) +
                                ",\"kind\":" + (h.Below(2) ? std::string("\"hard\"") : f()) + "}");
        break;
      case 2:
        what = "PUT /v1/teams/...";
        r = OwnConnection()->Put("/v1/teams/" + Pct(h.Next()), {{"guaranteed_gpus", 1}});
        break;
      case 3: {
        what = "POST /v1/jobs";
        r = admin_->PostRaw("/v1/jobs",
                            "{\"name\":" + f() + (h.Below(3) == 0 ? ",\"team\":" + f() : "") +
                                ",\"pool\":\"p\",\"min_gpus\":1,\"priority\":\"LOW\"" +
                                ",\"launch\":{\"command\":[" + f() + "],\"env\":{\"K\":" + f() +
                                "},\"workdir\":" + f() + "},\"eval\":{\"command\":[" + f() +
                                "],\"env\":{\"K\":" + f() + "},\"workdir\":" + f() + "}}");
        if (r.status == 201) fuzz_jobs.push_back(r.body.value("id", int64_t{0}));
        break;
      }
      case 4:
        what = "POST /v1/jobs/{id}/cancel";
        if (fuzz_jobs.empty()) continue;
        r = admin_->PostRaw(
            "/v1/jobs/" + std::to_string(fuzz_jobs[h.Below(fuzz_jobs.size())]) + "/cancel",
            "{\"reason\":" + f() + "}");
        break;
      case 5: {
        what = "POST /v1/jobs/{id}/workers, then rendezvous/join";
        r = worker_->PostRaw(job_path + "/workers", "{\"name\":" + f() + "}");
        if (r.status != 201) break;
        HttpJson other(daemon_->port(), r.body.value("worker_secret", ""));
        r = other.PostRaw(
            "/v1/workers/" + std::to_string(r.body.value("worker_id", 0)) + "/rendezvous/join",
            "{\"endpoint\":" + field(h.Next() + ":29500") + ",\"wait_seconds\":0}");
        break;
      }
      case 6: {
        // A value (made valid: a request body can hold nothing else), then
        // an add to it, refused with the value's start in the message.
        what = "PUT /v1/jobs/{id}/kv/v, then POST an add to it";
        r = admin_->Put(job_path + "/kv/v", {{"value", ValidUtf8Prefix(h.Next())}});
        if (r.status == 200) r = admin_->Post(job_path + "/kv/v", {{"add", 1}});
        break;
      }
      case 7:
        what = "POST /v1/nodes";
        r = agent_->PostRaw(
            "/v1/nodes", "{\"name\":" + f() + ",\"pool\":\"p\",\"gpus\":[0]," + "\"addr\":" + f() +
                             ",\"end_ms\":" + std::to_string(WallNowMs() + 3600000) + "}");
        break;
      case 8: {
        what = "POST /v1/nodes/n1/heartbeat";
        const std::string text = h.Next();
        std::string evals_exits;
        for (int64_t id : evals) {
          evals_exits += std::string(evals_exits.empty() ? "" : ",") +
                         "{\"id\":" + std::to_string(id) +
                         ",\"exit_code\":" + std::to_string(h.Below(2)) + ",\"message\":" + f() +
                         ",\"result\":{" + f() + ":" + f() + "}}";
        }
        r = agent_->PostRaw(
            "/v1/nodes/n1/heartbeat",
            "{\"running\":[" + std::to_string(segment) + "],\"eval_slots\":1,\"eval_exits\":[" +
                evals_exits + "],\"crashed\":[{\"segment_id\":" + std::to_string(segment) +
                ",\"exit_code\":1,\"message\":" + field(text) + "}],\"logs\":[{\"segment_id\":" +
                std::to_string(segment) + ",\"rank\":0,\"offset\":" + std::to_string(log_offset) +
                ",\"size\":" + std::to_string(text.size()) + ",\"text\":" + field(text) + "}]}");
        if (r.status == 200) {
          evals.clear();
          log_offset += static_cast<int64_t>(text.size());
          for (const json& e : r.body.value("evals", json::array())) evals.insert(e.value("id", 0));
        }
        break;
      }
      case 9:
        what = "POST /v1/workers/{id}/checkpoint";
        r = self.Post(worker_path + "/checkpoint", {{"step", ++step}, {"seconds", 1}});
        break;
      case 10: {
        const char* const kGets[] = {"/v1/jobs?state=", "/v1/nope/", "/v1/teams/",
                                     "/v1/segments?job_id=", "/v1/jobs/1/logs?after="};
        const std::string prefix = kGets[h.Below(5)];
        what = "GET " + prefix + "...";
        r = OwnConnection()->Get(prefix + Pct(h.Next()));
        break;
      }
      case 11:
        what = "DELETE /v1/nodes/.../token";
        r = OwnConnection()->Delete("/v1/nodes/" + Pct(h.Next()) + "/token");
        break;
      default:
        what = "POST /v1/jobs (raw bytes outside strings)";
        r = admin_->PostRaw("/v1/jobs", h.Next());
        break;
    }
    ASSERT_NE(r.status, 0) << "round " << round << " (seed " << kSeed + round << "), " << what
                           << ": no answer (stintd died?)\n"
                           << daemon_->output().substr(0, 2000);
    ASSERT_TRUE(r.text.empty() || !r.body.is_discarded())
        << "round " << round << " (seed " << kSeed + round << "), " << what << ": " << r.status
        << " answer is not JSON: " << r.text.substr(0, 300);
    ASSERT_NE(r.status, 500) << "round " << round << " (seed " << kSeed + round << "), " << what
                             << ": " << r.text.substr(0, 300);
    if (round % 50 == 49) {
      ASSERT_NO_FATAL_FAILURE(ExpectEveryListingReadable("round " + std::to_string(round)));
    }
  }
  ASSERT_NO_FATAL_FAILURE(ExpectEveryListingReadable("the end"));
  for (const std::vector<std::string>& command :
       std::vector<std::vector<std::string>>{{"jobs", "list"},
                                             {"jobs", "show", std::to_string(job)},
                                             {"nodes"},
                                             {"teams", "list"},
                                             {"windows", "list"},
                                             {"queue"},
                                             {"segments"},
                                             {"status"}}) {
    const RunResult r = Ctl(command);
    EXPECT_EQ(r.exit_code, 0) << "stintctl " << command[0] << ":\n" << r.output.substr(0, 500);
  }
}

}  // namespace
}  // namespace stint
