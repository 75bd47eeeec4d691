// stint-sim's trace adapters: the published formats (small excerpts of the
// real files in tests/data/traces, see its README), the rows each skips by
// reason, censored and fractional pods, the lead-in trim, and a clear error
// naming the file, line and column for a malformed file.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "sim/trace.h"
#include "sim/workload_spec.h"
#include "util/status_matchers.h"

namespace stint::sim {
namespace {

class SimTraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sim_trace_testXXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& f : files_) std::remove(f.c_str());
    rmdir(dir_.c_str());
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    files_.push_back(path);
    return path;
  }
  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(SimTraceTest, PhillyReadsSevenFieldsAndScalesWorkPerJobType) {
  const std::string path = Write("vc1.trace",
                                 "A3C\tcmd\t-n\t0\t100\t0.0\t1\n"
                                 "A3C\tcmd\t-n\t0\t300\t10.5\t2\n"
                                 "LM (batch size 20)\tcmd\t-step\t1\t5000\t20\t8\n");
  JobDefaults d;
  d.philly_median_s = 1000;
  auto jobs = LoadPhilly(path, d);
  ASSERT_OK(jobs);
  ASSERT_EQ(jobs.value().size(), 3u);
  EXPECT_EQ(jobs.value()[0].team, "vc1");
  EXPECT_EQ(jobs.value()[1].max_gpus, 2);
  EXPECT_DOUBLE_EQ(jobs.value()[1].submit_s, 10.5);
  // The A3C median is 300 steps (upper median of two): 100 steps -> 1000/3 s.
  EXPECT_NEAR(jobs.value()[0].work_s, 1000.0 / 3, 1e-6);
  EXPECT_NEAR(jobs.value()[2].work_s, 1000.0, 1e-6);
}

TEST_F(SimTraceTest, MalformedPhillyLineNamesFileAndLine) {
  const std::string path =
      Write("bad.trace", "A3C\tcmd\t-n\t0\t100\t0.0\t1\nA3C\tcmd\t-n\t0\tlots\t1.0\t1\n");
  auto jobs = LoadPhilly(path, JobDefaults{});
  ASSERT_FALSE(jobs.ok());
  EXPECT_NE(jobs.status().message().find(path + ":2: total_steps (column 5) is not a positive "
                                                "number (got \"lots\")"),
            std::string::npos)
      << jobs.status().message();
  const std::string short_line = Write("short.trace", "A3C\tcmd\t-n\n");
  auto j2 = LoadPhilly(short_line, JobDefaults{});
  ASSERT_FALSE(j2.ok());
  EXPECT_NE(j2.status().message().find(short_line + ":1: expected 7"), std::string::npos)
      << j2.status().message();
}

TEST_F(SimTraceTest, TiresiasCsvWithCrlf) {
  const std::string path =
      Write("t.csv",
            "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\r\n"
            "0,1,0,606,vgg19,164,30\r\n1,8,30,133,vgg11,147,23\r\n");
  auto jobs = LoadTiresias(path, JobDefaults{});
  ASSERT_OK(jobs);
  ASSERT_EQ(jobs.value().size(), 2u);
  EXPECT_EQ(jobs.value()[1].max_gpus, 8);
  EXPECT_DOUBLE_EQ(jobs.value()[1].work_s, 147);
  const std::string bad =
      Write("b.csv",
            "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,x,0,1,m,5,1\n");
  auto b = LoadTiresias(bad, JobDefaults{});
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find(bad + ":2: num_gpu"), std::string::npos)
      << b.status().message();
}

TEST_F(SimTraceTest, HeliosJobLogSkipsCpuJobsAndUsesVcAsTeam) {
  const std::string path =
      Write("cluster_log.csv",
            "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,"
            "duration,queue\n"
            "j1,u1,vcA,8,32,1,COMPLETED,2020-04-01 00:00:10,x,y,3600,5\n"
            "j2,u2,vcB,0,4,1,COMPLETED,2020-04-01 00:00:20,x,y,100,0\n"
            "j3,u1,vcB,1,4,1,FAILED,2020-04-01 00:01:10,x,y,60,0\n");
  LoadReport r;
  auto jobs = LoadHeliosJobs(path, JobDefaults{}, &r);
  ASSERT_OK(jobs);
  ASSERT_EQ(jobs.value().size(), 2u);
  EXPECT_EQ(jobs.value()[0].team, "vcA");
  // Submit times stay on the trace's clock (Unix seconds) until TrimLeadIn.
  EXPECT_DOUBLE_EQ(jobs.value()[1].submit_s - jobs.value()[0].submit_s, 60);
  EXPECT_EQ(r.skipped, (std::map<std::string, int64_t>{{"CPU-only jobs", 1}}));
  TrimLeadIn(&jobs.value(), StartAt{}, &r);
  EXPECT_DOUBLE_EQ(jobs.value()[1].submit_s, 60);
}

