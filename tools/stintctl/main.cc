// stintctl: the admin command line for stintd (tools/stintd/API.md).
//
//   stintctl pools add NAME [--description TEXT] [--storage PREFIX]...
//   stintctl pools set-storage NAME [PREFIX...]     stintctl pools list
//   stintctl windows add --pool P --gpus N [--start T] (--end T | --duration D)
//                        [--kind hard|spot] [--notice-lead D]
//                        [--nodes N1,N2 | --node NAME[:0,1,...]]...  (one window per node;
//                        --gpus is then per node, or the GPUs listed after the name)
//   stintctl windows list                             stintctl windows close ID [--lead D]
//   stintctl teams set NAME [--guaranteed N] [--borrow-limit N] [--budget X] [--budget-period D]
//                        (a change keeps what it does not name)    stintctl teams list
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
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/gpu_list.h"
#include "common/launch_spec.h"
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

// What a leaf command runs once the command line is parsed. Main runs the
// first parsed one in the order registered, so a command that has
// subcommands of its own comes after them (it is parsed along with them).
using Leaf = std::function<int(Ctl&, int64_t now_ms)>;
using Leaves = std::vector<std::pair<CLI::App*, Leaf>>;

// A positive id. CLI::PositiveNumber's message prints DBL_MAX in full.
CLI::Range IdRange() { return CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()); }

// --- pools ---
void AddPools(CLI::App& app, Leaves& leaves) {
  CLI::App* pools = app.add_subcommand("pools", "GPU pools")->require_subcommand(1);
  auto name = std::make_shared<std::string>();
  auto description = std::make_shared<std::string>();
  CLI::App* pools_add = pools->add_subcommand("add", "create a pool");
  pools_add->add_option("name", *name, "pool name")->required();
  CLI::Option* desc_opt = pools_add->add_option("--description", *description, "free text");
  auto pricing = std::make_shared<std::string>();
  auto price = std::make_shared<double>(0);
  CLI::Option* pricing_opt = pools_add->add_option(
      "--pricing", *pricing, "how its GPUs are paid for: on_demand (default), spot or on_prem");
  CLI::Option* price_opt =
      pools_add->add_option("--price", *price, "price per GPU-hour (0: unpriced)")
          ->check(CLI::NonNegativeNumber);
  auto storage = std::make_shared<std::vector<std::string>>();
  pools_add->add_option("--storage", *storage,
                        "a shared path or s3://bucket/prefix its nodes reach checkpoints at "
                        "(repeat for several; none: every location)");
  leaves.emplace_back(pools_add, [=](Ctl& c, int64_t) {
    Json body{{"name", *name}};
    if (*desc_opt) body["description"] = *description;
    if (*pricing_opt) body["pricing"] = *pricing;
    if (*price_opt) body["price_per_gpu_hour"] = *price;
    if (!storage->empty()) body["storage"] = *storage;
    return c.Run("POST", "/v1/pools", body,
                 [&](const Json&) { return Line("pool " + *name + " created"); });
  });
  auto set_name = std::make_shared<std::string>();
  auto set_price = std::make_shared<double>(0);
  CLI::App* pools_price =
      pools->add_subcommand("set-price", "set a pool's price per GPU-hour from now on");
  pools_price->add_option("name", *set_name, "pool name")->required();
  pools_price->add_option("price", *set_price, "price per GPU-hour")
      ->required()
      ->check(CLI::NonNegativeNumber);
  leaves.emplace_back(pools_price, [=](Ctl& c, int64_t) {
    return c.Run("POST", "/v1/pools/" + UrlEncode(*set_name) + "/price",
                 Json{{"price_per_gpu_hour", *set_price}}, [&](const Json& p) {
                   return Line("pool " + *set_name + ": " + Cell(p, "price_per_gpu_hour") +
                               " per GPU-hour from now on");
                 });
  });
  auto storage_name = std::make_shared<std::string>();
  auto set_storage = std::make_shared<std::vector<std::string>>();
  CLI::App* pools_storage = pools->add_subcommand(
      "set-storage", "set what storage a pool's nodes reach (no prefix: every location)");
  pools_storage->add_option("name", *storage_name, "pool name")->required();
  pools_storage->add_option("prefix", *set_storage, "shared paths and s3://bucket/prefix URLs");
  leaves.emplace_back(pools_storage, [=](Ctl& c, int64_t) {
    return c.Run("PUT", "/v1/pools/" + UrlEncode(*storage_name) + "/storage",
                 Json{{"storage", *set_storage}}, [&](const Json&) {
                   return Line("pool " + *storage_name + ": storage " +
                               (set_storage->empty() ? std::string("undeclared (any location)")
                                                     : std::to_string(set_storage->size()) +
                                                           " prefixes"));
                 });
  });
  CLI::App* pools_list = pools->add_subcommand("list", "list pools");
  leaves.emplace_back(pools_list, [](Ctl& c, int64_t) {
    return c.Run("GET", "/v1/pools", std::nullopt, RenderPools);
  });
}

