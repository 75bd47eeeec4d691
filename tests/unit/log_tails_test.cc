// LogTails: stintd's in-memory tails of the workers' output (API.md, "Logs").
#include "stintd/server/log_tails.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <string>
#include <thread>

#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint::stintd {
namespace {

using std::chrono::milliseconds;

std::string Text(const LogTails::Tail& t) {
  std::string out;
  for (const LogChunk& c : t.chunks) out += c.text;
  return out;
}

TEST(LogTails, ChunksComeInOrderAndARepeatedHeartbeatAddsNothing) {
  LogTails logs;
  logs.Append(1, 10, 0, 0, 6, "hello ");
  logs.Append(1, 10, 1, 0, 3, "r1\n");
  logs.Append(1, 10, 0, 0, 6, "hello ");  // the same piece again: its answer was lost
  logs.Append(1, 10, 0, 6, 6, "world\n");
  LogTails::Tail all = logs.Read(1, 0, milliseconds(0));
  ASSERT_EQ(all.chunks.size(), 3u);
  EXPECT_EQ(Text(all), "hello r1\nworld\n");
  EXPECT_EQ(all.chunks[1].rank, 1);
  EXPECT_EQ(all.next, 3);
  EXPECT_FALSE(all.dropped);
  LogTails::Tail after = logs.Read(1, 2, milliseconds(0));
  EXPECT_EQ(Text(after), "world\n");
  EXPECT_TRUE(logs.Read(2, 0, milliseconds(0)).chunks.empty()) << "another job's output";
}

TEST(LogTails, CapsDropTheOldestPerJobAndOverall) {
  LogTails logs(/*max_bytes_per_job=*/8, /*max_bytes=*/12);
  logs.Append(1, 10, 0, 0, 4, "aaaa");
  logs.Append(1, 10, 0, 4, 4, "bbbb");
  logs.Append(1, 10, 0, 8, 4, "cccc");  // job 1 over 8 bytes: "aaaa" goes
  LogTails::Tail one = logs.Read(1, 0, milliseconds(0));
  EXPECT_EQ(Text(one), "bbbbcccc");
  EXPECT_TRUE(one.dropped);
  logs.Append(2, 20, 0, 0, 6, "dddddd");  // 14 bytes in all: job 1's "bbbb" goes
  EXPECT_EQ(Text(logs.Read(1, 0, milliseconds(0))), "cccc");
  EXPECT_EQ(Text(logs.Read(2, 0, milliseconds(0))), "dddddd");
}

TEST(LogTails, AReadWaitsForOutputOrAWakeAndACursorFromBeforeARestartStartsOver) {
  LogTails logs;
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    logs.Append(1, 10, 0, 0, 3, "hi\n");
  });
  const auto start = std::chrono::steady_clock::now();
  LogTails::Tail t = logs.Read(1, 0, milliseconds(20000));
  writer.join();
  EXPECT_EQ(Text(t), "hi\n");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));

  std::thread waker([&] {
    std::this_thread::sleep_for(milliseconds(50));
    logs.Wake(1);
  });
  LogTails::Tail woken = logs.Read(1, 1, milliseconds(20000));
  waker.join();
  EXPECT_TRUE(woken.chunks.empty());
  EXPECT_EQ(woken.next, 1);

  // A cursor of a stintd that held more before it restarted.
  EXPECT_EQ(Text(logs.Read(1, 500, milliseconds(0))), "hi\n");
  logs.Shutdown();
  EXPECT_TRUE(logs.Read(1, 1, milliseconds(20000)).chunks.empty())
      << "does not wait after Shutdown";
}

