// The batch script `stint slurm submit` writes: the options that make the
// requeue contract hold, and a command that survives any characters.
#include "sbatch_options.h"
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
  // A task that died after the run recorded its stop (this job, this
  // restart) is requeued as 75 is; the record is read before the requeue.
  EXPECT_TRUE(Has(s, "decided=$(head -n 1 '/ckpt/run 7/REQUEUE' 2>/dev/null)\n")) << s;
  EXPECT_TRUE(Has(s, "    \"slurm_job=$SLURM_JOB_ID restart=${SLURM_RESTART_COUNT:-0} \"*)\n"))
      << s;
  EXPECT_LT(s.find("decided=$("), s.find("if [ \"$rc\" = 75 ]")) << s;
}

// Every form sbatch takes, as `submit` hands them on in #SBATCH lines.
std::vector<std::string> Directives(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size();) {
    Result<std::vector<SbatchOption>> taken = TakeSbatchOption(args, &i);
    EXPECT_TRUE(taken.ok()) << args[i - 1] << ": " << taken.status().ToString();
    if (!taken.ok()) break;
    for (const SbatchOption& o : *taken) out.push_back(SbatchDirective(o));
  }
  return out;
}

TEST(SbatchOptions, ShortLongApartAttachedAbbreviatedAndClustered) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Directives({"-p", "low", "-N2", "-o", "out"}), (V{"-p low", "-N 2", "-o out"}));
  EXPECT_EQ(Directives({"--partition", "low", "--nodes=2-4", "--part=hi"}),
            (V{"--partition=low", "--nodes=2-4", "--partition=hi"}));
  // Flags take nothing after them; a value may start with '-' (getopt's rule).
  EXPECT_EQ(Directives({"--exclusive", "-H", "--requeue", "-t", "-1"}),
            (V{"--exclusive", "-H", "--requeue", "-t -1"}));
  // A cluster of flags ending in an option with its value attached.
  EXPECT_EQ(Directives({"-HQplow"}), (V{"-H", "-Q", "-p low"}));
  // Optional values only come attached.
  EXPECT_EQ(Directives({"--exclusive=user", "-k", "-kcont"}),
            (V{"--exclusive=user", "-k", "-kcont"}));
  // Values sbatch would split or cut at '#' are quoted as its directive parser reads them.
  EXPECT_EQ(Directives({"-J", "low #2 \"x\" a\\b", "--comment="}),
            (V{"-J \"low #2 \\\"x\\\" a\\\\b\"", "--comment=\"\""}));
}

TEST(SbatchOptions, RefusedWithTheOptionNamed) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-J", "x\ntouch pwned"}, "'-J': its value holds a control character (0x0a)"},
      {{"--job-name=x\ry"}, "control character (0x0d)"},
      {{"-Jx\ty"}, "control character (0x09)"},
      {{"--hold=x\ny"}, "'--hold=x<0x0a>y': --hold takes no value"},
      {{"--job-name"}, "'--job-name': needs a value"},
      {{"-p"}, "-p needs a value"},
      {{"--hold=yes"}, "--hold takes no value"},
      {{"--no-such"}, "sbatch has no such option"},
      {{"-Z"}, "sbatch has no option -Z"},
      {{"--a=1"}, "ambiguous: --account, --acctg-freq, --array"},
      {{"--wrap=hostname"}, "has no place in a job's batch script"},
      {{"-W"}, "-W has no place"},
  };
  for (const auto& [args, why] : cases) {
    size_t i = 0;
    Result<std::vector<SbatchOption>> taken = TakeSbatchOption(args, &i);
    ASSERT_FALSE(taken.ok()) << args[0];
    EXPECT_EQ(taken.status().code(), Code::kInvalidArgument) << args[0];
    EXPECT_TRUE(Has(taken.status().message(), why)) << taken.status().message();
  }
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
