#include "stintd/slurm/slurm_executor.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <utility>

#include "base/strings.h"
#include "base/subprocess.h"
#include "common/launch_spec.h"
#include "stint/env.h"

extern char** environ;

namespace stint::stintd {
namespace {

// What a worker task does before the user's command (bash, no single
// quotes: it is passed quoted): its rank's registration, ranks and GPUs
// from the per-rank lists the executor put in the job's environment.
constexpr const char kTaskPrelude[] = R"(r=$SLURM_PROCID
ids=($STINT_WORKER_IDS); secrets=($STINT_WORKER_SECRETS); tokens=($STINT_FENCING_TOKENS)
locals=($STINT_LOCAL_RANKS); sizes=($STINT_LOCAL_WORLD_SIZES)
export RANK=$r LOCAL_RANK=${locals[$r]} LOCAL_WORLD_SIZE=${sizes[$r]}
export STINT_WORKER_ID=${ids[$r]} STINT_WORKER_SECRET=${secrets[$r]} STINT_FENCING_TOKEN=${tokens[$r]}
export STINT_WORKER_NAME=$SLURMD_NODENAME:$r
unset STINT_WORKER_IDS STINT_WORKER_SECRETS STINT_FENCING_TOKENS STINT_LOCAL_RANKS STINT_LOCAL_WORLD_SIZES
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  IFS=, read -ra d <<< "$CUDA_VISIBLE_DEVICES"; g=$STINT_GPUS_PER_WORKER
  if [ ${#d[@]} -ge $(( (LOCAL_RANK + 1) * g )) ]; then
    CUDA_VISIBLE_DEVICES=$(IFS=,; echo "${d[*]:$((LOCAL_RANK * g)):$g}"); export CUDA_VISIBLE_DEVICES
  fi
fi
exec "$@")";

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string Join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : sep) + i;
  return out;
}

void Log(const std::string& line) { std::fprintf(stderr, "stintd: slurm: %s\n", line.c_str()); }

// Text from users (a job's name) as it may go into a batch script's
// comment: a newline there would start a command, so every control
// character becomes '?'.
std::string OneLine(const std::string& text) {
  std::string out = text;
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return out;
}

// Variables of stintd's own environment the jobs must not inherit: its
// tokens, and the Slurm variables of an allocation stintd may run in.
std::vector<std::string> InheritedToDrop() {
  std::vector<std::string> drop = {"STINTD_ADMIN_TOKEN", "STINTD_WORKER_TOKEN",
                                   "STINTD_AGENT_TOKEN"};
  for (char** e = environ; *e != nullptr; e++) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (name.rfind("SLURM_", 0) == 0 && name != "SLURM_CONF") drop.push_back(name);
  }
  return drop;
}

// How a Slurm job that ended maps to a segment exit (API.md, "Slurm"): a
// crash where Slurm could not launch its batch script (so a node that cannot
// launch anything trips the crash-loop guard instead of a resubmit every
// poll), its batch script's code where the job ran to its end, 75 (queue
// again) where Slurm ended it (preemption, time limit, node failure, a
// cancel that was not ours).
int SegmentExitCode(const SlurmJob& job) {
  if (job.LaunchFailed()) return 1;
  if (job.state == "COMPLETED" || job.state == "FAILED") return job.exit_code;
  if (job.state == "OUT_OF_MEMORY") return 128 + 9;
  return 75;
}

// The Slurm job id of a segment's external_id ("slurm:ID"); 0 for none.
int64_t SlurmJobId(const std::string& external_id) {
  const std::string prefix = "slurm:";
  if (external_id.rfind(prefix, 0) != 0) return 0;
  const std::string id = external_id.substr(prefix.size());
  if (id.empty() || id.size() > 18 || !std::all_of(id.begin(), id.end(), ::isdigit)) return 0;
  return std::stoll(id);
}

// The node's newest window that has not ended (nullptr: none).
const Window* OpenNodeWindow(const ClusterState& s, const std::string& node, TimeMs now) {
  const Window* found = nullptr;
  for (const auto& [id, w] : s.windows) {
    if (w.node == node && now < w.end_ms && (found == nullptr || w.id > found->id)) found = &w;
  }
  return found;
}

bool NodeDown(const SlurmNode& n) {
  if (n.state == "DOWN" || n.state == "UNKNOWN" || n.state == "FUTURE") return true;
  for (const std::string& f : n.flags)
    if (f == "NOT_RESPONDING" || f == "FAIL" || f == "POWERED_DOWN") return true;
  return false;
}

}  // namespace

