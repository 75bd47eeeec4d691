// stintd on PostgreSQL (issue 45, item 1), a real server the test starts:
// `stintd migrate` copies an SQLite store into an empty database, a stintd
// with --store postgresql://... serves what was copied and keeps what it
// acknowledges across a kill -9, and a second stintd on the same database
// stands by; two stintds on one database hand the lead over when the
// leader dies or is paused past its lease, and the old one is fenced.
#include <signal.h>

#include <sys/wait.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "stint/coordinator_client.h"
#include "util/postgres_server.h"
#include "util/stintd_process.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

using nlohmann::json;

TEST(StintdPostgres, MigrateThenServeAndSurviveAKill) {
  std::string why;
  std::unique_ptr<PostgresServer> pg = PostgresServer::Start(&why);
  if (pg == nullptr) GTEST_SKIP() << why;
  const std::string url = pg->CreateDatabase("stintd", &why);
  ASSERT_FALSE(url.empty()) << why;
  TempDir dir;

  // A stintd on SQLite gets a pool, a window and a job, then stops.
  StintdProcess lite(STINTD_PATH, dir.path(), SteadyStintdArgs());
  ASSERT_TRUE(lite.Start()) << lite.output();
  {
    HttpJson admin(lite.port(), StintdProcess::kAdminToken);
    ASSERT_EQ(admin.Post("/v1/pools", {{"name", "onprem"}, {"storage", {"s3://ckpts/runs"}}})
                  .status,
              201);
    ASSERT_EQ(admin.Post("/v1/windows",
                         {{"pool", "onprem"}, {"gpus", 4}, {"end_ms", WallNowMs() + 3600000}})
                  .status,
              201);
    ASSERT_EQ(admin.Post("/v1/jobs", {{"name", "train"}, {"pool", "onprem"}, {"min_gpus", 8}})
                  .status,
              201);
  }
  ASSERT_EQ(WEXITSTATUS(lite.Kill(SIGTERM)), 0) << lite.output();

  RunResult migrated =
      RunProgram(STINTD_PATH, {"migrate", "--from", "sqlite:" + lite.db_path(), "--to", url});
  ASSERT_EQ(migrated.exit_code, 0) << migrated.output;
  EXPECT_NE(migrated.output.find("1 pools, 1 windows"), std::string::npos) << migrated.output;
  // Never over a database that holds a state.
  RunResult again =
      RunProgram(STINTD_PATH, {"migrate", "--from", "sqlite:" + lite.db_path(), "--to", url});
  EXPECT_NE(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("not empty"), std::string::npos) << again.output;

  TempDir pg_dir;
  StintdProcess daemon(STINTD_PATH, pg_dir.path(), SteadyStintdArgs());
  daemon.set_store(url);
  ASSERT_TRUE(daemon.Start()) << daemon.output();
  HttpJson admin(daemon.port(), StintdProcess::kAdminToken);
  const json pools = admin.Get("/v1/pools").body.value("pools", json::array());
  ASSERT_EQ(pools.size(), 1u) << pools.dump();
  EXPECT_EQ(pools[0].value("storage", json::array()), json::array({"s3://ckpts/runs"}));
  auto second = admin.Post("/v1/jobs", {{"name", "eval"}, {"pool", "onprem"}, {"min_gpus", 1}});
  ASSERT_EQ(second.status, 201) << second.text;

  // A second stintd on the same database stands by while this one leads.
  TempDir other_dir;
  StintdProcess other(STINTD_PATH, other_dir.path(), SteadyStintdArgs());
  other.set_store(url);
  ASSERT_TRUE(other.StartStandby()) << other.output();
  EXPECT_NE(other.output().find("the leader is " + daemon.url()), std::string::npos)
      << other.output();
  ASSERT_EQ(WEXITSTATUS(other.Kill(SIGTERM)), 0) << other.output();

  // What it acknowledged survives a kill -9.
  daemon.Kill(SIGKILL);
  ASSERT_TRUE(daemon.Start()) << daemon.output();
  HttpJson after(daemon.port(), StintdProcess::kAdminToken);
  const json jobs = after.Get("/v1/jobs").body.value("jobs", json::array());
  ASSERT_EQ(jobs.size(), 2u) << jobs.dump();
  EXPECT_EQ(jobs[0].value("name", ""), "train");
  EXPECT_EQ(jobs[1].value("name", ""), "eval");
}

std::string Stintctl(const std::string& urls, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"--url", urls, "--token", StintdProcess::kAdminToken};
  argv.insert(argv.end(), args.begin(), args.end());
  RunResult r = RunProgram(STINTCTL_PATH, argv);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

