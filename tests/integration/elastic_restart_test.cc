// ElasticGroup against a real stintd when its backend cannot release a
// communicator in-process (NCCL before 2.26.2, whose ncclCommAbort may hang:
// nccl_recovery.h). The backend here is a world-of-one communicator standing
// in for such an NCCL (no GPU needed): releasing one leaves it unreleased
// and the factory reports RestartRequired(). A failed generation must then
// make Reform() ask for a process restart, not form the next generation in
// this process; a backend that can release re-forms in-process as before.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>

#include "stint/coordinator_client.h"
#include "stint/elastic_group.h"
#include "util/status_matchers.h"
#include "util/stintd_process.h"
#include "util/temp_dir.h"

#ifndef STINTD_PATH
#error "STINTD_PATH must name the stintd binary"
#endif

namespace stint {
namespace {

// A world of one: collectives leave the data as it is.
class SoloCommunicator final : public Communicator {
 public:
  SoloCommunicator(const GroupMembership& m, std::atomic<bool>* unreleased, bool can_release)
      : membership_(m), unreleased_(unreleased), can_release_(can_release) {}
  ~SoloCommunicator() override { Abort(); }
  const char* backend() const override { return "solo"; }
  const GroupMembership& membership() const override { return membership_; }
  Status AllReduce(void*, size_t, DType, ReduceOp) override { return Check(); }
  Status Broadcast(void*, size_t, int) override { return Check(); }
  Status Barrier() override { return Check(); }
  void Abort() override {
    if (aborted_.exchange(true)) return;
    if (!can_release_) unreleased_->store(true);  // the handle is dropped, not aborted
  }
  bool aborted() const override { return aborted_.load(); }

 private:
  Status Check() const { return aborted() ? Status::Aborted("solo: aborted") : Status::OK(); }
  GroupMembership membership_;
  std::atomic<bool>* const unreleased_;
  const bool can_release_;
  std::atomic<bool> aborted_{false};
};

class SoloFactory final : public CommunicatorFactory {
 public:
  explicit SoloFactory(bool can_release) : can_release_(can_release) {}
  Result<std::unique_ptr<Communicator>> Form(const GroupMembership& m, GroupKv&) override {
    if (m.master_listen_fd >= 0) close(m.master_listen_fd);
    ++formed;
    return std::unique_ptr<Communicator>(new SoloCommunicator(m, &unreleased_, can_release_));
  }
  const char* Name() const override { return "solo"; }
  bool RestartRequired() const override { return unreleased_.load(); }
  int formed = 0;

 private:
  const bool can_release_;
  std::atomic<bool> unreleased_{false};
};

class ElasticRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<StintdProcess>(
        STINTD_PATH, dir_.path(),
        std::vector<std::string>{"--tick-seconds", "0.1", "--lease-ttl-seconds", "600",
                                 "--rendezvous-last-call-seconds", "1",
                                 "--start-grace-seconds", "120"});
    ASSERT_TRUE(daemon_->Start()) << daemon_->output();
    admin_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAdminToken);
    ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "p"}}).status, 201);
    const int64_t now = WallNowMs();
    auto w = admin_->Post("/v1/windows",
                          {{"pool", "p"}, {"gpus", 1}, {"start_ms", now}, {"end_ms", now + 3'600'000}});
    ASSERT_EQ(w.status, 201) << w.text;
    auto j = admin_->Post("/v1/jobs", {{"name", "solo"},
                                       {"min_gpus", 1},
                                       {"max_gpus", 1},
                                       {"checkpoint_seconds", 1},
                                       {"restart_seconds", 1},
                                       {"checkpoint_interval_seconds", 10}});
    ASSERT_EQ(j.status, 201) << j.text;
    job_ = j.body.value("id", int64_t{0});
    // Workers register with a running segment only: the scheduler's next pass.
    ASSERT_TRUE(Eventually([&] {
      return admin_->Get("/v1/jobs/" + std::to_string(job_)).body.value("state", "") == "RUNNING";
    }, 60));
    CoordinatorOptions co;
    co.url = daemon_->url();
    co.token = StintdProcess::kWorkerToken;
    co.job_id = static_cast<uint64_t>(job_);
    co.worker_name = "solo";
    auto client = CoordinatorClient::Create(co);
    ASSERT_OK(client);
    client_ = std::move(*client);
    ASSERT_OK(client_->Register());
  }

  // Joins, then fails the generation and re-forms.
  Result<ElasticStep> JoinThenFail(SoloFactory* factory) {
    ElasticOptions eo;
    eo.join_timeout = std::chrono::seconds(60);
    STINT_ASSIGN_OR_RETURN(auto group, ElasticGroup::Create(client_.get(), factory, eo));
    STINT_ASSIGN_OR_RETURN(ElasticStep joined, group->Join(nullptr));
    EXPECT_EQ(joined.world_size, 1);
    EXPECT_FALSE(factory->RestartRequired());
    Result<ElasticStep> reformed = group->Reform(/*failed=*/true, nullptr);
    group->Cancel();
    return reformed;
  }

  TempDir dir_;
  std::unique_ptr<StintdProcess> daemon_;
  std::unique_ptr<HttpJson> admin_;
  int64_t job_ = 0;
  std::unique_ptr<CoordinatorClient> client_;
};

TEST_F(ElasticRestartTest, AnUnreleasedCommunicatorMakesReformAskForARestart) {
  SoloFactory factory(/*can_release=*/false);
  Result<ElasticStep> reformed = JoinThenFail(&factory);
  ASSERT_FALSE(reformed.ok());
  EXPECT_EQ(reformed.status().code(), Code::kFailedPrecondition) << reformed.status().ToString();
  EXPECT_NE(reformed.status().message().find("restart"), std::string::npos)
      << reformed.status().ToString();
  EXPECT_EQ(factory.formed, 1) << "a generation was formed in-process after the unreleased one";
}

TEST_F(ElasticRestartTest, AReleasableCommunicatorReformsInProcess) {
  SoloFactory factory(/*can_release=*/true);
  Result<ElasticStep> reformed = JoinThenFail(&factory);
  ASSERT_OK(reformed);
  EXPECT_TRUE(reformed->reformed);
  EXPECT_EQ(factory.formed, 2);
}

}  // namespace
}  // namespace stint
