// stintctl's pure parts: times, durations, GPU ranges, names, tables and the
// views of stintd's answers.
#include <gtest/gtest.h>

#include "stintctl/format.h"
#include "stintctl/parse.h"
#include "stintctl/render.h"
#include "util/status_matchers.h"

namespace stint {
namespace ctl {
namespace {

// 2026-12-02T18:00:00Z
constexpr int64_t kNow = 1796234400000;

TEST(StintctlParse, DurationsTakeUnitsLargestFirst) {
  EXPECT_EQ(*ParseDuration("90s"), 90);
  EXPECT_EQ(*ParseDuration("15m"), 900);
  EXPECT_EQ(*ParseDuration("2h"), 7200);
  EXPECT_EQ(*ParseDuration("1h30m"), 5400);
  EXPECT_EQ(*ParseDuration("1d2h3m4s"), 93784);
  EXPECT_EQ(*ParseDuration("0"), 0);
  EXPECT_EQ(*ParseDuration("0s"), 0);
  EXPECT_EQ(*ParseDuration("2H"), 7200);
  for (const char* bad :
       {"", "90", "h", "1x", "30m1h", "1h1h", "-5m", "1.5h", "1h ", "99999999999999d"}) {
    auto d = ParseDuration(bad);
    EXPECT_EQ(d.status().code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseDuration("90").status().message().find("missing unit"), std::string::npos);
}

TEST(StintctlParse, TimesAreNowRelativeUnixOrUtcIso) {
  EXPECT_EQ(*ParseTime("now", kNow), kNow);
  EXPECT_EQ(*ParseTime("now+90m", kNow), kNow + 90 * 60000);
  EXPECT_EQ(*ParseTime("now-5m", kNow), kNow - 5 * 60000);
  EXPECT_EQ(*ParseTime("+2h", kNow), kNow + 2 * 3600000);
  EXPECT_EQ(*ParseTime("1796234400", kNow), kNow);
  EXPECT_EQ(*ParseTime("2026-12-02T18:00:00Z", 0), kNow);
  EXPECT_EQ(*ParseTime("2026-12-02T18:00Z", 0), kNow);
  EXPECT_EQ(*ParseTime("2026-12-02 18:00:30Z", 0), kNow + 30000);
  EXPECT_EQ(*ParseTime("1970-01-01T00:00:00Z", 5), 0);
  EXPECT_EQ(*ParseTime("2024-02-29T00:00:00Z", 0), 1709164800000);
  for (const char* bad :
       {"", "tomorrow", "now+", "+", "now+5", "2026-12-02", "2026-12-02T18:00:00",
        "2026-12-02T18:00:00+01:00", "2026-13-01T00:00Z", "2025-02-29T00:00Z", "2026-12-02T24:00Z",
        "2026-12-02T18:60Z", "2026-12-02T18:00:00Zjunk", "5m"}) {
    auto t = ParseTime(bad, kNow);
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseTime("2026-12-02T18:00:00", kNow).status().message().find("UTC"),
            std::string::npos);
}

TEST(StintctlParse, CivilDaysRoundTrip) {
  for (int64_t days : {int64_t(-719468), int64_t(-1), int64_t(0), int64_t(59), int64_t(11016),
                       int64_t(20789), int64_t(2932896)}) {
    int64_t y;
    unsigned m, d;
    CivilFromDays(days, &y, &m, &d);
    EXPECT_EQ(DaysFromCivil(y, m, d), days) << y << "-" << m << "-" << d;
  }
  EXPECT_EQ(DaysFromCivil(1970, 1, 1), 0);
  EXPECT_EQ(DaysFromCivil(2000, 3, 1), 11017);
}

TEST(StintctlParse, GpuRangesPrioritiesAndStates) {
  auto one = ParseGpuRange("4");
  ASSERT_OK(one);
  EXPECT_EQ(one->min, 4);
  EXPECT_EQ(one->max, 4);
  auto range = ParseGpuRange("2:8");
  ASSERT_OK(range);
  EXPECT_EQ(range->min, 2);
  EXPECT_EQ(range->max, 8);
  for (const char* bad : {"", "0", "8:2", "a", "2:", ":2", "1:2:3", "-1", "1234567"}) {
    EXPECT_FALSE(ParseGpuRange(bad).ok()) << bad;
  }
  EXPECT_EQ(*ParsePriority("high"), "HIGH");
  EXPECT_EQ(*ParsePriority("Critical"), "CRITICAL");
  EXPECT_FALSE(ParsePriority("urgent").ok());
  EXPECT_EQ(*ParseJobState("pending"), "PENDING");
  EXPECT_FALSE(ParseJobState("queued").ok());
}

TEST(StintctlFormat, UtcDurationsAndRelativeTimes) {
  EXPECT_EQ(FormatUtc(kNow), "2026-12-02T18:00:00Z");
  EXPECT_EQ(FormatUtc(0), "1970-01-01T00:00:00Z");
  EXPECT_EQ(FormatUtc(951782400000), "2000-02-29T00:00:00Z");
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(45), "45s");
  EXPECT_EQ(FormatDuration(90), "1m30s");
  EXPECT_EQ(FormatDuration(720), "12m");
  EXPECT_EQ(FormatDuration(5400), "1h30m");
  EXPECT_EQ(FormatDuration(3600 + 5), "1h");  // two units at most
  EXPECT_EQ(FormatDuration(93784), "1d02h");
  EXPECT_EQ(FormatDuration(-90), "-1m30s");
  EXPECT_EQ(FormatRelative(kNow + 12 * 60000, kNow), "in 12m");
  EXPECT_EQ(FormatRelative(kNow - 3 * 60000, kNow), "3m ago");
  EXPECT_EQ(FormatRelative(kNow + 400, kNow), "now");
  EXPECT_EQ(FormatWhen(kNow + 7200000, kNow), "in 2h (2026-12-02T20:00:00Z)");
}

TEST(StintctlFormat, TablesAlignColumnsWithoutTrailingBlanks) {
  Table t({"ID", "NAME", "NOTE"});
  t.AddRow({"1", "train-7b", ""});
  t.AddRow({"12", "é", "last column is not padded"});
  t.AddRow({"3"});
  EXPECT_EQ(t.Render(),
            "ID  NAME      NOTE\n"
            "1   train-7b\n"
            "12  é         last column is not padded\n"
            "3\n");
}

TEST(StintctlRender, QueueShowsPositionReasonPlannedStartAndRunningEnds) {
  Json queue = Json::parse(R"({
    "now_ms": 1796234400000,
    "pending": [
      {"position": 1, "job_id": 7, "name": "train-7b", "team": "research", "priority": "HIGH",
       "min_gpus": 8, "max_gpus": 8, "reason": "window", "detail": "needs 8 GPUs in one window",
       "planned_start_ms": 1796235120000, "planned_gpus": 8, "wait_seconds": 90},
      {"position": 2, "job_id": 9, "name": "eval", "team": "infra", "priority": "LOW",
       "min_gpus": 1, "max_gpus": 4, "reason": "quota", "detail": "team infra at its borrow limit",
       "planned_start_ms": null, "planned_gpus": 0, "wait_seconds": 3600}
    ],
    "running": [
      {"job_id": 3, "name": "pretrain", "team": "research", "priority": "CRITICAL",
       "segment": {"id": 11, "job_id": 3, "allocs": [{"window_id": 2, "gpus": 4}, {"window_id": 5, "gpus": 4}],
                   "gpus": 8, "state": "notified", "start_ms": 1796230800000, "planned_end_ms": 1796238000000,
                   "notice_reason": "window_close", "deadline_ms": 1796234700000}},
      {"job_id": 4, "name": "spot-job", "team": "infra", "priority": "MEDIUM",
       "segment": {"id": 12, "job_id": 4, "allocs": [{"window_id": 6, "gpus": 2}], "gpus": 2,
                   "state": "running", "start_ms": 1796234340000, "planned_end_ms": null,
                   "notice_reason": "none", "deadline_ms": 0}}
    ],
    "stats": {"free_gpus": 3, "pending_jobs": 2}
  })");
  const std::string out = RenderQueue(queue);
  EXPECT_NE(out.find("PENDING: 2 jobs"), std::string::npos) << out;
  EXPECT_NE(out.find("POS  JOB  NAME      TEAM      PRIO  GPUS  WAIT   REASON  PLANNED_START"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("in 12m (2026-12-02T18:12:00Z) on 8"), std::string::npos) << out;
  EXPECT_NE(out.find("needs 8 GPUs in one window"), std::string::npos);
  EXPECT_NE(out.find("1-4"), std::string::npos);
  EXPECT_NE(out.find("1m30s"), std::string::npos);
  EXPECT_NE(out.find("unknown"), std::string::npos);
  EXPECT_NE(out.find("RUNNING: 2 jobs"), std::string::npos);
  EXPECT_NE(out.find("w2:4,w5:4"), std::string::npos);
  EXPECT_NE(out.find("deadline in 5m (2026-12-02T18:05:00Z) (window_close)"), std::string::npos)
      << out;
  EXPECT_NE(out.find("open-ended"), std::string::npos);
  EXPECT_NE(out.find("1h ago"), std::string::npos);  // started
  EXPECT_NE(out.find("free_gpus=3  pending_jobs=2"), std::string::npos);
}

TEST(StintctlRender, EmptyListsAndOddFieldsDoNotThrow) {
  EXPECT_EQ(RenderQueue(Json::parse(R"({"now_ms": 0, "pending": [], "running": []})")),
            "no pending jobs\n\nno running jobs\n");
  EXPECT_EQ(RenderJobs(Json::object(), kNow), "no jobs\n");
  EXPECT_EQ(RenderPools(Json::array()), "no pools\n");
  // Wrong types and missing fields show as "-" or as their JSON.
  Json odd = Json::parse(
      R"({"jobs": [{"id": "x", "min_gpus": "many", "submit_ms": "soon", "state": null}]})");
  std::string out = RenderJobs(odd, kNow);
  EXPECT_NE(out.find("x"), std::string::npos) << out;
  EXPECT_EQ(Cell(Json{{"a", 2.0}}, "a"), "2");
  EXPECT_EQ(Cell(Json{{"a", 2.5}}, "a"), "2.5");
  EXPECT_EQ(Cell(Json{{"a", true}}, "a"), "yes");
  EXPECT_EQ(Cell(Json{{"a", nullptr}}, "a"), "-");
  EXPECT_EQ(Cell(Json::object(), "a"), "-");
  EXPECT_EQ(Cell(Json::array(), "a"), "-");
}

TEST(StintctlRender, WindowsTeamsSegmentsAndOneJob) {
  Json windows = Json::parse(R"({"windows": [
    {"id": 1, "pool": "a100", "gpus": 8, "start_ms": 1796230800000, "end_ms": 1796241600000, "kind": "hard",
     "notice_lead_seconds": 0, "closed_early": false, "open": true, "allocated_gpus": 4},
    {"id": 2, "pool": "spot", "gpus": 2, "start_ms": 1796234400000, "end_ms": null, "kind": "spot",
     "notice_lead_seconds": 120, "closed_early": true, "open": false, "allocated_gpus": 0}]})");
  std::string w = RenderWindows(windows, kNow);
  EXPECT_NE(w.find("in 2h (2026-12-02T20:00:00Z)"), std::string::npos) << w;
  EXPECT_NE(w.find("closed (closed early)"), std::string::npos) << w;
  EXPECT_NE(w.find("none (until revoked)"), std::string::npos);
  EXPECT_NE(w.find("2m"), std::string::npos);

