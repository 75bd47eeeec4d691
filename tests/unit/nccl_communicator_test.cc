// The NCCL communicator: type mapping and id text everywhere; forming and
// collectives on a GPU machine (one GPU: a world of one; two ranks need two
// GPUs, since NCCL refuses two ranks of one communicator on one device).
// GPU tests skip with the reason elsewhere.
#include "nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <nccl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "device_probe.h"
#include "nccl_staging.h"
#include "nccl_types.h"
#include "nccl_unique_id.h"
#include "util/gpu_skip.h"
#include "util/status_matchers.h"

namespace stint {
namespace {

using std::chrono::milliseconds;

// The test's own GroupKv: a map in memory, Wait on a condition variable.
class MemKv final : public GroupKv {
 public:
  Status Put(const std::string& key, const std::string& value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      values_[key] = value;
    }
    cv_.notify_all();
    return Status::OK();
  }
  Result<std::string> Wait(const std::string& key, milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; })) {
      return Status::DeadlineExceeded("kv " + key + " was not put within " +
                                      std::to_string(timeout.count()) + " ms");
    }
    return values_[key];
  }
  std::string Get(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    return values_.count(key) ? values_[key] : "";
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
};

// Another backend's communicator, for Shrink's refusal.
class FakeComm final : public Communicator {
 public:
  const char* backend() const override { return "fake"; }
  const GroupMembership& membership() const override { return m_; }
  Status AllReduce(void*, size_t, DType, ReduceOp) override { return Status::OK(); }
  Status Broadcast(void*, size_t, int) override { return Status::OK(); }
  Status Barrier() override { return Status::OK(); }
  void Abort() override { aborted_ = true; }
  bool aborted() const override { return aborted_; }
  GroupMembership m_{1, 0, 2, "127.0.0.1", 0, -1};
  bool aborted_ = false;
};

GroupMembership Member(uint64_t generation, int rank, int world_size) {
  GroupMembership m;
  m.generation = generation;
  m.rank = rank;
  m.world_size = world_size;
  m.master_host = "127.0.0.1";
  return m;
}

bool FdIsClosed(int fd) { return fcntl(fd, F_GETFD) == -1 && errno == EBADF; }

// Device memory of `n` T on the current device, filled from the host.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : n_(host.size()) {
    EXPECT_EQ(cudaMalloc(&ptr_, n_ * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void* get() { return ptr_; }
  std::vector<T> ToHost() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  size_t n_;
  void* ptr_ = nullptr;
};

// --- No GPU needed. ---

TEST(NcclTypes, MapsEveryDTypeNcclReduces) {
  const std::pair<DType, ncclDataType_t> cases[] = {
      {DType::kFloat32, ncclFloat32}, {DType::kFloat64, ncclFloat64},
      {DType::kFloat16, ncclFloat16}, {DType::kBFloat16, ncclBfloat16},
      {DType::kInt8, ncclInt8},       {DType::kUInt8, ncclUint8},
      {DType::kInt32, ncclInt32},     {DType::kInt64, ncclInt64},
  };
  for (const auto& [dtype, nccl] : cases) {
    Result<ncclDataType_t> t = NcclDataType(dtype);
    ASSERT_OK(t) << DTypeName(dtype);
    EXPECT_EQ(*t, nccl) << DTypeName(dtype);
  }
}

TEST(NcclTypes, RefusesDTypesNcclCannotReduceNamingThem) {
  for (DType dtype : {DType::kInt16, DType::kBool, DType::kComplex64, DType::kComplex128}) {
    Result<ncclDataType_t> t = NcclDataType(dtype);
    ASSERT_FALSE(t.ok()) << DTypeName(dtype);
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
    EXPECT_NE(t.status().message().find(DTypeName(dtype)), std::string::npos)
        << t.status().ToString();
  }
}

TEST(NcclTypes, MapsSumMaxMinAndRefusesAnythingElse) {
  EXPECT_EQ(*NcclRedOp(ReduceOp::kSum), ncclSum);
  EXPECT_EQ(*NcclRedOp(ReduceOp::kMax), ncclMax);
  EXPECT_EQ(*NcclRedOp(ReduceOp::kMin), ncclMin);
  Result<ncclRedOp_t> bad = NcclRedOp(static_cast<ReduceOp>(42));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
}

TEST(NcclUniqueId, HexRoundTripsEveryByteValue) {
  ncclUniqueId id;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i)
    id.internal[i] = static_cast<char>(i * 2 + 1);  // > 127 too
  const std::string hex = EncodeNcclUniqueId(id);
  ASSERT_EQ(hex.size(), 2u * NCCL_UNIQUE_ID_BYTES);
  EXPECT_EQ(hex.substr(0, 6), "010305");
  EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos);
  Result<ncclUniqueId> back = DecodeNcclUniqueId(hex, kNcclIdKey);
  ASSERT_OK(back);
  EXPECT_EQ(std::memcmp(back->internal, id.internal, NCCL_UNIQUE_ID_BYTES), 0);

  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  Result<ncclUniqueId> from_upper = DecodeNcclUniqueId(upper, kNcclIdKey);
  ASSERT_OK(from_upper);
  EXPECT_EQ(std::memcmp(from_upper->internal, id.internal, NCCL_UNIQUE_ID_BYTES), 0);
}

