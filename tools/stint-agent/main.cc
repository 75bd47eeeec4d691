// stint-agent: lends this machine's GPUs to stintd (tools/stintd/API.md,
// "Nodes").
//
//   stint-agent --coord URL --token-file F --pool NAME --gpus 0,1,2,3
//               [--ca-file PEM] [--node NAME] [--for D | --until T] [--spot --notice-lead S]
//               [--workdir DIR] [--heartbeat-seconds S] [--no-long-poll]
//               [--job-user USER | --job-uids FIRST-LAST]
//
// Registers the node (a window of its GPUs in the pool: hard with an end,
// or spot with a notice lead), heartbeats, and closes the window on SIGTERM
// or SIGINT. Times T and durations D as stintctl reads them. Without
// --for, --until and --spot the node joins the admin window that names it
// (stintctl windows add --nodes ...; --pool is then optional) and launches
// what is granted there; SIGTERM closes that window for this node too.
// --token-file holds the shared agent token or the node's own
// (stintctl nodes add NAME).
//
// A job's code must not act as its node: the agent is not dumpable (a
// process of its user cannot read its environment or memory), and with
// --job-user or --job-uids (an agent running as root) the jobs' processes
// run as another user, which cannot read the token file (it must then be
// unreadable to all but its owner) nor, under --job-uids, another job's
// processes. An agent running as root without either warns: its jobs then
// run as root.
//
// Exit codes: 0 stopped by a signal (window closed) or the window ended;
// 1 stintd refused or could not be told; 2 usage error; 3 stintd could not
// be reached to register.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "base/strings.h"
#include "common/gpu_list.h"
#include "common/time_parse.h"
#include "coord/wall_clock.h"
#include "stint-agent/node_agent.h"

