// The batch script `stint slurm submit` writes: the options that make the
// requeue contract hold, and a command that survives any characters.
#include "slurm_command.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace stint {
namespace {

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(SlurmBatchScript, RequeueSignalsTasksAndCompletion) {
  SlurmSubmitSpec spec;
  spec.root = "/ckpt/run 7";
  spec.gpus_per_node = 4;
  spec.lead_seconds = 180;
  spec.sbatch = {"--nodes=2-4", "--time-min=0:30:00"};
  spec.command = {"python", "train.py", "--name", "it's \"quoted\" $HOME"};
  const std::string s = SlurmBatchScript(spec);
  for (const char* line :
       {"#SBATCH --requeue\n", "#SBATCH --open-mode=append\n", "#SBATCH --signal=USR1@180\n",
        "#SBATCH --ntasks-per-node=4\n", "#SBATCH --gres=gpu:4\n", "#SBATCH --nodes=2-4\n",
        "#SBATCH --time-min=0:30:00\n", "export STINT_SLURM_REQUEUE=script\n"}) {
    EXPECT_TRUE(Has(s, line)) << line << " missing from:\n" << s;
  }
  // Every task: srun, one per GPU, USR1/USR2 ignored until the watcher is in.
  EXPECT_TRUE(Has(s, "srun --kill-on-bad-exit=1 /bin/sh -c 'trap \"\" USR1 USR2; exec \"$0\" \"$@\"'"
                     " 'python' 'train.py' '--name' 'it'\\''s \"quoted\" $HOME' &\n"))
      << s;
  // A finished run exits 0 before any task starts; 75 is requeued.
  EXPECT_TRUE(Has(s, "if [ -e '/ckpt/run 7/COMPLETE' ]; then")) << s;
  EXPECT_TRUE(Has(s, "if [ \"$rc\" = 75 ]; then")) << s;
  EXPECT_TRUE(Has(s, "if scontrol requeue \"$SLURM_JOB_ID\"; then")) << s;
  // ...and waits to be ended by it, not exiting 75 first.
  EXPECT_LT(s.find("scontrol requeue"), s.find("sleep 60 & wait $!")) << s;
  EXPECT_LT(s.find("if [ -e"), s.find("srun --")) << s;
}

TEST(SlurmBatchScript, WithoutARootOrGpusItLeavesThoseOut) {
  SlurmSubmitSpec spec;
  spec.command = {"./train"};
  const std::string s = SlurmBatchScript(spec);
  EXPECT_FALSE(Has(s, "COMPLETE")) << s;
  EXPECT_FALSE(Has(s, "--gres")) << s;
  EXPECT_TRUE(Has(s, "#SBATCH --signal=USR1@120\n")) << s;  // the default lead
}

TEST(SlurmDuration, EveryFormSbatchTakes) {
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"30", 1800},      {"1:30", 90},      {"2:00:05", 7205}, {"1-2", 93600},
      {"1-0:30", 88200}, {"0-1:2:3", 3723}, {"0", 0}};
  for (const auto& [text, seconds] : cases) {
    Result<int64_t> got = ParseSlurmDuration(text);
    ASSERT_TRUE(got.ok()) << text << ": " << got.status().ToString();
    EXPECT_EQ(*got, seconds) << text;
  }
  for (const char* bad : {"", "1:", ":5", "1:2:3:4", "x", "1-", "-1", "1-2-3", "1h"}) {
    Result<int64_t> got = ParseSlurmDuration(bad);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_EQ(got.status().code(), Code::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace stint
