// rank_saver: one rank of a multi-process job that saves (or loads) one
// sharded checkpoint through the job's c10d TCPStore, for rank_commit_test.
//
//   rank_saver save ROOT PORT RANK WORLD STEP [FAULT] [TIMEOUT_MS] [NODE] [REPLICATE]
//   rank_saver load ROOT PORT RANK WORLD RUN [FAULT] [TIMEOUT_MS] [NODE]
//
// NODE: this rank's node (CheckpointOptions::node_id; "-": the default),
// for node-local roots: ranks of one node get one ROOT. REPLICATE "1": after
// the save is durable, FlushReplication() (this node's part held by its
// peer replicas), printed as "replication <status>", exit 5 when it fails.
//
// The state (RankState below): tensor "w" of [kRowsPerRank * WORLD, kCols]
// int64, of which each rank saves rows [kRowsPerRank * RANK, +kRowsPerRank);
// tensor "bias" [kBias], replicated, saved by rank 0 only; blob "who".
// Values depend on the step, so a load can tell which step it read.
//
// FAULT: "none"; "enospc" or "fsync" (injected through FaultEnv on this
// rank's data file); "kill@N": SIGKILL itself at its N-th operation (file
// system or channel), so the test can stop a rank at any point of a save;
// "slowread@MS": the first file this rank opens to read takes MS ms more (a
// rank whose load is slow); "slowwrite@MS": the same for the first data file
// (*.stint) it opens to write (a rank whose persist is slow); "eio@BYTES": this rank's writes fail with EIO
// once BYTES were written (a failing disk mid-save); "eioread@SUFFIX":
// opening a file whose path ends with SUFFIX to read fails with EIO (an
// unreadable file of one step, e.g. "step-00000004/rank-00001.stint");
// "abandon@MS": after MS ms this rank gives the save up (AbandonSave, as
// when it cannot build its state) instead of saving.
//
// Every rank waits for the others before it starts (RUN, or STEP, names the
// barrier on the store).
//
// Prints "outcome OK" or "outcome <status>"; exit 0 when durable, 3 when the
// save failed, 4 when a load read wrong values, 1 on a setup error.
#include <signal.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "c10d_commit_channel.h"
#include "stint/checkpointer.h"
#include "util/fault_env.h"

namespace stint {
namespace {

constexpr int64_t kRowsPerRank = 3;
constexpr int64_t kCols = 5;
constexpr int64_t kBias = 7;

int64_t Value(uint64_t step, int64_t row, int64_t col) {
  return int64_t(step) * 100000 + row * 100 + col;
}

// Counts operations of the Env and the channel alike once armed (at the
// start of the save); SIGKILLs this process at the N-th (0: never).
class Killer {
 public:
  explicit Killer(uint64_t at) : at_(at) {}
  void Arm() { armed_ = true; }
  void Tick() {
    if (armed_ && at_ != 0 && ++count_ == at_) kill(getpid(), SIGKILL);
  }

 private:
  const uint64_t at_;
  std::atomic<bool> armed_{false};
  std::atomic<uint64_t> count_{0};
};

class KillingEnv final : public EnvWrapper {
 public:
  KillingEnv(Env* base, Killer* killer, std::chrono::milliseconds read_delay,
             std::chrono::milliseconds write_delay)
      : EnvWrapper(base), killer_(killer), read_delay_(read_delay), write_delay_(write_delay) {}
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const FileOptions& options) override {
    if (!delayed_.exchange(true)) std::this_thread::sleep_for(read_delay_);  // the fault
    return EnvWrapper::NewRandomAccessFile(path, options);
  }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const FileOptions& options) override {
    killer_->Tick();
    const bool data = path.size() > 6 && path.compare(path.size() - 6, 6, ".stint") == 0;
    if (data && !write_delayed_.exchange(true)) std::this_thread::sleep_for(write_delay_);  // the fault
    return EnvWrapper::NewWritableFile(path, options);
  }
  Status CreateDir(const std::string& path) override {
    killer_->Tick();
    return EnvWrapper::CreateDir(path);
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    killer_->Tick();
    return EnvWrapper::RenameFile(from, to);
  }
  Status SyncDir(const std::string& path) override {
    killer_->Tick();
    return EnvWrapper::SyncDir(path);
  }

