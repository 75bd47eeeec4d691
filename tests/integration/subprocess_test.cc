// RunCommand with real processes: output and exit status, a command that
// is not in PATH, and one that outlives its deadline (killed and reaped).
#include "base/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>

#include "util/status_matchers.h"

namespace stint {
namespace {

using std::chrono::milliseconds;

TEST(RunCommandTest, CapturesOutputAndExitStatus) {
  Result<CommandOutput> out =
      RunCommand({"sh", "-c", "echo out; echo err >&2; exit 3"}, milliseconds(60000));
  ASSERT_OK(out);
  EXPECT_EQ(out->exit_code, 3);
  // Apart: a warning on stderr never reaches what the caller parses.
  EXPECT_EQ(out->output, "out\n");
  EXPECT_EQ(out->errors, "err\n");
  EXPECT_EQ(out->Text(), "err\nout");
  out = RunCommand({"sh", "-c", "kill -TERM $$"}, milliseconds(60000));
  ASSERT_OK(out);
  EXPECT_EQ(out->exit_code, 128 + SIGTERM);
}

TEST(RunCommandTest, OutputPastTheLimitIsDroppedAndSaidSoWhileTheCommandRunsToItsEnd) {
  // 3 MiB through the pipe: a caller's limit keeps what it asked for, the
  // rest is drained (the command is not blocked on a full pipe) and flagged,
  // and a larger limit keeps it all (squeue --json of a busy cluster).
  const std::vector<std::string> argv = {"sh", "-c", "head -c 3145728 /dev/zero; exit 4"};
  Result<CommandOutput> out = RunCommand(argv, milliseconds(60000), {}, 1000);
  ASSERT_OK(out);
  EXPECT_EQ(out->exit_code, 4);
  EXPECT_EQ(out->output.size(), 1000u);
  EXPECT_TRUE(out->truncated);
  out = RunCommand(argv, milliseconds(60000), {}, 8u << 20);
  ASSERT_OK(out);
  EXPECT_EQ(out->output.size(), 3145728u);
  EXPECT_FALSE(out->truncated);
}

TEST(RunCommandTest, TheEnvironmentIsTheCallersChanged) {
  // What stintd --slurm relies on: sbatch gets the workers' secrets and
  // never stintd's own tokens.
  ASSERT_EQ(setenv("STINT_TEST_KEPT", "kept", 1), 0);
  ASSERT_EQ(setenv("STINT_TEST_DROPPED", "secret", 1), 0);
  ASSERT_EQ(setenv("STINT_TEST_REPLACED", "old", 1), 0);
  CommandEnv env;
  env.unset = {"STINT_TEST_DROPPED"};
  env.set = {{"STINT_TEST_REPLACED", "new"}, {"STINT_TEST_ADDED", "a b=c"}};
  Result<CommandOutput> out = RunCommand(
      {"sh", "-c",
       "echo \"$STINT_TEST_KEPT|${STINT_TEST_DROPPED-unset}|$STINT_TEST_REPLACED|"
       "$STINT_TEST_ADDED\"; env | grep -c '^STINT_TEST_REPLACED='"},
      milliseconds(60000), env);
  unsetenv("STINT_TEST_KEPT");
  unsetenv("STINT_TEST_DROPPED");
  unsetenv("STINT_TEST_REPLACED");
  ASSERT_OK(out);
  EXPECT_EQ(out->output, "kept|unset|new|a b=c\n1\n");
}

TEST(RunCommandTest, AMissingProgramIsNotFound) {
  Result<CommandOutput> out = RunCommand({"stint-no-such-program"}, milliseconds(60000));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), Code::kNotFound);
  EXPECT_NE(out.status().ToString().find("stint-no-such-program"), std::string::npos);
}

TEST(RunCommandTest, ACommandPastItsDeadlineIsKilledAndReaped) {
  // The shell would sleep for 10 minutes; the command gets 200 ms.
  const auto start = std::chrono::steady_clock::now();
  Result<CommandOutput> out = RunCommand({"sh", "-c", "echo started; exec sleep 600"},
                                         milliseconds(200));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), Code::kDeadlineExceeded);
  EXPECT_NE(out.status().ToString().find("sh -c echo started; exec sleep 600"), std::string::npos)
      << out.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::minutes(5));
  // Reaped: no child of this process is left.
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
}

}  // namespace
}  // namespace stint