TEST(NcclUniqueId, MalformedIdIsDataLossNamingTheKey) {
  ncclUniqueId id;
  std::memset(&id, 0xab, sizeof(id));
  const std::string good = EncodeNcclUniqueId(id);
  std::string non_hex = good;
  non_hex[17] = 'g';
  for (const std::string& bad :
       {std::string(), good.substr(1), good + "0", non_hex, std::string(256, ' ')}) {
    Result<ncclUniqueId> r = DecodeNcclUniqueId(bad, kNcclIdKey);
    ASSERT_FALSE(r.ok()) << "'" << bad << "'";
    EXPECT_EQ(r.status().code(), Code::kDataLoss);
    EXPECT_NE(r.status().message().find("nccl-id"), std::string::npos) << r.status().ToString();
  }
  EXPECT_NE(DecodeNcclUniqueId(non_hex, kNcclIdKey).status().message().find("offset 17"),
            std::string::npos);
}

TEST(NcclFactory, NameIsNccl) {
  NcclCommunicatorFactory factory;
  EXPECT_STREQ(factory.Name(), "nccl");
}

TEST(NcclFactory, FormWithoutADeviceIsUnavailable) {
  Result<int> gpus = CudaDeviceCount();
  if (gpus.ok()) GTEST_SKIP() << "this machine has " << *gpus << " CUDA device(s)";
  NcclCommunicatorFactory factory;
  MemKv kv;
  Result<std::unique_ptr<Communicator>> comm = factory.Form(Member(1, 0, 1), kv);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), Code::kUnavailable);
  EXPECT_NE(comm.status().message().find("no CUDA device"), std::string::npos)
      << comm.status().ToString();
  EXPECT_EQ(kv.Get(kNcclIdKey), "") << "nothing is published without a device";
}

// Without a device Form fails at the probe; with one, rank 1 of 2 finds no
// id in time. Either way the listening socket handed to it is closed.
TEST(NcclFactory, FormClosesTheListenFdEvenWhenItFails) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  NcclCommunicatorOptions options;
  options.comm.timeout = milliseconds(200);
  NcclCommunicatorFactory factory(options);
  MemKv kv;
  GroupMembership m = Member(1, 1, 2);
  m.master_listen_fd = fd;
  Result<std::unique_ptr<Communicator>> comm = factory.Form(m, kv);
  ASSERT_FALSE(comm.ok());
  EXPECT_TRUE(comm.status().code() == Code::kUnavailable ||
              comm.status().code() == Code::kDeadlineExceeded)
      << comm.status().ToString();
  EXPECT_TRUE(FdIsClosed(fd));
}