Result<std::unique_ptr<SlurmExecutor>> SlurmExecutor::Start(Coordinator* coordinator,
                                                            SlurmExecutorOptions options) {
  if (options.partitions.empty())
    return Status::InvalidArgument("--slurm needs at least one --slurm-partition");
  if (options.coord_url.empty())
    return Status::InvalidArgument("--slurm needs the URL the workers reach stintd at");
  if (options.workdir.empty()) return Status::InvalidArgument("--slurm-workdir is empty");
  if (options.margin_seconds < 0 || options.notice_lead_seconds < 0 ||
      options.start_timeout_seconds <= 0 || options.exit_grace_seconds <= 0 ||
      options.poll_interval.count() <= 0) {
    return Status::InvalidArgument(
        "Slurm margins, leads and timeouts must be positive (the margin and lead may be 0)");
  }
  Status made = Env::Default()->CreateDir(options.workdir);
  if (!made.ok() && made.code() != Code::kAlreadyExists) return made.WithContext("--slurm-workdir");
  std::unique_ptr<SlurmExecutor> e(new SlurmExecutor(coordinator, std::move(options)));
  STINT_ASSIGN_OR_RETURN(Cluster cluster, e->ReadCluster());
  for (const std::string& p : e->options_.partitions) {
    const bool known = std::any_of(cluster.nodes.begin(), cluster.nodes.end(),
                                   [&](const SlurmNode& n) { return n.InPartition(p); });
    if (!known)
      return Status::NotFound("Slurm partition " + p + " has no nodes (scontrol show node)");
    Result<Pool> pool = coordinator->AddPool(Pool{p, "Slurm partition " + p});
    if (!pool.ok() && pool.status().code() != Code::kAlreadyExists) return pool.status();
  }
  e->thread_ = std::thread([raw = e.get()] { raw->Loop(); });
  e->heartbeat_thread_ = std::thread([raw = e.get()] { raw->HeartbeatLoop(); });
  return e;
}

SlurmExecutor::SlurmExecutor(Coordinator* coordinator, SlurmExecutorOptions options)
    : coordinator_(coordinator), options_(std::move(options)) {}

SlurmExecutor::~SlurmExecutor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

void SlurmExecutor::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    Status polled = Poll();
    if (!polled.ok() && logged_["poll"] != polled.ToString()) {
      Log("cannot read the cluster: " + polled.ToString());
      logged_["poll"] = polled.ToString();
    } else if (polled.ok() && !logged_["poll"].empty()) {
      Log("the cluster answers again");
      logged_["poll"].clear();
    }
    lock.lock();
    cv_.wait_for(lock, options_.poll_interval, [this] { return stop_; });
  }
}

void SlurmExecutor::HeartbeatLoop() {
  const CoordinatorOptions& o = coordinator_->options();
  const auto every = std::chrono::milliseconds(
      static_cast<int64_t>(std::min(o.node_ttl_seconds, o.policy.lease_ttl_seconds) * 1000 / 3));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    const std::map<std::string, std::vector<int64_t>> live = live_;
    lock.unlock();
    for (const auto& [node, running] : live) Beat(node, running, {});
    lock.lock();
    cv_.wait_for(lock, every, [this] { return stop_; });
  }
}

void SlurmExecutor::Beat(const std::string& node, const std::vector<int64_t>& running,
                         const std::vector<Coordinator::NodeExit>& exits) {
  Result<Window> beat = coordinator_->NodeHeartbeat(node, running, exits);
  // kNotFound: no window yet (not schedulable); kAborted: its window ended.
  if (!beat.ok() && beat.status().code() != Code::kNotFound &&
      beat.status().code() != Code::kAborted) {
    Log("heartbeat of node " + node + ": " + beat.status().ToString());
  }
}

std::string SlurmExecutor::JobPrefix() const { return "stint." + options_.tag + "."; }

std::string SlurmExecutor::JobName(int64_t segment_id) const {
  return JobPrefix() + std::to_string(segment_id);
}