TEST(SimTraceDrop, AJobFitsAPoolOnlyByWhatIsOpenAtOnce) {
  std::vector<SimWindow> windows(2);
  windows[0].gpus = windows[1].gpus = 8;
  windows[0].start_s = 0;
  windows[0].end_s = 100;
  windows[1].start_s = 100;  // follows the first: never 16 at once
  windows[1].end_s = 200;
  std::vector<SimJob> jobs(2);
  jobs[0].min_gpus = jobs[0].max_gpus = 16;
  jobs[1].min_gpus = jobs[1].max_gpus = 8;
  EXPECT_EQ(DropUnplaceable(&jobs, windows), 1);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].max_gpus, 8);
  windows[1].start_s = 50;  // overlaps: a gang of 16 spans both
  jobs.assign(1, SimJob());
  jobs[0].min_gpus = jobs[0].max_gpus = 16;
  EXPECT_EQ(DropUnplaceable(&jobs, windows), 0);
}

TEST_F(SimTraceTest, HeliosCapacityAndStackedWindows) {
  const std::string path = Write(
      "gpus.csv", "date,vcA,vcB,total\n2020-04-01,8,8,16\n2020-04-02,8,12,20\n2020-04-03,4,8,12\n");
  auto steps = LoadHeliosCapacity(path, "total", 0.5);
  ASSERT_OK(steps);
  ASSERT_EQ(steps.value().size(), 3u);
  EXPECT_EQ(steps.value()[1].second, 10);
  // 8 -> 10 -> 6: a base window of 8 (closed on day 2, reopened as 6) and a 2-GPU window for day 1.
  auto windows = StepsToWindows(steps.value(), 5 * 86400.0, stintd::WindowKind::kHard, 0, "p0");
  int at_day1 = 0, at_day2 = 0;
  for (const SimWindow& w : windows) {
    if (w.start_s <= 86400 && 86400 < w.end_s) at_day1 += w.gpus;
    if (w.start_s <= 2 * 86400 && 2 * 86400 < w.end_s) at_day2 += w.gpus;
  }
  EXPECT_EQ(at_day1, 10);
  EXPECT_EQ(at_day2, 6);
  auto bad = LoadHeliosCapacity(path, "vcZ", 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path + ":1: header has no column vcZ"), std::string::npos);
}

TEST_F(SimTraceTest, BambooNodeEventsBecomeRevokedSpotWindows) {
  const std::string path =
      Write("nodes.csv", "1000,add,node1\r\n2000,add,node2\r\n9000,remove,node1\r\n");
  auto windows = LoadBambooNodes(path, 4, 30);
  ASSERT_OK(windows);
  ASSERT_EQ(windows.value().size(), 2u);
  EXPECT_EQ(windows.value()[0].kind, stintd::WindowKind::kSpot);
  EXPECT_DOUBLE_EQ(windows.value()[0].revoke_s, 9);
  EXPECT_EQ(windows.value()[1].revoke_s, kForever);
  const std::string bad = Write("bad.csv", "1000,add,node1\n2000,explode,node1\n");
  auto b = LoadBambooNodes(bad, 4, 30);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find(bad + ":2: event must be add or remove"), std::string::npos);
}

TEST_F(SimTraceTest, WorkloadLabelsSyntheticParts) {
  WorkloadOptions o;
  o.synthetic_jobs.jobs = 20;
  auto w = BuildWorkload("synthetic", "fixed:16", o);
  ASSERT_OK(w);
  EXPECT_TRUE(w.value().synthetic_jobs);
  EXPECT_TRUE(w.value().synthetic_capacity);
  EXPECT_NE(w.value().job_source.find("SYNTHETIC"), std::string::npos);
  EXPECT_FALSE(BuildWorkload("nosuch:x", "fixed:16", o).ok());
  EXPECT_FALSE(BuildWorkload("synthetic", "fixed:zero", o).ok());
}

// ---- The published files: excerpts in tests/data/traces ----

std::string Data(const std::string& name) { return std::string(STINT_TEST_TRACES) + "/" + name; }

const SimJob* Find(const std::vector<SimJob>& jobs, const std::string& name) {
  for (const SimJob& j : jobs) {
    if (j.name == name) return &j;
  }
  return nullptr;
}

constexpr char kAlibaba[] = "alibaba-gpu-v2023-openb_pod_list_default-head91.csv";