TEST(NcclFactory, ShrinkRefusesAnotherBackendsCommunicator) {
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  NcclCommunicatorFactory factory;
  FakeComm old;
  Result<std::unique_ptr<Communicator>> comm = factory.Shrink(old, Member(2, 0, 1), {1});
  ASSERT_FALSE(comm.ok());
  if (version < NCCL_VERSION(2, 27, 0)) {
    EXPECT_EQ(comm.status().code(), Code::kUnimplemented) << comm.status().ToString();
  } else {
    EXPECT_EQ(comm.status().code(), Code::kInvalidArgument) << comm.status().ToString();
    EXPECT_NE(comm.status().message().find("fake"), std::string::npos) << comm.status().ToString();
  }
  EXPECT_FALSE(old.aborted()) << "a refused shrink leaves the old communicator alone";
}

// --- One GPU: a world of one rank. ---

std::unique_ptr<Communicator> FormSingle(MemKv& kv, NcclCommunicatorOptions options = {}) {
  NcclCommunicatorFactory factory(options);
  Result<std::unique_ptr<Communicator>> comm = factory.Form(Member(1, 0, 1), kv);
  EXPECT_OK(comm);
  return comm.ok() ? std::move(*comm) : nullptr;
}

// Every test here needs a GPU (some two) and starts on device 0.
class NcclSingleRank : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_UNLESS_GPUS(1);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
};

TEST_F(NcclSingleRank, AllReduceBroadcastBarrierOnDeviceMemory) {
  MemKv kv;
  std::unique_ptr<Communicator> comm = FormSingle(kv);
  ASSERT_NE(comm, nullptr);
  EXPECT_STREQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world_size(), 1);
  EXPECT_EQ(comm->generation(), 1u);
  EXPECT_EQ(kv.Get(kNcclIdKey).size(), 2u * NCCL_UNIQUE_ID_BYTES) << "rank 0 publishes the id";

  DeviceArray<float> f({1.5f, -2.0f, 3.0f, 4.25f});
  Status s = comm->AllReduce(f.get(), 4, DType::kFloat32, ReduceOp::kSum);
  ASSERT_OK(s);
  EXPECT_EQ(f.ToHost(), (std::vector<float>{1.5f, -2.0f, 3.0f, 4.25f}));

  DeviceArray<int64_t> i({7, -9, int64_t{1} << 40});
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    s = comm->AllReduce(i.get(), 3, DType::kInt64, op);
    ASSERT_OK(s);
  }
  EXPECT_EQ(i.ToHost(), (std::vector<int64_t>{7, -9, int64_t{1} << 40}));

  DeviceArray<uint8_t> bytes({1, 2, 3, 4, 5});
  s = comm->Broadcast(bytes.get(), 5, 0);
  ASSERT_OK(s);
  EXPECT_EQ(bytes.ToHost(), (std::vector<uint8_t>{1, 2, 3, 4, 5}));

  s = comm->Barrier();
  ASSERT_OK(s);
  EXPECT_FALSE(comm->aborted());
}

TEST_F(NcclSingleRank, RunsOnTheCallersStream) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  {
    NcclCommunicatorOptions options;
    options.stream = stream;
    options.device = 0;
    MemKv kv;
    std::unique_ptr<Communicator> comm = FormSingle(kv, options);
    ASSERT_NE(comm, nullptr);
    DeviceArray<int32_t> v({1, 2, 3});
    Status s = comm->AllReduce(v.get(), 3, DType::kInt32, ReduceOp::kMax);
    ASSERT_OK(s);
    EXPECT_EQ(v.ToHost(), (std::vector<int32_t>{1, 2, 3}));
    ASSERT_OK(comm->Barrier());
  }
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess) << "the caller's stream stays the caller's";
}