Result<SlurmExecutor::Cluster> SlurmExecutor::ReadCluster() const {
  // squeue --json lists every job Slurm remembers (22.05 ignores its
  // filters with --json), about 4 KiB each: a busy cluster's runs to tens of
  // MiB.
  constexpr size_t kMaxClusterOutput = size_t{512} << 20;
  auto run = [&](std::vector<std::string> argv) -> Result<std::string> {
    STINT_ASSIGN_OR_RETURN(CommandOutput out,
                           RunCommand(argv, options_.command_timeout, {}, kMaxClusterOutput));
    if (out.truncated) {
      return Status::ResourceExhausted(Join(argv, " ") + " printed more than " +
                                       std::to_string(kMaxClusterOutput >> 20) + " MiB");
    }
    if (out.exit_code != 0) {
      return Status::Unavailable(Join(argv, " ") + " exited " + std::to_string(out.exit_code) +
                                 ": " + out.Text().substr(0, 500));
    }
    return out.output;
  };
  Cluster c;
  STINT_ASSIGN_OR_RETURN(std::string nodes, run({"scontrol", "show", "node", "--oneliner"}));
  STINT_ASSIGN_OR_RETURN(c.nodes, ParseNodes(nodes));
  STINT_ASSIGN_OR_RETURN(std::string squeue, run({"squeue", "--json"}));
  STINT_ASSIGN_OR_RETURN(c.jobs, ParseSqueueJson(squeue));
  STINT_ASSIGN_OR_RETURN(std::string res, run({"scontrol", "show", "reservation", "-o"}));
  STINT_ASSIGN_OR_RETURN(c.reservations, ParseReservations(res));
  const std::string prefix = JobPrefix();
  for (const SlurmJob& j : c.jobs) {
    if (j.name.rfind(prefix, 0) != 0 || j.het_job_offset != 0) continue;
    const std::string sid_text = j.name.substr(prefix.size());
    if (sid_text.empty() || !std::all_of(sid_text.begin(), sid_text.end(), ::isdigit)) continue;
    const int64_t sid = std::stoll(sid_text);
    const SlurmJob*& newest = c.ours[sid];
    if (newest == nullptr || j.id > newest->id) newest = &j;
  }
  return c;
}

Status SlurmExecutor::Poll() {
  // An unreadable cluster skips the poll: the heartbeat thread goes on from
  // the last view, so a slurmctld restart or a slow command closes nothing.
  STINT_ASSIGN_OR_RETURN(Cluster cluster, ReadCluster());
  const TimeMs now = coordinator_->now();
  std::set<std::string> managed, live;
  ReconcileWindows(cluster, now, &managed, &live);
  std::map<std::string, NodeReport> reports;
  std::vector<Action> actions;
  ReconcileSegments(cluster, now, managed, &reports, &actions);
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_.clear();
    for (const std::string& node : live) live_[node] = reports[node].running;
  }
  for (const std::string& node : managed) {
    const NodeReport& r = reports[node];
    if (live.count(node) || !r.exits.empty()) Beat(node, r.running, r.exits);
  }
  for (const Action& a : actions) Act(a, now);
  return Status::OK();
}

void SlurmExecutor::Act(const Action& a, TimeMs now) {
  const std::string subject = "segment " + std::to_string(a.segment_id);
  if (a.slurm_job != 0) {
    Status sent = Cancel(a.slurm_job, a.signal);
    if (!sent.ok()) {  // retried next poll
      Log(subject + ": " + sent.ToString());
    } else if (!a.signal.empty()) {
      signalled_.insert(a.segment_id);
      Log(subject + ": notice forwarded to Slurm job " + std::to_string(a.slurm_job) + " as SIG" +
          a.signal);
    }
    return;
  }
  Status submitted = Submit(a.segment_id, now);
  if (submitted.ok()) return;
  Log(subject + ": " + submitted.ToString());
  for (const std::string& node : a.nodes)
    Beat(node, {}, {{a.segment_id, 1, "Slurm submit failed: " + submitted.ToString()}});
}

