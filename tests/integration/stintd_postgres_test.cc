// stintd on PostgreSQL (issue 45, item 1), a real server the test starts:
// `stintd migrate` copies an SQLite store into an empty database, a stintd
// with --store postgresql://... serves what was copied and keeps what it
// acknowledges across a kill -9, and a second stintd on the same database
// is refused while the first runs.
#include <signal.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

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

  // A second stintd on the same database is refused while this one runs.
  TempDir other_dir;
  StintdProcess other(STINTD_PATH, other_dir.path(), SteadyStintdArgs());
  other.set_store(url);
  EXPECT_FALSE(other.Start());
  EXPECT_NE(other.output().find("another stintd"), std::string::npos) << other.output();

  // What it acknowledged survives a kill -9.
  daemon.Kill(SIGKILL);
  ASSERT_TRUE(daemon.Start()) << daemon.output();
  HttpJson after(daemon.port(), StintdProcess::kAdminToken);
  const json jobs = after.Get("/v1/jobs").body.value("jobs", json::array());
  ASSERT_EQ(jobs.size(), 2u) << jobs.dump();
  EXPECT_EQ(jobs[0].value("name", ""), "train");
  EXPECT_EQ(jobs[1].value("name", ""), "eval");
}

}  // namespace
}  // namespace stint