TEST(SimTraceExcerpt, AlibabaPodsCountedByReasonCensoredAndRoundedUp) {
  LoadReport r;
  auto jobs = LoadAlibabaPods(Data(kAlibaba), JobDefaults{}, &r);
  ASSERT_OK(jobs);
  EXPECT_EQ(r.rows, 91);
  EXPECT_EQ(r.skipped,
            (std::map<std::string, int64_t>{{"CPU-only pods", 6}, {"never-scheduled pods", 3}}));
  EXPECT_EQ(r.censored, 15);    // Running, deleted at the trace end (12902960)
  EXPECT_EQ(r.fractional, 29);  // gpu_milli < 1000
  ASSERT_EQ(jobs.value().size(), 82u);
  EXPECT_EQ(Find(jobs.value(), "alibaba/openb-pod-0005"), nullptr);  // CPU-only
  EXPECT_EQ(Find(jobs.value(), "alibaba/openb-pod-0061"), nullptr);  // never scheduled
  // A whole 8-GPU pod: work = deletion - scheduled; Burstable -> MEDIUM.
  const SimJob* p17 = Find(jobs.value(), "alibaba/openb-pod-0017");
  ASSERT_NE(p17, nullptr);
  EXPECT_EQ(p17->max_gpus, 8);
  EXPECT_DOUBLE_EQ(p17->work_s, 10769854.0 - 9437497);
  EXPECT_EQ(p17->priority, stintd::Priority::kMedium);
  // 460 milli-GPU, still running at the end: one whole GPU up to the end, LS -> HIGH.
  const SimJob* p1 = Find(jobs.value(), "alibaba/openb-pod-0001");
  ASSERT_NE(p1, nullptr);
  EXPECT_EQ(p1->max_gpus, 1);
  EXPECT_DOUBLE_EQ(p1->work_s, 12902960.0 - 427061);
  EXPECT_EQ(p1->priority, stintd::Priority::kHigh);
  // Phase Running but deleted before the end: a known duration, not censored; BE -> LOW.
  const SimJob* p22 = Find(jobs.value(), "alibaba/openb-pod-0022");
  ASSERT_NE(p22, nullptr);
  EXPECT_DOUBLE_EQ(p22->work_s, 9973826.0 - 9679175);
  EXPECT_EQ(p22->priority, stintd::Priority::kLow);
}

TEST(SimTraceExcerpt, AutoStartTrimsTheAlibabaLeadIn) {
  LoadReport r;
  auto jobs = LoadAlibabaPods(Data(kAlibaba), JobDefaults{}, &r);
  ASSERT_OK(jobs);
  // 15 pods arrive over 9.4e6 s, the other 67 within 0.6e6 s after it.
  EXPECT_DOUBLE_EQ(EarnestStart(jobs.value()), 9437497);
  StartAt at;
  at.mode = StartAt::Mode::kAuto;
  TrimLeadIn(&jobs.value(), at, &r);
  EXPECT_DOUBLE_EQ(r.start_s, 9437497);
  EXPECT_DOUBLE_EQ(r.trimmed_s, 9437497);
  EXPECT_EQ(r.lead_in_joined, 15);  // all still running at the start
  ASSERT_EQ(jobs.value().size(), 82u);
  EXPECT_DOUBLE_EQ(jobs.value().front().submit_s, 0);
  const SimJob* p0 = Find(jobs.value(), "alibaba/openb-pod-0000");
  ASSERT_NE(p0, nullptr);
  EXPECT_DOUBLE_EQ(p0->submit_s, 0);
  EXPECT_DOUBLE_EQ(p0->work_s, 12537496.0 - 9437497);  // the work left at the start
  const SimJob* p17 = Find(jobs.value(), "alibaba/openb-pod-0017");
  ASSERT_NE(p17, nullptr);
  EXPECT_DOUBLE_EQ(p17->submit_s, 0);
  EXPECT_DOUBLE_EQ(p17->work_s, 10769854.0 - 9437497);
  EXPECT_NE(r.Summary().find("skipped 6 CPU-only pods, 3 never-scheduled pods; 15 censored"),
            std::string::npos)
      << r.Summary();
  EXPECT_NE(r.Summary().find("9437497 s of lead-in trimmed, 15 lead-in jobs"), std::string::npos)
      << r.Summary();
}