 private:
  Killer* const killer_;
  const std::chrono::milliseconds read_delay_;
  const std::chrono::milliseconds write_delay_;
  std::atomic<bool> delayed_{false};
  std::atomic<bool> write_delayed_{false};
};

class KillingChannel final : public CommitChannel {
 public:
  KillingChannel(CommitChannel* base, Killer* killer) : base_(base), killer_(killer) {}
  Status Set(const std::string& key, const std::string& value) override {
    killer_->Tick();
    return base_->Set(key, value);
  }
  Result<std::optional<std::string>> Get(const std::string& key) override {
    killer_->Tick();
    return base_->Get(key);
  }
  // The base's own bounded reads, blocking waits and multi-key reads, so the
  // protocol runs over what a job's channel really does.
  Result<std::optional<std::string>> GetBy(
      const std::string& key, std::chrono::steady_clock::time_point deadline) override {
    killer_->Tick();
    return base_->GetBy(key, deadline);
  }
  Result<std::optional<std::string>> WaitFor(
      const std::string& key, std::chrono::steady_clock::time_point deadline) override {
    killer_->Tick();
    return base_->WaitFor(key, deadline);
  }
  Result<std::vector<std::optional<std::string>>> GetMany(
      const std::vector<std::string>& keys,
      std::chrono::steady_clock::time_point deadline) override {
    killer_->Tick();
    return base_->GetMany(keys, deadline);
  }
  Status Delete(const std::string& key) override {
    killer_->Tick();
    return base_->Delete(key);
  }
  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    killer_->Tick();
    return base_->Add(key, delta);
  }
  std::string Describe() const override { return base_->Describe(); }

 private:
  CommitChannel* const base_;
  Killer* const killer_;
};

