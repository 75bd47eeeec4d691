// The stint-sim binary: on the real Tiresias job trace and Bamboo spot node
// events (skipped where ../shared/traces is absent) it writes the report
// files and two runs give the same event log; on the synthetic workload
// (always) the report says it is synthetic, and a malformed trace line is
// reported with its file and line; on the Alibaba excerpt in
// tests/data/traces the report counts the skipped rows by reason, the
// censored and fractional pods and the trimmed lead-in; on a priced
// spot-mix it reports the cost against first-fit, and a bad price table is
// refused naming the entry.
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int Shell(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string TempDir() {
  char tmpl[] = "/tmp/sim_cli_testXXXXXX";
  return mkdtemp(tmpl) != nullptr ? tmpl : "";
}

TEST(SimCli, ReplaysRealTiresiasJobsOnBambooSpotNodes) {
  const std::string traces = STINT_TRACES_DIR;
  struct stat st {};
  if (stat((traces + "/tiresias/60_job.csv").c_str(), &st) != 0)
    GTEST_SKIP() << "no trace samples at " << traces;
  const std::string dir = TempDir();
  ASSERT_FALSE(dir.empty());
  const std::string cmd =
      std::string(STINT_SIM_PATH) + " --trace tiresias:" + traces +
      "/tiresias/60_job.csv --capacity bamboo-nodes:" + traces +
      "/spot-bamboo/g4dn-trace.csv:1 --no-gang --policies fifo,easy,slurm,stint --out ";
  ASSERT_EQ(Shell(cmd + dir + "/a > " + dir + "/a.txt 2>&1"), 0) << Slurp(dir + "/a.txt");
  ASSERT_EQ(Shell(cmd + dir + "/b > " + dir + "/b.txt 2>&1"), 0);
  const std::string table = Slurp(dir + "/a/table.md");
  EXPECT_NE(table.find("Normalised to fifo = 1.0"), std::string::npos) << table;
  EXPECT_NE(table.find("| stint | 60/60 |"), std::string::npos) << table;
  EXPECT_NE(Slurp(dir + "/a/utilisation.svg").find("<polyline"), std::string::npos);
  for (const char* p : {"fifo", "easy", "slurm", "stint"}) {
    const std::string a = Slurp(dir + "/a/events-" + p + ".log");
    EXPECT_FALSE(a.empty()) << p;
    EXPECT_EQ(a, Slurp(dir + "/b/events-" + p + ".log")) << p;
  }
  Shell("rm -rf " + dir);
}

TEST(SimCli, SyntheticReplayIsLabelledAndBadInputNamesFileAndLine) {
  const std::string dir = TempDir();
  ASSERT_FALSE(dir.empty());
  const std::string sim = STINT_SIM_PATH;
  ASSERT_EQ(Shell(sim + " --synthetic-jobs 40 --policies fifo,stint --out " + dir + "/s > " + dir +
                  "/s.txt 2>&1"),
            0)
      << Slurp(dir + "/s.txt");
  const std::string table = Slurp(dir + "/s/table.md");
  EXPECT_NE(table.find("[SYNTHETIC]"), std::string::npos) << table;
  EXPECT_NE(table.find("| stint | 40/40 |"), std::string::npos) << table;
  EXPECT_NE(Slurp(dir + "/s/utilisation.svg").find("<polyline"), std::string::npos);
  std::ofstream(dir + "/bad.csv")
      << "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,1,0,1,m\n";
  EXPECT_EQ(Shell(sim + " --trace tiresias:" + dir + "/bad.csv --capacity fixed:8 > " + dir +
                  "/bad.txt 2>&1"),
            2);
  EXPECT_NE(Slurp(dir + "/bad.txt").find(dir + "/bad.csv:2: expected 7"), std::string::npos)
      << Slurp(dir + "/bad.txt");
  Shell("rm -rf " + dir);
}

TEST(SimCli, AlibabaExcerptReportsSkipsCensoredFractionalAndTrim) {
  const std::string dir = TempDir();
  ASSERT_FALSE(dir.empty());
  const std::string sim = STINT_SIM_PATH;
  const std::string pods =
      std::string(STINT_TEST_TRACES) + "/alibaba-gpu-v2023-openb_pod_list_default-head91.csv";
  ASSERT_EQ(Shell(sim + " --trace alibaba:" + pods +
                  " --capacity fixed:16 --start-at auto --policies fifo,stint --out " + dir +
                  "/a > " + dir + "/a.txt 2>&1"),
            0)
      << Slurp(dir + "/a.txt");
  const std::string table = Slurp(dir + "/a/table.md");
  EXPECT_NE(table.find("- trace input: 91 rows; skipped 6 CPU-only pods, 3 never-scheduled pods; "
                       "15 censored (still running at the trace end: replayed up to it); 29 "
                       "fractional-GPU requests rounded up to whole GPUs; replay starts at trace "
                       "time 9437497 s (9437497 s of lead-in trimmed, 15 lead-in jobs still "
                       "running join at 0)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| stint | 82/82 |"), std::string::npos) << table;
  EXPECT_NE(Slurp(dir + "/a.txt").find("stint-sim: trace: 91 rows; skipped 6 CPU-only pods"),
            std::string::npos);
  const std::string json = Slurp(dir + "/a/results.json");
  EXPECT_NE(json.find("\"never-scheduled pods\": 3"), std::string::npos) << json;
  EXPECT_NE(json.find("\"censored\": 15"), std::string::npos) << json;

  EXPECT_EQ(Shell(sim + " --trace alibaba:" + pods + " --capacity fixed:16 --start-at soon > " +
                  dir + "/s.txt 2>&1"),
            2);
  EXPECT_NE(Slurp(dir + "/s.txt").find("--start-at"), std::string::npos);
  std::ofstream(dir + "/bad.csv")
      << "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
         "deletion_time,scheduled_time\n"
         "p0,1000,100,1,1000,,LS,Running,0,,\n"
         "p1,1000,100,1,x,,LS,Running,0,10,5\n";
  EXPECT_EQ(Shell(sim + " --trace alibaba:" + dir + "/bad.csv --capacity fixed:8 > " + dir +
                  "/bad.txt 2>&1"),
            2);
  EXPECT_NE(Slurp(dir + "/bad.txt").find(dir + "/bad.csv:3: gpu_milli (column 5)"),
            std::string::npos)
      << Slurp(dir + "/bad.txt");
  Shell("rm -rf " + dir);
}

TEST(SimCli, SpotMixWithPricesReportsCostAgainstFirstFitAndBadPricesNameTheEntry) {
  const std::string dir = TempDir();
  ASSERT_FALSE(dir.empty());
  const std::string sim = std::string(STINT_SIM_PATH) +
                          " --synthetic-jobs 40 --capacity spot-mix:1:2:2:3 --policies "
                          "stint,stint-first-fit,stint-cheapest-only";
  const std::string prices =
      " --prices onprem=on_prem:1,ondemand=on_demand:3,spot=spot:0.35*ondemand";
  ASSERT_EQ(Shell(sim + prices + " --out " + dir + "/p > " + dir + "/p.txt 2>&1"), 0)
      << Slurp(dir + "/p.txt");
  const std::string table = Slurp(dir + "/p/table.md");
  EXPECT_NE(
      table.find("- prices per GPU-hour: onprem=on_prem:1,ondemand=on_demand:3,spot=spot:1.05"),
      std::string::npos)
      << table;
  EXPECT_NE(table.find("| cost / stint-first-fit |"), std::string::npos) << table;
  EXPECT_NE(table.find("| stint-first-fit | 40/40 |"), std::string::npos) << table;
  EXPECT_NE(table.find("stintd's Job::cost within"), std::string::npos) << table;
  const std::string json = Slurp(dir + "/p/results.json");
  EXPECT_NE(json.find("\"cost_total\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"gpu_h\""), std::string::npos) << json;

  EXPECT_EQ(
      Shell(sim + " --prices onprem=on_prem:1,spot=spot:0.3*ondemand > " + dir + "/bad.txt 2>&1"),
      2);
  EXPECT_NE(Slurp(dir + "/bad.txt")
                .find("--prices entry 2 (\"spot=spot:0.3*ondemand\"): \"ondemand\" in "
                      "\"0.3*ondemand\" is not a pool priced before it"),
            std::string::npos)
      << Slurp(dir + "/bad.txt");
  EXPECT_EQ(Shell(sim + " --prices onprem=on_prem:1,spot=spot:1 > " + dir + "/miss.txt 2>&1"), 2);
  EXPECT_NE(Slurp(dir + "/miss.txt").find("the capacity's pool \"ondemand\" has no price"),
            std::string::npos)
      << Slurp(dir + "/miss.txt");
  Shell("rm -rf " + dir);
}

}  // namespace