namespace {

int Usage(const std::string& message) {
  std::fprintf(stderr, "stint-agent: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // First: not even the token read below may be read from this process's
  // memory or /proc/<pid>/environ by another process of its user.
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    std::fprintf(stderr, "stint-agent: prctl(PR_SET_DUMPABLE): %s\n", std::strerror(errno));
    return 1;
  }
  using stint::agent::AgentExit;
  using stint::agent::NodeAgentOptions;
  CLI::App app{"stint-agent: lends this machine's GPUs to stintd as a window"};
  NodeAgentOptions o;
  std::string token_file, gpus, for_duration, until;
  double heartbeat_seconds = 5;
  app.add_option("--coord", o.url,
                 "stintd's URL (several, comma-separated: the stintds sharing a database; "
                 "passed to the workers as STINT_COORD_URL)")
      ->capture_default_str();
  app.add_option("--token-file", token_file, "file holding an agent token (or $STINT_AGENT_TOKEN)");
  app.add_option("--ca-file", o.ca_file,
                 "https: PEM CA certificates stintd's certificate must chain to (or $STINT_CA_FILE)");
  app.add_option("--pool", o.pool,
                 "the pool the GPUs join (required unless joining an admin window)");
  app.add_option("--gpus", gpus, "GPU indices on this machine, e.g. 0,1,2,3")->required();
  app.add_option("--node", o.node, "node name (default: the host name)");
  app.add_option("--for", for_duration, "lend the GPUs this long (hard window): 90m, 8h, 1d");
  app.add_option("--until", until, "lend the GPUs until then (hard window)");
  app.add_flag("--spot", o.spot, "revocable window: it may close any time, with --notice-lead");
  app.add_option("--notice-lead", o.notice_lead_seconds,
                 "seconds of notice a segment gets when the window closes")
      ->capture_default_str();
  app.add_option("--workdir", o.workdir, "per-segment logs go here")->capture_default_str();
  app.add_option("--addr", o.addr,
                 "address this node's workers are reached at (MASTER_ADDR; default: the node name)");
  bool no_long_poll = false;
  app.add_flag("--no-long-poll", no_long_poll,
               "beat only every --heartbeat-seconds instead of waiting at stintd for new "
               "assignments in between");
  app.add_option("--eval-slots", o.eval_slots,
                 "evaluations of jobs' checkpoints run at once on what segments leave over "
                 "(0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option("--job-user", o.job_user,
                 "run every job's processes as this user (name or uid; the agent runs as root)");
  app.add_option("--job-uids", o.job_uids,
                 "run each job's processes as a uid of its own from FIRST-LAST (the agent runs "
                 "as root), so jobs cannot read each other's credentials");
  app.add_option("--heartbeat-seconds", heartbeat_seconds, "between heartbeats")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  if (!for_duration.empty() && !until.empty()) return Usage("give --for or --until, not both");
  const int64_t now_ms = stint::internal::WallNowMs();
  if (!for_duration.empty()) {
    auto d = stint::tools::ParseDuration(for_duration);
    if (!d.ok()) return Usage("--for: " + d.status().message());
    o.end_ms = now_ms + *d * 1000;
  }
  if (!until.empty()) {
    auto t = stint::tools::ParseTime(until, now_ms);
    if (!t.ok()) return Usage("--until: " + t.status().message());
    o.end_ms = *t;
  }
  auto gpu_list = stint::tools::ParseGpuList(gpus);
  if (!gpu_list.ok()) return Usage("--gpus: " + gpu_list.status().message());
  o.gpus = std::move(*gpu_list);
  if (o.node.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0) return Usage("no --node and no host name");
    o.node = host;
  }
  const bool job_users = !o.job_user.empty() || !o.job_uids.empty();
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) return Usage("cannot read --token-file " + token_file);
    struct stat st;
    if (job_users && stat(token_file.c_str(), &st) == 0 && (st.st_mode & 044) != 0) {
      return Usage("--token-file " + token_file +
                   " is readable by others than its owner, so by the jobs' users too: chmod "
                   "600 it");
    }
    std::string line;
    while (std::getline(in, line)) {
      line = stint::Trim(line);
      if (!line.empty() && line[0] != '#') {
        o.token = line;
        break;
      }
    }
  } else if (const char* t = std::getenv("STINT_AGENT_TOKEN")) {
    o.token = stint::Trim(t);
  }
  unsetenv("STINT_AGENT_TOKEN");  // no process started from here inherits it
  if (geteuid() == 0 && !job_users) {
    std::fprintf(stderr,
                 "stint-agent: WARNING: running as root without --job-user or --job-uids: "
                 "jobs' processes run as root and can read this node's token and other jobs' "
                 "credentials\n");
  }
  if (o.token.empty()) return Usage("no agent token: give --token-file or $STINT_AGENT_TOKEN");
  if (o.ca_file.empty()) {
    if (const char* ca = std::getenv("STINT_CA_FILE")) o.ca_file = ca;
  }
  o.heartbeat_interval = std::chrono::milliseconds(static_cast<int64_t>(heartbeat_seconds * 1000));
  o.long_poll = !no_long_poll;

  // Before any thread exists, so only Run()'s sigtimedwait sees them.
  const std::vector<int> stop_signals = {SIGTERM, SIGINT};
  sigset_t set;
  sigemptyset(&set);
  for (int sig : stop_signals) sigaddset(&set, sig);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto agent = stint::agent::NodeAgent::Create(o);
  if (!agent.ok()) return Usage(agent.status().message());
  stint::Status registered = (*agent)->Register();
  if (!registered.ok()) {
    std::fprintf(stderr, "stint-agent: cannot register node %s: %s\n", o.node.c_str(),
                 registered.ToString().c_str());
    return registered.code() == stint::Code::kUnavailable ? 3 : 1;
  }
  switch ((*agent)->Run(stop_signals)) {
    case AgentExit::kStopped:
    case AgentExit::kWindowClosed:
      return 0;
    case AgentExit::kCloseFailed:
      return 1;
  }
  return 1;
}
