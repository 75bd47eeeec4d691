// SlurmView's parsers on the output of Slurm 22.05.8 (recorded here from the
// test cluster) and on 23.02+'s JSON shapes, and its bad-input errors.
#include "stintd/slurm/slurm_view.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <time.h>

#include <string>

#include "util/status_matchers.h"

namespace stint::stintd {
namespace {

TEST(SlurmViewTest, SinfoJsonOf2205GivesNodesGpusStatesAndPartitions) {
  const std::string text = R"({"meta": {}, "errors": [], "nodes": [
    {"name": "sx1", "address": "127.0.0.1", "state": "idle", "state_flags": [],
     "gres": "gpu:4", "gres_used": "gpu:0", "partitions": ["low", "high"], "reason": ""},
    {"name": "sx2", "address": "sx2", "state": "mixed", "state_flags": ["DRAIN"],
     "gres": "gpu:a100:2(S:0-1),shard:8", "partitions": ["low"], "reason": "fan"},
    {"name": "sx3", "state": "down", "state_flags": ["NOT_RESPONDING"], "gres": "",
     "partitions": ["high"], "reason": "gone"}]})";
  Result<std::vector<SlurmNode>> nodes = ParseSinfoJson(text);
  ASSERT_OK(nodes);
  ASSERT_EQ(nodes->size(), 3u);
  const SlurmNode& a = (*nodes)[0];
  EXPECT_EQ(a.name, "sx1");
  EXPECT_EQ(a.address, "127.0.0.1");
  EXPECT_EQ(a.state, "IDLE");
  EXPECT_EQ(a.gpus, 4);
  EXPECT_TRUE(a.InPartition("high"));
  EXPECT_FALSE(a.InPartition("hi"));
  EXPECT_TRUE(a.Schedulable());
  const SlurmNode& b = (*nodes)[1];
  EXPECT_EQ(b.gpus, 2);
  EXPECT_EQ(b.state, "MIXED");
  EXPECT_FALSE(b.Schedulable());  // draining
  EXPECT_EQ(b.reason, "fan");
  const SlurmNode& c = (*nodes)[2];
  EXPECT_EQ(c.gpus, 0);
  EXPECT_FALSE(c.Schedulable());
}

TEST(SlurmViewTest, SinfoJsonOf2302ListsTheStateAndItsFlagsInOneArray) {
  Result<std::vector<SlurmNode>> nodes = ParseSinfoJson(
      R"({"nodes": [{"name": "g1", "state": ["IDLE", "DRAIN"], "gres": "gpu:h100:8"},
                    {"name": "g2", "state": ["ALLOCATED"], "gres": "gpu:8"}]})");
  ASSERT_OK(nodes);
  EXPECT_EQ((*nodes)[0].state, "IDLE");
  EXPECT_EQ((*nodes)[0].flags, std::vector<std::string>{"DRAIN"});
  EXPECT_FALSE((*nodes)[0].Schedulable());
  EXPECT_EQ((*nodes)[0].gpus, 8);
  EXPECT_TRUE((*nodes)[1].Schedulable());
}

TEST(SlurmViewTest, SqueueJsonGivesExitCodesOfBothDialects) {
  // 22.05: exit_code is the raw wait status (75 << 8 = 19200; 15 a SIGTERM).
  const std::string text = R"({"jobs": [
    {"job_id": 1, "name": "stint.stintd.5", "job_state": "FAILED", "nodes": "sx[1-2]",
     "partition": "low", "state_reason": "NonZeroExitCode", "exit_code": 19200},
    {"job_id": 2, "name": "other", "job_state": "CANCELLED", "nodes": "sx3", "exit_code": 15},
    {"job_id": 3, "name": "p", "job_state": "PENDING", "nodes": "", "exit_code": 0},
    {"job_id": 4, "name": "new", "job_state": ["COMPLETED"], "nodes": "sx1",
     "exit_code": {"status": ["EXITED"], "return_code": {"number": 76}}},
    {"job_id": 5, "name": "sig", "job_state": ["FAILED"], "nodes": "sx1",
     "exit_code": {"status": ["SIGNALED"], "return_code": 0, "signal": {"id": {"number": 9}}}}]})";
  Result<std::vector<SlurmJob>> jobs = ParseSqueueJson(text);
  ASSERT_OK(jobs);
  ASSERT_EQ(jobs->size(), 5u);
  EXPECT_EQ((*jobs)[0].exit_code, 75);
  EXPECT_EQ((*jobs)[0].nodes, (std::vector<std::string>{"sx1", "sx2"}));
  EXPECT_EQ((*jobs)[0].partition, "low");
  EXPECT_FALSE((*jobs)[0].Live());
  EXPECT_EQ((*jobs)[1].exit_code, 128 + 15);
  EXPECT_TRUE((*jobs)[2].nodes.empty());
  EXPECT_TRUE((*jobs)[2].Live());
  EXPECT_EQ((*jobs)[3].state, "COMPLETED");
  EXPECT_EQ((*jobs)[3].exit_code, 76);
  EXPECT_EQ((*jobs)[4].exit_code, 128 + 9);
}

