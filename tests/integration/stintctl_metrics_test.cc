// The real stintctl binary against a real stintd: the counts `stintctl
// status` and `stintctl queue` print (jobs by state, GPUs, open windows, the
// queue by priority and by blocking reason) are the numbers GET /metrics
// exports for the same state.
#include <cstdint>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "util/stintd_process.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

#ifndef STINTCTL_PATH
#error "STINTCTL_PATH must name the stintctl binary (see dashboard_tests.cmake)"
#endif

namespace stint {
namespace {

using nlohmann::json;

// "12 open" in "gpus  12 open, 6 allocated": the number before `word` on the
// line that starts with `key`; -1 (and a failure) when it is not there.
int64_t Count(const std::string& output, const std::string& key, const std::string& word) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + " ", 0) != 0) continue;
    std::smatch m;
    if (std::regex_search(line, m, std::regex("(\\d+) " + word + "(,|;|$| )")))
      return std::stoll(m[1]);
    ADD_FAILURE() << "no \"N " << word << "\" on the " << key << " line: " << line;
    return -1;
  }
  ADD_FAILURE() << "no " << key << " line in:\n" << output;
  return -1;
}

class StintctlMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<StintdProcess>(STINTD_PATH, dir_.path(), SteadyStintdArgs());
    ASSERT_TRUE(daemon_->Start()) << daemon_->output();
    admin_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAdminToken);
    worker_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kWorkerToken);
  }

  // stintctl's output; a non-zero exit is a failure.
  std::string Ctl(const std::vector<std::string>& command) {
    std::vector<std::string> args = {"--url", daemon_->url(), "--token",
                                     StintdProcess::kAdminToken};
    args.insert(args.end(), command.begin(), command.end());
    RunResult r = RunProgram(STINTCTL_PATH, args, /*merge_stderr=*/false);
    EXPECT_EQ(r.exit_code, 0) << "stintctl " << command[0] << ":\n" << r.output;
    return r.output;
  }
  std::map<std::string, double> Metrics() {
    auto r = worker_->Get("/metrics");
    EXPECT_EQ(r.status, 200) << r.text;
    return ParseMetrics(r.text);
  }
  json Post(const std::string& path, const json& body, int want) {
    auto r = admin_->Post(path, body);
    EXPECT_EQ(r.status, want) << "POST " << path << " " << body.dump() << ": " << r.text;
    return r.body;
  }
  int64_t Submit(const std::string& name, const std::string& pool, int gpus,
                 const std::string& priority) {
    return Post("/v1/jobs",
                {{"name", name},
                 {"pool", pool},
                 {"min_gpus", gpus},
                 {"priority", priority},
                 {"checkpoint_seconds", 1},
                 {"restart_seconds", 0},
                 {"checkpoint_interval_seconds", 60},
                 {"preemptible", false}},
                201)
        .value("id", int64_t{0});
  }
  std::string JobState(int64_t id) {
    auto r = admin_->Get("/v1/jobs/" + std::to_string(id));
    EXPECT_EQ(r.status, 200) << r.text;
    return r.body.value("state", "");
  }

  TempDir dir_;
  std::unique_ptr<StintdProcess> daemon_;
  std::unique_ptr<HttpJson> admin_, worker_;
};