void SlurmExecutor::ReconcileWindows(const Cluster& cluster, TimeMs now,
                                     std::set<std::string>* managed, std::set<std::string>* live) {
  // The GPUs that jobs not ours hold per node: Slurm would not give them to
  // us. A job holding none (CPU only) takes nothing a window lends.
  std::map<std::string, int> foreign;
  for (const SlurmJob& j : cluster.jobs) {
    if (!j.Live() || j.state == "PENDING" || j.name.rfind(JobPrefix(), 0) == 0) continue;
    for (const std::string& n : j.nodes) foreign[n] += j.GpusOn(n);
  }
  for (const SlurmNode& node : cluster.nodes) {
    auto part = std::find_if(options_.partitions.begin(), options_.partitions.end(),
                             [&](const std::string& p) { return node.InPartition(p); });
    if (part == options_.partitions.end() || node.gpus <= 0) continue;
    managed->insert(node.name);
    if (!NodeDown(node)) live->insert(node.name);
    coordinator_->LabelNode(node.name, "slurm");
    // The next reservation over the node ends its window; one in force
    // now makes it unavailable.
    TimeMs end = kNever;
    bool reserved = false;
    for (const SlurmReservation& r : cluster.reservations) {
      if (std::find(r.nodes.begin(), r.nodes.end(), node.name) == r.nodes.end()) continue;
      if (r.start_ms <= now && now < r.end_ms) reserved = true;
      if (r.start_ms > now) end = std::min(end, r.start_ms);
    }
    const int free_gpus = std::max(0, node.gpus - foreign[node.name]);
    std::optional<Window> open;
    bool idle = true;  // no active segment on the open window
    coordinator_->Read([&](const ClusterState& s, const Plan&, TimeMs) {
      const Window* w = OpenNodeWindow(s, node.name, now);
      if (w == nullptr) return;
      open = *w;
      for (const auto& [sid, seg] : s.segments) {
        if (!SegmentActive(seg.state)) continue;
        for (const Placement& p : seg.placement) idle = idle && p.window_id != w->id;
      }
    });
    // A window lending GPUs another job took closes; a smaller one follows.
    const bool taken = open && static_cast<int>(open->node_gpus.size()) > free_gpus;
    const bool available = node.Schedulable() && !reserved && free_gpus > 0 && !taken;
    auto own_lead = options_.partition_notice_lead_seconds.find(*part);
    const TimeMs lead = SecondsToMs(own_lead != options_.partition_notice_lead_seconds.end()
                                        ? own_lead->second
                                        : options_.notice_lead_seconds);
    const std::string subject = "node " + node.name;
    if (available && !open) {
      // A window too short for a segment to start and stop is not lent.
      if (end != kNever && end - now < SecondsToMs(2 * options_.margin_seconds + 60)) continue;
      Window spec;
      spec.node = node.name;
      spec.pool = *part;
      for (int g = 0; g < free_gpus; g++) spec.node_gpus.push_back(g);
      spec.end_ms = end;
      spec.kind = end == kNever ? WindowKind::kSpot : WindowKind::kHard;
      spec.notice_lead_ms = lead;
      if (!node.address.empty() && node.address != node.name) spec.node_addr = node.address;
      bool created = false;
      Result<Window> w = coordinator_->RegisterNode(spec, &created);
      if (!w.ok()) {
        if (logged_[subject] != w.status().ToString()) Log(subject + ": " + w.status().ToString());
        logged_[subject] = w.status().ToString();
        continue;
      }
      logged_.erase(subject);
      if (created) {
        Log(subject + " lends window " + std::to_string(w->id) + " (" + std::to_string(free_gpus) +
            " GPUs, pool " + *part +
            (end == kNever ? ", no known end)" : ", until a reservation)"));
      }
    } else if (available && open && !open->closed_early && end < open->end_ms) {
      Log(subject + ": a reservation starts in " + std::to_string((end - now) / 1000) +
          " s: window " + std::to_string(open->id) + " closes then");
      Result<Window> closed = coordinator_->CloseWindow(open->id, std::max<TimeMs>(0, end - now));
      if (!closed.ok()) Log(subject + ": " + closed.status().ToString());
    } else if (available && open && !open->closed_early && idle &&
               static_cast<int>(open->node_gpus.size()) < free_gpus) {
      // GPUs another job held are free again: an idle window gives way to
      // a larger one (a busy one keeps its segments).
      Log(subject + ": " + std::to_string(free_gpus) + " GPUs free: window " +
          std::to_string(open->id) + " closes now, a larger one follows");
      Result<Window> closed = coordinator_->CloseWindow(open->id, TimeMs{0});
      if (!closed.ok()) Log(subject + ": " + closed.status().ToString());
    } else if (!available && open && !open->closed_early) {
      const bool down = NodeDown(node);
      Log(subject + " is " + node.state + (node.flags.empty() ? "" : "+" + Join(node.flags, "+")) +
          (reserved ? ", reserved" : "") +
          (foreign[node.name] > 0
               ? ", another job holds " + std::to_string(foreign[node.name]) + " of its GPUs"
               : "") +
          (node.reason.empty() ? "" : " (" + node.reason + ")") + ": window " +
          std::to_string(open->id) + (down ? " closes now" : " closes with its notice lead"));
      Result<Window> closed =
          coordinator_->CloseWindow(open->id, down ? std::optional<TimeMs>(0) : std::nullopt);
      if (!closed.ok()) Log(subject + ": " + closed.status().ToString());
    }
  }
}

