// stintctl: the admin command line for stintd (tools/stintd/API.md).
//
//   stintctl pools add NAME [--description TEXT]      stintctl pools list
//   stintctl windows add --pool P --gpus N [--start T] (--end T | --duration D)
//                        [--kind hard|spot] [--notice-lead D]
//                        [--nodes N1,N2 | --node NAME[:0,1,...]]...  (one window per node;
//                        --gpus is then per node, or the GPUs listed after the name)
//   stintctl windows list                             stintctl windows close ID [--lead D]
//   stintctl teams set NAME --guaranteed N [--borrow-limit N]    stintctl teams list
//   stintctl jobs submit --name N --gpus MIN[:MAX] [--team T] [--pool P] [--priority L]
//                        [--no-gang] [--not-preemptible] [--checkpoint-seconds S]
//                        [--restart-seconds S] [--interval-seconds S] [--remaining D]
//                        [--gpus-per-worker N] [--env K=V]... [--workdir DIR]
//                        [--signal TERM|INT|HUP|USR1|USR2] [--torchrun[=LAUNCHER]]
//                        [--no-restart-crashed]
//                        [-- COMMAND ARGS...]
//   stintctl nodes                                    (stint-agent nodes, their GPUs and windows)
//   stintctl nodes add NAME   (prints the node's own agent token)   nodes revoke NAME
//   stintctl logs JOB [--follow]                      (its workers' output, via their agents)
//   stintctl jobs list [--state S]   jobs show ID   jobs cancel ID [--reason R]
//   stintctl jobs priority ID LEVEL
//   stintctl queue                                    stintctl segments [--job ID]
//   stintctl status                                   (counts: jobs, GPUs, windows, queue)
//
// Global: --url (or $STINTD_URL; default http://127.0.0.1:7077), --token or
// --token-file (or $STINTD_TOKEN, $STINTD_TOKEN_FILE), --ca-file (or
// $STINT_CA_FILE: the CAs an https stintd's certificate must chain to),
// --json (the server's answer, unchanged, for scripts).
// Times T: now, now+90m, +2h, unix seconds, 2026-12-02T18:00:00Z.
// Durations D: 90s, 15m, 2h, 1h30m, 1d.
//
// Exit codes: 0 done; 1 stintd refused (its message is printed); 2 usage
// error (nothing was sent); 3 stintd could not be reached.
//
// One attempt per command, no retries: an operator sees at once that stintd
// is down (exit 3) instead of a command hanging for a minute.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "coord/http_json.h"
#include "coord/wall_clock.h"
#include "stint/status.h"
#include "stintctl/format.h"
#include "stintctl/parse.h"
#include "stintctl/render.h"

namespace stint {
namespace ctl {
namespace {

using internal::HttpJsonClient;
using internal::HttpRequest;
using internal::UrlEncode;

constexpr int kExitOk = 0;
constexpr int kExitRefused = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnreachable = 3;

int Usage(const std::string& message) {
  std::cerr << "stintctl: " << message << "\n";
  return kExitUsage;
}

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// The first line that is neither blank nor a "#" comment, trimmed: the
// format of stintd's own token files (a file written by `echo` ends in a
// newline that is not part of the token).
Result<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument("cannot read token file " + path);
  std::string line;
  while (std::getline(in, line)) {
    size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    size_t e = line.find_last_not_of(" \t\r");
    return line.substr(b, e - b + 1);
  }
  return Status::InvalidArgument("token file " + path + " is empty");
}

struct Globals {
  std::string url;
  std::string token;
  std::string token_file;
  std::string ca_file;
  bool json = false;
};

class Ctl {
 public:
  Ctl(std::unique_ptr<HttpJsonClient> http, bool json) : http_(std::move(http)), json_(json) {}

