// stint-sim's trace adapters: the published formats, and a clear error
// naming the file and line for a malformed one.
#include <unistd.h>

#include <cstdio>
#include <fstream>
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
  EXPECT_NE(jobs.status().message().find(path + ":2: total_steps"), std::string::npos)
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
  auto jobs = LoadHeliosJobs(path, JobDefaults{});
  ASSERT_OK(jobs);
  ASSERT_EQ(jobs.value().size(), 2u);
  EXPECT_EQ(jobs.value()[0].team, "vcA");
  EXPECT_DOUBLE_EQ(jobs.value()[1].submit_s, 60);
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

}  // namespace
}  // namespace stint::sim