TEST(SlurmViewTest, AJobWhoseBatchScriptSlurmCouldNotLaunchIsToldApart) {
  // What 22.05 printed here for a batch launch the node refused (its step
  // socket path was too long): CANCELLED, nodes given, ended as it started.
  // Cancelled while pending (no nodes), cancelled after running, and a
  // script that failed by itself are not launch failures.
  const std::string text = R"({"jobs": [
    {"job_id": 1, "job_state": "CANCELLED", "nodes": "sx1", "state_reason": "None",
     "exit_code": 0, "start_time": 1796470732, "end_time": 1796470732},
    {"job_id": 2, "job_state": "FAILED", "nodes": "sx1", "state_reason": "JobLaunchFailure",
     "exit_code": 4021, "start_time": 1796470752, "end_time": 1796470752},
    {"job_id": 3, "job_state": ["CANCELLED"], "nodes": "", "state_reason": "None",
     "start_time": {"set": true, "number": 1796470800}, "end_time": {"set": true, "number": 1796470800}},
    {"job_id": 4, "job_state": "CANCELLED", "nodes": "sx2", "state_reason": "None",
     "exit_code": 0, "start_time": 1796470700, "end_time": 1796470760},
    {"job_id": 5, "job_state": "FAILED", "nodes": "sx2", "state_reason": "NonZeroExitCode",
     "exit_code": 256, "start_time": 1796470700, "end_time": 1796470700},
    {"job_id": 6, "job_state": ["CANCELLED"], "nodes": "sx3", "state_reason": "None",
     "start_time": {"set": true, "number": 1796470900}, "end_time": {"set": true, "number": 1796470901}}]})";
  Result<std::vector<SlurmJob>> jobs = ParseSqueueJson(text);
  ASSERT_OK(jobs);
  ASSERT_EQ(jobs->size(), 6u);
  EXPECT_EQ((*jobs)[0].start_time, 1796470732);
  EXPECT_EQ((*jobs)[5].end_time, 1796470901);
  std::vector<bool> failed;
  for (const SlurmJob& j : *jobs) failed.push_back(j.LaunchFailed());
  EXPECT_EQ(failed, (std::vector<bool>{true, true, false, false, false, true}));
}

TEST(SlurmViewTest, ReservationsAreReadInTheControllersLocalTime) {
  setenv("TZ", "CET-1", 1);  // UTC+1, a POSIX rule: no tzdata needed
  tzset();
  Result<std::vector<SlurmReservation>> res = ParseReservations(
      "ReservationName=maint StartTime=2026-12-05T10:00:00 EndTime=2026-12-05T12:00:00 "
      "Duration=02:00:00 Nodes=sx[2-3] NodeCnt=2 CoreCnt=16 Features=(null) "
      "PartitionName=(null) Flags=MAINT,IGNORE_JOBS,SPEC_NODES TRES=cpu=16 Users=root\n"
      "ReservationName=open StartTime=2026-12-06T00:00:00 EndTime=UNLIMITED Nodes=(null)\n");
  unsetenv("TZ");
  tzset();
  ASSERT_OK(res);
  ASSERT_EQ(res->size(), 2u);
  const SlurmReservation& m = (*res)[0];
  EXPECT_EQ(m.name, "maint");
  EXPECT_EQ(m.start_ms, int64_t{1796461200} * 1000);  // 09:00 UTC
  EXPECT_EQ(m.end_ms - m.start_ms, int64_t{2} * 3600 * 1000);
  EXPECT_EQ(m.nodes, (std::vector<std::string>{"sx2", "sx3"}));
  EXPECT_EQ(m.flags, (std::vector<std::string>{"MAINT", "IGNORE_JOBS", "SPEC_NODES"}));
  EXPECT_TRUE((*res)[1].nodes.empty());
  EXPECT_EQ((*res)[1].end_ms, std::numeric_limits<int64_t>::max());

  Result<std::vector<SlurmReservation>> none = ParseReservations("No reservations in the system\n");
  ASSERT_OK(none);
  EXPECT_TRUE(none->empty());
}

TEST(SlurmViewTest, BadInputIsRefusedNamingWhatAndWhere) {
  Result<std::vector<SlurmNode>> nodes = ParseSinfoJson("sinfo: error: Unable to contact");
  ASSERT_FALSE(nodes.ok());
  EXPECT_NE(nodes.status().message().find("sinfo --json"), std::string::npos);
  EXPECT_FALSE(ParseSinfoJson(R"({"errors": []})").ok());
  Result<std::vector<SlurmJob>> jobs =
      ParseSqueueJson(R"({"jobs": [{"job_id": 7, "nodes": "sx[3-1]"}]})");
  ASSERT_FALSE(jobs.ok());
  EXPECT_NE(jobs.status().message().find("job 7 nodes"), std::string::npos)
      << jobs.status().ToString();
  EXPECT_FALSE(ParseSqueueJson(R"({"jobs": [{"name": "no id"}]})").ok());
  Result<std::vector<SlurmReservation>> res =
      ParseReservations("ReservationName=r StartTime=tomorrow EndTime=UNLIMITED Nodes=a");
  ASSERT_FALSE(res.ok());
  EXPECT_NE(res.status().message().find("reservation r StartTime"), std::string::npos)
      << res.status().ToString();
}

TEST(SlurmViewTest, TimeLimitsAreMinutesAndSeconds) {
  EXPECT_EQ(SlurmTimeLimit(60), "1:00");
  EXPECT_EQ(SlurmTimeLimit(605), "10:05");
  EXPECT_EQ(SlurmTimeLimit(7259), "120:59");
}

}  // namespace
}  // namespace stint::stintd