  // Sends one request; prints the server's JSON (--json) or human(reply).
  int Run(const std::string& method, const std::string& path, std::optional<Json> body,
          const std::function<std::string(const Json&)>& human) {
    HttpRequest req;
    req.method = method;
    req.path = path;
    req.body = std::move(body);
    auto reply = http_->Call(req);
    if (!reply.ok()) return Failed(reply.status());
    if (json_) {
      std::cout << reply->text;
      if (reply->text.empty() || reply->text.back() != '\n') std::cout << "\n";
    } else {
      std::cout << human(reply->body);
    }
    return kExitOk;
  }

  // Several GETs for one view, in order; the first that fails ends the
  // command as Run would. --json prints {"<path>": answer, ...}.
  int RunGets(const std::vector<std::string>& paths,
              const std::function<std::string(const std::vector<Json>&)>& human) {
    std::vector<Json> answers;
    Json by_path = Json::object();
    for (const std::string& path : paths) {
      HttpRequest req;
      req.method = "GET";
      req.path = path;
      auto reply = http_->Call(req);
      if (!reply.ok()) return Failed(reply.status());
      by_path[path] = reply->body;
      answers.push_back(std::move(reply->body));
    }
    std::cout << (json_ ? by_path.dump() + "\n" : human(answers));
    return kExitOk;
  }

  // stintctl logs: the job's workers' output stintd holds (API.md, "Logs"),
  // each line prefixed with its rank; --follow long-polls for more until
  // the job ended and nothing more came. --json prints each answer as is.
  int Logs(int64_t job, bool follow) {
    const std::string base = "/v1/jobs/" + std::to_string(job);
    // Also how late the end of a job is seen that no agent's exit report
    // ended (those wake the wait).
    constexpr int kWaitSeconds = 10;
    std::map<std::pair<int64_t, int64_t>, std::string> partial;  // (segment, rank) -> unended line
    int64_t after = 0, segment = 0;
    bool ended = false;
    auto flush = [&] {
      for (auto& [key, text] : partial) {
        if (!text.empty()) std::cout << "[rank " << key.second << "] " << text << "\n";
      }
      partial.clear();
    };
    for (;;) {
      HttpRequest req;
      req.method = "GET";
      req.path = base + "/logs?after=" + std::to_string(after);
      if (follow && !ended) {
        req.path += "&wait_seconds=" + std::to_string(kWaitSeconds);
        req.server_wait = std::chrono::seconds(kWaitSeconds);
      }
      auto reply = http_->Call(req);
      // --follow rides out a restart of stintd, which keeps the output and
      // its numbering (the cursor stays valid): it asks again for up to
      // kReconnectSeconds while stintd cannot be reached.
      constexpr int kReconnectSeconds = 120;
      const auto unreachable_since = std::chrono::steady_clock::now();
      for (bool said = false; !reply.ok() && follow &&
                              reply.status().code() == Code::kUnavailable &&
                              std::chrono::steady_clock::now() - unreachable_since <
                                  std::chrono::seconds(kReconnectSeconds);) {
        if (!said) std::cerr << "stintctl: " << reply.status().message() << "; asking again\n";
        said = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        reply = http_->Call(req);
      }
      if (!reply.ok()) return Failed(reply.status());
      const Json chunks = reply->body.value("chunks", Json::array());
      after = reply->body.value("next", after);
      if (json_) {
        std::cout << reply->text << (reply->text.empty() || reply->text.back() != '\n' ? "\n" : "");
      } else {
        if (reply->body.value("dropped", false)) std::cout << "... (older output dropped)\n";
        for (const Json& ch : chunks) {
          const int64_t sid = ch.value("segment_id", int64_t{0});
          const int64_t rank = ch.value("rank", int64_t{0});
          if (sid != segment) {
            flush();
            std::cout << "== segment " << sid << " ==\n";
            segment = sid;
          }
          std::string& text = partial[{sid, rank}];
          text += ch.value("text", std::string());
          for (size_t nl; (nl = text.find('\n')) != std::string::npos; text.erase(0, nl + 1)) {
            std::cout << "[rank " << rank << "] " << text.substr(0, nl) << "\n";
          }
        }
        std::cout.flush();
      }
      // Done once a pass asked after an answer that said the job ended
      // brought nothing more (stintd takes a node's output before its exit
      // report, so all of it was in by then).
      if (!follow || (ended && chunks.empty())) break;
      const std::string state = reply->body.value("state", std::string());
      ended = state == "DONE" || state == "FAILED" || state == "CANCELLED";
    }
    if (!json_) flush();
    return kExitOk;
  }

