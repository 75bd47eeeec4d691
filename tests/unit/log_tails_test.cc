// LogTails: stintd's in-memory tails of the workers' output (API.md, "Logs").
#include "stintd/server/log_tails.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

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

}  // namespace
}  // namespace stint::stintd