// --- price-rules ---
void AddPriceRules(CLI::App& app, Leaves& leaves) {
  CLI::App* rules =
      app.add_subcommand("price-rules", "what each priority level may pay")->require_subcommand(1);
  CLI::App* list = rules->add_subcommand("list", "list the rules");
  leaves.emplace_back(list, [](Ctl& c, int64_t) {
    return c.Run("GET", "/v1/price-rules", std::nullopt, RenderPriceRules);
  });
  struct Args {
    std::string priority, window;
    double cap = -1;
    int revocations = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* set = rules->add_subcommand("set", "change a level's rule (fields not given are kept)");
  set->add_option("priority", a->priority, "LOW, MEDIUM, HIGH or CRITICAL")->required();
  CLI::Option* cap_opt = set->add_option(
      "--max-price", a->cap, "pools priced above this per GPU-hour are not used (-1: any price)");
  CLI::Option* revocations_opt =
      set->add_option("--spot-fallback", a->revocations,
                      "after this many revocations a job stops using spot pools (0: never)")
          ->check(CLI::NonNegativeNumber);
  CLI::Option* window_opt =
      set->add_option("--spot-fallback-window", a->window, "within this long, e.g. 24h (default)");
  leaves.emplace_back(set, [=](Ctl& c, int64_t) {
    auto p = ParsePriority(a->priority);
    if (!p.ok()) return Usage(p.status().message());
    Json body = Json::object();
    if (*cap_opt) body["max_price_per_gpu_hour"] = a->cap;
    if (*revocations_opt) body["spot_fallback_revocations"] = a->revocations;
    if (*window_opt) {
      auto d = ParseDuration(a->window);
      if (!d.ok()) return Usage("--spot-fallback-window: " + d.status().message());
      body["spot_fallback_window_seconds"] = *d;
    }
    return c.Run("PUT", "/v1/price-rules/" + *p, body, RenderPriceRules);
  });
}

// --- windows ---
// `windows add`'s flags.
struct WindowsAddArgs {
  std::string pool, start, end, duration, kind = "hard", lead;
  int gpus = 0;
  std::vector<std::string> nodes, node;
  CLI::Option* gpus_opt = nullptr;
  CLI::Option* start_opt = nullptr;
  CLI::Option* end_opt = nullptr;
  CLI::Option* duration_opt = nullptr;
  CLI::Option* lead_opt = nullptr;
};

// The "nodes" of the request: --nodes names, then --node NAME[:GPUS].
Result<Json> WindowNodes(const WindowsAddArgs& a) {
  Json nodes = Json::array();
  for (const std::string& n : a.nodes) nodes.push_back(n);
  for (const std::string& n : a.node) {
    const size_t colon = n.find(':');
    if (colon == std::string::npos) {
      nodes.push_back(n);
      continue;
    }
    auto gpus = tools::ParseGpuList(n.substr(colon + 1));
    if (!gpus.ok()) return Status::InvalidArgument("--node " + n + ": " + gpus.status().message());
    nodes.push_back({{"name", n.substr(0, colon)}, {"gpus", *gpus}});
  }
  return nodes;
}

int WindowsAdd(Ctl& c, int64_t now, const WindowsAddArgs& a) {
  Json body{{"pool", a.pool}, {"kind", a.kind}};
  const Result<Json> nodes = WindowNodes(a);
  if (!nodes.ok()) return Usage(nodes.status().message());
  if (*a.gpus_opt) body["gpus"] = a.gpus;
  if (!nodes->empty()) {
    body["nodes"] = *nodes;
  } else if (!*a.gpus_opt) {
    return Usage("--gpus is required (or --nodes / --node)");
  }
  int64_t start = now;
  if (*a.start_opt) {
    auto t = ParseTime(a.start, now);
    if (!t.ok()) return Usage("--start: " + t.status().message());
    start = *t;
    body["start_ms"] = start;
  }
  if (*a.end_opt) {
    auto t = ParseTime(a.end, now);
    if (!t.ok()) return Usage("--end: " + t.status().message());
    body["end_ms"] = *t;
  } else if (*a.duration_opt) {
    auto d = ParseDuration(a.duration);
    if (!d.ok()) return Usage("--duration: " + d.status().message());
    body["end_ms"] = start + *d * 1000;
  } else if (a.kind == "hard") {
    return Usage("a hard window needs --end or --duration");
  }
  if (*a.lead_opt) {
    auto d = ParseDuration(a.lead);
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
      out += Line("window " + Cell(w, "id") + ": pool " + Cell(w, "pool") + ", " + Cell(w, "gpus") +
                  " GPUs" + node + ", " + Cell(w, "kind") + ", from " +
                  TimeCell(w, "start_ms", now) + " until " + end);
    }
    return out;
  });
}