// Issue 45, items 2-4: a standby takes over once the leader's lease runs
// out, whether the leader was killed or paused; clients given the list of
// both reach whichever leads, and a worker's heartbeat sent while none
// leads is retried until one does; a paused leader that wakes after the
// takeover exits (75) without acting, and nothing acknowledged is lost.
TEST(StintdPostgres, AStandbyTakesOverAndTheOldLeaderIsFenced) {
  std::string why;
  std::unique_ptr<PostgresServer> pg = PostgresServer::Start(&why);
  if (pg == nullptr) GTEST_SKIP() << why;
  const std::string url = pg->CreateDatabase("stintd", &why);
  ASSERT_FALSE(url.empty()) << why;
  const double lease_seconds = 2;
  std::vector<std::string> args = SteadyStintdArgs();
  args.insert(args.end(), {"--leader-lease-seconds", "2"});
  // Past any takeover on a loaded machine: a lease, a poll, a load.
  const double takeover_limit = 30 * lease_seconds;

  TempDir a_dir, b_dir;
  StintdProcess a(STINTD_PATH, a_dir.path(), args), b(STINTD_PATH, b_dir.path(), args);
  a.set_store(url);
  b.set_store(url);
  ASSERT_TRUE(a.Start()) << a.output();
  EXPECT_NE(a.output().find("stintd: leading at epoch 1"), std::string::npos) << a.output();
  ASSERT_TRUE(b.StartStandby()) << b.output();
  HttpJson admin_a(a.port(), StintdProcess::kAdminToken);
  ASSERT_EQ(admin_a.Post("/v1/pools", {{"name", "p"}}).status, 201);
  ASSERT_EQ(admin_a.Post("/v1/windows", {{"pool", "p"}, {"gpus", 1}, {"end_ms", WallNowMs() + 3600000}})
                .status,
            201);
  auto first = admin_a.Post("/v1/jobs", {{"name", "first"}, {"pool", "p"}, {"min_gpus", 1}});
  ASSERT_EQ(first.status, 201) << first.text;
  const int64_t job = first.body.value("id", int64_t{0});
  ASSERT_TRUE(Eventually([&] {
    return admin_a.Get("/v1/jobs/" + std::to_string(job)).body.value("state", "") == "RUNNING";
  }));
  const json leader = admin_a.Get("/v1/leader").body;
  EXPECT_EQ(leader.value("epoch", 0), 1) << leader.dump();
  EXPECT_EQ(leader["leader"].value("url", ""), a.url()) << leader.dump();
  ASSERT_EQ(leader["standbys"].size(), 1u) << leader.dump();
  const std::string b_url = leader["standbys"][0].value("url", "");
  ASSERT_FALSE(b_url.empty()) << leader.dump();
  // stintctl given the standby first reaches the leader.
  std::string status = Stintctl(b_url + "," + a.url(), {"status"});
  EXPECT_NE(status.find(a.url() + " (epoch 1); standbys: " + b_url), std::string::npos) << status;

  // A worker of the running segment, given both URLs.
  CoordinatorOptions o;
  o.url = a.url() + "," + b_url;
  o.token = StintdProcess::kWorkerToken;
  o.job_id = uint64_t(job);
  o.worker_name = "through-takeover";
  o.retry.initial_backoff = std::chrono::milliseconds(50);
  o.retry.max_backoff = std::chrono::milliseconds(500);
  o.retry.deadline = std::chrono::milliseconds(static_cast<int64_t>(takeover_limit * 1000));
  auto worker = CoordinatorClient::Create(o);
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  Result<WorkerRegistration> reg = (*worker)->Register();
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  ASSERT_TRUE((*worker)->Heartbeat(1).ok());

  // kill -9 of the leader: the standby serves within about a lease, and
  // the worker's heartbeat, sent meanwhile, is retried until it answers.
  const auto killed = std::chrono::steady_clock::now();
  a.Kill(SIGKILL);
  Result<WorkerView> beat = Status::Internal("not run");
  std::thread heartbeat([&] { beat = (*worker)->Heartbeat(2); });
  ASSERT_TRUE(b.WaitUntilLeading(takeover_limit)) << b.output();
  heartbeat.join();
  ASSERT_TRUE(beat.ok()) << beat.status().ToString();
  EXPECT_TRUE(beat->active);
  EXPECT_EQ(beat->fencing_token, reg->fencing_token);
  std::printf("takeover after kill -9: %.2f s (lease %.0f s)\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count(),
              lease_seconds);
  EXPECT_EQ(b.url(), b_url);
  status = Stintctl(a.url() + "," + b_url, {"status"});
  EXPECT_NE(status.find(b_url + " (epoch 2)"), std::string::npos) << status;
  HttpJson admin_b(b.port(), StintdProcess::kAdminToken);
  ASSERT_EQ(admin_b.Get("/v1/jobs").body.value("jobs", json::array()).size(), 1u);
  Result<FencingCheck> fencing = (*worker)->CheckFencing();
  ASSERT_TRUE(fencing.ok()) << fencing.status().ToString();
  EXPECT_TRUE(fencing->valid);

  // The old leader comes back as a standby; the leader is paused past its
  // lease: the standby takes over again.
  ASSERT_TRUE(a.StartStandby()) << a.output();
  ASSERT_EQ(::kill(b.pid(), SIGSTOP), 0);
  const auto paused = std::chrono::steady_clock::now();
  ASSERT_TRUE(a.WaitUntilLeading(takeover_limit)) << a.output();
  std::printf("takeover after SIGSTOP: %.2f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - paused).count());
  HttpJson admin_a2(a.port(), StintdProcess::kAdminToken);
  ASSERT_EQ(admin_a2.Post("/v1/jobs", {{"name", "second"}, {"pool", "p"}, {"min_gpus", 1}}).status,
            201);

  // The paused one wakes after the takeover: it exits without acting.
  const int woke = b.Kill(SIGCONT, takeover_limit);
  ASSERT_TRUE(WIFEXITED(woke)) << b.output();
  EXPECT_EQ(WEXITSTATUS(woke), 75) << b.output();
  EXPECT_NE(b.output().find("fenced: "), std::string::npos) << b.output();
  const json jobs = admin_a2.Get("/v1/jobs").body.value("jobs", json::array());
  ASSERT_EQ(jobs.size(), 2u) << jobs.dump();
  EXPECT_EQ(jobs[1].value("name", ""), "second");
  EXPECT_EQ(admin_a2.Get("/v1/leader").body.value("epoch", 0), 3);
}

}  // namespace
}  // namespace stint
