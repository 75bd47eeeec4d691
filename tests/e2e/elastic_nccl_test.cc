// ElasticGroup over the NCCL communicator factory, with a real stintd.
//
// One GPU: a world of one in this process forms through the group, agrees
// at step boundaries (a host int64 allreduce, staged through the device)
// without re-forming, synchronizes a host blob (a staged broadcast) and
// stops when asked. Two GPUs: tests/e2e/elastic_test.cc's runs on NCCL, a
// worker per device (examples/elastic_training --backend nccl): a rank is
// SIGKILLed between steps and in the middle of an allreduce, the survivor
// re-forms (a shrink where the old communicator is still healthy and the
// library can; else abort and re-init) and a new worker joins; the final
// model must match one CPU process's uninterrupted run and every sample be
// trained on exactly once per epoch. Everything skips without the devices.
#include <gtest/gtest.h>
#include <signal.h>

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "nccl_communicator.h"
#include "stint/coordinator_client.h"
#include "stint/elastic_group.h"
#include "util/elastic_job.h"
#include "util/gpu_skip.h"
#include "util/status_matchers.h"

namespace stint {
namespace {

constexpr int kSteps = 300;

// A job of min..max workers on a window of `gpus`, running.
class NcclElasticTest : public ElasticJobTest {
 protected:
  void StartJob(int min_workers, int max_workers, const std::string& lease_ttl_seconds) {
    ElasticJobTest::StartJob("elastic-nccl", min_workers, max_workers, lease_ttl_seconds);
  }

  // examples/elastic_training --backend nccl on CUDA device `device`.
  std::unique_ptr<ChildProcess> Worker(const std::string& name, int device,
                                       std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--backend", "nccl", "--device", std::to_string(device)};
    args.insert(args.end(), extra.begin(), extra.end());
    return ElasticJobTest::Worker(name, kSteps, "10000", args);
  }

  // GPU against CPU float sums: a looser bound than elastic_test's.
  void ExpectMatchesReference() { ElasticJobTest::ExpectMatchesReference(kSteps, 1e-3); }
};

// The state a test rank keeps: a host blob rank 0 broadcasts (its size
// first, as TorchElasticState does), whatever the world size.
class BlobState final : public ElasticState {
 public:
  explicit BlobState(std::string blob) : blob_(std::move(blob)) {}
  Status Synchronize(Communicator& comm) override {
    ++calls_;
    uint64_t size = blob_.size();
    STINT_RETURN_IF_ERROR(comm.Broadcast(&size, sizeof(size), 0));
    blob_.resize(size);
    return comm.Broadcast(blob_.data(), blob_.size(), 0);
  }
  const std::string& blob() const { return blob_; }
  int calls() const { return calls_; }