void AddWindowsAdd(CLI::App* windows, Leaves& leaves) {
  auto a = std::make_shared<WindowsAddArgs>();
  CLI::App* windows_add = windows->add_subcommand("add", "offer GPUs of a pool for a time window");
  windows_add->add_option("--pool", a->pool, "pool name")->required();
  a->gpus_opt = windows_add->add_option("--gpus", a->gpus, "number of GPUs (per node with nodes)")
                    ->check(CLI::Range(1, 1 << 20));
  windows_add
      ->add_option("--nodes", a->nodes, "nodes the window covers, N1,N2 (their agents launch)")
      ->delimiter(',');
  windows_add->add_option("--node", a->node,
                          "a node the window covers with its GPU indices, NAME:0,1,2 (repeatable)");
  a->start_opt = windows_add->add_option("--start", a->start, "start time (default now)");
  a->end_opt = windows_add->add_option("--end", a->end, "end time");
  a->duration_opt = windows_add->add_option("--duration", a->duration, "length, from the start");
  a->end_opt->excludes(a->duration_opt);
  windows_add->add_option("--kind", a->kind, "hard (known end) or spot (revocable)")
      ->check(CLI::IsMember({"hard", "spot"}));
  a->lead_opt = windows_add->add_option("--notice-lead", a->lead, "notice a spot revocation gives");
  leaves.emplace_back(windows_add, [a](Ctl& c, int64_t now) { return WindowsAdd(c, now, *a); });
}

void AddWindows(CLI::App& app, Leaves& leaves) {
  CLI::App* windows = app.add_subcommand("windows", "time windows of GPUs")->require_subcommand(1);
  AddWindowsAdd(windows, leaves);
  CLI::App* windows_list = windows->add_subcommand("list", "list windows");
  leaves.emplace_back(windows_list, [](Ctl& c, int64_t now) {
    return c.Run("GET", "/v1/windows", std::nullopt,
                 [now](const Json& r) { return RenderWindows(r, now); });
  });
  auto id = std::make_shared<int64_t>(0);
  auto lead = std::make_shared<std::string>();
  CLI::App* windows_close =
      windows->add_subcommand("close", "close a window early (notices go out)");
  windows_close->add_option("id", *id, "window id")->required()->check(IdRange());
  CLI::Option* lead_opt =
      windows_close->add_option("--lead", *lead, "notice before the close (default: the window's)");
  leaves.emplace_back(windows_close, [=](Ctl& c, int64_t now) {
    Json body = Json::object();
    if (*lead_opt) {
      auto d = ParseDuration(*lead);
      if (!d.ok()) return Usage("--lead: " + d.status().message());
      body["lead_seconds"] = *d;
    }
    return c.Run("POST", "/v1/windows/" + std::to_string(*id) + "/close", body, [&](const Json& w) {
      return Line("window " + Cell(w, "id") + " closes " + TimeCell(w, "end_ms", now));
    });
  });
}