void SlurmExecutor::ReconcileSegments(const Cluster& cluster, TimeMs now,
                                      const std::set<std::string>& managed,
                                      std::map<std::string, NodeReport>* reports,
                                      std::vector<Action>* actions) {
  struct Seg {
    SegmentState state = SegmentState::kRunning;
    // Notified, or shrinking: one srun step cannot signal some of its tasks
    // only, so a shrink stops the whole segment, which restarts at its new
    // size.
    bool notice = false;
    TimeMs ended_ms = 0;
    std::vector<std::string> nodes;  // one per placement, in order
    bool has_launch = false;
    std::string signal;
    std::string external_id;  // "slurm:ID" once submitted (durable)
  };
  std::map<int64_t, Seg> segs;
  coordinator_->Read([&](const ClusterState& s, const Plan&, TimeMs) {
    for (const auto& [sid, seg] : s.segments) {
      const bool ours = cluster.ours.count(sid) > 0;
      if (!ours && !SegmentActive(seg.state)) continue;
      Seg info;
      bool placed_here = false;
      for (const Placement& p : seg.placement) {
        auto w = s.windows.find(p.window_id);
        if (w == s.windows.end()) continue;
        info.nodes.push_back(w->second.node);
        placed_here = placed_here || managed.count(w->second.node) > 0;
      }
      if (!placed_here && !ours) continue;
      info.state = seg.state;
      info.notice = seg.state == SegmentState::kNotified || seg.shrink_deadline_ms != 0;
      info.ended_ms = seg.ended_ms;
      info.external_id = seg.external_id;
      auto job = s.jobs.find(seg.job_id);
      if (job != s.jobs.end() && !job->second.launch.empty()) {
        Result<tools::LaunchSpec> spec = tools::LaunchSpec::Parse(job->second.launch);
        info.has_launch = spec.ok();
        if (spec.ok()) info.signal = spec->signal.value_or("TERM");
      }
      segs[sid] = std::move(info);
    }
  });
  // The jobs of submitted segments that squeue no longer lists: Slurm's
  // accounting is asked how they ended, all at once.
  std::map<int64_t, int64_t> vanished;  // segment -> its Slurm job
  std::vector<int64_t> vanished_ids;
  for (const auto& [sid, seg] : segs) {
    const int64_t id = SlurmJobId(seg.external_id);
    if (SegmentActive(seg.state) && !cluster.ours.count(sid) && id != 0) {
      vanished[sid] = id;
      vanished_ids.push_back(id);
    }
  }
  const Result<Accounted> accounted =
      vanished_ids.empty() ? Result<Accounted>(Accounted{}) : Accounting(vanished_ids);
  auto report_exit = [&](int64_t sid, const Seg& seg, int code, const std::string& message) {
    for (const std::string& node : seg.nodes)
      (*reports)[node].exits.push_back({sid, code, message});
  };
  for (const auto& [sid, seg] : segs) {
    auto found = cluster.ours.find(sid);
    const SlurmJob* job = found == cluster.ours.end() ? nullptr : found->second;
    const std::string subject = "segment " + std::to_string(sid);
    if (SegmentActive(seg.state)) {
      if (job == nullptr) {
        if (!seg.external_id.empty()) {
          // Submitted (the id is durable) and gone from squeue: it ended
          // while stintd was down longer than MinJobAge, or Slurm lost it.
          // Never submitted again as this segment: its end as Slurm's
          // accounting tells it maps like a live job's, and where
          // accounting cannot tell, it is queued again (it resumes from its
          // checkpoint).
          const int64_t id = vanished[sid];
          const std::string gone = subject + ": its Slurm job " +
                                   seg.external_id.substr(seg.external_id.find(':') + 1) +
                                   " is gone from squeue";
          const SlurmJob* ended = nullptr;
          std::string unknown;
          if (id == 0) {
            unknown = "stintd's record of it, \"" + seg.external_id + "\", names no Slurm job";
          } else if (!accounted.ok()) {
            unknown = accounted.status().ToString();
          } else if (auto a = accounted->jobs.find(id); a == accounted->jobs.end()) {
            unknown = accounted->source + " does not know it";
          } else if (a->second.name != JobName(sid)) {
            unknown = accounted->source + " knows job " + std::to_string(id) + " as \"" +
                      OneLine(a->second.name) + "\", not this segment's";
          } else if (a->second.Live()) {
            unknown = accounted->source + " says it is still " + a->second.state;
          } else {
            ended = &a->second;
          }
          if (ended != nullptr) {
            const std::string what = "Slurm job " + std::to_string(id) + " " + ended->state +
                                     " (exit " + std::to_string(ended->exit_code) + "), says " +
                                     accounted->source;
            Log(gone + "; " + what);
            report_exit(sid, seg, SegmentExitCode(*ended), what);
          } else {
            Log(gone + " and how it ended is unknown (" + unknown + "): the job is queued again");
            report_exit(sid, seg, 75, "its Slurm job vanished (" + unknown + ")");
          }
          submitted_ms_.erase(sid);
        } else if (seg.has_launch) {
          actions->push_back({sid, 0, "", seg.nodes});
        }
        continue;
      }
      submitted_ms_.emplace(sid, now);  // found after a restart: the timeout counts from now
      if (Status labelled = coordinator_->LabelSegment(sid, "slurm:" + std::to_string(job->id));
          !labelled.ok()) {
        Log(subject + ": " + labelled.ToString());
      }
      if (job->Live()) {
        if (job->state == "PENDING" &&
            now - submitted_ms_[sid] > SecondsToMs(options_.start_timeout_seconds)) {
          Log(subject + ": Slurm job " + std::to_string(job->id) + " did not start (" +
              job->reason + "): cancelled, the job is queued again");
          actions->push_back({sid, job->id, "", {}});  // one that fails is retried next poll
          report_exit(sid, seg, 75, "Slurm did not start it (" + job->reason + ")");
          continue;
        }
        for (const std::string& node : seg.nodes) (*reports)[node].running.push_back(sid);
        if (seg.notice && !signalled_.count(sid))
          actions->push_back({sid, job->id, seg.signal, {}});
        continue;
      }
      const int code = SegmentExitCode(*job);
      std::string what = "Slurm job " + std::to_string(job->id) + " " + job->state + " (" +
                         job->reason + ", exit " + std::to_string(job->exit_code) + ")";
      if (job->LaunchFailed()) {
        what = "Slurm could not launch the batch script of job " + std::to_string(job->id) +
               " on " + Join(job->nodes, ",") + ": " + job->state + " (" + job->reason +
               "); slurmd's log on that node says why";
      }
      Log(subject + ": " + what);
      report_exit(sid, seg, code, what);
      continue;
    }
    // The segment ended: its Slurm job, if it still runs, goes too, at
    // once when its GPUs are gone (lost, cancelled), else after the grace
    // its workers get to exit by themselves.
    if (job != nullptr && job->Live()) {
      const bool at_once =
          seg.state == SegmentState::kLost || seg.state == SegmentState::kCancelled;
      if (at_once || now - seg.ended_ms > SecondsToMs(options_.exit_grace_seconds)) {
        if (!logged_.count(subject)) {
          Log(subject + " ended: cancelling Slurm job " + std::to_string(job->id));
          logged_[subject] = "cancelled";
        }
        actions->push_back({sid, job->id, "", {}});  // again next poll while it lives
      }
    } else {
      submitted_ms_.erase(sid);
      signalled_.erase(sid);
      logged_.erase(subject);
    }
  }
}