TEST_F(NcclSingleRank, AbortThenEveryCallIsAborted) {
  MemKv kv;
  std::unique_ptr<Communicator> comm = FormSingle(kv);
  ASSERT_NE(comm, nullptr);
  comm->Abort();
  EXPECT_TRUE(comm->aborted());
  comm->Abort();  // idempotent
  DeviceArray<float> f({1.0f});
  EXPECT_EQ(comm->AllReduce(f.get(), 1, DType::kFloat32, ReduceOp::kSum).code(), Code::kAborted);
  EXPECT_EQ(comm->Broadcast(f.get(), sizeof(float), 0).code(), Code::kAborted);
  Status s = comm->Barrier();
  EXPECT_EQ(s.code(), Code::kAborted);
  EXPECT_NE(s.message().find("Abort()"), std::string::npos) << s.ToString();
}

TEST_F(NcclSingleRank, AbortFromAnotherThreadStopsALoopOfCollectivesPromptly) {
  MemKv kv;
  std::unique_ptr<Communicator> comm = FormSingle(kv);
  ASSERT_NE(comm, nullptr);
  DeviceArray<float> big(std::vector<float>(size_t{1} << 22, 1.0f));  // 16 MiB
  std::atomic<bool> running{false};
  Status last;
  std::chrono::steady_clock::time_point stopped;
  std::thread worker([&] {
    running = true;
    (void)cudaSetDevice(0);
    do {
      last = comm->AllReduce(big.get(), size_t{1} << 22, DType::kFloat32, ReduceOp::kSum);
    } while (last.ok());
    stopped = std::chrono::steady_clock::now();
  });
  while (!running) std::this_thread::yield();
  std::this_thread::sleep_for(milliseconds(100));
  const auto t0 = std::chrono::steady_clock::now();
  comm->Abort();
  worker.join();
  EXPECT_EQ(last.code(), Code::kAborted) << last.ToString();
  EXPECT_LT(stopped - t0, std::chrono::seconds(10));
  EXPECT_TRUE(comm->aborted());
}

TEST_F(NcclSingleRank, HostMemoryIsStagedThroughTheDevice) {
  MemKv kv;
  std::unique_ptr<Communicator> comm = FormSingle(kv);
  ASSERT_NE(comm, nullptr);
  // The step-boundary agreement: two int64 flags in pageable host memory.
  int64_t flags[2] = {1, 0};
  ASSERT_OK(comm->AllReduce(flags, 2, DType::kInt64, ReduceOp::kMax));
  EXPECT_EQ(flags[0], 1);
  EXPECT_EQ(flags[1], 0);
  // A blob larger than the staging buffers goes in several chunks; an odd
  // size ends in a partial one.
  std::string blob(kNcclStagingCapacity * 2 + 12345, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 31 + 7);
  const std::string want = blob;
  ASSERT_OK(comm->Broadcast(blob.data(), blob.size(), 0));
  EXPECT_EQ(blob, want);
  std::vector<double> values(kNcclStagingCapacity / sizeof(double) + 3, 0.5);
  ASSERT_OK(comm->AllReduce(values.data(), values.size(), DType::kFloat64, ReduceOp::kSum));
  EXPECT_EQ(values.back(), 0.5);
  // Pinned host memory takes the same path.
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), 4 * sizeof(float)), cudaSuccess);
  for (int i = 0; i < 4; ++i) pinned[i] = 1.5f * static_cast<float>(i);
  ASSERT_OK(comm->AllReduce(pinned, 4, DType::kFloat32, ReduceOp::kMin));
  EXPECT_EQ(pinned[3], 4.5f);
  cudaFreeHost(pinned);
  EXPECT_FALSE(comm->aborted());
}

TEST_F(NcclSingleRank, DeviceMemoryOfAnotherDeviceIsRefusedAndAbortsTheCommunicator) {
  SKIP_UNLESS_GPUS(2);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  DeviceArray<float> elsewhere({1.0f});
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  MemKv kv;
  std::unique_ptr<Communicator> comm = FormSingle(kv);
  ASSERT_NE(comm, nullptr);
  Status s = comm->AllReduce(elsewhere.get(), 1, DType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("CUDA device 1"), std::string::npos) << s.ToString();
  EXPECT_TRUE(comm->aborted()) << "a failed call leaves the communicator unusable";
  EXPECT_EQ(comm->Barrier().code(), Code::kAborted);
}