// --- teams ---
void AddTeams(CLI::App& app, Leaves& leaves) {
  CLI::App* teams =
      app.add_subcommand("teams", "teams and their GPU guarantees")->require_subcommand(1);
  struct Args {
    std::string name, period;
    int guaranteed = 0, borrow = 0;
    double budget = -1;
  };
  auto a = std::make_shared<Args>();
  CLI::App* teams_set = teams->add_subcommand("set", "create or change a team");
  teams_set->add_option("name", a->name, "team name")->required();
  CLI::Option* guaranteed_opt =
      teams_set
          ->add_option("--guaranteed", a->guaranteed,
                       "GPUs guaranteed to the team (a new team: 0; a change keeps it)")
          ->check(CLI::NonNegativeNumber);
  CLI::Option* borrow_opt = teams_set
                                ->add_option("--borrow-limit", a->borrow,
                                             "GPUs it may borrow beyond that (-1: unlimited)")
                                ->check(CLI::Range(-1, 1 << 30));
  CLI::Option* budget_opt =
      teams_set->add_option("--budget", a->budget, "spending limit per period (-1: none)");
  CLI::Option* period_opt = teams_set->add_option("--budget-period", a->period,
                                                  "the budget's period, e.g. 30d (default) or 7d");
  leaves.emplace_back(teams_set, [=](Ctl& c, int64_t now) {
    // Only what is given: stintd keeps the team's other fields.
    Json body = Json::object();
    if (*guaranteed_opt) body["guaranteed_gpus"] = a->guaranteed;
    if (*borrow_opt) body["borrow_limit_gpus"] = a->borrow;
    if (*budget_opt) body["budget"] = a->budget;
    if (*period_opt) {
      auto d = ParseDuration(a->period);
      if (!d.ok()) return Usage("--budget-period: " + d.status().message());
      body["budget_period_seconds"] = *d;
    }
    return c.Run("PUT", "/v1/teams/" + UrlEncode(a->name), body, [&](const Json& t) {
      return RenderTeams(Json{{"teams", Json::array({t})}}, now);
    });
  });
  CLI::App* teams_list = teams->add_subcommand("list", "list teams");
  leaves.emplace_back(teams_list, [](Ctl& c, int64_t now) {
    return c.Run("GET", "/v1/teams", std::nullopt,
                 [now](const Json& r) { return RenderTeams(r, now); });
  });
}

// --- jobs ---
// `jobs submit`'s flags; the launch spec's go with a command after --.
struct JobsSubmitArgs {
  std::string name, gpus, team, pool, priority, remaining, eval;
  int eval_every = 1, eval_gpus = 0;
  CLI::Option* eval_opt = nullptr;
  bool no_gang = false, not_preemptible = false;
  double ckpt = 0, restart = 0, interval = 0;
  CLI::Option* team_opt = nullptr;
  CLI::Option* pool_opt = nullptr;
  CLI::Option* priority_opt = nullptr;
  CLI::Option* ckpt_opt = nullptr;
  CLI::Option* restart_opt = nullptr;
  CLI::Option* interval_opt = nullptr;
  CLI::Option* remaining_opt = nullptr;
  // The launch spec: stint-agent starts the command on the segment's nodes.
  std::vector<std::string> command, env;
  std::string workdir, signal, torchrun;
  int gpus_per_worker = 1;
  bool no_restart_crashed = false;
  CLI::Option* gpw_opt = nullptr;
  CLI::Option* workdir_opt = nullptr;
  CLI::Option* signal_opt = nullptr;
  CLI::Option* torchrun_opt = nullptr;
  CLI::Option* no_restart_opt = nullptr;
};