Status SlurmExecutor::Submit(int64_t segment_id, TimeMs now) {
  int64_t job_id = 0;
  std::string job_name, launch_text, partition;
  std::vector<std::string> hosts;  // per placement
  std::vector<int> gpus;           // per placement
  std::string master;
  int master_port = 0;
  TimeMs end = kNever;
  coordinator_->Read([&](const ClusterState& s, const Plan&, TimeMs) {
    auto seg = s.segments.find(segment_id);
    if (seg == s.segments.end()) return;
    job_id = seg->second.job_id;
    auto job = s.jobs.find(job_id);
    if (job != s.jobs.end()) {
      job_name = job->second.name;
      launch_text = job->second.launch;
    }
    master_port = seg->second.master_port;
    for (const Placement& p : seg->second.placement) {
      auto w = s.windows.find(p.window_id);
      if (w == s.windows.end()) continue;
      hosts.push_back(w->second.node);
      gpus.push_back(static_cast<int>(p.gpus.size()));
      if (master.empty())
        master = w->second.node_addr.empty() ? w->second.node : w->second.node_addr;
      if (partition.empty()) partition = w->second.pool;
      end = std::min(end, w->second.end_ms);
    }
  });
  if (hosts.empty())
    return Status::NotFound("segment " + std::to_string(segment_id) + " has no placement");
  STINT_ASSIGN_OR_RETURN(tools::LaunchSpec spec, tools::LaunchSpec::Parse(launch_text));
  const int gpw = spec.GpusPerWorker();
  // Ranks in placement order, as stint-agent numbers them.
  std::vector<std::string> task_hosts, local_ranks, local_sizes;
  for (size_t i = 0; i < hosts.size(); i++) {
    const int local = gpus[i] / gpw;
    for (int l = 0; l < local; l++) {
      task_hosts.push_back(hosts[i]);
      local_ranks.push_back(std::to_string(l));
      local_sizes.push_back(std::to_string(local));
    }
  }
  const int world = static_cast<int>(task_hosts.size());
  if (world == 0)
    return Status::FailedPrecondition("segment " + std::to_string(segment_id) + " has no workers");
  std::vector<std::string> ids, secrets, tokens;
  for (int r = 0; r < world; r++) {
    std::string secret;
    STINT_ASSIGN_OR_RETURN(Worker w, coordinator_->RegisterWorker(
                                         job_id, "slurm:" + task_hosts[r] + ":" + std::to_string(r),
                                         &secret, task_hosts[r]));
    ids.push_back(std::to_string(w.id));
    secrets.push_back(secret);
    tokens.push_back(std::to_string(w.fencing_token));
  }

  const std::string dir = options_.workdir + "/job-" + std::to_string(job_id);
  Status made = Env::Default()->CreateDir(dir);
  if (!made.ok() && made.code() != Code::kAlreadyExists) return made;
  const std::string base = dir + "/segment-" + std::to_string(segment_id);
  std::string command;
  for (const std::string& arg : spec.command) command += " " + ShellQuote(arg);
  // One job component per node, asking the GPUs and tasks the placement
  // has there (nodes may differ: [4, 2]); several make a heterogeneous job,
  // whose srun step numbers the tasks across its components in order.
  std::vector<size_t> parts;  // the placements with workers
  for (size_t i = 0; i < hosts.size(); i++)
    if (gpus[i] / gpw > 0) parts.push_back(i);
  const std::string het =
      parts.size() > 1 ? "--het-group=0-" + std::to_string(parts.size() - 1) + " " : "";
  const std::string script =
      "#!/bin/bash\n"
      "# stintd segment " +
      std::to_string(segment_id) + " of job " + std::to_string(job_id) + " (" + OneLine(job_name) +
      "): " + std::to_string(world) +
      " workers, one srun task each, ranks in placement order.\n"
      "srun " +
      het + "--kill-on-bad-exit=0 --wait=" +
      std::to_string(static_cast<int>(options_.exit_grace_seconds)) + " /bin/bash -c " +
      ShellQuote(kTaskPrelude) + " stint-task" + command + "\n";
  STINT_RETURN_IF_ERROR(WriteStringToFileSync(Env::Default(), base + ".sh", script));

  CommandEnv env;
  env.unset = InheritedToDrop();
  env.set = {
      {"STINT_COORD_URL", options_.coord_url},
      {"STINT_JOB_ID", std::to_string(job_id)},
      {"STINT_SEGMENT_ID", std::to_string(segment_id)},
      {"STINT_WORKER_IDS", Join(ids, " ")},
      {"STINT_WORKER_SECRETS", Join(secrets, " ")},
      {"STINT_FENCING_TOKENS", Join(tokens, " ")},
      {"STINT_LOCAL_RANKS", Join(local_ranks, " ")},
      {"STINT_LOCAL_WORLD_SIZES", Join(local_sizes, " ")},
      {"STINT_GPUS_PER_WORKER", std::to_string(gpw)},
      {"STINT_LEASE_TTL_SECONDS", std::to_string(coordinator_->options().policy.lease_ttl_seconds)},
      {"STINT_HEARTBEAT_INTERVAL_SECONDS",
       std::to_string(coordinator_->options().heartbeat_interval_seconds)},
      {"WORLD_SIZE", std::to_string(world)},
      {"MASTER_ADDR", master},
      {"MASTER_PORT", std::to_string(master_port != 0 ? master_port : 20000 + segment_id % 20000)}};
  if (!options_.ca_file.empty()) env.set.emplace_back("STINT_CA_FILE", options_.ca_file);
  if (spec.env) {
    for (const auto& [k, v] : *spec.env) env.set.emplace_back(k, v);
  }
  std::vector<std::string> argv = {
      "sbatch",
      "--parsable",
      "--job-name=" + JobName(segment_id),
      "--no-requeue",
      "--output=" + base + ".log",
      "--open-mode=append",
      "--export=ALL",
      "--comment=stintd job " + std::to_string(job_id) + " segment " + std::to_string(segment_id) +
          (options_.epoch > 0 ? " epoch " + std::to_string(options_.epoch) : "")};
  if (spec.workdir) argv.push_back("--chdir=" + *spec.workdir);
  for (size_t k = 0; k < parts.size(); k++) {
    const size_t i = parts[k];
    if (k > 0) argv.push_back(":");
    argv.insert(argv.end(), {"--partition=" + partition, "--nodes=1", "--nodelist=" + hosts[i],
                             "--ntasks=" + std::to_string(gpus[i] / gpw),
                             "--gres=gpu:" + std::to_string(gpus[i])});
    if (end != kNever) {
      const int64_t seconds = (end - now) / 1000 - static_cast<int64_t>(options_.margin_seconds);
      argv.push_back("--time=" + SlurmTimeLimit(std::max<int64_t>(60, seconds)));
    }
  }
  argv.push_back(base + ".sh");
  STINT_RETURN_IF_ERROR(MayAct("sbatch segment " + std::to_string(segment_id)));
  STINT_ASSIGN_OR_RETURN(CommandOutput out, RunCommand(argv, options_.command_timeout, env));
  // --parsable prints "JOBID[;CLUSTER]" on stdout; stderr may carry warnings
  // (a site's job_submit.lua), which are logged, never parsed.
  const std::string first = out.output.substr(0, out.output.find('\n'));
  std::string id_text = first.substr(0, first.find(';'));
  while (!id_text.empty() && std::isspace(static_cast<unsigned char>(id_text.back())))
    id_text.pop_back();
  if (out.exit_code != 0 || id_text.empty() ||
      !std::all_of(id_text.begin(), id_text.end(), ::isdigit)) {
    return Status::FailedPrecondition("sbatch (exit " + std::to_string(out.exit_code) +
                                      "): " + out.Text().substr(0, 500));
  }
  if (const std::string said = Trim(out.errors); !said.empty())
    Log("segment " + std::to_string(segment_id) + ": sbatch says: " + said.substr(0, 500));
  submitted_ms_[segment_id] = now;
  // Durable before the next poll, which takes a segment with an id that
  // squeue does not list for one whose job ended.
  if (Status labelled = coordinator_->LabelSegment(segment_id, "slurm:" + id_text); !labelled.ok())
    Log("segment " + std::to_string(segment_id) + ": " + labelled.ToString());
  Log("segment " + std::to_string(segment_id) + " of job " + std::to_string(job_id) +
      " is Slurm job " + id_text + " on " + Join(hosts, ",") + " (" + std::to_string(world) +
      " workers)");
  return Status::OK();
}