TEST_F(NcclSingleRank, CollectiveWaitsForTheCallersCurrentStream) {
  cudaStream_t caller = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking), cudaSuccess);
  {
    NcclCommunicatorOptions options;
    options.device = 0;
    int asked = -1;
    options.current_stream = [&](int device) -> Result<void*> {
      asked = device;
      return static_cast<void*>(caller);
    };
    MemKv kv;
    std::unique_ptr<Communicator> comm = FormSingle(kv, options);
    ASSERT_NE(comm, nullptr);
    // The caller's stream writes the buffer (a large copy, still running
    // when the collective is enqueued); the collective must see its result.
    const size_t n = size_t{1} << 24;  // 64 MiB of int32
    std::vector<int32_t> ones(n, 1);
    DeviceArray<int32_t> dst(std::vector<int32_t>(n, 0));
    int32_t* pinned = nullptr;
    ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), n * sizeof(int32_t)), cudaSuccess);
    std::memcpy(pinned, ones.data(), n * sizeof(int32_t));
    ASSERT_EQ(
        cudaMemcpyAsync(dst.get(), pinned, n * sizeof(int32_t), cudaMemcpyHostToDevice, caller),
        cudaSuccess);
    ASSERT_OK(comm->AllReduce(dst.get(), n, DType::kInt32, ReduceOp::kSum));
    EXPECT_EQ(asked, 0);
    EXPECT_EQ(dst.ToHost(), ones);
    cudaFreeHost(pinned);
    // An error from the provider fails the call and aborts.
    options.current_stream = [](int) -> Result<void*> { return Status::Unavailable("no torch"); };
    MemKv kv2;
    std::unique_ptr<Communicator> failing = FormSingle(kv2, options);
    ASSERT_NE(failing, nullptr);
    Status s = failing->Barrier();
    EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
    EXPECT_TRUE(failing->aborted());
  }
  EXPECT_EQ(cudaStreamDestroy(caller), cudaSuccess);
}

TEST_F(NcclSingleRank, UnreducibleDTypeIsRefusedNamingIt) {
  MemKv kv;
  std::unique_ptr<Communicator> comm = FormSingle(kv);
  ASSERT_NE(comm, nullptr);
  DeviceArray<uint8_t> flags({1, 0, 1});
  Status s = comm->AllReduce(flags.get(), 3, DType::kBool, ReduceOp::kMax);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("bool"), std::string::npos) << s.ToString();
}

TEST_F(NcclSingleRank, BroadcastFromARootOutsideTheWorldIsRefused) {
  MemKv kv;
  std::unique_ptr<Communicator> comm = FormSingle(kv);
  ASSERT_NE(comm, nullptr);
  DeviceArray<uint8_t> bytes({1});
  EXPECT_EQ(comm->Broadcast(bytes.get(), 1, 1).code(), Code::kInvalidArgument);
}

TEST_F(NcclSingleRank, FormOnADeviceThatDoesNotExistIsInvalidArgument) {
  NcclCommunicatorOptions options;
  options.device = *CudaDeviceCount();
  NcclCommunicatorFactory factory(options);
  MemKv kv;
  Result<std::unique_ptr<Communicator>> comm = factory.Form(Member(1, 0, 1), kv);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), Code::kInvalidArgument) << comm.status().ToString();
}

TEST_F(NcclSingleRank, ShrinkRefusesToExcludeItselfAndLeavesTheOldOneUsable) {
  MemKv kv;
  std::unique_ptr<Communicator> comm = FormSingle(kv);
  ASSERT_NE(comm, nullptr);
  NcclCommunicatorFactory factory;
  Result<std::unique_ptr<Communicator>> shrunk = factory.Shrink(*comm, Member(2, 0, 0), {0});
  ASSERT_FALSE(shrunk.ok());
  EXPECT_TRUE(shrunk.status().code() == Code::kFailedPrecondition ||
              shrunk.status().code() == Code::kUnimplemented)
      << shrunk.status().ToString();
  EXPECT_FALSE(comm->aborted());
  EXPECT_OK(comm->Barrier());
}