TEST_F(StintctlMetricsTest, StatusAndQueueCountsEqualTheMetrics) {
  // Two pools; windows open, upcoming and closed early; jobs running, done,
  // cancelled and waiting (two priorities, one of them for a window that
  // has not opened yet).
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "alpha"}}).status, 201);
  ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "beta"}}).status, 201);
  const int64_t now = WallNowMs();
  Post("/v1/windows", {{"pool", "alpha"}, {"gpus", 8}, {"end_ms", now + 3600000}}, 201);
  Post("/v1/windows", {{"pool", "beta"}, {"gpus", 4}, {"kind", "spot"}}, 201);
  Post("/v1/windows",
       {{"pool", "beta"}, {"gpus", 16}, {"start_ms", now + 1800000}, {"end_ms", now + 7200000}},
       201);
  const int64_t closed =
      Post("/v1/windows", {{"pool", "alpha"}, {"gpus", 2}, {"end_ms", now + 3600000}}, 201)
          .value("id", int64_t{0});
  Post("/v1/windows/" + std::to_string(closed) + "/close", {{"lead_seconds", 0}}, 200);

  const int64_t done = Submit("done", "alpha", 2, "MEDIUM");
  ASSERT_TRUE(Eventually([&] { return JobState(done) == "RUNNING"; }));
  auto reg = worker_->Post("/v1/jobs/" + std::to_string(done) + "/workers", {{"name", "w0"}});
  ASSERT_EQ(reg.status, 201) << reg.text;
  const int64_t wid = reg.body["worker_id"];
  HttpJson as_worker(daemon_->port(), reg.body.value("worker_secret", ""));
  auto fin = as_worker.Post("/v1/workers/" + std::to_string(wid) + "/finished", json::object());
  ASSERT_EQ(fin.status, 200) << fin.text;
  const int64_t cancelled = Submit("cancelled", "alpha", 64, "LOW");
  ASSERT_EQ(Post("/v1/jobs/" + std::to_string(cancelled) + "/cancel", json::object(), 200)
                .value("state", ""),
            "CANCELLED");

  ASSERT_TRUE(Eventually([&] { return JobState(done) == "DONE"; }));

  // a and b run before high is submitted: a scheduler pass that saw all
  // four at once would give alpha's 8 free GPUs to high, not to a.
  const int64_t a = Submit("a", "alpha", 6, "MEDIUM");
  const int64_t b = Submit("b", "beta", 3, "MEDIUM");
  ASSERT_TRUE(Eventually([&] { return JobState(a) == "RUNNING" && JobState(b) == "RUNNING"; }));
  const int64_t high =
      Submit("high", "alpha", 8, "HIGH");  // 6 of alpha's 8 GPUs are held, not preemptible
  const int64_t later = Submit("later", "beta", 12, "LOW");  // only the upcoming window is that big
  json queue;
  ASSERT_TRUE(Eventually([&] {
    auto r = admin_->Get("/v1/queue");
    queue = r.body;
    if (r.status != 200 || queue["pending"].size() != 2) return false;
    for (const json& p : queue["pending"]) {
      if (p.value("reason", "none") == "none") return false;
    }
    return true;
  })) << queue.dump();
  EXPECT_EQ(JobState(high), "PENDING");
  EXPECT_EQ(JobState(later), "PENDING");

  const std::map<std::string, double> before = Metrics();
  const std::string status = Ctl({"status"});
  const std::string queue_text = Ctl({"queue"});
  const std::map<std::string, double> after = Metrics();
  std::cout << "stintctl status:\n" << status;

  // Each number is compared with a sample that held still across the two
  // commands; one that moved would mean the state under test was not steady.
  auto metric = [&](const std::string& key) -> double {
    auto b = before.find(key), a = after.find(key);
    if (b == before.end() || a == after.end()) {
      ADD_FAILURE() << key << " is not in /metrics";
      return -1;
    }
    EXPECT_EQ(b->second, a->second) << key << " moved while stintctl ran";
    return a->second;
  };

  int compared = 0;
  auto expect = [&](int64_t printed, const std::string& key, const std::string& where) {
    EXPECT_EQ(static_cast<double>(printed), metric(key)) << where << " vs " << key;
    compared++;
  };
  for (const char* state : {"PENDING", "RUNNING", "DONE", "CANCELLED", "FAILED"}) {
    std::string word = state;
    for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    expect(Count(status, "jobs", word), std::string("stintd_jobs{state=\"") + state + "\"}",
           "status jobs " + word);
  }
  for (const char* state : {"open", "allocated", "free", "fragmented"}) {
    expect(Count(status, "gpus", state), std::string("stintd_gpus{state=\"") + state + "\"}",
           std::string("status gpus ") + state);
  }
  expect(Count(status, "windows", "open"), "stintd_windows_open", "status windows open");
  for (const char* prio : {"LOW", "MEDIUM", "HIGH", "CRITICAL"}) {
    expect(Count(status, "pending", prio),
           std::string("stintd_queue_length{priority=\"") + prio + "\"}",
           std::string("status pending ") + prio);
  }
  // Blocking reasons: those printed are the non-zero samples, the rest are 0.
  const size_t blocked_at = status.find("; blocked: ");
  ASSERT_NE(blocked_at, std::string::npos) << status;
  const std::string blocked =
      status.substr(blocked_at + 11, status.find('\n', blocked_at) - blocked_at - 11);
  for (const char* reason : {"quota", "window", "gang", "priority", "preempting", "depth"}) {
    const std::string key = std::string("stintd_queue_blocked{reason=\"") + reason + "\"}";
    std::smatch m;
    int64_t printed = 0;
    if (std::regex_search(blocked, m, std::regex(std::string("(\\d+) ") + reason + "(,|$)"))) {
      printed = std::stoll(m[1]);
    }
    expect(printed, key, std::string("status blocked ") + reason);
  }
  // `stintctl queue`: its stats line and its section headers.
  std::map<std::string, int64_t> stats;
  std::smatch m;
  const std::regex kv("([a-z_]+)=(\\d+)");
  for (auto it = std::sregex_iterator(queue_text.begin(), queue_text.end(), kv);
       it != std::sregex_iterator(); ++it) {
    stats[(*it)[1]] = std::stoll((*it)[2]);
  }
  ASSERT_EQ(stats.size(), 6u) << queue_text;
  expect(stats["open_window_gpus"], "stintd_gpus{state=\"open\"}", "queue open_window_gpus");
  expect(stats["allocated_gpus"], "stintd_gpus{state=\"allocated\"}", "queue allocated_gpus");
  expect(stats["free_gpus"], "stintd_gpus{state=\"free\"}", "queue free_gpus");
  expect(stats["fragmented_gpus"], "stintd_gpus{state=\"fragmented\"}", "queue fragmented_gpus");
  expect(stats["pending_jobs"], "stintd_jobs{state=\"PENDING\"}", "queue pending_jobs");
  expect(stats["running_jobs"], "stintd_jobs{state=\"RUNNING\"}", "queue running_jobs");
  ASSERT_TRUE(std::regex_search(queue_text, m, std::regex("PENDING: (\\d+) jobs?"))) << queue_text;
  expect(std::stoll(m[1]), "stintd_jobs{state=\"PENDING\"}", "queue PENDING header");
  ASSERT_TRUE(std::regex_search(queue_text, m, std::regex("RUNNING: (\\d+) jobs?"))) << queue_text;
  expect(std::stoll(m[1]), "stintd_jobs{state=\"RUNNING\"}", "queue RUNNING header");

  // And the numbers are the ones this state fixes, so equality is not 0 == 0.
  EXPECT_EQ(after.at("stintd_jobs{state=\"RUNNING\"}"), 2);
  EXPECT_EQ(after.at("stintd_jobs{state=\"PENDING\"}"), 2);
  EXPECT_EQ(after.at("stintd_jobs{state=\"DONE\"}"), 1);
  EXPECT_EQ(after.at("stintd_jobs{state=\"CANCELLED\"}"), 1);
  EXPECT_EQ(after.at("stintd_gpus{state=\"open\"}"), 12);
  EXPECT_EQ(after.at("stintd_gpus{state=\"allocated\"}"), 9);
  EXPECT_EQ(after.at("stintd_windows_open"), 2);
  EXPECT_EQ(after.at("stintd_queue_length{priority=\"HIGH\"}"), 1);
  EXPECT_EQ(after.at("stintd_queue_length{priority=\"LOW\"}"), 1);
  EXPECT_EQ(Count(status, "windows", "upcoming"), 1);
  EXPECT_EQ(Count(status, "windows", "closed"), 1);
  std::cout << "stintctl vs /metrics: " << compared << " numbers compared\n";
}