Result<SlurmExecutor::Accounted> SlurmExecutor::Accounting(const std::vector<int64_t>& ids) const {
  std::string list;
  for (int64_t id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  std::vector<std::string> failed;  // why each command did not answer
  for (const bool completion : {false, true}) {
    std::vector<std::string> argv = {"sacct"};
    if (completion) argv.push_back("--completion");
    // --jobs without --starttime reaches back to the epoch; --allocations
    // leaves the steps out.
    argv.insert(argv.end(), {"--jobs=" + list, "--allocations", "--noheader", "--parsable2",
                             "--format=JobIDRaw,State,ExitCode,JobName"});
    const std::string command = completion ? "sacct --completion" : "sacct";
    Result<CommandOutput> out = RunCommand(argv, options_.command_timeout);
    if (!out.ok()) {
      failed.push_back(out.status().ToString());
      continue;
    }
    if (out->exit_code != 0) {  // "Slurm accounting storage is disabled"
      failed.push_back(command + " exited " + std::to_string(out->exit_code) + ": " +
                       out->Text().substr(0, 300));
      continue;
    }
    // stdout only: sacct --completion warns on stderr of fields it does not
    // know (22.05: "Unknown type HetJobId").
    Result<std::vector<SlurmJob>> jobs = ParseSacct(out->output);
    if (!jobs.ok()) {
      failed.push_back(jobs.status().ToString());
      continue;
    }
    Accounted a;
    a.source = command;
    for (SlurmJob& j : *jobs) a.jobs[j.id] = std::move(j);
    return a;
  }
  return Status::Unavailable("Slurm's accounting does not answer: " + Join(failed, "; "));
}

Status SlurmExecutor::MayAct(const std::string& what) const {
  if (!options_.may_act || options_.may_act()) return Status::OK();
  return Status::Aborted("fenced: " + what + " not run, this stintd no longer holds the leader "
                         "lease of epoch " + std::to_string(options_.epoch));
}

Status SlurmExecutor::Cancel(int64_t slurm_job, const std::string& signal) {
  std::vector<std::string> argv = {"scancel"};
  if (!signal.empty()) argv.push_back("--signal=" + signal);
  argv.push_back(std::to_string(slurm_job));
  STINT_RETURN_IF_ERROR(MayAct(Join(argv, " ")));
  STINT_ASSIGN_OR_RETURN(CommandOutput out, RunCommand(argv, options_.command_timeout));
  if (out.exit_code != 0) {
    return Status::FailedPrecondition(Join(argv, " ") + " (exit " + std::to_string(out.exit_code) +
                                      "): " + out.Text().substr(0, 300));
  }
  return Status::OK();
}

}  // namespace stint::stintd
