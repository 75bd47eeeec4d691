#include "stint-agent/node_agent.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>

#include "base/strings.h"
#include "common/launch_spec.h"
#include "coord/http_json.h"
#include "coord/wall_clock.h"
#include "stint-agent/job_process.h"
#include "stint/env.h"

namespace stint {
namespace agent {
namespace {

using internal::HttpReply;
using internal::HttpRequest;
using internal::Json;

// How long a heartbeat waits for the processes of an evaluation it killed
// to be gone (SIGKILL takes milliseconds; one stuck in the kernel is waited
// for over later beats, its GPU taking no worker meanwhile).
constexpr std::chrono::seconds kSettleWait{2};

bool ValidNodeName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (unsigned char c : name) {
    if (!(std::isalnum(c) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

std::string JoinGpus(const std::vector<int>& gpus) {
  std::string out;
  for (int g : gpus) out += (out.empty() ? "" : ",") + std::to_string(g);
  return out;
}

// The last non-empty line of a log (its last 4 KiB), for a failure message.
std::string LastLine(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  const std::streamoff from = size > 4096 ? size - 4096 : 0;
  in.seekg(from);
  std::string tail((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
  const size_t nl = tail.rfind('\n');
  return nl == std::string::npos ? tail : tail.substr(nl + 1);
}

// Up to `max` bytes of the file from `offset`, without a UTF-8 character
// cut at the end (it goes whole with the next piece); "" when there is
// nothing new (or no file yet: the worker opens it after the fork).
std::string ReadPiece(const std::string& path, uint64_t offset, size_t max) {
  std::ifstream in(path, std::ios::binary);
  if (!in || !in.seekg(static_cast<std::streamoff>(offset))) return "";
  std::string bytes(max, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(max));
  bytes.resize(static_cast<size_t>(in.gcount()));
  for (size_t back = 1; back <= 3 && back <= bytes.size(); back++) {
    const unsigned char c = bytes[bytes.size() - back];
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (need > back) bytes.resize(bytes.size() - back);
    break;
  }
  return bytes;
}

// The first line start at or after `offset` within 64 KiB (`offset` when
// there is none), where skipped output resumes.
uint64_t LineStartFrom(const std::string& path, uint64_t offset) {
  const std::string bytes = ReadPiece(path, offset, 64u << 10);
  const size_t nl = bytes.find('\n');
  return nl == std::string::npos ? offset : offset + nl + 1;
}

}  // namespace

Result<std::unique_ptr<NodeAgent>> NodeAgent::Create(NodeAgentOptions options) {
  if (!ValidNodeName(options.node)) {
    return Status::InvalidArgument("--node must match [A-Za-z0-9._-]{1,128} (got \"" +
                                   options.node + "\")");
  }
  const bool join = !options.spot && !options.end_ms;
  if (options.pool.empty() && !join) return Status::InvalidArgument("--pool is required");
  if (options.gpus.empty()) return Status::InvalidArgument("--gpus must list at least one index");
  for (int g : options.gpus) {
    if (g < 0) return Status::InvalidArgument("--gpus: an index is negative");
  }
  if (options.notice_lead_seconds < 0) return Status::InvalidArgument("--notice-lead must be >= 0");
  if (options.heartbeat_interval.count() <= 0)
    return Status::InvalidArgument("--heartbeat-seconds must be > 0");
  if (options.eval_slots < 0 || options.eval_slots > static_cast<int>(options.gpus.size())) {
    return Status::InvalidArgument(
        "--eval-slots must be 0.." + std::to_string(options.gpus.size()) +
        " (one evaluation per GPU lent at most; got " + std::to_string(options.eval_slots) + ")");
  }
  STINT_ASSIGN_OR_RETURN(JobUsers job_users, JobUsers::Create(options.job_user, options.job_uids));
  if (!options.workdir.empty())
    STINT_RETURN_IF_ERROR(CreateDirWithParents(Env::Default(), options.workdir));
  if (!options.ca_file.empty()) {
    // The workers start in their own working directory.
    char* absolute = realpath(options.ca_file.c_str(), nullptr);
    if (absolute == nullptr) return StatusFromErrno("--ca-file " + options.ca_file, errno);
    options.ca_file = absolute;
    free(absolute);
  }
  internal::HttpJsonOptions h;
  h.url = options.url;
  h.token = options.token;
  h.ca_file = options.ca_file;
  h.retry.deadline = options.call_deadline;
  h.retry.initial_backoff = std::chrono::milliseconds(50);
  h.retry.max_backoff = std::chrono::seconds(1);
  STINT_ASSIGN_OR_RETURN(auto http, internal::HttpJsonClient::Create(h));
  return std::unique_ptr<NodeAgent>(
      new NodeAgent(std::move(options), std::move(http), std::move(job_users)));
}

NodeAgent::NodeAgent(NodeAgentOptions options, std::unique_ptr<internal::HttpJsonClient> http,
                     JobUsers job_users)
    : options_(std::move(options)), http_(std::move(http)), job_users_(std::move(job_users)) {}

NodeAgent::~NodeAgent() = default;

Status NodeAgent::Register() {
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/nodes";
  // Neither an end nor --spot: the node joins the admin window that names
  // it (API.md, "Windows on nodes") instead of lending one of its own.
  const bool join = !options_.spot && !options_.end_ms;
  Json body{{"name", options_.node}, {"gpus", options_.gpus}};
  if (!options_.pool.empty()) body["pool"] = options_.pool;
  if (join) {
    body["join"] = true;
  } else {
    body["kind"] = options_.spot ? "spot" : "hard";
    body["notice_lead_seconds"] = options_.notice_lead_seconds;
  }
  if (options_.end_ms) body["end_ms"] = *options_.end_ms;
  if (!options_.addr.empty()) body["addr"] = options_.addr;
  req.body = std::move(body);
  // Registering again finds the same window (stintd answers it when pool
  // and GPUs match), so a lost answer may be repeated.
  req.idempotent = true;
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  const Json& w = reply.body.is_object() ? reply.body.value("window", Json()) : Json();
  if (!w.is_object() || !w.value("id", Json()).is_number_integer()) {
    return Status::Internal("stintd's answer to POST /v1/nodes has no window: " + reply.text);
  }
  window_id_ = w["id"].get<int64_t>();
  // Found again: an earlier agent of this node died, and its workers with
  // it (PR_SET_PDEATHSIG). The segments it ran are not started a second
  // time; the first beat reports them as crashed, so stintd queues them.
  adopted_window_ = reply.status != 201;
  const Json end = w.value("end_ms", Json());
  window_end_ms_ = end.is_number_integer() ? end.get<int64_t>() : 0;
  std::printf("stint-agent: node %s registered: window %lld in pool %s, GPUs %s (%s%s)\n",
              options_.node.c_str(), static_cast<long long>(window_id_),
              w.value("pool", std::string()).c_str(), JoinGpus(options_.gpus).c_str(),
              reply.status == 201 ? "new" : "found again", join ? ", an admin's window" : "");
  std::fflush(stdout);
  return Status::OK();
}

Status NodeAgent::CloseWindow() {
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/nodes/" + options_.node + "/close";
  req.body = Json::object();
  return http_->Call(req).status();
}

std::set<int64_t> NodeAgent::ActiveJobs() const {
  std::set<int64_t> jobs;
  for (const auto& [sid, run] : runs_) {
    bool live = !run.done;
    for (const WorkerProc& p : run.procs) live = live || !p.exited;
    if (live) jobs.insert(run.job_id);
  }
  for (const auto& [id, e] : evals_) {
    if (!e.exited) jobs.insert(e.job_id);
  }
  return jobs;
}

bool NodeAgent::AnyRunning() const {
  for (const auto& [id, run] : runs_) {
    if (!run.done) return true;
  }
  return false;
}

void NodeAgent::KillRun(int64_t segment_id, int sig) {
  auto it = runs_.find(segment_id);
  if (it == runs_.end()) return;
  for (const WorkerProc& p : it->second.procs) {
    if (!p.exited) kill(-p.pid, sig);  // the whole process group
  }
}

void NodeAgent::Reap() {
  for (;;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    for (auto& [id, e] : evals_) {
      if (e.pid != pid || e.reaped) continue;
      e.reaped = true;
      e.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      // What it started goes with it (SettleEvaluations waits for that).
      e.killed = true;
      e.tree->Kill();
      std::printf("stint-agent: evaluation %lld exited %d\n", static_cast<long long>(id), e.code);
    }
    for (auto& [sid, run] : runs_) {
      for (WorkerProc& p : run.procs) {
        if (p.pid != pid) continue;
        p.exited = true;
        p.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        // What is left of its group goes with it: a worker's children must
        // not outlive the worker the segment accounts for.
        kill(-p.pid, SIGKILL);
        // Its output up to here goes up before its exit is reported.
        struct stat st;
        p.log_end = stat(p.log.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
        // A crash while the segment runs on: the others go on without it
        // (an elastic group re-forms), and it is started again once stintd
        // counted the crash, rather than leaving its GPUs idle until the
        // segment ends.
        const bool crash = p.code != 0 && p.code != 75 && p.code != 76;
        const bool live_crash = crash && !p.leaving && !run.signalled && !run.done;
        p.relaunch = live_crash && run.restart_crashed;
        p.crash_sent = false;
        const bool ends = live_crash && !run.restart_crashed && run.crash_rank < 0;
        if (ends) run.crash_rank = p.rank;
        std::printf("stint-agent: segment %lld rank %d exited %d%s\n", static_cast<long long>(sid),
                    p.rank, p.code,
                    p.relaunch ? " (a crash: reported, then started again)"
                    : ends     ? " (a crash: the segment ends, restart_crashed is false)"
                               : "");
        if (ends) {
          for (const WorkerProc& other : run.procs) {
            if (!other.exited) kill(-other.pid, SIGKILL);
          }
        }
      }
    }
  }
  for (auto& [sid, run] : runs_) {
    if (run.done) continue;
    bool all = true;
    for (const WorkerProc& p : run.procs) all = all && p.exited && !p.relaunch;
    if (!all) continue;
    run.done = true;
    // 76 (fail) wins over 75 (requeue) over any other failure over 0.
    const WorkerProc* decisive = nullptr;
    auto rank_of = [](int code) { return code == 76 ? 3 : code == 75 ? 2 : code != 0 ? 1 : 0; };
    for (const WorkerProc& p : run.procs) {
      if (decisive == nullptr || rank_of(p.code) > rank_of(decisive->code)) decisive = &p;
    }
    // A crash that ended the segment, not the kills that followed it.
    for (const WorkerProc& p : run.procs) {
      if (p.rank == run.crash_rank && rank_of(decisive->code) <= 1) decisive = &p;
    }
    run.exit_code = decisive == nullptr ? 0 : decisive->code;
    if (decisive != nullptr && decisive->code != 0) {
      run.message = "rank " + std::to_string(decisive->rank) + ": " + LastLine(decisive->log);
    }
    std::printf("stint-agent: segment %lld: workers done, exit %d\n", static_cast<long long>(sid),
                run.exit_code);
  }
  std::fflush(stdout);
}

// One assignment's launch, read once from the heartbeat's answer, and what
// this call of Launch starts of it.
struct LaunchPlan {
  int64_t sid = 0;
  int64_t job = 0;
  tools::LaunchSpec spec;  // its command is empty when the spec was unreadable
  std::string spec_error;  // why it was ("" when read)
  std::vector<int> gpus;   // the segment's GPUs on this node
  int local = 0;           // its workers on this node
  int rank_base = 0;
  int world = 0;
  std::string master_addr;
  int master_port = 0;
  std::string segment_token;  // torchrun's registration token for this node
  // What the agent executes: the spec's command, after the launcher's
  // arguments under torchrun.
  std::vector<std::string> command;
  int procs = 0;  // processes this agent starts: a launcher, or one per worker
  // Which of them this call starts (LaunchKind), and their registrations
  // (empty objects under torchrun), in the same order.
  std::vector<int> starts;
  std::vector<Json> regs;
  std::string dir;  // their logs

  bool torchrun() const { return spec.ThroughTorchrun(); }
  // The GPUs of process `i`: its gpus_per_worker share, or all of the
  // node's under torchrun.
  std::vector<int> GpusOf(int i) const {
    if (torchrun()) return gpus;
    const int gpw = spec.GpusPerWorker();
    const size_t first = std::min(gpus.size(), static_cast<size_t>(i) * gpw);
    return std::vector<int>(gpus.begin() + first,
                            gpus.begin() + std::min(gpus.size(), first + gpw));
  }
};

namespace {

// The plan of assignment `a` (API.md, "Launching"), before it is known what
// to start. `url` and `addr`: the agent's --coord and --addr.
LaunchPlan ReadAssignment(const Json& a, const std::string& url, const std::string& addr) {
  LaunchPlan plan;
  plan.sid = a.value("segment_id", int64_t{0});
  plan.job = a.value("job_id", int64_t{0});
  Result<tools::LaunchSpec> spec = tools::LaunchSpec::FromJson(a.value("launch", Json::object()));
  if (spec.ok()) {
    plan.spec = std::move(*spec);
  } else {
    plan.spec_error = spec.status().message();
  }
  plan.gpus = a.value("gpus", std::vector<int>());
  plan.local = static_cast<int>(plan.gpus.size()) / plan.spec.GpusPerWorker();
  plan.rank_base = a.value("rank_base", 0);
  plan.world = a.value("world_size", plan.local);
  plan.master_addr = a.value("master_addr", std::string("127.0.0.1"));
  plan.master_port = a.value("master_port", 29500);
  plan.segment_token = a.value("registration_token", std::string());
  plan.command = plan.spec.command;
  // "torchrun": one launcher per node, which starts the local workers and
  // forms the group at stintd (--rdzv-backend=stint) under a key prefix of
  // this segment, so an earlier segment's closed rendezvous is not met.
  if (plan.torchrun() && !plan.command.empty()) {
    std::string endpoint = url;
    if (endpoint.rfind("http://", 0) == 0) endpoint = endpoint.substr(7);
    if (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    std::vector<std::string> full = *plan.spec.torchrun;
    full.insert(full.end(),
                {"--nnodes=" + std::to_string(a.value("nodes", 1)),
                 "--nproc-per-node=" + std::to_string(plan.local), "--rdzv-backend=stint",
                 "--rdzv-endpoint=" + endpoint, "--rdzv-id=" + std::to_string(plan.job),
                 "--rdzv-conf=prefix=torchrun/segment-" + std::to_string(plan.sid),
                 "--no-python"});  // the command is an argv, as without torchrun
    if (!addr.empty()) full.push_back("--local-addr=" + addr);
    full.insert(full.end(), plan.command.begin(), plan.command.end());
    plan.command = std::move(full);
  }
  plan.procs = plan.torchrun() ? 1 : plan.local;
  return plan;
}

// Everything the child of process `i` needs in its environment, made before
// the fork. `reg`: its registration. torchrun sets the ranks and the master
// itself.
EnvVars WorkerEnv(const LaunchPlan& plan, int i, int rank, const std::string& visible,
                  const Json& reg, const NodeAgentOptions& options) {
  EnvVars vars = {{"CUDA_VISIBLE_DEVICES", visible}};
  if (!plan.torchrun()) {
    vars.insert(vars.end(), {{"RANK", std::to_string(rank)},
                             {"LOCAL_RANK", std::to_string(i)},
                             {"WORLD_SIZE", std::to_string(plan.world)},
                             {"LOCAL_WORLD_SIZE", std::to_string(plan.local)},
                             {"MASTER_ADDR", plan.master_addr},
                             {"MASTER_PORT", std::to_string(plan.master_port)}});
  }
  vars.insert(vars.end(), {{"STINT_COORD_URL", options.url},
                           {"STINT_JOB_ID", std::to_string(plan.job)},
                           {"STINT_SEGMENT_ID", std::to_string(plan.sid)},
                           {"STINT_WORKER_NAME", options.node + ":" + std::to_string(rank)},
                           // Node-local checkpoint roots tell nodes apart by it.
                           {"STINT_NODE_ID", options.node}});
  if (!plan.torchrun()) {
    vars.insert(vars.end(),
                {{"STINT_WORKER_ID", std::to_string(reg.value("worker_id", int64_t{0}))},
                 {"STINT_WORKER_SECRET", reg.value("worker_secret", std::string())},
                 {"STINT_FENCING_TOKEN", std::to_string(reg.value("fencing_token", uint64_t{0}))},
                 {"STINT_LEASE_TTL_SECONDS", std::to_string(reg.value("lease_ttl_seconds", 0.0))},
                 {"STINT_HEARTBEAT_INTERVAL_SECONDS",
                  std::to_string(reg.value("heartbeat_interval_seconds", 0.0))}});
  } else {
    vars.emplace_back("STINT_COORD_TOKEN", plan.segment_token);
  }
  if (!options.ca_file.empty()) vars.emplace_back("STINT_CA_FILE", options.ca_file);
  if (plan.spec.env) {
    for (const auto& [k, v] : *plan.spec.env) vars.emplace_back(k, v);
  }
  return vars;
}

// The last line of the log's last 64 KiB that is a JSON object (an
// evaluation's metrics), or null.
Json LastJsonObject(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Json();
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 65536);
  in.seekg(from);
  std::string text(static_cast<size_t>(size - from), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  size_t end = text.size();
  while (end > 0) {
    size_t begin = text.rfind('\n', end - 1);
    begin = begin == std::string::npos ? 0 : begin + 1;
    const Json j =
        Json::parse(text.substr(begin, end - begin), nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) return j;
    if (begin == 0) break;
    end = begin - 1;
  }
  return Json();
}

}  // namespace

void NodeAgent::Launch(const void* assignment, int only_process) {
  LaunchPlan plan =
      ReadAssignment(*static_cast<const Json*>(assignment), options_.url, options_.addr);
  // Which processes to start: all for a new segment; `only_process` alone
  // in place of a crashed one; for one that grew (an elastic job took more
  // GPUs here), the workers of the GPUs no process of it was given. They
  // join the job's group as new members.
  auto found = runs_.find(plan.sid);
  const LaunchKind kind = only_process >= 0      ? LaunchKind::kRestart
                          : found != runs_.end() ? LaunchKind::kGrow
                                                 : LaunchKind::kNew;
  if (kind == LaunchKind::kRestart) {
    if (!RestartsInPlace(plan, only_process)) return;
    plan.starts.push_back(only_process);
  } else {
    plan.starts = Unstarted(plan, kind == LaunchKind::kGrow ? &found->second : nullptr);
  }
  if (kind == LaunchKind::kGrow &&
      (plan.torchrun() || found->second.done || found->second.signalled ||
       found->second.leave_deadline_ms != 0 || plan.starts.empty()))
    return;
  SegmentRun fresh;
  SegmentRun& run = kind == LaunchKind::kGrow ? found->second : fresh;
  run.job_id = plan.job;
  run.signal = plan.spec.SignalNumber();
  // A torchrun launcher that exits non-zero has given up (it restarts its
  // own workers, --max-restarts) and closed the segment's rendezvous: one
  // started again could never join, so its crash ends the segment.
  run.restart_crashed = plan.spec.RestartCrashed() && !plan.torchrun();
  plan.dir = options_.workdir + "/job-" + std::to_string(plan.job) + "/segment-" +
             std::to_string(plan.sid);
  Status made = CreateDirWithParents(Env::Default(), plan.dir);
  // Started before: the next beat tries again.
  if (kind != LaunchKind::kNew && (plan.command.empty() || !made.ok())) return;
  if (plan.command.empty() || plan.local < 1 || !made.ok()) {
    run.done = true;
    run.exit_code = 127;
    run.message = plan.command.empty() ? plan.spec_error
                  : !made.ok()         ? made.ToString()
                                       : "no GPUs here";
    runs_[plan.sid] = std::move(run);
    return;
  }
  if (!RegisterWorkers(plan)) return;
  StartWorkers(plan, kind, run);
}

bool NodeAgent::RestartsInPlace(const LaunchPlan& plan, int only_process) {
  auto found = runs_.find(plan.sid);
  if (only_process >= plan.procs || found == runs_.end()) return false;
  // Only on the GPUs it had: after a shrink or grow the index may stand
  // for others, and then the segment goes on without it.
  const std::vector<int> slice = plan.GpusOf(only_process);
  bool same = false;
  for (WorkerProc& p : found->second.procs) {
    if (p.index != only_process) continue;
    same = same || p.gpus == slice;
    if (p.gpus != slice) p.relaunch = false;  // its exit code counts with the rest
  }
  return same;
}

std::vector<int> NodeAgent::Unstarted(const LaunchPlan& plan, const SegmentRun* grown) {
  std::vector<int> starts;
  for (int i = 0; i < plan.procs; i++) {
    bool held = false;
    for (int g : grown != nullptr ? plan.GpusOf(i) : std::vector<int>()) {
      for (const WorkerProc& p : grown->procs)
        held = held || std::find(p.gpus.begin(), p.gpus.end(), g) != p.gpus.end();
    }
    if (!held) starts.push_back(i);
  }
  return starts;
}

bool NodeAgent::RegisterWorkers(LaunchPlan& plan) {
  // Each worker's credential: a registration made for it (the agent token
  // carries the worker right), whose secret acts for that worker and, in
  // the KV and the fencing check, for this job only. All of them before
  // any process starts: a refusal (the segment just ended) starts nothing,
  // and the next beat decides again. Under torchrun the agent does not
  // know the processes: the launcher gets the segment's registration token
  // for this node (the job's KV while the segment lasts), and each rank
  // torchrun starts registers itself with it, so every rank holds a secret
  // and a fencing token of its own.
  if (plan.torchrun() && plan.segment_token.empty()) {
    std::fprintf(stderr, "stint-agent: segment %lld: no registration token for torchrun\n",
                 static_cast<long long>(plan.sid));
    return false;
  }
  for (int i : plan.starts) {
    if (plan.torchrun()) {
      plan.regs.push_back(Json::object());
      continue;
    }
    HttpRequest req;
    req.method = "POST";
    req.path = "/v1/jobs/" + std::to_string(plan.job) + "/workers";
    req.body = Json{{"name", options_.node + ":" + std::to_string(plan.rank_base + i)},
                    {"node", options_.node}};
    req.idempotent = false;
    Result<HttpReply> reg = http_->Call(req);
    if (!reg.ok() || !reg->body.is_object()) {
      std::fprintf(stderr, "stint-agent: segment %lld: cannot register rank %d: %s\n",
                   static_cast<long long>(plan.sid), plan.rank_base + i,
                   reg.ok() ? "no answer" : reg.status().ToString().c_str());
      return false;
    }
    plan.regs.push_back(reg->body);
  }
  return true;
}

void NodeAgent::StartWorkers(const LaunchPlan& plan, LaunchKind kind, SegmentRun& run) {
  const std::string workdir = plan.spec.workdir.value_or("");
  const Result<std::optional<JobIdentity>> as = job_users_.For(plan.job, ActiveJobs());
  if (!as.ok()) {
    std::fprintf(stderr, "stint-agent: segment %lld of job %lld: %s\n",
                 static_cast<long long>(plan.sid), static_cast<long long>(plan.job),
                 as.status().ToString().c_str());
    if (kind != LaunchKind::kNew) return;  // the next beat tries again
    run.done = true;
    run.exit_code = 127;
    run.message = as.status().ToString();
    runs_[plan.sid] = std::move(run);
    return;
  }
  for (size_t k = 0; k < plan.starts.size(); k++) {
    const int i = plan.starts[k];
    WorkerProc p;
    p.index = i;
    p.rank = plan.rank_base + i;  // under torchrun: the node's first rank
    p.log = plan.dir + "/rank-" + std::to_string(p.rank) + ".log";
    p.gpus = plan.GpusOf(i);
    const EnvVars vars = WorkerEnv(plan, i, p.rank, JoinGpus(p.gpus), plan.regs[k], options_);
    const pid_t pid = ForkJobProcess(plan.command, p.log, workdir, vars, *as);
    if (pid < 0) continue;
    p.pid = pid;
    if (kind == LaunchKind::kRestart) {
      // In place of the crashed process; its log goes on in the same file.
      for (WorkerProc& old : runs_[plan.sid].procs) {
        if (old.index != i) continue;
        p.log_sent = old.log_sent;
        old = std::move(p);
      }
      std::printf("stint-agent: segment %lld: rank %d started again\n",
                  static_cast<long long>(plan.sid), plan.rank_base + i);
      std::fflush(stdout);
      return;
    }
    run.procs.push_back(std::move(p));
  }
  if (kind == LaunchKind::kRestart) return;  // the fork failed: the next beat tries again
  if (run.procs.empty() && kind == LaunchKind::kNew) {
    run.done = true;
    run.exit_code = 127;
    run.message = "fork failed";
  }
  if (kind == LaunchKind::kGrow) {
    std::string ranks;
    for (int i : plan.starts)
      ranks += (ranks.empty() ? "" : ",") + std::to_string(plan.rank_base + i);
    std::printf("stint-agent: segment %lld of job %lld grew: started ranks %s of %d on GPUs %s\n",
                static_cast<long long>(plan.sid), static_cast<long long>(plan.job), ranks.c_str(),
                plan.world, JoinGpus(plan.gpus).c_str());
    std::fflush(stdout);
    return;
  }
  std::printf("stint-agent: segment %lld of job %lld: started ranks %d..%d of %d on GPUs %s%s\n",
              static_cast<long long>(plan.sid), static_cast<long long>(plan.job), plan.rank_base,
              plan.rank_base + plan.local - 1, plan.world, JoinGpus(plan.gpus).c_str(),
              plan.torchrun() ? " (through torchrun)" : "");
  std::fflush(stdout);
  runs_[plan.sid] = std::move(run);
}

void NodeAgent::ShrinkNotice(int64_t sid, SegmentRun& run, const void* notice_json, int64_t now) {
  const Json& notice = *static_cast<const Json*>(notice_json);
  std::vector<int> gone;
  for (const Json& g : notice["gpus"]) {
    if (g.is_number_integer()) gone.push_back(g.get<int>());
  }
  const int64_t deadline = notice.value("deadline_ms", int64_t{0});
  std::string ranks;
  for (WorkerProc& p : run.procs) {
    if (p.leaving || p.exited || p.gpus.empty()) continue;
    bool all = true;
    for (int g : p.gpus) all = all && std::find(gone.begin(), gone.end(), g) != gone.end();
    if (!all) continue;  // it keeps a GPU that stays: it stays
    p.leaving = true;
    kill(-p.pid, run.signal);
    ranks += (ranks.empty() ? "" : ",") + std::to_string(p.rank);
  }
  if (!ranks.empty()) {
    run.leave_deadline_ms = deadline;
    std::printf(
        "stint-agent: segment %lld: shrink notice, ranks %s leave (GPUs %s), signal %s, "
        "deadline in %.1f s\n",
        static_cast<long long>(sid), ranks.c_str(), JoinGpus(gone).c_str(), strsignal(run.signal),
        double(deadline - now) / 1000);
    std::fflush(stdout);
  }
  if (run.leave_deadline_ms == 0 || now < run.leave_deadline_ms) return;
  for (const WorkerProc& p : run.procs) {
    if (p.leaving && !p.exited) kill(-p.pid, SIGKILL);
  }
}

std::vector<NodeAgent::LogPiece> NodeAgent::CollectLogs() {
  // Per worker and beat; a worker writing faster gets there over a few beats.
  constexpr size_t kMaxPiece = 256u << 10;
  // All pieces of a beat, as escaped JSON text (a byte may take 6): stintd
  // takes heartbeat bodies up to 2 MiB.
  constexpr size_t kMaxBeatText = 1u << 20;
  // Output further behind than this is skipped (it stays in the log file
  // here): stintd keeps only the newest 4 MiB of a job, and a worker's exit
  // waits for the rest of its output, which this bounds.
  constexpr uint64_t kMaxBacklog = 8u << 20;
  std::vector<LogPiece> pieces;
  size_t budget = kMaxBeatText;
  // Exited workers first: their exit waits for their output.
  for (const bool exited : {true, false}) {
    for (auto& [sid, run] : runs_) {
      for (WorkerProc& p : run.procs) {
        if (p.exited != exited || budget < 1024) continue;
        struct stat st;
        if (stat(p.log.c_str(), &st) != 0) continue;  // no file yet
        const uint64_t size = static_cast<uint64_t>(st.st_size);
        if (p.exited && size < p.log_end) p.log_end = size;  // truncated by someone
        if (size > p.log_sent + kMaxBacklog) {
          p.log_sent = LineStartFrom(p.log, size - kMaxBacklog);
          std::fprintf(stderr,
                       "stint-agent: %s: more than %llu MiB behind: older output skipped (it "
                       "stays in the file)\n",
                       p.log.c_str(), static_cast<unsigned long long>(kMaxBacklog >> 20));
        }
        if (size <= p.log_sent) continue;
        // Halved until its escaped text fits what is left of the beat's.
        size_t max = std::min(kMaxPiece, budget);
        std::string bytes, text;
        bool read = false;  // something was there: an empty piece is then the budget's
        while (max > 0) {
          bytes = ReadPiece(p.log, p.log_sent, max);
          if (bytes.empty()) break;
          read = true;
          text = ValidUtf8Prefix(bytes);
          const size_t escaped = Json(text).dump().size();
          if (escaped <= budget) {
            budget -= escaped;
            break;
          }
          max = bytes.size() / 2;
          bytes.clear();
        }
        if (bytes.empty()) {
          if (!read && p.exited && p.log_end > p.log_sent) {
            // Unreadable (or a cut UTF-8 character at its end): its exit
            // does not wait for output that cannot go.
            std::fprintf(stderr, "stint-agent: %s: cannot read from byte %llu: not uploaded\n",
                         p.log.c_str(), static_cast<unsigned long long>(p.log_sent));
            p.log_end = p.log_sent;
          }
          continue;
        }
        pieces.push_back({sid, &p, p.log_sent, bytes.size(), std::move(text)});
      }
    }
  }
  return pieces;
}

bool NodeAgent::LogCaughtUp(const WorkerProc& p, const std::vector<LogPiece>& pieces) {
  if (!p.exited) return true;
  uint64_t sent = p.log_sent;
  for (const LogPiece& l : pieces) {
    if (l.proc == &p) sent = std::max(sent, l.offset + l.size);
  }
  return sent >= p.log_end;
}

Status NodeAgent::Beat(bool may_wait) {
  SettleEvaluations(kSettleWait);  // reaps the workers too
  // The output first: an exit (or a crash) is reported once stintd has
  // (with this beat) its workers' output up to it, so whoever sees a job
  // end finds all of it; until then the segment counts as running and the
  // beats come one after another (draining_).
  std::vector<LogPiece> pieces = CollectLogs();
  draining_ = false;
  Json running = Json::array(), exited = Json::array(), crashed = Json::array();
  std::vector<WorkerProc*> crash_reports;
  for (auto& [sid, run] : runs_) {
    bool caught_up = true;
    for (const WorkerProc& p : run.procs) caught_up = caught_up && LogCaughtUp(p, pieces);
    draining_ = draining_ || !caught_up;
    for (WorkerProc& p : run.procs) {
      if (!p.relaunch || p.crash_sent || !LogCaughtUp(p, pieces)) continue;
      crashed.push_back({{"segment_id", sid},
                         {"exit_code", p.code},
                         {"message", ValidUtf8Prefix("rank " + std::to_string(p.rank) + ": " +
                                                     LastLine(p.log))}});
      crash_reports.push_back(&p);
    }
    if (!run.done || !caught_up) {
      running.push_back(sid);
    } else {
      exited.push_back({{"segment_id", sid},
                        {"exit_code", run.exit_code},
                        {"message", ValidUtf8Prefix(run.message)}});
    }
  }
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/nodes/" + options_.node + "/heartbeat";
  polled_ = false;
  const bool wait = may_wait && options_.long_poll && !draining_ && !assignments_tag_.empty();
  if (wait) {
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%.3f",
                  std::chrono::duration<double>(options_.heartbeat_interval).count());
    req.path += std::string("?wait_seconds=") + seconds + "&known=" + assignments_tag_;
    req.server_wait = options_.heartbeat_interval;
  }
  Json logs = Json::array();
  for (const LogPiece& l : pieces) {
    logs.push_back({{"segment_id", l.segment_id},
                    {"rank", l.proc->rank},
                    {"offset", l.offset},
                    {"size", l.size},
                    {"text", l.text}});
  }
  Json body{{"running", running}, {"exited", exited}, {"logs", logs}};
  if (!crashed.empty()) body["crashed"] = crashed;
  // Evaluations that ended, each with the JSON object it printed last.
  body["eval_slots"] = options_.eval_slots;
  Json eval_exits = Json::array();
  std::vector<int64_t> eval_reported;
  for (const auto& [id, e] : evals_) {
    if (!e.exited) continue;
    Json x{{"id", id}, {"exit_code", e.code}};
    const Json result = LastJsonObject(e.log);
    if (result.is_object()) x["result"] = result;
    if (e.code != 0) x["message"] = ValidUtf8Prefix(e.why.empty() ? LastLine(e.log) : e.why);
    eval_exits.push_back(std::move(x));
    eval_reported.push_back(id);
  }
  if (!eval_exits.empty()) body["eval_exits"] = std::move(eval_exits);
  req.body = std::move(body);
  STINT_ASSIGN_OR_RETURN(HttpReply reply, http_->Call(req));
  for (WorkerProc* p : crash_reports) p->crash_sent = true;
  for (int64_t id : eval_reported) evals_.erase(id);
  for (const LogPiece& l : pieces) l.proc->log_sent = l.offset + l.size;
  const bool first_beat = !beaten_;
  beaten_ = true;
  assignments_tag_ =
      reply.body.is_object() ? reply.body.value("assignments_tag", std::string()) : std::string();
  // stintd long-polls (it gave a tag): the next beat at once, as a poll.
  polled_ = may_wait && options_.long_poll && !assignments_tag_.empty();
  const Json assignments =
      reply.body.is_object() ? reply.body.value("assignments", Json::array()) : Json::array();
  // Evaluations first: one on a GPU a new segment takes is stopped before
  // the segment's workers start there.
  const Json evals = reply.body.is_object() ? reply.body.value("evals", Json()) : Json();
  if (evals.is_array()) RunEvaluations(&evals);
  // A GPU an evaluation's processes may still use takes no worker yet: the
  // segment starts (or grows) there at a later beat.
  const std::set<int> dying = SettleEvaluations(kSettleWait);
  const int64_t now = internal::WallNowMs();
  std::set<int64_t> listed;
  for (const Json& a : assignments) {
    const int64_t sid = a.value("segment_id", int64_t{0});
    listed.insert(sid);
    const Json notice = a.value("notice", Json());
    const int64_t deadline = notice.is_object() ? notice.value("deadline_ms", int64_t{0}) : 0;
    auto it = runs_.find(sid);
    if (it == runs_.end() && first_beat && adopted_window_) {
      SegmentRun orphan;
      orphan.job_id = a.value("job_id", int64_t{0});
      orphan.done = true;
      orphan.exit_code = 128 + SIGKILL;
      orphan.message =
          "the agent of node " + options_.node + " restarted; its workers died with it";
      std::printf("stint-agent: segment %lld ran under an earlier agent: reporting it lost\n",
                  static_cast<long long>(sid));
      std::fflush(stdout);
      runs_[sid] = std::move(orphan);
      continue;
    }
    bool gpu_dying = false;
    for (const Json& g : a.value("gpus", Json::array()))
      gpu_dying = gpu_dying || (g.is_number_integer() && dying.count(g.get<int>()) != 0);
    if (it == runs_.end()) {
      if (deadline != 0 && now >= deadline) continue;  // too late to start
      if (gpu_dying) continue;
      Launch(&a);
      it = runs_.find(sid);
      if (it == runs_.end()) continue;
    } else if (deadline == 0 && !gpu_dying) {
      Launch(&a);  // starts the workers of GPUs a grow added, if any
    }
    SegmentRun& run = it->second;
    if (notice.is_object() && notice.value("gpus", Json()).is_array()) {
      ShrinkNotice(sid, run, &notice, now);
      continue;
    }
    // Crashed workers stintd counted: started again while there is no
    // notice; with one, they stay exited (their code decides with the rest).
    for (size_t i = 0; i < run.procs.size(); i++) {
      WorkerProc& p = run.procs[i];
      if (!p.relaunch || !p.crash_sent) continue;
      if (deadline != 0) {
        p.relaunch = false;
        continue;
      }
      Launch(&a, p.index);
    }
    if (deadline != 0 && !run.signalled && !run.done) {
      run.signalled = true;
      run.deadline_ms = deadline;
      std::printf("stint-agent: segment %lld: notice (%s), signal %s, deadline in %.1f s\n",
                  static_cast<long long>(sid), notice.value("reason", std::string()).c_str(),
                  strsignal(run.signal), double(deadline - now) / 1000);
      std::fflush(stdout);
      KillRun(sid, run.signal);
    }
    if (run.deadline_ms != 0 && now >= run.deadline_ms && !run.done) KillRun(sid, SIGKILL);
  }
  // Segments no longer listed ended (or were fenced): nothing of them runs
  // on. One that ended after its notice (its workers acked a checkpoint and
  // exit on their own) keeps them until the notice's deadline; the beats
  // then come at the interval (no long poll), to kill them in time.
  for (auto it = runs_.begin(); it != runs_.end();) {
    if (listed.count(it->first)) {
      ++it;
      continue;
    }
    const SegmentRun& ended = it->second;
    if (ended.signalled && !ended.done && now < ended.deadline_ms) {
      polled_ = false;
    } else {
      KillRun(it->first, SIGKILL);
    }
    bool all = true;
    for (const WorkerProc& p : it->second.procs) all = all && p.exited;
    if (all) {
      it = runs_.erase(it);
    } else {
      ++it;  // reaped on a later beat
    }
  }
  return Status::OK();
}

AgentExit NodeAgent::Run(const std::vector<int>& stop_signals) {
  // Orphans become the agent's children, not init's: an evaluation's
  // processes whose parent died are still found, killed and reaped.
  if (!BecomeSubreaper()) {
    std::fprintf(stderr,
                 "stint-agent: PR_SET_CHILD_SUBREAPER: %s (an evaluation's orphaned processes "
                 "may outlive it)\n",
                 std::strerror(errno));
  }
  const AgentExit exit = Serve(stop_signals);
  for (auto& [id, e] : evals_) e.killed = true;
  // Bounded: a process stuck in the kernel (D state) must not keep the agent.
  SettleEvaluations(std::chrono::seconds(10));
  return exit;
}

AgentExit NodeAgent::Serve(const std::vector<int>& stop_signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : stop_signals) sigaddset(&set, sig);
  // Long polls: the first beat at once (it learns the tag).
  auto next_beat =
      std::chrono::steady_clock::now() +
      (options_.long_poll ? std::chrono::milliseconds(0) : options_.heartbeat_interval);
  bool stopping = false;
  auto stop_all = [&] {
    for (const auto& [sid, run] : runs_) KillRun(sid, SIGKILL);
    // Bounded: a process stuck in the kernel (D state) must not keep the
    // agent; PR_SET_PDEATHSIG finishes it once the agent is gone.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (AnyRunning() && std::chrono::steady_clock::now() < until) {
      Reap();
      usleep(10000);
    }
  };
  for (;;) {
    const auto wait = std::max(std::chrono::steady_clock::duration::zero(),
                               next_beat - std::chrono::steady_clock::now());
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig > 0 && !stopping) {
      std::printf("stint-agent: %s: closing window %lld of node %s\n", strsignal(sig),
                  static_cast<long long>(window_id_), options_.node.c_str());
      std::fflush(stdout);
      Status closed = CloseWindow();
      if (!closed.ok()) {
        std::fprintf(stderr, "stint-agent: could not close window %lld: %s\n",
                     static_cast<long long>(window_id_), closed.ToString().c_str());
        stop_all();
        return AgentExit::kCloseFailed;
      }
      std::printf("stint-agent: window %lld closed\n", static_cast<long long>(window_id_));
      std::fflush(stdout);
      // Its segments get their notices (the window's lead); the workers
      // checkpoint and exit, which the next beats report.
      stopping = true;
      next_beat = std::chrono::steady_clock::now();
    } else if (sig > 0) {
      std::printf("stint-agent: %s again: killing the workers\n", strsignal(sig));
      stop_all();
      return AgentExit::kStopped;
    }
    if (sig < 0 && errno != EAGAIN && errno != EINTR) {
      std::fprintf(stderr, "stint-agent: sigtimedwait: %s\n", std::strerror(errno));
    }
    if (std::chrono::steady_clock::now() < next_beat) continue;  // EINTR
    next_beat += options_.heartbeat_interval;
    if (window_end_ms_ != 0 && internal::WallNowMs() >= window_end_ms_ && !AnyRunning()) {
      std::printf("stint-agent: window %lld reached its end\n", static_cast<long long>(window_id_));
      std::fflush(stdout);
      return AgentExit::kWindowClosed;
    }
    Status beat = Beat(/*may_wait=*/!stopping);
    if (stopping && runs_.empty()) return AgentExit::kStopped;
    // A long poll waited its interval at stintd (or answered a change): the
    // next one at once.
    if (beat.ok() && (draining_ || polled_)) next_beat = std::chrono::steady_clock::now();
    if (beat.ok()) continue;
    if (beat.code() == Code::kAborted) {  // 410: the window closed
      stop_all();
      if (stopping) {
        std::printf("stint-agent: window %lld ended\n", static_cast<long long>(window_id_));
        std::fflush(stdout);
        return AgentExit::kStopped;
      }
      std::printf("stint-agent: stintd closed window %lld: %s\n",
                  static_cast<long long>(window_id_), beat.message().c_str());
      std::fflush(stdout);
      return AgentExit::kWindowClosed;
    }
    // Unreachable past the call deadline, or a refusal: keep beating; stintd
    // closes the window itself if the silence outlasts its node TTL.
    std::fprintf(stderr, "stint-agent: heartbeat failed: %s\n", beat.ToString().c_str());
  }
}

}  // namespace agent
}  // namespace stint