// Prices, price rules and budgets set through stintctl, and what it shows
// of them and of a job's cost and efficiency: the server's numbers.
TEST_F(StintctlMetricsTest, PricesRulesBudgetsAndFiguresThroughStintctl) {
  Ctl({"pools", "add", "a", "--pricing", "spot", "--price", "1.5"});
  Ctl({"pools", "add", "b", "--price", "3"});
  EXPECT_NE(Ctl({"pools", "set-price", "a", "2"}).find("2 per GPU-hour from now on"),
            std::string::npos);
  const std::string pools = Ctl({"pools", "list"});
  EXPECT_TRUE(std::regex_search(pools, std::regex("\\na +spot +2\\.00 +2 "))) << pools;
  EXPECT_TRUE(std::regex_search(pools, std::regex("\\nb +on_demand +3\\.00 +1 "))) << pools;

  const std::string rules = Ctl({"price-rules", "set", "low", "--max-price", "2.5",
                                 "--spot-fallback", "2", "--spot-fallback-window", "6h"});
  EXPECT_TRUE(std::regex_search(rules, std::regex("\\nLOW +2\\.50 +2 revocations +6h"))) << rules;
  EXPECT_TRUE(std::regex_search(rules, std::regex("\\nMEDIUM +any +never"))) << rules;
  json got = admin_->Get("/v1/price-rules").body["rules"][0];
  EXPECT_EQ(got["max_price_per_gpu_hour"], 2.5);
  EXPECT_EQ(got["spot_fallback_window_seconds"], 6 * 3600);

  const std::string team = Ctl(
      {"teams", "set", "vision", "--guaranteed", "0", "--budget", "100", "--budget-period", "7d"});
  EXPECT_NE(team.find("100.00"), std::string::npos) << team;
  EXPECT_EQ(Metrics().at("stintd_team_budget{team=\"vision\"}"), 100);

  Post("/v1/windows",
       {{"pool", "a"}, {"gpus", 2}, {"end_ms", WallNowMs() + 3'600'000}, {"kind", "hard"}}, 201);
  const std::string submitted =
      Ctl({"jobs", "submit", "--name", "j", "--gpus", "2", "--team", "vision", "--pool", "a,b"});
  const int64_t job = std::stoll(submitted.substr(submitted.find("job ") + 4));
  EXPECT_EQ(admin_->Get("/v1/jobs/" + std::to_string(job)).body["pools"], json({"a", "b"}));
  ASSERT_TRUE(Eventually([&] { return JobState(job) == "RUNNING"; }));
  auto reg = worker_->Post("/v1/jobs/" + std::to_string(job) + "/workers", {{"name", "w"}});
  ASSERT_EQ(reg.status, 201) << reg.text;
  HttpJson as_worker(daemon_->port(), reg.body["worker_secret"].get<std::string>());
  const std::string wid = std::to_string(reg.body["worker_id"].get<int64_t>());
  for (int step = 1; step <= 3; step++) {
    ASSERT_EQ(
        as_worker.Post("/v1/workers/" + wid + "/heartbeat", {{"step", step}, {"loss", 1.0}}).status,
        200);
    ASSERT_TRUE(Eventually([&] {
      return admin_->Get("/v1/jobs/" + std::to_string(job) + "/losses").body["points"].size() ==
             static_cast<size_t>(step);
    }));
  }
  ASSERT_EQ(
      as_worker.Post("/v1/workers/" + wid + "/checkpoint", {{"step", 3}, {"seconds", 0.1}}).status,
      200);
  ASSERT_TRUE(
      Eventually([&] { return admin_->Get("/v1/jobs/" + std::to_string(job)).body["cost"] > 0; }));
  const std::string shown = Ctl({"jobs", "show", std::to_string(job)});
  for (const char* want : {"pool ", "a,b", "cost ", "efficiency ", "overheads ", "cost per step ",
                           "GPU time by segment:", "KEPT_STEPS"}) {
    EXPECT_NE(shown.find(want), std::string::npos) << want << " in:\n" << shown;
  }
  const std::string teams = Ctl({"teams", "list"});
  EXPECT_TRUE(
      std::regex_search(teams, std::regex("\\nvision .* 100\\.00 +[0-9.]+ +[0-9.]+ +4\\.00 ")))
      << teams;  // budget, spent, left, 2 GPUs x 2 per hour
}

}  // namespace
}  // namespace stint