int Run(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: rank_saver save|load ROOT PORT RANK WORLD [STEP FAULT TIMEOUT]\n");
    return 1;
  }
  const std::string mode = argv[1];
  const int rank = std::atoi(argv[4]);
  const int world = std::atoi(argv[5]);
  const uint64_t step = argc > 6 ? std::strtoull(argv[6], nullptr, 10) : 0;
  const std::string fault = argc > 7 ? argv[7] : "none";
  const int64_t timeout_ms = argc > 8 ? std::atoll(argv[8]) : 0;
  const std::string node = argc > 9 ? argv[9] : "-";
  const bool replicate = argc > 10 && std::string(argv[10]) == "1";

  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(std::atoi(argv[3]));
  so.isServer = false;
  so.waitWorkers = false;
  so.timeout = std::chrono::seconds(60);
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  C10dCommitChannel tcp(store, "c10d TCPStore");

  Killer killer(fault.rfind("kill@", 0) == 0 ? std::strtoull(fault.c_str() + 5, nullptr, 10) : 0);
  KillingChannel channel(&tcp, &killer);
  FaultEnv fault_env(Env::Default());
  const auto read_delay = std::chrono::milliseconds(
      fault.rfind("slowread@", 0) == 0 ? std::strtoll(fault.c_str() + 9, nullptr, 10) : 0);
  const auto write_delay = std::chrono::milliseconds(
      fault.rfind("slowwrite@", 0) == 0 ? std::strtoll(fault.c_str() + 10, nullptr, 10) : 0);
  KillingEnv env(&fault_env, &killer, read_delay, write_delay);
  if (fault == "enospc") fault_env.FailWritesAfterBytes(4096, ENOSPC);
  if (fault == "fsync") fault_env.FailNthSync(1);
  if (fault.rfind("eio@", 0) == 0)
    fault_env.FailWritesAfterBytes(std::strtoull(fault.c_str() + 4, nullptr, 10), EIO);
  if (fault.rfind("eioread@", 0) == 0) fault_env.FailReadsOf(fault.substr(8), EIO);

  CheckpointOptions o;
  o.root = argv[2];
  o.env = &env;
  o.rank = rank;
  o.world_size = world;
  o.commit_channel = &channel;
  o.commit_timeout = std::chrono::milliseconds(timeout_ms);
  o.job_id = "rank-saver";
  o.fencing_token = 1000 + rank;
  o.chunk_size = 4096;
  o.keep_last = 0;
  o.io_engine = "posix";
  o.threads = 1;
  if (node != "-") o.node_id = node;
  auto ckpt = Checkpointer::Open(o);
  if (!ckpt.ok()) {
    std::printf("open %s\n", ckpt.status().ToString().c_str());
    return 1;
  }

  // Start together: a rank still loading its libraries must not look lost
  // to a rank that is already waiting for its report.
  const std::string ready = mode + "-ready-" + std::to_string(step);
  store->add(ready, 1);
  const auto start_by = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (store->add(ready, 0) < world) {
    if (std::chrono::steady_clock::now() > start_by) {
      std::printf("outcome the other ranks did not start\n");
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  killer.Arm();
  const int64_t rows = kRowsPerRank * world;
  if (mode == "save") {
    std::vector<int64_t> w(kRowsPerRank * kCols), bias(kBias);
    for (int64_t r = 0; r < kRowsPerRank; ++r) {
      for (int64_t c = 0; c < kCols; ++c)
        w[r * kCols + c] = Value(step, rank * kRowsPerRank + r, c);
    }
    for (int64_t i = 0; i < kBias; ++i) bias[i] = Value(step, -1, i);
    State state;
    state.tensors.push_back(TensorShard{"w",
                                        DType::kInt64,
                                        {rows, kCols},
                                        {rank * kRowsPerRank, 0},
                                        {kRowsPerRank, kCols},
                                        w.data()});
    if (rank == 0)
      state.tensors.push_back(TensorShard{"bias", DType::kInt64, {kBias}, {}, {}, bias.data()});
    state.blobs["who"] = "rank " + std::to_string(rank);
    if (fault.rfind("abandon@", 0) == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoll(fault.c_str() + 8)));
      Status s = (*ckpt)->AbandonSave(step, Status::InvalidArgument("this rank's state is bad"));
      std::printf("outcome %s\n", s.ToString().c_str());
      return 3;
    }
    auto handle = (*ckpt)->Save(step, state);
    Status s = handle.ok() ? handle->durable.get() : handle.status();
    std::printf("outcome %s\n", s.ToString().c_str());
    std::fflush(stdout);
    if (s.ok() && replicate) {
      Status r = (*ckpt)->FlushReplication(std::chrono::seconds(120));
      std::printf("replication %s\n", r.ToString().c_str());
      std::fflush(stdout);
      if (!r.ok()) return 5;
    }
    return s.ok() ? 0 : 3;
  }

  // load: this rank's share of "w" at this world size (uneven: the last rank
  // takes the remainder) and all of "bias"; the saved world size may differ.
  int64_t saved_rows = 0, begin = 0, count = 0;
  std::vector<int64_t> w, bias(kBias, -1);
  auto loaded =
      (*ckpt)->Load([&](const CheckpointReader& reader) -> Result<std::vector<TensorDest>> {
        for (const auto& t : reader.tensors()) {
          if (t.name == "w") saved_rows = t.shape[0];
        }
        const int64_t per = saved_rows / world;
        begin = per * rank;
        count = rank == world - 1 ? saved_rows - begin : per;
        w.assign(count * kCols, -1);
        return std::vector<TensorDest>{
            TensorDest{
                "w", DType::kInt64, {saved_rows, kCols}, {begin, 0}, {count, kCols}, w.data()},
            TensorDest{"bias", DType::kInt64, {kBias}, {}, {}, bias.data()}};
      });
  if (!loaded.ok()) {
    std::printf("outcome %s\n", loaded.status().ToString().c_str());
    return 3;
  }
  for (int64_t r = 0; r < count; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      if (w[r * kCols + c] != Value(loaded->step, begin + r, c)) {
        std::printf("outcome wrong value at row %lld col %lld\n", (long long)(begin + r),
                    (long long)c);
        return 4;
      }
    }
  }
  for (int64_t i = 0; i < kBias; ++i) {
    if (bias[i] != Value(loaded->step, -1, i)) {
      std::printf("outcome wrong bias %lld\n", (long long)i);
      return 4;
    }
  }
  for (const std::string& why : loaded->skipped) std::printf("skipped %s\n", why.c_str());
  auto who = loaded->blobs.find("who");
  std::printf("loaded %llu who=%s\n", (unsigned long long)loaded->step,
              who == loaded->blobs.end() ? "-" : who->second.c_str());
  std::printf("outcome OK\n");
  return 0;
}

}  // namespace
}  // namespace stint

int main(int argc, char** argv) { return stint::Run(argc, argv); }