// --- Two GPUs: two ranks, one thread and one device each. ---

// Forms ranks 0 and 1 of generation 1 on devices 0 and 1 concurrently.
std::vector<std::unique_ptr<Communicator>> FormPair(MemKv& kv, milliseconds timeout) {
  std::vector<std::unique_ptr<Communicator>> comms(2);
  std::vector<Status> status(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      NcclCommunicatorOptions options;
      options.device = rank;
      options.comm.timeout = timeout;
      NcclCommunicatorFactory factory(options);
      Result<std::unique_ptr<Communicator>> c = factory.Form(Member(1, rank, 2), kv);
      status[rank] = c.status();
      if (c.ok()) comms[rank] = std::move(*c);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) EXPECT_OK(status[rank]) << "rank " << rank;
  if (!comms[0] || !comms[1]) comms.clear();
  return comms;
}

// Every test here needs two GPUs: comms_ holds ranks 0 and 1 once formed.
class NcclTwoRanks : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_UNLESS_GPUS(2); }

  // Forms comms_ (FormPair) with each collective's `timeout`.
  void Form(milliseconds timeout) {
    comms_ = FormPair(kv_, timeout);
    ASSERT_EQ(comms_.size(), 2u);
  }

  // Runs `fn` for both ranks at once, each on a thread of its own with its
  // device current; what each returned (OK where the device could not be
  // made current).
  std::vector<Status> OnBothRanks(const std::function<Status(int rank, Communicator& c)>& fn) {
    std::vector<Status> status(2);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, rank] {
        if (cudaSetDevice(rank) != cudaSuccess) return;
        status[rank] = fn(rank, *comms_[rank]);
      });
    }
    for (std::thread& t : threads) t.join();
    return status;
  }

  MemKv kv_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

TEST_F(NcclTwoRanks, AllReduceBroadcastBarrierAcrossTwoThreads) {
  ASSERT_NO_FATAL_FAILURE(Form(std::chrono::seconds(60)));
  std::vector<std::vector<float>> sums(2), maxes(2);
  std::vector<std::vector<uint8_t>> bcast(2);
  const std::vector<Status> status = OnBothRanks([&](int rank, Communicator& c) {
    DeviceArray<float> sum(std::vector<float>(1000, rank + 1.0f));
    DeviceArray<float> max(std::vector<float>(1000, rank + 1.0f));
    DeviceArray<uint8_t> bytes(std::vector<uint8_t>(64, static_cast<uint8_t>(10 + rank)));
    Status s = c.AllReduce(sum.get(), 1000, DType::kFloat32, ReduceOp::kSum);
    if (s.ok()) s = c.AllReduce(max.get(), 1000, DType::kFloat32, ReduceOp::kMax);
    if (s.ok()) s = c.Broadcast(bytes.get(), 64, /*root=*/1);
    if (s.ok()) s = c.Barrier();
    sums[rank] = sum.ToHost();
    maxes[rank] = max.ToHost();
    bcast[rank] = bytes.ToHost();
    return s;
  });
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_OK(status[rank]) << "rank " << rank;
    EXPECT_EQ(sums[rank], std::vector<float>(1000, 3.0f)) << "rank " << rank;
    EXPECT_EQ(maxes[rank], std::vector<float>(1000, 2.0f)) << "rank " << rank;
    EXPECT_EQ(bcast[rank], std::vector<uint8_t>(64, 11)) << "rank " << rank;
  }
}