  Json teams =
      Json::parse(R"({"teams": [{"name": "research", "guaranteed_gpus": 8, "borrow_limit_gpus": -1,
                                          "usage_gpu_seconds": 7200, "allocated_gpus": 4}]})");
  std::string t = RenderTeams(teams, 0);
  EXPECT_NE(t.find("unlimited"), std::string::npos) << t;
  EXPECT_NE(t.find("2.0"), std::string::npos);

  Json job =
      Json::parse(R"({"id": 7, "name": "train", "state": "PENDING", "min_gpus": 2, "max_gpus": 8,
    "submit_ms": 1796230800000, "checkpoint_seconds": 30, "segments": [
      {"id": 3, "job_id": 7, "allocs": [{"window_id": 1, "gpus": 2}], "gpus": 2, "fencing_token": 5,
       "start_ms": 1796227200000, "planned_end_ms": null, "state": "ended", "notice_reason": "preempted",
       "notice_ms": 1796229000000, "deadline_ms": 1796229060000, "ended_ms": 1796229050000}],
    "pending": {"position": 1, "reason": "priority", "detail": "behind job 3", "planned_start_ms": null}})");
  std::string j = RenderJob(job, kNow);
  EXPECT_NE(j.find("gpus"), std::string::npos) << j;
  EXPECT_NE(j.find("2-8"), std::string::npos);
  EXPECT_NE(j.find("30s"), std::string::npos);
  EXPECT_NE(
      j.find("pending: position 1, blocked by priority (behind job 3); planned start unknown"),
      std::string::npos)
      << j;
  EXPECT_NE(j.find("segments:"), std::string::npos);
  EXPECT_NE(j.find("preempted"), std::string::npos);

  job["service_gpu_seconds"] = 7200;
  job["pending"]["service_class"] = 1;
  j = RenderJob(job, kNow);
  EXPECT_NE(j.find("pending: position 1, service class 1, blocked by priority"), std::string::npos)
      << j;
  EXPECT_NE(j.find("GPU time held"), std::string::npos) << j;
}

}  // namespace
}  // namespace ctl
}  // namespace stint
