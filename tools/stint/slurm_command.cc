#include "slurm_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <string>
#include <vector>

#include "base/strings.h"
#include "base/subprocess.h"
#include "checkpoint/commit.h"
#include "checkpoint/completion.h"
#include "checkpoint/save_times.h"
#include "sbatch_options.h"
#include "stint/env.h"
#include "stint/slurm.h"
#include "stint/version.h"

namespace stint {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

int Usage(const std::string& why) {
  std::cerr << "stint slurm: " << why << "\n"
            << "usage: stint slurm submit [--root DIR] [--gpus-per-node N] [--lead S | "
               "--checkpoint-seconds S]\n"
            << "                          [--script PATH|DIR] [--dry-run] [SBATCH-OPTION ...] "
               "-- COMMAND [ARG ...]\n"
            << "       stint slurm status JOB [--root DIR]\n";
  return kExitUsage;
}

// `text` single-quoted for sh.
std::string ShellQuote(const std::string& text) {
  std::string q = "'";
  for (char c : text) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

// 1 to 7 decimal digits; false otherwise.
bool ParseCount(const std::string& text, int* out) {
  if (text.empty() || text.size() > 7 || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  *out = std::stoi(text);
  return true;
}

bool ParsePositive(const std::string& text, int* out) { return ParseCount(text, out) && *out > 0; }

std::string Seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", s);
  return text;
}

Status WriteScript(const std::string& path, const std::string& text) {
  STINT_RETURN_IF_ERROR(WriteStringToFileSync(Env::Default(), path, text));
  if (chmod(path.c_str(), 0755) != 0) return Status::IoError("chmod " + path);
  return Status::OK();
}

}  // namespace

std::string SlurmBatchScript(const SlurmSubmitSpec& spec) {
  std::string s = "#!/bin/bash\n";
  s += "# Written by `stint slurm submit` (stint " STINT_VERSION_STRING "): one srun task per GPU,\n";
  s += "# Slurm's notices to every task, a requeue when the tasks exit 75 (their\n";
  s += "# checkpoint is durable) or recorded their stop before one of them died,\n";
  s += "# and nothing to do once the run is complete.\n";
  s += "#SBATCH --requeue\n";
  s += "#SBATCH --open-mode=append\n";
  if (!spec.lead_note.empty())
    s += "# The warning's lead: 2 x checkpoint + 60 s, " + spec.lead_note + ".\n";
  s += "#SBATCH --signal=USR1@" + std::to_string(spec.lead_seconds) + "\n";
  if (spec.gpus_per_node > 0) {
    s += "#SBATCH --ntasks-per-node=" + std::to_string(spec.gpus_per_node) + "\n";
    s += "#SBATCH --gres=gpu:" + std::to_string(spec.gpus_per_node) + "\n";
  }
  for (const std::string& option : spec.sbatch) s += "#SBATCH " + option + "\n";
  s += "\n";
  // The tasks exit 75 and this script requeues: it works where scontrol is
  // missing inside the tasks' container, and never before the tasks ended.
  s += "export STINT_SLURM_REQUEUE=script\n";
  s += "echo \"stint: Slurm job $SLURM_JOB_ID, restart ${SLURM_RESTART_COUNT:-0}, "
       "$SLURM_NTASKS tasks on $SLURM_JOB_NODELIST\"\n";
  if (!spec.root.empty()) {
    const std::string complete = ShellQuote(spec.root + "/" + kCompleteName);
    s += "if [ -e " + complete + " ]; then\n";
    s += "  echo \"stint: the run is complete, nothing to do:\" " + complete + "\n";
    s += "  exit 0\n";
    s += "fi\n";
  }
  // A SIGTERM here (the time limit) must not end the script before the
  // tasks: it would lose the requeue.
  s += "trap 'echo \"stint: the batch script got SIGTERM; waiting for the tasks\"' TERM\n";
  // USR1/USR2 ignored until the task's watcher installs its handlers: a
  // notice during start-up (imports) must not kill the task; the job's end
  // time covers a notice lost that way.
  s += "srun --kill-on-bad-exit=1 /bin/sh -c 'trap \"\" USR1 USR2; exec \"$0\" \"$@\"'";
  for (const std::string& arg : spec.command) s += " " + ShellQuote(arg);
  s += " &\n";
  s += "srun_pid=$!\n";
  s += "wait \"$srun_pid\"; rc=$?\n";
  s += "while [ \"$rc\" -gt 128 ] && kill -0 \"$srun_pid\" 2>/dev/null; do "
       "wait \"$srun_pid\"; rc=$?; done\n";
  s += "echo \"stint: the tasks exited $rc\"\n";
  if (!spec.root.empty()) {
    // A task may die (a signal, a crash in its teardown) after the run's stop
    // and its checkpoint are settled: the tasks' record of that stop, for this
    // job and this restart only, decides. A crash before the stop has no
    // such record and fails the job.
    const std::string decision = ShellQuote(spec.root + "/" + kSlurmStopRecordName);
    s += "if [ \"$rc\" != 0 ] && [ \"$rc\" != 75 ]; then\n";
    s += "  decided=$(head -n 1 " + decision + " 2>/dev/null)\n";
    s += "  case \"$decided\" in\n";
    s += "    \"slurm_job=$SLURM_JOB_ID restart=${SLURM_RESTART_COUNT:-0} \"*)\n";
    s += "      echo \"stint: the tasks exited $rc after this run's stop was recorded ($decided):"
         " requeueing as for 75\"\n";
    s += "      rc=75 ;;\n";
    s += "  esac\n";
    s += "fi\n";
  }
  s += "if [ \"$rc\" = 75 ]; then\n";
  s += "  echo \"stint: requeueing Slurm job $SLURM_JOB_ID\"\n";
  // The requeue ends this script. Exiting first races it: the job could
  // end as FAILED (exit 75) before Slurm requeues it (seen under load).
  s += "  if scontrol requeue \"$SLURM_JOB_ID\"; then\n";
  s += "    for _ in 1 2 3 4 5 6 7 8 9 10; do sleep 60 & wait $!; done\n";
  s += "    echo \"stint: Slurm did not end the requeued job within 10 minutes\"\n";
  s += "  fi\n";
  s += "fi\n";
  s += "exit \"$rc\"\n";
  return s;
}

Result<int64_t> ParseSlurmDuration(const std::string& text) {
  auto bad = [&] {
    return Status::InvalidArgument(
        "'" + text + "' is not a Slurm duration (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S)");
  };
  std::string rest = text;
  int64_t days = -1;
  const size_t dash = rest.find('-');
  if (dash != std::string::npos) {
    int d = 0;
    if (!ParseCount(rest.substr(0, dash), &d)) return bad();
    days = d;
    rest = rest.substr(dash + 1);
  }
  std::vector<int64_t> parts;
  size_t start = 0;
  for (;;) {
    const size_t colon = rest.find(':', start);
    int part = 0;
    if (!ParseCount(rest.substr(start, colon - start), &part)) return bad();
    parts.push_back(part);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (parts.size() > 3) return bad();
  if (days >= 0) {  // D-H[:M[:S]]
    while (parts.size() < 3) parts.push_back(0);
    return ((days * 24 + parts[0]) * 60 + parts[1]) * 60 + parts[2];
  }
  if (parts.size() == 1) return parts[0] * 60;             // M
  if (parts.size() == 2) return parts[0] * 60 + parts[1];  // M:S
  return (parts[0] * 60 + parts[1]) * 60 + parts[2];       // H:M:S
}

int RunSlurmSubmit(const std::vector<std::string>& args) {
  SlurmSubmitSpec spec;
  std::string script;
  bool dry_run = false;
  int checkpoint_seconds = 0;
  bool lead_given = false;
  std::vector<SbatchOption> sbatch;
  size_t i = 0;
  while (i < args.size() && args[i] != "--") {
    const std::string& a = args[i];
    // Ours, as --flag VALUE or --flag=VALUE; the value, false when there is none.
    const std::string flag = a.substr(0, a.find('='));
    auto value = [&](std::string* out) {
      if (flag.size() < a.size()) {
        *out = a.substr(flag.size() + 1);
      } else if (i + 1 < args.size()) {
        *out = args[++i];
      } else {
        return false;
      }
      ++i;
      return true;
    };
    std::string v;
    if (flag == "--root") {
      if (!value(&spec.root) || spec.root.empty()) return Usage("--root needs a directory");
    } else if (flag == "--script") {
      if (!value(&script) || script.empty()) return Usage("--script needs a path");
    } else if (a == "--dry-run") {
      dry_run = true;
      ++i;
    } else if (flag == "--gpus-per-node" || flag == "--lead" || flag == "--checkpoint-seconds") {
      int n = 0;
      if (!value(&v) || !ParsePositive(v, &n)) return Usage(flag + " needs a positive number");
      if (flag == "--gpus-per-node") spec.gpus_per_node = n;
      if (flag == "--lead") spec.lead_seconds = n, lead_given = true;
      if (flag == "--checkpoint-seconds") checkpoint_seconds = n;
    } else if (a.size() > 1 && a[0] == '-') {
      Result<std::vector<SbatchOption>> taken = TakeSbatchOption(args, &i);
      if (!taken.ok()) return Usage(taken.status().message());
      sbatch.insert(sbatch.end(), taken->begin(), taken->end());
    } else {
      return Usage("'" + a + "' before --: the command goes after --");
    }
  }
  for (const SbatchOption& option : sbatch) spec.sbatch.push_back(SbatchDirective(option));
  if (i >= args.size() || i + 1 == args.size()) return Usage("no command after --");
  spec.command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
  if (lead_given && checkpoint_seconds > 0)
    return Usage("--lead and --checkpoint-seconds: give one");
  if (!lead_given && checkpoint_seconds == 0 && !spec.root.empty()) {
    // Measured: the slowest of the root's recent saves (Save() to durable).
    Result<std::vector<SaveTime>> times = ReadSaveTimes(Env::Default(), spec.root);
    if (!times.ok()) {
      std::cerr << "stint slurm submit: " << times.status().ToString() << "; lead "
                << spec.lead_seconds << " s (the default)\n";
    } else if (!times->empty()) {
      double slowest = 0;
      for (const SaveTime& t : *times) slowest = std::max(slowest, t.durable_seconds);
      checkpoint_seconds = std::max(1, static_cast<int>(std::ceil(slowest)));
      spec.lead_note = "measured: the slowest of the " + std::to_string(times->size()) +
                       " newest saves in the root took " + Seconds(slowest);
    }
  }
  // The warning must leave time for the step in progress, the checkpoint
  // and its commit, and Slurm's 30 s signal resolution.
  if (checkpoint_seconds > 0) spec.lead_seconds = 2 * checkpoint_seconds + 60;
  // A grant of --time-min (what 22.05's backfill gives) must leave training
  // time after the restart and before the warning.
  for (const SbatchOption& option : sbatch) {
    if (option.flag != "--time-min") continue;
    const std::string given = SbatchDirective(option);
    Result<int64_t> time_min = ParseSlurmDuration(*option.value);
    if (!time_min.ok()) return Usage(given + ": " + time_min.status().message());
    if (*time_min - spec.lead_seconds < 120) {
      std::cerr << "stint slurm submit: warning: " << given << " leaves "
                << std::max<int64_t>(0, *time_min - spec.lead_seconds)
                << " s between a run's start and its warning " << spec.lead_seconds
                << " s before the end; the restart (imports, rendezvous, load) comes out of "
                   "that: give --time-min at least the lead + 2 minutes\n";
    }
  }
  if (!dry_run) {
    std::cerr << "stint slurm submit: --signal=USR1@" << spec.lead_seconds
              << (spec.lead_note.empty() ? "" : " (" + spec.lead_note + ")") << "\n";
  }

  const std::string text = SlurmBatchScript(spec);
  if (dry_run) {
    std::cout << text;
    return kExitOk;
  }
  // Where the job's files are (the root, or where the user says), never the
  // caller's working directory; without either, a temporary file (sbatch
  // keeps its own copy: `scontrol write batch_script JOB`).
  Env* env = Env::Default();
  const std::string name = "stint-slurm-job-" + std::to_string(std::time(nullptr)) + "-" +
                           std::to_string(getpid()) + ".sh";
  const bool keep = !script.empty() || !spec.root.empty();
  if (script.empty() && !spec.root.empty()) {
    if (Status s = CreateDirWithParents(env, spec.root); !s.ok()) {
      std::cerr << "stint slurm submit: --root: " << s.ToString() << "\n";
      return kExitFailed;
    }
    script = spec.root + "/" + name;
  } else if (script.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    script = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/" + name;
  } else if (env->IsDirectory(script)) {
    script += "/" + name;
  }
  if (Status s = WriteScript(script, text); !s.ok()) {
    std::cerr << "stint slurm submit: " << s.ToString() << "\n";
    return kExitFailed;
  }
  Result<CommandOutput> out = RunCommand({"sbatch", "--parsable", script}, std::chrono::minutes(2));
  if (Status s = keep ? Status::OK() : env->RemoveFile(script); !s.ok())
    std::cerr << "stint slurm submit: warning: " << s.ToString() << "\n";
  if (!out.ok() || out->exit_code != 0) {
    std::cerr << "stint slurm submit: sbatch " << script << ": "
              << (out.ok() ? out->Text() : out.status().ToString()) << "\n";
    return kExitFailed;
  }
  const std::string job = Trim(out->output);
  std::cout << "submitted Slurm job " << job << " (batch script "
            << (keep ? script : "not kept: `scontrol write batch_script " + job + "` prints it")
            << ")\n";
  return kExitOk;
}

int RunSlurmStatus(const std::vector<std::string>& args) {
  std::string job, root;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--root" && i + 1 < args.size()) {
      root = args[++i];
    } else if (job.empty() && args[i].rfind("-", 0) != 0) {
      job = args[i];
    } else {
      return Usage("unexpected '" + args[i] + "'");
    }
  }
  if (job.empty()) return Usage("status needs a job id");
  int rc = kExitOk;
  // Finished jobs too (for MinJobAge): -t all.
  Result<CommandOutput> q = RunCommand(
      {"squeue", "-h", "-t", "all", "-j", job, "-O",
       "JobId:12,State:12,TimeUsed:12,TimeLimit:12,NumNodes:7,RestartCnt:10,ReasonList:60"},
      std::chrono::minutes(1));
  if (q.ok() && q->exit_code == 0 && !Trim(q->output).empty()) {
    std::cout << "JOB         STATE       USED        LIMIT       NODES  RESTARTS  NODES/REASON\n"
              << Trim(q->output) << "\n";
  } else {
    std::cout << "job " << job << ": not in squeue ("
              << (q.ok() ? q->Text() : q.status().ToString()) << ")\n";
    rc = kExitFailed;
  }
  if (root.empty()) return rc;
  Env* env = Env::Default();
  Result<std::vector<uint64_t>> steps = ListCheckpointSteps(env, root);
  if (!steps.ok()) {
    std::cout << "root " << root << ": " << steps.status().ToString() << "\n";
    return kExitFailed;
  }
  std::cout << "root " << root << ": " << steps->size() << " committed checkpoint"
            << (steps->size() == 1 ? "" : "s");
  if (!steps->empty()) std::cout << ", newest step " << steps->back();
  std::cout << "\n";
  Result<std::vector<SaveTime>> times = ReadSaveTimes(env, root);
  if (!times.ok()) {
    std::cout << "save times: " << times.status().ToString() << "\n";
  } else if (!times->empty()) {
    std::vector<double> s;
    for (const SaveTime& t : *times) s.push_back(t.durable_seconds);
    std::sort(s.begin(), s.end());
    std::cout << "save to durable over the newest " << s.size() << ": median "
              << Seconds(s[s.size() / 2]) << ", slowest " << Seconds(s.back()) << "\n";
  }
  Result<std::optional<CompletionMarker>> done = ReadCompletion(env, root);
  if (!done.ok()) {
    std::cout << "complete: " << done.status().ToString() << "\n";
    return kExitFailed;
  }
  if (*done) {
    std::cout << "complete at step " << (*done)->step << " " << (*done)->info << "\n";
  } else {
    std::cout << "not complete\n";
  }
  return rc;
}

}  // namespace stint