 private:
  std::string blob_;
  int calls_ = 0;
};

TEST_F(NcclElasticTest, SingleRankFormsAgreesAtBoundariesAndSynchronizesHostState) {
  SKIP_UNLESS_GPUS(1);
  // Leases outlive the test: this process does not heartbeat.
  ASSERT_NO_FATAL_FAILURE(StartJob(1, 1, "600"));
  CoordinatorOptions co;
  co.url = stintd_->url();
  co.token = StintdProcess::kWorkerToken;
  co.job_id = static_cast<uint64_t>(job_);
  co.worker_name = "solo";
  Result<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Create(co);
  ASSERT_OK(client);
  ASSERT_OK((*client)->Register());

  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  NcclCommunicatorOptions no;
  no.comm.timeout = std::chrono::seconds(20);
  no.device = 0;
  NcclCommunicatorFactory factory(no);
  ElasticOptions eo;
  eo.comm = no.comm;
  eo.join_timeout = std::chrono::seconds(60);
  Result<std::unique_ptr<ElasticGroup>> group = ElasticGroup::Create(client->get(), &factory, eo);
  ASSERT_OK(group);

  // Larger than one staging buffer (4 MiB): several staged chunks.
  std::string blob(9 * 1024 * 1024 + 17, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 13 + 1);
  BlobState state(blob);
  Result<ElasticStep> joined = (*group)->Join(&state);
  ASSERT_OK(joined);
  EXPECT_TRUE(joined->reformed);
  EXPECT_EQ(joined->world_size, 1);
  EXPECT_EQ(joined->rank, 0);
  EXPECT_GT(joined->generation, 0u);
  EXPECT_STREQ((*group)->comm().backend(), "nccl");
  EXPECT_EQ(state.calls(), 1);
  EXPECT_EQ(state.blob(), blob) << "the staged broadcast changed the root's blob";

  // The boundary agreement is a host allreduce: staged, it agrees without
  // re-forming, step after step.
  for (int i = 0; i < 5; ++i) {
    Result<ElasticStep> b = (*group)->StepBoundary(false, &state);
    ASSERT_OK(b);
    EXPECT_FALSE(b->stop);
    EXPECT_FALSE(b->reformed) << "boundary " << i << " re-formed: the agreement failed";
    EXPECT_EQ(b->generation, joined->generation);
  }
  EXPECT_FALSE((*group)->comm().aborted());
  EXPECT_EQ(state.calls(), 1);

  // A device collective on the group's communicator.
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dev), 4 * sizeof(float)), cudaSuccess);
  const float in[4] = {1, 2, 3, 4};
  ASSERT_EQ(cudaMemcpy(dev, in, sizeof(in), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_OK((*group)->comm().AllReduce(dev, 4, DType::kFloat32, ReduceOp::kSum));
  float out[4] = {};
  ASSERT_EQ(cudaMemcpy(out, dev, sizeof(out), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(dev);
  EXPECT_EQ(out[3], 4.0f);

  // A stop request is agreed at the next boundary.
  Result<ElasticStep> stop = (*group)->StepBoundary(true, &state);
  ASSERT_OK(stop);
  EXPECT_TRUE(stop->stop);
  EXPECT_FALSE(stop->reformed);
  (*group)->Cancel();
}

TEST_F(NcclElasticTest, TwoGpusKillOneThenAddOneWithoutRestart) {
  SKIP_UNLESS_GPUS(2);
  ASSERT_NO_FATAL_FAILURE(StartJob(1, 2, "3"));
  std::vector<std::unique_ptr<ChildProcess>> w;
  // 30 ms steps: the survivor alone must not finish before a new process
  // (CUDA and NCCL init included) joins.
  for (int i = 0; i < 2; ++i) w.push_back(Worker("w" + std::to_string(i), i, {"--step-ms", "30"}));
  for (auto& p : w) ASSERT_TRUE(p->WaitForLine("FIRST_STEP ")) << p->output();
  for (auto& p : w) EXPECT_EQ(ParseGeneration(p->output()).world, 2) << p->output();
  // SIGKILL rank 0.
  int victim = ParseGeneration(w[0]->output()).rank == 0 ? 0 : 1;
  const int survivor = 1 - victim;
  ASSERT_EQ(kill(w[victim]->pid(), SIGKILL), 0);
  EXPECT_EQ(ExitCode(w[victim]->Wait()), -SIGKILL);
  ASSERT_TRUE(w[survivor]->WaitForLine("GENERATION ")) << w[survivor]->output();
  EXPECT_EQ(ParseGeneration(w[survivor]->output()).world, 1) << w[survivor]->output();
  ASSERT_TRUE(w[survivor]->WaitForLine("FIRST_STEP ")) << w[survivor]->output();
  // A new worker takes the freed device: two again.
  auto joiner = Worker("w2", victim, {"--step-ms", "30"});
  ASSERT_TRUE(w[survivor]->WaitForLine("GENERATION ")) << w[survivor]->output();
  EXPECT_EQ(ParseGeneration(w[survivor]->output()).world, 2) << w[survivor]->output();
  EXPECT_EQ(ExitCode(w[survivor]->Wait()), 0) << w[survivor]->output();
  EXPECT_EQ(ExitCode(joiner->Wait()), 0) << joiner->output();
  ExpectMatchesReference();
  EXPECT_EQ(admin_->Get("/v1/jobs/" + std::to_string(job_)).body["state"], "DONE");
}

TEST_F(NcclElasticTest, TwoGpusWorkerKilledMidAllreduceDoesNotHangTheOther) {
  SKIP_UNLESS_GPUS(2);
  ASSERT_NO_FATAL_FAILURE(StartJob(1, 2, "3"));
  const std::vector<std::string> big = {"--ballast", "4000000"};  // 16 MB on the device
  auto survivor = Worker("w0", 0, big);
  std::vector<std::string> dies = big;
  dies.insert(dies.end(), {"--die-in-allreduce-at", "30"});
  auto victim = Worker("victim", 1, dies);
  EXPECT_EQ(ExitCode(victim->Wait()), -SIGKILL) << victim->output();
  // The survivor leaves generation 1 by a failed collective (NCCL error or
  // the deadline, then abort), re-forms alone, and finishes.
  EXPECT_EQ(ExitCode(survivor->Wait()), 0) << survivor->output();
  const Generation last = ParseGeneration(survivor->output());
  EXPECT_EQ(last.world, 1) << survivor->output();
  EXPECT_GT(last.generation, 1u) << survivor->output();
  ExpectMatchesReference();
}

}  // namespace
}  // namespace stint