TEST_F(NcclTwoRanks, HostFlagsAndABlobLargerThanTheStagingAreStagedOnBothRanks) {
  ASSERT_NO_FATAL_FAILURE(Form(std::chrono::seconds(60)));
  const size_t n = kNcclStagingCapacity + 1000;  // two chunks, the second partial
  std::vector<std::vector<int64_t>> flags(2);
  std::vector<std::string> blobs(2);
  const std::vector<Status> status = OnBothRanks([&](int rank, Communicator& c) {
    // The step-boundary agreement: rank 1 wants a new generation.
    flags[rank] = {rank == 1 ? 1 : 0, 0};
    Status s = c.AllReduce(flags[rank].data(), 2, DType::kInt64, ReduceOp::kMax);
    // The state sync: rank 0's blob, size first.
    std::string& blob = blobs[rank];
    if (rank == 0) {
      blob.resize(n);
      for (size_t i = 0; i < n; ++i) blob[i] = static_cast<char>(i % 251);
    }
    uint64_t size = blob.size();
    if (s.ok()) s = c.Broadcast(&size, sizeof(size), 0);
    blob.resize(size);
    if (s.ok()) s = c.Broadcast(blob.data(), blob.size(), 0);
    return s;
  });
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_OK(status[rank]) << "rank " << rank;
    EXPECT_EQ(flags[rank], (std::vector<int64_t>{1, 0})) << "rank " << rank;
    EXPECT_EQ(blobs[rank], blobs[0]) << "rank " << rank;
  }
  EXPECT_EQ(blobs[1].size(), n);
}

TEST_F(NcclTwoRanks, CollectiveWithoutItsPeerTimesOutAndAborts) {
  ASSERT_NO_FATAL_FAILURE(Form(milliseconds(1000)));
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  DeviceArray<float> f({1.0f});
  const auto t0 = std::chrono::steady_clock::now();
  Status s =
      comms_[0]->AllReduce(f.get(), 1, DType::kFloat32, ReduceOp::kSum);  // rank 1 never joins
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_TRUE(comms_[0]->aborted());
  EXPECT_EQ(comms_[0]->Barrier().code(), Code::kAborted);
  comms_[1]->Abort();
}

TEST_F(NcclTwoRanks, AbortFromAnotherThreadInterruptsACollectiveInFlight) {
  ASSERT_NO_FATAL_FAILURE(Form(std::chrono::seconds(60)));
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  DeviceArray<float> f({1.0f});
  std::thread aborter([&] {
    std::this_thread::sleep_for(milliseconds(300));
    comms_[0]->Abort();
  });
  const auto t0 = std::chrono::steady_clock::now();
  Status s =
      comms_[0]->AllReduce(f.get(), 1, DType::kFloat32, ReduceOp::kSum);  // rank 1 never joins
  const auto took = std::chrono::steady_clock::now() - t0;
  aborter.join();
  EXPECT_EQ(s.code(), Code::kAborted) << s.ToString();
  EXPECT_LT(took, std::chrono::seconds(20)) << "well before the 60 s timeout";
  comms_[1]->Abort();
}

TEST_F(NcclTwoRanks, ShrinkKeepsTheSurvivorAndAbortsTheParent) {
  ASSERT_NO_FATAL_FAILURE(Form(std::chrono::seconds(60)));
  comms_[1]->Abort();  // rank 1 leaves (or died)
  NcclCommunicatorOptions options;
  options.device = 0;
  NcclCommunicatorFactory factory(options);
  Result<std::unique_ptr<Communicator>> shrunk = factory.Shrink(*comms_[0], Member(2, 0, 1), {1});
  Result<NcclRecoveryPlan> ladder = LoadedNcclRecoveryPlan();
  ASSERT_OK(ladder);
  if (!ladder->shrink) {
    EXPECT_EQ(shrunk.status().code(), Code::kUnimplemented) << shrunk.status().ToString();
    GTEST_SKIP() << ladder->summary;
  }
  ASSERT_OK(shrunk);
  EXPECT_TRUE(comms_[0]->aborted()) << "the parent is aborted after an aborting shrink";
  Communicator& c = **shrunk;
  EXPECT_EQ(c.generation(), 2u);
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.world_size(), 1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  DeviceArray<float> f({5.0f});
  Status s = c.AllReduce(f.get(), 1, DType::kFloat32, ReduceOp::kSum);
  ASSERT_OK(s);
  EXPECT_EQ(f.ToHost(), std::vector<float>{5.0f});
  EXPECT_OK(c.Barrier());
}

}  // namespace
}  // namespace stint