// Persisted tails come back after a restart with their numbering, so a
// cursor stays valid and a repeated upload still adds nothing; the files
// rotate at the per-job cap; a record cut short ends the file and is cut
// off, so the next append is read back whole.
TEST(LogTails, PersistedTailsComeBackNumberedAndRotateAtTheCap) {
  TempDir dir;
  const std::string logs_dir = dir.Sub("logs");
  {
    LogTails logs(/*max_bytes_per_job=*/64);
    ASSERT_OK(logs.Persist(logs_dir));
    logs.Append(1, 10, 0, 0, 6, "hello ");
    logs.Append(1, 10, 0, 6, 6, "world\n");
    logs.Append(2, 20, 1, 0, 3, "r1\n");
  }
  {
    LogTails logs(64);
    ASSERT_OK(logs.Persist(logs_dir));
    LogTails::Tail one = logs.Read(1, 0, milliseconds(0));
    EXPECT_EQ(Text(one), "hello world\n");
    EXPECT_EQ(one.next, 2);
    EXPECT_EQ(Text(logs.Read(1, 1, milliseconds(0))), "world\n") << "the cursor holds";
    EXPECT_EQ(logs.Read(2, 0, milliseconds(0)).chunks.at(0).rank, 1);
    logs.Append(1, 10, 0, 6, 6, "world\n");  // a repeat from before the restart
    logs.Append(1, 10, 0, 12, 3, "ok\n");
    EXPECT_EQ(Text(logs.Read(1, 0, milliseconds(0))), "hello world\nok\n");
    EXPECT_EQ(logs.Read(1, 0, milliseconds(0)).next, 3);
    // 40 bytes a chunk: the file rotates, and only the newest 64 bytes
    // stay in memory.
    for (int i = 0; i < 10; i++)
      logs.Append(1, 11, 0, 40u * i, 40, std::string(39, char('a' + i)) + "\n");
  }
  struct stat st;
  ASSERT_EQ(stat((logs_dir + "/job-1.log.1").c_str(), &st), 0) << "rotated";
  uint64_t on_disk = st.st_size;
  ASSERT_EQ(stat((logs_dir + "/job-1.log").c_str(), &st), 0);
  on_disk += st.st_size;
  EXPECT_LE(on_disk, 2u * (64 + 40 + 32)) << "two files of about the cap";
  // A torn record at the end (stintd died mid-write).
  ASSERT_TRUE(WriteWholeFile(logs_dir + "/job-1.log",
                             ReadWholeFile(logs_dir + "/job-1.log") + "C 99 11 0 999 50\nshort"));
  {
    LogTails logs(64);
    ASSERT_OK(logs.Persist(logs_dir));
    LogTails::Tail t = logs.Read(1, 0, milliseconds(0));
    EXPECT_EQ(Text(t), std::string(39, 'j') + "\n");
    EXPECT_EQ(t.next, 13);
    EXPECT_TRUE(t.dropped);
    logs.Append(1, 11, 0, 400, 4, "end\n");
  }
  LogTails logs(64);
  ASSERT_OK(logs.Persist(logs_dir));
  EXPECT_EQ(Text(logs.Read(1, 13, milliseconds(0))), "end\n");
  EXPECT_EQ(logs.Read(1, 0, milliseconds(0)).next, 14);
}

TEST(LogTails, PruneForgetsOldOutputOfJobsNotKept) {
  TempDir dir;
  LogTails logs;
  ASSERT_OK(logs.Persist(dir.path()));
  logs.Append(1, 10, 0, 0, 4, "one\n");
  logs.Append(2, 20, 0, 0, 4, "two\n");
  Result<int> young = logs.Prune([](int64_t) { return false; }, std::chrono::hours(1));
  ASSERT_OK(young);
  EXPECT_EQ(*young, 0) << "written just now";
  // A timestamp ahead of time() (the kernel may stamp files from a finer
  // clock) is no reason to keep a file past a zero age: seen as a flake.
  const timespec ahead[2] = {{std::time(nullptr) + 2, 0}, {std::time(nullptr) + 2, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, dir.Sub("job-1.log").c_str(), ahead, 0), 0);
  Result<int> pruned = logs.Prune([](int64_t job) { return job == 2; }, std::chrono::seconds(0));
  ASSERT_OK(pruned);
  EXPECT_EQ(*pruned, 1);
  EXPECT_TRUE(logs.Read(1, 0, milliseconds(0)).chunks.empty());
  EXPECT_EQ(logs.Read(1, 0, milliseconds(0)).next, 1) << "numbering goes on";
  EXPECT_EQ(access(dir.Sub("job-1.log").c_str(), F_OK), -1);
  EXPECT_EQ(Text(logs.Read(2, 0, milliseconds(0))), "two\n");
  EXPECT_EQ(access(dir.Sub("job-2.log").c_str(), F_OK), 0);
}

}  // namespace
}  // namespace stint::stintd