TEST(SimTraceExcerpt, StartAtSecondsSkipsLeadInJobsThatHadEnded) {
  LoadReport r;
  auto jobs = LoadTiresias(Data("tiresias-60_job-head30.csv"), JobDefaults{}, &r);
  ASSERT_OK(jobs);
  EXPECT_EQ(r.rows, 30);
  EXPECT_TRUE(r.skipped.empty());
  ASSERT_EQ(jobs.value().size(), 30u);
  auto at = ParseStartAt("100");
  ASSERT_OK(at);
  TrimLeadIn(&jobs.value(), at.value(), &r);
  // Jobs 0..4 arrive at 0, 30, 53, 79, 99 and run 164, 147, 127, 121,
  // 121 s: all still running at 100, so all join with the work left.
  EXPECT_EQ(r.lead_in_joined, 5);
  EXPECT_TRUE(r.skipped.empty());
  EXPECT_DOUBLE_EQ(jobs.value()[0].work_s, 64);
  auto late = ParseStartAt("200");
  ASSERT_OK(late);
  LoadReport r2;
  auto again = LoadTiresias(Data("tiresias-60_job-head30.csv"), JobDefaults{}, &r2);
  ASSERT_OK(again);
  TrimLeadIn(&again.value(), late.value(), &r2);
  // By 200 jobs 0..3 have ended (at 164, 177, 180, 200 s); 4..6 (ending at
  // 220, 270, 297 s) join.
  EXPECT_EQ(r2.skipped,
            (std::map<std::string, int64_t>{{"lead-in jobs ended before the start", 4}}));
  EXPECT_EQ(r2.lead_in_joined, 3);
  EXPECT_EQ(again.value().size(), 26u);
  EXPECT_FALSE(ParseStartAt("soon").ok());
  EXPECT_FALSE(ParseStartAt("-5").ok());
}

TEST(SimTraceExcerpt, HeliosJobLogInThePublishedLayout) {
  LoadReport r;
  auto jobs = LoadHeliosJobs(Data("helios-cluster_log-HANDMADE.csv"), JobDefaults{}, &r);
  ASSERT_OK(jobs);
  EXPECT_EQ(r.rows, 8);
  EXPECT_EQ(r.skipped,
            (std::map<std::string, int64_t>{{"CPU-only jobs", 1}, {"never-started jobs", 2}}));
  ASSERT_EQ(jobs.value().size(), 5u);
  StartAt at;
  at.mode = StartAt::Mode::kAuto;
  TrimLeadIn(&jobs.value(), at, &r);
  // One job on June 1st, four on June 9th: the replay starts on the 9th and
  // the first job (an hour long) had ended by then.
  EXPECT_EQ(r.skipped["lead-in jobs ended before the start"], 1);
  ASSERT_EQ(jobs.value().size(), 4u);
  EXPECT_EQ(jobs.value()[0].name, "helios/1425511");
  EXPECT_EQ(jobs.value()[0].team, "vcJkd");
  EXPECT_DOUBLE_EQ(jobs.value()[0].submit_s, 0);
  EXPECT_DOUBLE_EQ(jobs.value()[1].submit_s, 26);
  EXPECT_EQ(jobs.value()[3].max_gpus, 16);
  EXPECT_DOUBLE_EQ(jobs.value()[3].work_s, 7200);
}

TEST(SimTraceExcerpt, PhillyTiresiasAndCapacityExcerptsLoadAsPublished) {
  LoadReport r;
  auto philly = LoadPhilly(Data("philly-gavel-ee9e8c-head30.trace"), JobDefaults{}, &r);
  ASSERT_OK(philly);
  EXPECT_EQ(r.rows, 30);
  EXPECT_TRUE(r.skipped.empty());
  EXPECT_EQ(philly.value().size(), 30u);
  EXPECT_EQ(philly.value()[0].team, "philly-gavel-ee9e8c-head30");
  auto nodes = LoadBambooNodes(Data("bamboo-g4dn-trace-head40.csv"), 4, 120);
  ASSERT_OK(nodes);
  EXPECT_EQ(nodes.value().size(), 27u);  // 27 adds, 13 of them removed
  EXPECT_DOUBLE_EQ(nodes.value()[0].start_s, 480);
  auto avail = LoadBambooAvailability(Data("bamboo-p2-us-east-1e-avail.csv"), false, 1);
  ASSERT_OK(avail);
  EXPECT_EQ(avail.value().size(), 13u);
  EXPECT_EQ(avail.value()[0].second, 10);
  auto helios = LoadHeliosCapacity(Data("helios-venus-cluster_gpu_number-head7.csv"), "total", 1);
  ASSERT_OK(helios);
  EXPECT_EQ(helios.value().size(), 7u);
}