 private:
  // Says why a request failed; the exit status tells unreachable from refused.
  static int Failed(const Status& s) {
    std::cerr << "stintctl: " << s.message() << "\n";
    return s.code() == Code::kUnavailable ? kExitUnreachable : kExitRefused;
  }

  std::unique_ptr<HttpJsonClient> http_;
  bool json_;
};

std::string Line(const std::string& s) { return s + "\n"; }

int Main(int argc, char** argv) {
  CLI::App app{"stintctl: administer stintd (pools, windows, teams, jobs, queue)"};
  app.fallthrough();  // global flags also after the subcommand: `stintctl queue --json`
  app.require_subcommand(1);
  Globals g;
  app.add_option("--url", g.url, "stintd address (default $STINTD_URL or http://127.0.0.1:7077)");
  app.add_option("--token", g.token, "bearer token (default $STINTD_TOKEN)");
  app.add_option("--token-file", g.token_file,
                 "file holding the bearer token (default $STINTD_TOKEN_FILE)");
  app.add_option("--ca-file", g.ca_file,
                 "https: PEM CA certificates stintd's certificate must chain to "
                 "(default $STINT_CA_FILE)");
  app.add_flag("--json", g.json, "print stintd's JSON answer unchanged");

  // CLI::PositiveNumber's message prints DBL_MAX in full.
  const CLI::Range kId(int64_t{1}, std::numeric_limits<int64_t>::max());

  // Each leaf command registers what it runs once everything is parsed.
  std::vector<std::pair<CLI::App*, std::function<int(Ctl&, int64_t now_ms)>>> leaves;
  auto leaf = [&](CLI::App* cmd, std::function<int(Ctl&, int64_t)> run) {
    leaves.emplace_back(cmd, std::move(run));
  };

  // --- pools ---
  CLI::App* pools = app.add_subcommand("pools", "GPU pools")->require_subcommand(1);
  std::string pool_name, pool_description;
  CLI::App* pools_add = pools->add_subcommand("add", "create a pool");
  pools_add->add_option("name", pool_name, "pool name")->required();
  auto* pool_desc_opt = pools_add->add_option("--description", pool_description, "free text");
  leaf(pools_add, [&](Ctl& c, int64_t) {
    Json body{{"name", pool_name}};
    if (*pool_desc_opt) body["description"] = pool_description;
    return c.Run("POST", "/v1/pools", body,
                 [&](const Json&) { return Line("pool " + pool_name + " created"); });
  });
  CLI::App* pools_list = pools->add_subcommand("list", "list pools");
  leaf(pools_list,
       [&](Ctl& c, int64_t) { return c.Run("GET", "/v1/pools", std::nullopt, RenderPools); });

  // --- windows ---
  CLI::App* windows = app.add_subcommand("windows", "time windows of GPUs")->require_subcommand(1);
  std::string w_pool, w_start, w_end, w_duration, w_kind = "hard", w_lead;
  int w_gpus = 0;
  CLI::App* windows_add = windows->add_subcommand("add", "offer GPUs of a pool for a time window");
  windows_add->add_option("--pool", w_pool, "pool name")->required();
  auto* w_gpus_opt =
      windows_add->add_option("--gpus", w_gpus, "number of GPUs (per node with nodes)")
          ->check(CLI::Range(1, 1 << 20));
  std::vector<std::string> w_nodes, w_node;
  windows_add
      ->add_option("--nodes", w_nodes, "nodes the window covers, N1,N2 (their agents launch)")
      ->delimiter(',');
  windows_add->add_option("--node", w_node,
                          "a node the window covers with its GPU indices, NAME:0,1,2 (repeatable)");
  auto* w_start_opt = windows_add->add_option("--start", w_start, "start time (default now)");
  auto* w_end_opt = windows_add->add_option("--end", w_end, "end time");
  auto* w_duration_opt =
      windows_add->add_option("--duration", w_duration, "length, from the start");
  w_end_opt->excludes(w_duration_opt);
  windows_add->add_option("--kind", w_kind, "hard (known end) or spot (revocable)")
      ->check(CLI::IsMember({"hard", "spot"}));
  auto* w_lead_opt =
      windows_add->add_option("--notice-lead", w_lead, "notice a spot revocation gives");
  leaf(windows_add, [&](Ctl& c, int64_t now) {
    Json body{{"pool", w_pool}, {"kind", w_kind}};
    Json nodes = Json::array();
    for (const std::string& n : w_nodes) nodes.push_back(n);
    for (const std::string& n : w_node) {
      const size_t colon = n.find(':');
      if (colon == std::string::npos) {
        nodes.push_back(n);
        continue;
      }
      Json gpus = Json::array();
      std::string part;
      std::istringstream in(n.substr(colon + 1));
      while (std::getline(in, part, ',')) {
        char* end = nullptr;
        const long g = std::strtol(part.c_str(), &end, 10);
        if (part.empty() || *end != '\0' || g < 0 || g > 1000000)
          return Usage("--node " + n + ": \"" + part + "\" is not a GPU index");
        gpus.push_back(g);
      }
      nodes.push_back({{"name", n.substr(0, colon)}, {"gpus", gpus}});
    }
    if (*w_gpus_opt) body["gpus"] = w_gpus;
    if (!nodes.empty()) {
      body["nodes"] = nodes;
    } else if (!*w_gpus_opt) {
      return Usage("--gpus is required (or --nodes / --node)");
    }
    int64_t start = now;
    if (*w_start_opt) {
      auto t = ParseTime(w_start, now);
      if (!t.ok()) return Usage("--start: " + t.status().message());
      start = *t;
      body["start_ms"] = start;
    }
    if (*w_end_opt) {
      auto t = ParseTime(w_end, now);
      if (!t.ok()) return Usage("--end: " + t.status().message());
      body["end_ms"] = *t;
    } else if (*w_duration_opt) {
      auto d = ParseDuration(w_duration);
      if (!d.ok()) return Usage("--duration: " + d.status().message());
      body["end_ms"] = start + *d * 1000;
    } else if (w_kind == "hard") {
      return Usage("a hard window needs --end or --duration");
    }
    if (*w_lead_opt) {
      auto d = ParseDuration(w_lead);
      if (!d.ok()) return Usage("--notice-lead: " + d.status().message());
      body["notice_lead_seconds"] = *d;
    }
    return c.Run("POST", "/v1/windows", body, [&](const Json& reply) {
      std::string out;
      const Json made = reply.contains("windows") ? reply["windows"] : Json::array({reply});
      for (const Json& w : made) {
        std::string end =
            w.contains("end_ms") && !w["end_ms"].is_null() ? TimeCell(w, "end_ms", now) : "revoked";
        std::string node;
        if (w.value("node", Json()).is_string()) node = " on node " + Cell(w, "node");
        out += Line("window " + Cell(w, "id") + ": pool " + Cell(w, "pool") + ", " +
                    Cell(w, "gpus") + " GPUs" + node + ", " + Cell(w, "kind") + ", from " +
                    TimeCell(w, "start_ms", now) + " until " + end);
      }
      return out;
    });
  });
  CLI::App* windows_list = windows->add_subcommand("list", "list windows");
  leaf(windows_list, [&](Ctl& c, int64_t now) {
    return c.Run("GET", "/v1/windows", std::nullopt,
                 [now](const Json& r) { return RenderWindows(r, now); });
  });
  int64_t w_id = 0;
  std::string w_close_lead;
  CLI::App* windows_close =
      windows->add_subcommand("close", "close a window early (notices go out)");
  windows_close->add_option("id", w_id, "window id")->required()->check(kId);
  auto* w_close_lead_opt = windows_close->add_option(
      "--lead", w_close_lead, "notice before the close (default: the window's)");
  leaf(windows_close, [&](Ctl& c, int64_t now) {
    Json body = Json::object();
    if (*w_close_lead_opt) {
      auto d = ParseDuration(w_close_lead);
      if (!d.ok()) return Usage("--lead: " + d.status().message());
      body["lead_seconds"] = *d;
    }
    return c.Run("POST", "/v1/windows/" + std::to_string(w_id) + "/close", body,
                 [&](const Json& w) {
                   return Line("window " + Cell(w, "id") + " closes " + TimeCell(w, "end_ms", now));
                 });
  });

  // --- teams ---
  CLI::App* teams =
      app.add_subcommand("teams", "teams and their GPU guarantees")->require_subcommand(1);
  std::string team_name;
  int t_guaranteed = 0, t_borrow = 0;
  CLI::App* teams_set = teams->add_subcommand("set", "create or change a team");
  teams_set->add_option("name", team_name, "team name")->required();
  teams_set->add_option("--guaranteed", t_guaranteed, "GPUs guaranteed to the team")
      ->required()
      ->check(CLI::NonNegativeNumber);
  auto* t_borrow_opt =
      teams_set
          ->add_option("--borrow-limit", t_borrow, "GPUs it may borrow beyond that (-1: unlimited)")
          ->check(CLI::Range(-1, 1 << 30));
  leaf(teams_set, [&](Ctl& c, int64_t) {
    Json body{{"guaranteed_gpus", t_guaranteed}};
    if (*t_borrow_opt) body["borrow_limit_gpus"] = t_borrow;
    return c.Run("PUT", "/v1/teams/" + UrlEncode(team_name), body, [&](const Json& t) {
      return RenderTeams(Json{{"teams", Json::array({t})}});
    });
  });
  CLI::App* teams_list = teams->add_subcommand("list", "list teams");
  leaf(teams_list,
       [&](Ctl& c, int64_t) { return c.Run("GET", "/v1/teams", std::nullopt, RenderTeams); });

  // --- jobs ---
  CLI::App* jobs = app.add_subcommand("jobs", "training jobs")->require_subcommand(1);
  std::string j_name, j_gpus, j_team, j_pool, j_priority, j_remaining;
  bool j_no_gang = false, j_not_preemptible = false;
  double j_ckpt = 0, j_restart = 0, j_interval = 0;
  CLI::App* jobs_submit = jobs->add_subcommand("submit", "queue a job");
  jobs_submit->add_option("--name", j_name, "job name")->required();
  jobs_submit->add_option("--gpus", j_gpus, "GPUs: N, or MIN:MAX for an elastic job")->required();
  auto* j_team_opt = jobs_submit->add_option("--team", j_team, "team");
  auto* j_pool_opt = jobs_submit->add_option("--pool", j_pool, "pool to run in");
  auto* j_priority_opt =
      jobs_submit->add_option("--priority", j_priority, "LOW, MEDIUM, HIGH or CRITICAL");
  jobs_submit->add_flag("--no-gang", j_no_gang,
                        "may start on fewer GPUs than asked, growing later");
  jobs_submit->add_flag("--not-preemptible", j_not_preemptible, "never preempted for priority");
  auto* j_ckpt_opt =
      jobs_submit->add_option("--checkpoint-seconds", j_ckpt, "time one checkpoint takes")
          ->check(CLI::NonNegativeNumber);
  auto* j_restart_opt =
      jobs_submit->add_option("--restart-seconds", j_restart, "time from start to first step")
          ->check(CLI::NonNegativeNumber);
  auto* j_interval_opt =
      jobs_submit->add_option("--interval-seconds", j_interval, "time between checkpoints")
          ->check(CLI::NonNegativeNumber);
  auto* j_remaining_opt =
      jobs_submit->add_option("--remaining", j_remaining, "work left, e.g. 12h");
  // The launch spec: stint-agent starts the command on the segment's nodes.
  std::vector<std::string> j_command, j_env;
  std::string j_workdir, j_signal;
  int j_gpus_per_worker = 1;
  auto* j_gpw_opt = jobs_submit
                        ->add_option("--gpus-per-worker", j_gpus_per_worker,
                                     "GPUs per worker process (with a command)")
                        ->check(CLI::Range(1, 1024));
  // One K=V per --env: a vector option would take the arguments up to the
  // next flag and swallow the `--` before the command.
  jobs_submit->add_option("--env", j_env, "K=V for the workers (with a command; repeatable)")
      ->allow_extra_args(false);
  auto* j_workdir_opt =
      jobs_submit->add_option("--workdir", j_workdir, "the workers' directory (with a command)");
  auto* j_signal_opt = jobs_submit->add_option(
      "--signal", j_signal, "sent to the workers on a notice: TERM (default), INT, HUP, USR1, USR2");
  std::string j_torchrun;
  auto* j_torchrun_opt =
      jobs_submit
          ->add_option("--torchrun", j_torchrun,
                       "start the command through torchrun, one launcher per node "
                       "(--rdzv-backend=stint); LAUNCHER: the torchrun executable")
          ->expected(0, 1)
          ->default_str("torchrun");
  bool j_no_restart_crashed = false;
  auto* j_no_restart_opt = jobs_submit->add_flag(
      "--no-restart-crashed", j_no_restart_crashed,
      "a crashed worker ends its whole segment instead of being started again (with a command)");
  jobs_submit->add_option("command", j_command,
                          "after --: the command stint-agent starts per worker");
  leaf(jobs_submit, [&](Ctl& c, int64_t) {
    auto gpus = ParseGpuRange(j_gpus);
    if (!gpus.ok()) return Usage(gpus.status().message());
    Json body{{"name", j_name}, {"min_gpus", gpus->min}, {"max_gpus", gpus->max}};
    if (*j_team_opt) body["team"] = j_team;
    if (*j_pool_opt) body["pool"] = j_pool;
    if (*j_priority_opt) {
      auto p = ParsePriority(j_priority);
      if (!p.ok()) return Usage(p.status().message());
      body["priority"] = *p;
    }
    if (j_no_gang) body["gang"] = false;
    if (j_not_preemptible) body["preemptible"] = false;
    if (*j_ckpt_opt) body["checkpoint_seconds"] = j_ckpt;
    if (*j_restart_opt) body["restart_seconds"] = j_restart;
    if (*j_interval_opt) body["checkpoint_interval_seconds"] = j_interval;
    if (*j_remaining_opt) {
      auto d = ParseDuration(j_remaining);
      if (!d.ok()) return Usage("--remaining: " + d.status().message());
      body["remaining_seconds"] = *d;
    }
    if (!j_command.empty()) {
      Json env = Json::object();
      for (const std::string& kv : j_env) {
        const size_t eq = kv.find('=');
        if (eq == std::string::npos || eq == 0) return Usage("--env wants K=V (got \"" + kv + "\")");
        env[kv.substr(0, eq)] = kv.substr(eq + 1);
      }
      Json launch{{"command", j_command}, {"env", env}, {"gpus_per_worker", j_gpus_per_worker}};
      if (*j_workdir_opt) launch["workdir"] = j_workdir;
      if (*j_torchrun_opt)
        launch["torchrun"] = Json::array({j_torchrun.empty() ? "torchrun" : j_torchrun});
      if (*j_signal_opt) {
        std::string sig = j_signal;
        if (sig.rfind("SIG", 0) == 0) sig = sig.substr(3);
        launch["signal"] = sig;
      }
      if (j_no_restart_crashed) launch["restart_crashed"] = false;
      body["launch"] = launch;
    } else if (!j_env.empty() || *j_workdir_opt || *j_signal_opt || *j_gpw_opt || *j_torchrun_opt ||
               *j_no_restart_opt) {
      return Usage(
          "--env, --workdir, --signal, --gpus-per-worker, --torchrun and --no-restart-crashed go "
          "with a command after --");
    }
    return c.Run("POST", "/v1/jobs", body, [](const Json& j) {
      return Line("job " + Cell(j, "id") + " submitted (" + Cell(j, "state") + ")");
    });
  });
  std::string j_state;
  CLI::App* jobs_list = jobs->add_subcommand("list", "list jobs");
  auto* j_state_opt =
      jobs_list->add_option("--state", j_state, "only PENDING, RUNNING, DONE, CANCELLED or FAILED");
  leaf(jobs_list, [&](Ctl& c, int64_t now) {
    std::string path = "/v1/jobs";
    if (*j_state_opt) {
      auto s = ParseJobState(j_state);
      if (!s.ok()) return Usage(s.status().message());
      path += "?state=" + *s;
    }
    return c.Run("GET", path, std::nullopt, [now](const Json& r) { return RenderJobs(r, now); });
  });
  int64_t j_id = 0;
  CLI::App* jobs_show = jobs->add_subcommand("show", "one job, its segments and why it waits");
  jobs_show->add_option("id", j_id, "job id")->required()->check(kId);
  leaf(jobs_show, [&](Ctl& c, int64_t now) {
    return c.Run("GET", "/v1/jobs/" + std::to_string(j_id), std::nullopt,
                 [now](const Json& j) { return RenderJob(j, now); });
  });
  std::string j_reason;
  CLI::App* jobs_cancel =
      jobs->add_subcommand("cancel", "cancel a job (a running one gets a notice)");
  jobs_cancel->add_option("id", j_id, "job id")->required()->check(kId);
  auto* j_reason_opt =
      jobs_cancel->add_option("--reason", j_reason, "recorded in the job's message");
  leaf(jobs_cancel, [&](Ctl& c, int64_t) {
    Json body = Json::object();
    if (*j_reason_opt) body["reason"] = j_reason;
    return c.Run("POST", "/v1/jobs/" + std::to_string(j_id) + "/cancel", body, [](const Json& j) {
      return Line("job " + Cell(j, "id") + ": " + Cell(j, "state"));
    });
  });
  std::string j_level;
  CLI::App* jobs_priority = jobs->add_subcommand("priority", "change a job's priority");
  jobs_priority->add_option("id", j_id, "job id")->required()->check(kId);
  jobs_priority->add_option("level", j_level, "LOW, MEDIUM, HIGH or CRITICAL")->required();
  leaf(jobs_priority, [&](Ctl& c, int64_t) {
    auto p = ParsePriority(j_level);
    if (!p.ok()) return Usage(p.status().message());
    return c.Run("POST", "/v1/jobs/" + std::to_string(j_id) + "/priority", Json{{"priority", *p}},
                 [](const Json& j) {
                   return Line("job " + Cell(j, "id") + ": priority " + Cell(j, "priority"));
                 });
  });

  // --- queue, segments ---
  CLI::App* queue =
      app.add_subcommand("queue", "pending jobs in order, with why they wait; running jobs");
  leaf(queue,
       [&](Ctl& c, int64_t) { return c.Run("GET", "/v1/queue", std::nullopt, RenderQueue); });
  int64_t s_job = 0;
  CLI::App* segments = app.add_subcommand("segments", "job runs in windows");
  auto* s_job_opt = segments->add_option("--job", s_job, "only this job's")->check(kId);
  leaf(segments, [&](Ctl& c, int64_t now) {
    std::string path = "/v1/segments";
    if (*s_job_opt) path += "?job_id=" + std::to_string(s_job);
    return c.Run("GET", path, std::nullopt,
                 [now](const Json& r) { return RenderSegments(r, now); });
  });

  int64_t logs_job = 0;
  bool logs_follow = false;
  CLI::App* logs = app.add_subcommand("logs", "a job's workers' output (from its stint-agents)");
  logs->add_option("job", logs_job, "job id")->required()->check(kId);
  logs->add_flag("-f,--follow", logs_follow, "keep printing until the job ended");
  leaf(logs, [&](Ctl& c, int64_t) { return c.Logs(logs_job, logs_follow); });

  CLI::App* nodes = app.add_subcommand("nodes", "stint-agent nodes, their GPUs and windows");
  // Before the leaf of `nodes` itself, which is parsed along with them.
  std::string node_name;
  CLI::App* nodes_add = nodes->add_subcommand(
      "add", "give a node its own agent token (printed once; replaces an earlier one)");
  nodes_add->add_option("name", node_name, "node name")->required();
  leaf(nodes_add, [&](Ctl& c, int64_t) {
    return c.Run("POST", "/v1/nodes/" + node_name + "/token", Json::object(), [](const Json& r) {
      return Line("node " + Cell(r, "name") + "'s agent token (shown once; stint-agent --node " +
                  Cell(r, "name") + " --token-file FILE):") +
             Line(r.value("token", std::string()));
    });
  });
  CLI::App* nodes_revoke =
      nodes->add_subcommand("revoke", "revoke a node's own agent token (its agent is refused)");
  nodes_revoke->add_option("name", node_name, "node name")->required();
  leaf(nodes_revoke, [&](Ctl& c, int64_t) {
    return c.Run("DELETE", "/v1/nodes/" + node_name + "/token", std::nullopt,
                 [&](const Json&) { return Line("node " + node_name + "'s agent token revoked"); });
  });
  leaf(nodes, [&](Ctl& c, int64_t) {
    return c.Run("GET", "/v1/nodes", std::nullopt, RenderNodes);
  });

  CLI::App* status = app.add_subcommand(
      "status", "counts: jobs by state, GPUs, windows, the queue by priority and reason");
  leaf(status, [&](Ctl& c, int64_t) {
    return c.RunGets({"/v1/queue", "/v1/jobs", "/v1/windows"},
                     [](const std::vector<Json>& r) { return RenderStatus(r[0], r[1], r[2]); });
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }

  // Flags win over the environment; a token beats a token file.
  if (g.url.empty()) g.url = Getenv("STINTD_URL");
  if (g.url.empty()) g.url = "http://127.0.0.1:7077";
  if (g.token.empty() && !g.token_file.empty()) {
    auto t = ReadTokenFile(g.token_file);
    if (!t.ok()) return Usage("--token-file: " + t.status().message());
    g.token = *t;
  }
  if (g.token.empty()) g.token = Getenv("STINTD_TOKEN");
  if (g.token.empty() && !Getenv("STINTD_TOKEN_FILE").empty()) {
    auto t = ReadTokenFile(Getenv("STINTD_TOKEN_FILE"));
    if (!t.ok()) return Usage("$STINTD_TOKEN_FILE: " + t.status().message());
    g.token = *t;
  }

  if (g.ca_file.empty()) g.ca_file = Getenv("STINT_CA_FILE");

  internal::HttpJsonOptions options;
  options.url = g.url;
  options.token = g.token;
  options.ca_file = g.ca_file;
  options.connect_timeout = std::chrono::seconds(3);
  options.request_timeout = std::chrono::seconds(30);
  options.retry.deadline = std::chrono::milliseconds(0);
  auto http = HttpJsonClient::Create(options);
  if (!http.ok()) return Usage(http.status().message());
  Ctl ctl(std::move(*http), g.json);
  const int64_t now = internal::WallNowMs();
  for (auto& [cmd, run] : leaves) {
    if (cmd->parsed()) return run(ctl, now);
  }
  return Usage("no command given (see --help)");
}

}  // namespace
}  // namespace ctl
}  // namespace stint

int main(int argc, char** argv) { return stint::ctl::Main(argc, argv); }
