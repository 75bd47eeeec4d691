// One writer per checkpoint root: a second writer (another process, or
// another Checkpointer of this one) is refused with the holder's pid and
// host and removes nothing; readers open beside the writer; once the holder
// is SIGKILLed a new writer gets the lock and removes what the dead one left.
// The same holds for a tier-2 replica root. Roots are created with parents.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "stint/checkpointer.h"
#include "util/status_matchers.h"
#include "util/step_state.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

constexpr double kProcessSeconds = 240;  // start-up and first commit on a loaded machine

std::string HostName() {
  char host[256] = {};
  EXPECT_EQ(gethostname(host, sizeof(host) - 1), 0);
  return host;
}

std::string Holder(pid_t pid) {
  return "pid " + std::to_string(pid) + " on host " + HostName();
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// What a writer that died mid-save leaves: a tmp directory and LATEST.tmp.
void MakeLeftovers(const std::string& root, const std::string& tmp_name) {
  ASSERT_EQ(mkdir((root + "/" + tmp_name).c_str(), 0755), 0) << tmp_name;
  ASSERT_TRUE(WriteWholeFile(root + "/" + tmp_name + "/rank-00000.stint", "partial"));
  ASSERT_TRUE(WriteWholeFile(root + "/LATEST.tmp", "step-00000999\n"));
}

TEST(WriterLock, SecondWriterRefusedNamingHolderUntilTheHolderIsKilled) {
  TempDir dir;
  const std::string root = dir.Sub("ckpt");
  ChildProcess writer(STINT_CRASH_WRITER, {root, "posix"}, /*merge_stderr=*/false);
  ASSERT_TRUE(writer.started());
  ASSERT_TRUE(writer.WaitForLine("durable ", kProcessSeconds)) << writer.output();
  const std::string leftover = ".tmp-999-00000000000000ff";
  MakeLeftovers(root, leftover);

  CheckpointOptions o;
  o.root = root;
  auto second = Checkpointer::Open(o);
  ASSERT_FALSE(second.ok()) << "a second writer opened a root that a live process writes";
  EXPECT_EQ(second.status().code(), Code::kFailedPrecondition) << second.status().ToString();
  EXPECT_NE(second.status().message().find(Holder(writer.pid())), std::string::npos)
      << second.status().ToString();

  CheckpointOptions ro = o;
  ro.read_only = true;
  auto reader = Checkpointer::Open(ro);
  ASSERT_OK(reader);
  auto listed = (*reader)->ListCommitted();
  ASSERT_OK(listed);
  EXPECT_FALSE(listed->empty());
  reader->reset();
  EXPECT_TRUE(Exists(root + "/" + leftover)) << "a refused writer or a reader removed leftovers";
  EXPECT_TRUE(Exists(root + "/LATEST.tmp"));

  ASSERT_EQ(kill(writer.pid(), SIGKILL), 0);
  int status = writer.Wait();
  ASSERT_TRUE(WIFSIGNALED(status)) << "writer ended by itself: " << writer.output();

  auto next = Checkpointer::Open(o);  // the lock went with the dead writer
  ASSERT_OK(next);
  EXPECT_FALSE(Exists(root + "/" + leftover));
  EXPECT_FALSE(Exists(root + "/LATEST.tmp"));
  auto children = Env::Default()->GetChildren(root);
  ASSERT_OK(children);
  for (const std::string& name : *children) {
    EXPECT_NE(name.rfind(".tmp-", 0), 0u) << "the dead writer's " << name << " is still there";
  }
  // And the lock is this process's now.
  auto third = Checkpointer::Open(o);
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.status().message().find(Holder(getpid())), std::string::npos)
      << third.status().ToString();
}

TEST(WriterLock, SecondWriterInThisProcessWaitsUpToLockWait) {
  TempDir dir;
  CheckpointOptions o;
  o.root = dir.Sub("ckpt");
  o.chunk_size = 8192;
  auto first = Checkpointer::Open(o);
  ASSERT_OK(first);
  auto refused = Checkpointer::Open(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(Holder(getpid())), std::string::npos)
      << refused.status().ToString();

  first->reset();
  o.lock_wait = std::chrono::minutes(1);
  auto second = Checkpointer::Open(o);
  ASSERT_OK(second);
  StepState s(4);
  auto h = (*second)->Save(4, s.AsState());
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());
}

TEST(WriterLock, RootAndReplicaRootAreCreatedWithParentsAndTheReplicaIsLocked) {
  TempDir dir;
  CheckpointOptions o;
  o.root = dir.Sub("nvme/job-7/ckpt");          // nvme/ and job-7/ do not exist
  o.replica_root = dir.Sub("shared/job-7/ckpt");  // nor shared/ and its job-7/
  o.chunk_size = 8192;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  StepState s(5);
  auto h = (*ckpt)->Save(5, s.AsState());
  ASSERT_OK(h);
  ASSERT_OK(h->durable.get());
  ASSERT_OK(h->replicated.get());
  auto replicated = (*ckpt)->ListReplicated();
  ASSERT_OK(replicated);
  EXPECT_EQ(*replicated, std::vector<uint64_t>{5});

  // Another job's writer sharing the replica root: its tier 1 works, its
  // tier 2 is refused (naming the holder) and removes nothing there.
  const std::string leftover = ".tmp-6-00000000000000aa";
  MakeLeftovers(o.replica_root, leftover);
  CheckpointOptions other = o;
  other.root = dir.Sub("nvme/job-8/ckpt");
  auto intruder = Checkpointer::Open(other);
  ASSERT_OK(intruder);
  StepState s6(6);
  auto h6 = (*intruder)->Save(6, s6.AsState());
  ASSERT_OK(h6);
  ASSERT_OK(h6->durable.get());
  Status r = h6->replicated.get();
  EXPECT_EQ(r.code(), Code::kFailedPrecondition) << r.ToString();
  EXPECT_NE(r.message().find(Holder(getpid())), std::string::npos) << r.ToString();
  EXPECT_TRUE(Exists(o.replica_root + "/" + leftover));

  // Once the holder is gone, the next replication takes the lock and cleans.
  ckpt->reset();
  StepState s7(7);
  auto h7 = (*intruder)->Save(7, s7.AsState());
  ASSERT_OK(h7);
  ASSERT_OK(h7->durable.get());
  ASSERT_OK(h7->replicated.get());
  EXPECT_FALSE(Exists(o.replica_root + "/" + leftover));
}

}  // namespace
}  // namespace stint