TEST_F(SimTraceTest, AlibabaEmptyDeletionIsCensoredAndOnlyReplayedRowsMustParse) {
  const std::string header =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n";
  const std::string path =
      Write("pods.csv", header +
                            "p0,1000,100,2,1000,,LS,Succeeded,0,500,100\n"
                            "p1,1000,100,1,250,,BE,Running,10,,40\n"       // censored: no deletion
                            "p2,1000,100,1,1000,,BE,Failed,20,60,60\n"     // zero length
                            "p3,1000,100,0,0,,BE,Running,30,later,soon\n"  // CPU-only: not read
                            "p4,1000,100,1,1000,,BE,Pending,35,40,\n"      // never scheduled
                            "p5,1000,100,4,1000,,LS,Running,50,900,55\n");
  LoadReport r;
  auto jobs = LoadAlibabaPods(path, JobDefaults{}, &r);
  ASSERT_OK(jobs);
  EXPECT_EQ(r.skipped,
            (std::map<std::string, int64_t>{
                {"CPU-only pods", 1}, {"never-scheduled pods", 1}, {"zero-length pods", 1}}));
  // p1 has no deletion_time; p5 is Running at the largest deletion_time (900).
  EXPECT_EQ(r.censored, 2);
  EXPECT_EQ(r.fractional, 1);
  ASSERT_EQ(jobs.value().size(), 3u);
  EXPECT_DOUBLE_EQ(Find(jobs.value(), "alibaba/p1")->work_s, 900 - 40);
  EXPECT_DOUBLE_EQ(Find(jobs.value(), "alibaba/p5")->work_s, 900 - 55);

  const std::string bad = Write("bad.csv", header +
                                               "p0,1000,100,2,1000,,LS,Succeeded,0,500,100\n"
                                               "p1,1000,100,1,1000,,LS,Succeeded,0,500,early\n");
  auto b = LoadAlibabaPods(bad, JobDefaults{});
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find(bad + ":3: scheduled_time (column 11) is not a number"),
            std::string::npos)
      << b.status().message();
  const std::string wrong = Write("wrong.csv", "name,num_gpu\np0,1\n");
  auto w = LoadAlibabaPods(wrong, JobDefaults{});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find(wrong + ":1: header has no column"), std::string::npos)
      << w.status().message();
}

TEST_F(SimTraceTest, TiresiasSkipsCpuOnlyAndZeroLengthRows) {
  const std::string path =
      Write("t.csv",
            "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
            "0,1,5,606,vgg19,164,30\n1,0,30,133,vgg11,147,23\n2,2,40,1,m,0,1\n");
  LoadReport r;
  auto jobs = LoadTiresias(path, JobDefaults{}, &r);
  ASSERT_OK(jobs);
  EXPECT_EQ(jobs.value().size(), 1u);
  EXPECT_EQ(r.skipped,
            (std::map<std::string, int64_t>{{"CPU-only jobs", 1}, {"zero-length jobs", 1}}));
}

TEST(SimTraceExcerpt, WorkloadReportsSkipsAndTrim) {
  WorkloadOptions o;
  o.start_at.mode = StartAt::Mode::kAuto;
  auto w = BuildWorkload(std::string("alibaba:") + Data(kAlibaba), "fixed:16", o);
  ASSERT_OK(w);
  EXPECT_EQ(w.value().jobs.size(), 82u);
  EXPECT_EQ(w.value().load.skipped_total(), 9);
  EXPECT_DOUBLE_EQ(w.value().load.start_s, 9437497);
  // A pod larger than every window is counted too.
  auto small = BuildWorkload(std::string("alibaba:") + Data(kAlibaba), "fixed:4", o);
  ASSERT_OK(small);
  EXPECT_EQ(small.value().load.skipped.at("jobs larger than any pool"), 1);  // openb-pod-0017
}

}  // namespace
TEST(SimTraceExcerpt, HeliosVcGpusBecomeTeamGuaranteesBySize) {
  std::vector<SimJob> jobs(6);
  for (size_t i = 0; i < jobs.size(); i++) jobs[i].team = i < 3 ? "a" : i < 5 ? "b" : "c";
  // Day one's largest VCs: 88, 80, 80 GPUs (sum 248), scaled to 100.
  auto g = HeliosTeamGuarantees(Data("helios-venus-cluster_gpu_number-head7.csv"), jobs, 100);
  ASSERT_OK(g);
  EXPECT_EQ(g.value(), (std::map<std::string, int>{{"a", 35}, {"b", 32}, {"c", 32}}));
  auto bad = HeliosTeamGuarantees(Data("tiresias-60_job-head30.csv"), jobs, 100);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tiresias-60_job-head30.csv:1: expected a header"),
            std::string::npos)
      << bad.status().message();
}

}  // namespace stint::sim