// The launch spec the command and its flags make; nullopt without a command.
Result<std::optional<tools::LaunchSpec>> LaunchOf(const JobsSubmitArgs& a) {
  if (a.command.empty()) {
    if (!a.env.empty() || *a.workdir_opt || *a.signal_opt || *a.gpw_opt || *a.torchrun_opt ||
        *a.no_restart_opt) {
      return Status::InvalidArgument(
          "--env, --workdir, --signal, --gpus-per-worker, --torchrun and --no-restart-crashed go "
          "with a command after --");
    }
    return std::optional<tools::LaunchSpec>();
  }
  tools::LaunchSpec launch;
  launch.command = a.command;
  launch.env.emplace();
  for (const std::string& kv : a.env) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::InvalidArgument("--env wants K=V (got \"" + kv + "\")");
    (*launch.env)[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  launch.gpus_per_worker = a.gpus_per_worker;
  if (*a.workdir_opt) launch.workdir = a.workdir;
  if (*a.torchrun_opt)
    launch.torchrun = std::vector<std::string>{a.torchrun.empty() ? "torchrun" : a.torchrun};
  if (*a.signal_opt) launch.signal = a.signal.rfind("SIG", 0) == 0 ? a.signal.substr(3) : a.signal;
  if (a.no_restart_crashed) launch.restart_crashed = false;
  return std::optional<tools::LaunchSpec>(std::move(launch));
}

int JobsSubmit(Ctl& c, const JobsSubmitArgs& a) {
  auto gpus = ParseGpuRange(a.gpus);
  if (!gpus.ok()) return Usage(gpus.status().message());
  Json body{{"name", a.name}, {"min_gpus", gpus->min}, {"max_gpus", gpus->max}};
  if (*a.team_opt) body["team"] = a.team;
  if (*a.pool_opt) body["pool"] = a.pool;
  if (*a.priority_opt) {
    auto p = ParsePriority(a.priority);
    if (!p.ok()) return Usage(p.status().message());
    body["priority"] = *p;
  }
  if (a.no_gang) body["gang"] = false;
  if (a.not_preemptible) body["preemptible"] = false;
  if (*a.ckpt_opt) body["checkpoint_seconds"] = a.ckpt;
  if (*a.restart_opt) body["restart_seconds"] = a.restart;
  if (*a.interval_opt) body["checkpoint_interval_seconds"] = a.interval;
  if (*a.remaining_opt) {
    auto d = ParseDuration(a.remaining);
    if (!d.ok()) return Usage("--remaining: " + d.status().message());
    body["remaining_seconds"] = *d;
  }
  if (*a.eval_opt) {
    body["eval"] = {
        {"command", {"sh", "-c", a.eval}}, {"every", a.eval_every}, {"gpus", a.eval_gpus}};
  }
  const auto launch = LaunchOf(a);
  if (!launch.ok()) return Usage(launch.status().message());
  if (launch->has_value()) body["launch"] = (*launch)->ToJson();
  return c.Run("POST", "/v1/jobs", body, [](const Json& j) {
    return Line("job " + Cell(j, "id") + " submitted (" + Cell(j, "state") + ")");
  });
}

void AddJobsSubmit(CLI::App* jobs, Leaves& leaves) {
  auto a = std::make_shared<JobsSubmitArgs>();
  CLI::App* jobs_submit = jobs->add_subcommand("submit", "queue a job");
  jobs_submit->add_option("--name", a->name, "job name")->required();
  jobs_submit->add_option("--gpus", a->gpus, "GPUs: N, or MIN:MAX for an elastic job")->required();
  a->team_opt = jobs_submit->add_option("--team", a->team, "team");
  a->pool_opt = jobs_submit->add_option("--pool", a->pool,
                                        "pools it may run in, e.g. a or a,b,c (default: any)");
  a->priority_opt =
      jobs_submit->add_option("--priority", a->priority, "LOW, MEDIUM, HIGH or CRITICAL");
  jobs_submit->add_flag("--no-gang", a->no_gang,
                        "may start on fewer GPUs than asked, growing later");
  jobs_submit->add_flag("--not-preemptible", a->not_preemptible, "never preempted for priority");
  a->ckpt_opt =
      jobs_submit->add_option("--checkpoint-seconds", a->ckpt, "time one checkpoint takes")
          ->check(CLI::NonNegativeNumber);
  a->restart_opt =
      jobs_submit->add_option("--restart-seconds", a->restart, "time from start to first step")
          ->check(CLI::NonNegativeNumber);
  a->interval_opt =
      jobs_submit->add_option("--interval-seconds", a->interval, "time between checkpoints")
          ->check(CLI::NonNegativeNumber);
  a->remaining_opt = jobs_submit->add_option("--remaining", a->remaining, "work left, e.g. 12h");
  a->eval_opt = jobs_submit->add_option(
      "--eval", a->eval,
      "shell command evaluating a checkpoint on leftover capacity ($STINT_EVAL_STEP: which; "
      "it prints its metrics as a JSON object)");
  jobs_submit->add_option("--eval-every", a->eval_every, "evaluate every Nth durable checkpoint")
      ->check(CLI::Range(1, 1000000));
  jobs_submit->add_option("--eval-gpus", a->eval_gpus, "0: CPU only (default), 1: one GPU")
      ->check(CLI::Range(0, 1));
  a->gpw_opt = jobs_submit
                   ->add_option("--gpus-per-worker", a->gpus_per_worker,
                                "GPUs per worker process (with a command)")
                   ->check(CLI::Range(1, 1024));
  // One K=V per --env: a vector option would take the arguments up to the
  // next flag and swallow the `--` before the command.
  jobs_submit->add_option("--env", a->env, "K=V for the workers (with a command; repeatable)")
      ->allow_extra_args(false);
  a->workdir_opt =
      jobs_submit->add_option("--workdir", a->workdir, "the workers' directory (with a command)");
  a->signal_opt = jobs_submit->add_option(
      "--signal", a->signal,
      "sent to the workers on a notice: TERM (default), INT, HUP, USR1, USR2");
  a->torchrun_opt = jobs_submit
                        ->add_option("--torchrun", a->torchrun,
                                     "start the command through torchrun, one launcher per node "
                                     "(--rdzv-backend=stint); LAUNCHER: the torchrun executable")
                        ->expected(0, 1)
                        ->default_str("torchrun");
  a->no_restart_opt = jobs_submit->add_flag(
      "--no-restart-crashed", a->no_restart_crashed,
      "a crashed worker ends its whole segment instead of being started again (with a command)");
  jobs_submit->add_option("command", a->command,
                          "after --: the command stint-agent starts per worker");
  leaves.emplace_back(jobs_submit, [a](Ctl& c, int64_t) { return JobsSubmit(c, *a); });
}

// jobs list, show, cancel and priority.
void AddJobViews(CLI::App* jobs, Leaves& leaves) {
  auto state = std::make_shared<std::string>();
  CLI::App* jobs_list = jobs->add_subcommand("list", "list jobs");
  CLI::Option* state_opt =
      jobs_list->add_option("--state", *state, "only PENDING, RUNNING, DONE, CANCELLED or FAILED");
  leaves.emplace_back(jobs_list, [=](Ctl& c, int64_t now) {
    std::string path = "/v1/jobs";
    if (*state_opt) {
      auto s = ParseJobState(*state);
      if (!s.ok()) return Usage(s.status().message());
      path += "?state=" + *s;
    }
    return c.Run("GET", path, std::nullopt, [now](const Json& r) { return RenderJobs(r, now); });
  });
  auto id = std::make_shared<int64_t>(0);
  CLI::App* jobs_show = jobs->add_subcommand("show", "one job, its segments and why it waits");
  jobs_show->add_option("id", *id, "job id")->required()->check(IdRange());
  leaves.emplace_back(jobs_show, [=](Ctl& c, int64_t now) {
    return c.Run("GET", "/v1/jobs/" + std::to_string(*id), std::nullopt,
                 [now](const Json& j) { return RenderJob(j, now); });
  });
  auto reason = std::make_shared<std::string>();
  CLI::App* jobs_cancel =
      jobs->add_subcommand("cancel", "cancel a job (a running one gets a notice)");
  jobs_cancel->add_option("id", *id, "job id")->required()->check(IdRange());
  CLI::Option* reason_opt =
      jobs_cancel->add_option("--reason", *reason, "recorded in the job's message");
  leaves.emplace_back(jobs_cancel, [=](Ctl& c, int64_t) {
    Json body = Json::object();
    if (*reason_opt) body["reason"] = *reason;
    return c.Run("POST", "/v1/jobs/" + std::to_string(*id) + "/cancel", body, [](const Json& j) {
      return Line("job " + Cell(j, "id") + ": " + Cell(j, "state"));
    });
  });
  auto level = std::make_shared<std::string>();
  CLI::App* jobs_priority = jobs->add_subcommand("priority", "change a job's priority");
  jobs_priority->add_option("id", *id, "job id")->required()->check(IdRange());
  jobs_priority->add_option("level", *level, "LOW, MEDIUM, HIGH or CRITICAL")->required();
  leaves.emplace_back(jobs_priority, [=](Ctl& c, int64_t) {
    auto p = ParsePriority(*level);
    if (!p.ok()) return Usage(p.status().message());
    return c.Run("POST", "/v1/jobs/" + std::to_string(*id) + "/priority", Json{{"priority", *p}},
                 [](const Json& j) {
                   return Line("job " + Cell(j, "id") + ": priority " + Cell(j, "priority"));
                 });
  });
}

void AddJobs(CLI::App& app, Leaves& leaves) {
  CLI::App* jobs = app.add_subcommand("jobs", "training jobs")->require_subcommand(1);
  AddJobsSubmit(jobs, leaves);
  AddJobViews(jobs, leaves);
}

// --- queue, segments ---
void AddQueueAndSegments(CLI::App& app, Leaves& leaves) {
  CLI::App* queue =
      app.add_subcommand("queue", "pending jobs in order, with why they wait; running jobs");
  leaves.emplace_back(
      queue, [](Ctl& c, int64_t) { return c.Run("GET", "/v1/queue", std::nullopt, RenderQueue); });
  auto job = std::make_shared<int64_t>(0);
  CLI::App* segments = app.add_subcommand("segments", "job runs in windows");
  CLI::Option* job_opt = segments->add_option("--job", *job, "only this job's")->check(IdRange());
  leaves.emplace_back(segments, [=](Ctl& c, int64_t now) {
    std::string path = "/v1/segments";
    if (*job_opt) path += "?job_id=" + std::to_string(*job);
    return c.Run("GET", path, std::nullopt,
                 [now](const Json& r) { return RenderSegments(r, now); });
  });
}

// --- logs ---
void AddLogs(CLI::App& app, Leaves& leaves) {
  auto job = std::make_shared<int64_t>(0);
  auto follow = std::make_shared<bool>(false);
  CLI::App* logs = app.add_subcommand("logs", "a job's workers' output (from its stint-agents)");
  logs->add_option("job", *job, "job id")->required()->check(IdRange());
  logs->add_flag("-f,--follow", *follow, "keep printing until the job ended");
  leaves.emplace_back(logs, [=](Ctl& c, int64_t) { return c.Logs(*job, *follow); });
}

// --- nodes ---
void AddNodes(CLI::App& app, Leaves& leaves) {
  CLI::App* nodes = app.add_subcommand("nodes", "stint-agent nodes, their GPUs and windows");
  // Before the leaf of `nodes` itself, which is parsed along with them.
  auto name = std::make_shared<std::string>();
  CLI::App* nodes_add = nodes->add_subcommand(
      "add", "give a node its own agent token (printed once; replaces an earlier one)");
  nodes_add->add_option("name", *name, "node name")->required();
  leaves.emplace_back(nodes_add, [=](Ctl& c, int64_t) {
    return c.Run("POST", "/v1/nodes/" + *name + "/token", Json::object(), [](const Json& r) {
      return Line("node " + Cell(r, "name") + "'s agent token (shown once; stint-agent --node " +
                  Cell(r, "name") + " --token-file FILE):") +
             Line(r.value("token", std::string()));
    });
  });
  CLI::App* nodes_revoke =
      nodes->add_subcommand("revoke", "revoke a node's own agent token (its agent is refused)");
  nodes_revoke->add_option("name", *name, "node name")->required();
  leaves.emplace_back(nodes_revoke, [=](Ctl& c, int64_t) {
    return c.Run("DELETE", "/v1/nodes/" + *name + "/token", std::nullopt,
                 [&](const Json&) { return Line("node " + *name + "'s agent token revoked"); });
  });
  leaves.emplace_back(
      nodes, [](Ctl& c, int64_t) { return c.Run("GET", "/v1/nodes", std::nullopt, RenderNodes); });
}

// --- status ---
void AddStatus(CLI::App& app, Leaves& leaves) {
  CLI::App* status = app.add_subcommand(
      "status",
      "counts: jobs by state, GPUs, windows, the queue by priority and reason; the leader, its "
      "epoch and the standbys of stintds sharing a database");
  leaves.emplace_back(status, [](Ctl& c, int64_t) {
    return c.RunGets({"/v1/queue", "/v1/jobs", "/v1/windows", "/v1/leader"},
                     [](const std::vector<Json>& r) { return RenderStatus(r[0], r[1], r[2], r[3]); });
  });
}

// The client of the global flags. Flags win over the environment; a token
// beats a token file. An error is a usage error (nothing was sent).
Result<std::unique_ptr<HttpJsonClient>> Connect(Globals g) {
  if (g.url.empty()) g.url = Getenv("STINTD_URL");
  if (g.url.empty()) g.url = "http://127.0.0.1:7077";
  if (g.token.empty() && !g.token_file.empty()) {
    auto t = ReadTokenFile(g.token_file);
    if (!t.ok()) return Status::InvalidArgument("--token-file: " + t.status().message());
    g.token = *t;
  }
  if (g.token.empty()) g.token = Getenv("STINTD_TOKEN");
  if (g.token.empty() && !Getenv("STINTD_TOKEN_FILE").empty()) {
    auto t = ReadTokenFile(Getenv("STINTD_TOKEN_FILE"));
    if (!t.ok()) return Status::InvalidArgument("$STINTD_TOKEN_FILE: " + t.status().message());
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
  return HttpJsonClient::Create(options);
}

int Main(int argc, char** argv) {
  CLI::App app{"stintctl: administer stintd (pools, windows, teams, jobs, queue)"};
  app.fallthrough();  // global flags also after the subcommand: `stintctl queue --json`
  app.require_subcommand(1);
  Globals g;
  app.add_option("--url", g.url,
                 "stintd address (default $STINTD_URL or http://127.0.0.1:7077); several, "
                 "comma-separated: the stintds sharing a database, asked until the leader answers");
  app.add_option("--token", g.token, "bearer token (default $STINTD_TOKEN)");
  app.add_option("--token-file", g.token_file,
                 "file holding the bearer token (default $STINTD_TOKEN_FILE)");
  app.add_option("--ca-file", g.ca_file,
                 "https: PEM CA certificates stintd's certificate must chain to "
                 "(default $STINT_CA_FILE)");
  app.add_flag("--json", g.json, "print stintd's JSON answer unchanged");

  Leaves leaves;
  AddPools(app, leaves);
  AddWindows(app, leaves);
  AddTeams(app, leaves);
  AddPriceRules(app, leaves);
  AddJobs(app, leaves);
  AddQueueAndSegments(app, leaves);
  AddLogs(app, leaves);
  AddNodes(app, leaves);
  AddStatus(app, leaves);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }

  auto http = Connect(g);
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
