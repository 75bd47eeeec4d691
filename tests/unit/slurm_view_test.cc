// SlurmView's parsers on the output of Slurm 22.05.8 (recorded from the test
// cluster: tests/data/slurm/README.md), on 23.02+'s squeue JSON shapes,
// scontrol's state forms and sacct's lines with accounting storage, and
// their bad-input errors.
#include "stintd/slurm/slurm_view.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <time.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "util/status_matchers.h"

namespace stint::stintd {
namespace {

std::string Recorded(const std::string& name) {
  std::ifstream in(std::string(STINT_SLURM_DATA) + "/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(SlurmViewTest, NodesOf2205AsScontrolPrintsThem) {
  // Recorded (tests/data/slurm/README.md): h2n1 drained with a reason of
  // several words, h2n2 running other jobs.
  Result<std::vector<SlurmNode>> nodes = ParseNodes(Recorded("22.05/scontrol_show_node.txt"));
  ASSERT_OK(nodes);
  ASSERT_EQ(nodes->size(), 2u);
  const SlurmNode& a = (*nodes)[0];
  EXPECT_EQ(a.name, "h2n1");
  EXPECT_EQ(a.address, "127.0.0.1");
  EXPECT_EQ(a.state, "MIXED");
  EXPECT_EQ(a.flags, std::vector<std::string>{"DRAIN"});
  EXPECT_FALSE(a.Schedulable());
  EXPECT_EQ(a.gpus, 4);
  EXPECT_TRUE(a.InPartition("high"));
  EXPECT_FALSE(a.InPartition("hi"));
  EXPECT_EQ(a.reason, "fan failed, see ticket 12 [root@2026-12-07T03:02:16]");
  const SlurmNode& b = (*nodes)[1];
  EXPECT_EQ(b.state, "MIXED");
  EXPECT_TRUE(b.flags.empty());
  EXPECT_TRUE(b.Schedulable());
  EXPECT_EQ(b.partitions, (std::vector<std::string>{"low", "high"}));
}

TEST(SlurmViewTest, NodeStatesWithFlagsOrSinfosMarksAndTypedGres) {
  // The State= forms scontrol prints (node_state_string_complete) and the
  // marks of the short form; fields newer releases add after Reason=.
  Result<std::vector<SlurmNode>> nodes = ParseNodes(
      "NodeName=g1 Gres=gpu:h100:8(S:0-1),shard:8 State=IDLE+DRAIN+NOT_RESPONDING "
      "Partitions=p Reason=gone Comment=x Extra=(null)\n"
      "NodeName=g2 Gres=(null) State=DOWN* Partitions=p\n"
      "NodeName=g3 Gres=gpu:2 State=IDLE~ Partitions=p\n"
      "\n"
      "NodeName=g4 Gres=gpu:2 State=ALLOCATED+COMPLETING\n");
  ASSERT_OK(nodes);
  ASSERT_EQ(nodes->size(), 4u);
  EXPECT_EQ((*nodes)[0].gpus, 8);
  EXPECT_EQ((*nodes)[0].flags, (std::vector<std::string>{"DRAIN", "NOT_RESPONDING"}));
  EXPECT_EQ((*nodes)[0].reason, "gone");
  EXPECT_EQ((*nodes)[1].state, "DOWN");
  EXPECT_EQ((*nodes)[1].flags, std::vector<std::string>{"NOT_RESPONDING"});
  EXPECT_EQ((*nodes)[1].gpus, 0);
  EXPECT_EQ((*nodes)[2].flags, std::vector<std::string>{"POWERED_DOWN"});
  EXPECT_FALSE((*nodes)[2].Schedulable());
  EXPECT_TRUE((*nodes)[3].Schedulable());
  EXPECT_TRUE((*nodes)[3].partitions.empty());
}

TEST(SlurmViewTest, SqueueOf2205GivesTheGpusEachJobHoldsPerNodeAndHetComponents) {
  Result<std::vector<SlurmJob>> jobs = ParseSqueueJson(Recorded("22.05/squeue.json"));
  ASSERT_OK(jobs);
  std::map<std::string, std::vector<const SlurmJob*>> by_name;
  for (const SlurmJob& j : *jobs) by_name[j.name].push_back(&j);
  ASSERT_EQ(by_name["foreign-gpu"].size(), 1u);
  EXPECT_EQ(by_name["foreign-gpu"][0]->GpusOn("h2n2"), 2);
  EXPECT_EQ(by_name["foreign-gpu"][0]->GpusOn("h2n1"), 0);
  ASSERT_EQ(by_name["foreign-cpu"].size(), 1u);
  EXPECT_EQ(by_name["foreign-cpu"][0]->GpusOn("h2n2"), 0);
  EXPECT_TRUE(by_name["foreign-cpu"][0]->Live());
  ASSERT_EQ(by_name["het"].size(), 2u);
  const SlurmJob& first = *by_name["het"][0];
  const SlurmJob& second = *by_name["het"][1];
  EXPECT_EQ(first.het_job_id, first.id);
  EXPECT_EQ(first.het_job_offset, 0);
  EXPECT_EQ(second.het_job_id, first.id);
  EXPECT_EQ(second.het_job_offset, 1);
  EXPECT_EQ(first.GpusOn("h2n1"), 1);
  EXPECT_EQ(second.GpusOn("h2n2"), 1);
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
  Result<std::vector<SlurmNode>> nodes = ParseNodes("scontrol: error: Unable to contact");
  ASSERT_FALSE(nodes.ok());
  EXPECT_NE(nodes.status().message().find("scontrol show node -o: a line without NodeName="),
            std::string::npos)
      << nodes.status().ToString();
  EXPECT_FALSE(ParseNodes("NodeName=a Gres=gpu:1").ok());  // no State=
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

TEST(SlurmViewTest, SacctCompletionOf2205GivesHowEachJobEnded) {
  // Recorded (tests/data/slurm/README.md): sacct --completion of jobs that
  // exited 0, 3 and 76, were killed by SIGKILL, cancelled, preempted (7208
  // preempted and requeued, then cancelled: its last line counts), a
  // heterogeneous job's two components and a name with a '|'.
  Result<std::vector<SlurmJob>> jobs = ParseSacct(Recorded("22.05/sacct_completion.txt"));
  ASSERT_OK(jobs);
  std::map<int64_t, SlurmJob> by_id;
  for (const SlurmJob& j : *jobs) by_id[j.id] = j;
  ASSERT_EQ(by_id.size(), 12u);
  auto ended = [&](int64_t id) {
    return by_id[id].state + " " + std::to_string(by_id[id].exit_code);
  };
  EXPECT_EQ(ended(7201), "COMPLETED 0");
  EXPECT_EQ(ended(7202), "FAILED 3");
  EXPECT_EQ(ended(7203), "FAILED 76");
  EXPECT_EQ(ended(7204), "FAILED 137");
  EXPECT_EQ(ended(7205), "CANCELLED 0");
  EXPECT_EQ(ended(7208), "CANCELLED 0");
  EXPECT_EQ(ended(7210), "PREEMPTED 0");
  EXPECT_EQ(by_id[7201].name, "stint.rec.1");
  EXPECT_EQ(by_id[7206].name, "stint.rec.6");
  EXPECT_EQ(by_id[7207].name, "stint.rec.6");
  EXPECT_EQ(by_id[7209].name, "stint.rec.8|odd");
  for (const auto& [id, j] : by_id) EXPECT_FALSE(j.Live()) << id;
}

TEST(SlurmViewTest, SacctOfAccountingStorageSkipsStepsAndReadsStatesOfSeveralWords) {
  // As sacct prints with slurmdbd (not recorded: the test cluster has no
  // accounting storage): a step line without --allocations, and a state
  // with who cancelled it.
  Result<std::vector<SlurmJob>> jobs = ParseSacct(
      "9001|CANCELLED by 0|0:15|stint.a.1\n9001.batch|CANCELLED|0:15|batch\n"
      "9002|TIMEOUT|0:0|stint.a.2\r\n\n9003|NODE_FAIL|1:0|stint.a.3\n");
  ASSERT_OK(jobs);
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].state, "CANCELLED");
  EXPECT_EQ((*jobs)[0].exit_code, 128 + 15);
  EXPECT_EQ((*jobs)[1].state, "TIMEOUT");
  EXPECT_EQ((*jobs)[1].name, "stint.a.2");
  EXPECT_EQ((*jobs)[2].state, "NODE_FAIL");
  EXPECT_EQ((*jobs)[2].exit_code, 1);
  Result<std::vector<SlurmJob>> none = ParseSacct("");
  ASSERT_OK(none);
  EXPECT_TRUE(none->empty());
}

TEST(SlurmViewTest, SacctLinesThatDoNotParseAreRefusedNamingTheLine) {
  for (const char* bad :
       {"9001|COMPLETED|0:0", "x9|COMPLETED|0:0|n", "9001||0:0|n", "9001|FAILED|one:0|n"}) {
    Result<std::vector<SlurmJob>> jobs = ParseSacct(bad);
    ASSERT_FALSE(jobs.ok()) << bad;
    EXPECT_NE(jobs.status().message().find(std::string("line \"") + bad), std::string::npos)
        << jobs.status().ToString();
  }
}

TEST(SlurmViewTest, TimeLimitsAreMinutesAndSeconds) {
  EXPECT_EQ(SlurmTimeLimit(60), "1:00");
  EXPECT_EQ(SlurmTimeLimit(605), "10:05");
  EXPECT_EQ(SlurmTimeLimit(7259), "120:59");
}

}  // namespace
}  // namespace stint::stintd
