// The coordinator: one ClusterState in memory, written through to the
// Store before any change is acknowledged, and a tick thread that runs the
// policy (MakePlan + ApplyPlan) every tick_seconds or as soon as a request
// changed something.
//
// Locking: writers (requests that change state, the tick) are serialized by
// write_mu_; state_ is guarded by a shared mutex that writers take
// exclusively only to change memory and write SQLite. Reads (the queue, job
// views), heartbeats and the tick's MakePlan take it shared, so a long plan
// never blocks heartbeats, and no change is visible before it is durable. Heartbeat times are soft
// state kept in their own table and merged into the state by the tick; a restart gives every lease
// a fresh TTL instead of persisting thousands of heartbeats per second.
#ifndef STINT_TOOLS_STINTD_SERVER_COORDINATOR_H_
#define STINT_TOOLS_STINTD_SERVER_COORDINATOR_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "stintd/core/model.h"
#include "stintd/core/policy.h"
#include "stintd/core/rendezvous.h"
#include "stintd/core/transitions.h"
#include "stintd/server/placement_index.h"
#include "stintd/store/store.h"

namespace stint::stintd {

// The largest KV value (API.md, "KV"); the HTTP request around it must fit
// in the server's 2 MiB body limit.
constexpr size_t kKvMaxValueBytes = size_t{1} << 20;

struct CoordinatorOptions {
  std::string db_path;
  // A store several stintds share: the lease this stintd leads at, checked
  // by every write (Store::SetFence). Unset: the store is this stintd's alone.
  std::optional<StoreFence> fence;
  PolicyConfig policy;
  double tick_seconds = 0.5;
  double heartbeat_interval_seconds = 5;  // suggested to workers
  double usage_flush_seconds = 60;        // team usage and job service written this often
  double node_ttl_seconds = 30;           // a node silent this long has its window closed
  // MASTER_PORT of launched segments: from this range (inclusive), unique
  // among the active segments with the same master node.
  int master_port_first = 29500;
  int master_port_last = 29999;
  // Each job's KV (API.md, "KV") holds at most this many keys and this many
  // bytes (keys and values); a write past either is refused
  // (kResourceExhausted). A job's KV is deleted when the job ends.
  int64_t kv_max_keys_per_job = 10000;
  int64_t kv_max_bytes_per_job = int64_t{64} << 20;
  // Milliseconds since the epoch; the system clock unless a test replaces it.
  std::function<TimeMs()> clock;
};

// Server-side counters that are not part of the persisted state.
struct ServerCounters {
  int64_t heartbeats = 0;
  int64_t plans = 0;
  double last_plan_seconds = 0;
  double max_plan_seconds = 0;
  int64_t store_errors = 0;
};

class Coordinator {
 public:
  // Opens the store, loads the state, resets soft state, starts the tick
  // thread.
  static Result<std::unique_ptr<Coordinator>> Open(CoordinatorOptions options);
  ~Coordinator();  // stops and joins the tick thread; wakes every long-poll

  // Every long-poll in progress answers now, and later ones do not wait:
  // stintd is stopping, and its HTTP server waits for its requests to end.
  // Thread-safe.
  void CancelWaits();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Reads under the shared lock: `fn(state, last_plan, now)`.
  void Read(const std::function<void(const ClusterState&, const Plan&, TimeMs)>& fn) const;
  // Reads under the shared lock with the ids (ascending) of the active
  // segments placed on node window `window_id`: `fn(state, ids, now)`.
  void ReadPlacedOn(
      int64_t window_id,
      const std::function<void(const ClusterState&, const std::set<int64_t>&, TimeMs)>& fn) const;

  // Admin requests. Each answers the object as it is after the change.
  Result<Pool> AddPool(const Pool& pool);
  // SetPoolPrice / SetPriceRule (accounting.h).
  Result<Pool> SetPoolPrice(const std::string& pool, double price_per_gpu_hour);
  // SetPoolStorage (transitions.h).
  Result<Pool> SetPoolStorage(const std::string& pool, const std::vector<std::string>& storage);
  Status SetPriceRule(Priority priority, const PriceRule& rule);
  Result<Window> AddWindow(const Window& window);
  // An admin window on named nodes: one window per node, each a copy of
  // `spec` (pool, start, end, kind, lead) with declared set, the node's
  // name and either its GPU indices or, when `node_gpus` is empty there,
  // spec.gpus GPUs the node's agent reports when it joins (RegisterNode
  // with join). kAlreadyExists when a node has a window that has not ended;
  // nothing is made then.
  struct DeclaredNode {
    std::string name;
    std::vector<int> gpus;  // empty: spec.gpus of the agent's
  };
  Result<std::vector<Window>> AddNodeWindows(const Window& spec,
                                             const std::vector<DeclaredNode>& nodes);
  Result<Window> CloseWindow(int64_t window_id, std::optional<TimeMs> lead_ms);
  Result<Team> PutTeam(const Team& team);
  Result<Job> SubmitJob(const Job& spec);
  Result<Job> CancelJob(int64_t job_id, const std::string& reason);
  Result<Job> SetPriority(int64_t job_id, Priority priority);

  // Node requests (stint-agent). A node is the window registered under its
  // name that has not ended; its GPUs are that window's. RegisterNode makes
  // the window (`spec.node`, `spec.node_gpus`, pool, end, kind, lead), or,
  // when the node's window is open and has the same pool and GPUs (an agent
  // restarted), answers that one with *created false; kAlreadyExists when
  // it differs, or is closing. NodeHeartbeat keeps it: a node silent for
  // node_ttl_seconds has its window closed by the tick with the window's
  // notice lead. kNotFound: no such node; kAborted: its window closed (the
  // agent stops). CloseNode closes it now with its notice lead.
  //
  // With `join`, the agent lends no window of its own: it joins the open
  // admin window that names the node (AddNodeWindows), which must lie in
  // spec.pool (when not empty) and, if it names GPU indices, among
  // spec.node_gpus; one declared as a count takes the first of
  // spec.node_gpus. *created is true for the first join. kNotFound when no
  // admin window names the node.
  Result<Window> RegisterNode(const Window& spec, bool* created, bool join = false);
  // `running`: segments whose workers the node runs (each counts as a
  // heartbeat of the segment, whose lease it keeps); `exits`: segments
  // whose workers on this node all exited (ReportSegmentExit, once every
  // node of the segment reported 0 for a 0). Reports for segments that
  // already ended are ignored (the agent repeats them until it sees the end).
  struct NodeExit {
    int64_t segment_id = 0;
    int exit_code = 0;
    std::string message;
  };
  // An evaluation a node's agent ran to its end: `result` is the JSON
  // object it printed last ("" when none).
  struct EvalExit {
    int64_t eval_id = 0;
    int exit_code = 0;
    std::string result;
    std::string message;
  };
  // The node's evaluations (evals.h): records `exits`, then places what its
  // `slots` may run now. The ids it runs, oldest first.
  Result<std::vector<int64_t>> NodeEvaluations(const std::string& node, int slots,
                                               const std::vector<EvalExit>& exits);
  // `crashes`: workers of segments still running here that crashed; the
  // agent starts them again unless the crash-loop guard failed the job
  // (ReportWorkerCrash). Several crashes of one segment in one heartbeat
  // count as one.
  Result<Window> NodeHeartbeat(const std::string& node, const std::vector<int64_t>& running = {},
                               const std::vector<NodeExit>& exits = {},
                               const std::vector<NodeExit>& crashes = {});
  Result<Window> CloseNode(const std::string& node);
  // Soft state: when the node's window was last heard from (0: never).
  TimeMs NodeLastHeartbeat(int64_t window_id) const;
  // Node credentials (API.md, "Credentials"). IssueNodeToken makes node
  // `name`'s own token (replacing an earlier one, which stops working);
  // `*token` is the only copy, the store keeps its hash.
  // REQUIRES: token != nullptr.
  Result<NodeCredential> IssueNodeToken(const std::string& name, std::string* token);
  Status RevokeNodeToken(const std::string& name);
  // Whether node `name` has a credential of its own, and whether `random`
  // (the random part of a "stn1." token) is it, compared in constant time.
  enum class NodeToken { kNoCredential, kMatch, kMismatch };
  NodeToken CheckNodeToken(const std::string& name, const std::string& random) const;

  // Labels from an executor other than stint-agent (stintd --slurm): the
  // executor of node `node` ("slurm"; soft, labelled again after a
  // restart) and the id it gave segment `segment_id` ("slurm:1234"), for
  // /v1/nodes, /v1/segments and the dashboard. A segment's id is durable
  // (Segment.external_id): a restarted executor knows what it submitted.
  // Thread-safe.
  void LabelNode(const std::string& node, const std::string& executor);
  Status LabelSegment(int64_t segment_id, const std::string& external_id);
  std::string NodeLabel(const std::string& node) const;  // "" for none

  // Worker requests.
  // Each registration gets a fresh secret (worker_secret.h): `*secret` is
  // the only copy, the store keeps its hash. REQUIRES: secret != nullptr.
  // `node`: the stint-agent node that launches it ("" for none).
  Result<Worker> RegisterWorker(int64_t job_id, const std::string& name, std::string* secret,
                                const std::string& node = "");
  // `report`: the step, and the samples and loss when the worker sent them;
  // merged into the state (RecordProgress) at the next tick.
  Result<WorkerView> Heartbeat(int64_t worker_id, const HeartbeatReport& report = {});
  // Answers when the worker has a notice or is no longer active, or after
  // `wait` with the current view.
  Result<WorkerView> WaitNotice(int64_t worker_id, std::chrono::milliseconds wait);
  Status ReportProgress(int64_t worker_id, int64_t step, double remaining_seconds);
  Status ReportCheckpoint(int64_t worker_id, int64_t step, double seconds, uint64_t bytes,
                          std::optional<double> notice_to_replicas_seconds = std::nullopt);
  // ReportStored (transitions.h).
  Status ReportStored(int64_t worker_id, const std::string& location, int tier, int64_t step,
                      uint64_t bytes);
  Status Ack(int64_t worker_id, int64_t step);
  Status Finish(int64_t worker_id);
  Status Leave(int64_t worker_id);
  // FencingValid (transitions.h) on the current state; `why` may be null.
  bool CheckFencing(int64_t job_id, uint64_t token, TimeMs* valid_until_ms,
                    std::string* why = nullptr) const;

  // Joins the job's rendezvous (rendezvous.h) and waits up to `wait` (at
  // most half a lease; the wait renews the lease) for a generation newer
  // than `known_generation` with this worker in it. On timeout it answers
  // the current view (not ready); the worker joins again, which is
  // idempotent. A round whose last call passes during the wait is closed
  // by the wait itself, not left to the next tick.
  Result<RendezvousView> JoinRendezvous(int64_t worker_id, const std::string& endpoint,
                                        uint64_t known_generation, std::chrono::milliseconds wait);
  // Answers when the job's generation is no longer `known_generation`, or
  // after `wait` (at most half a lease; renews the lease).
  Result<RendezvousView> WaitRendezvous(int64_t worker_id, uint64_t known_generation,
                                        std::chrono::milliseconds wait);

  // Job-scoped KV, deleted when the job ends (DONE, FAILED, CANCELLED).
  // if_version: nullopt = unconditional, 0 = only if absent, n = only if
  // the current version is n (else kAborted). kResourceExhausted when the
  // write would take the job past kv_max_keys_per_job or
  // kv_max_bytes_per_job (a write that grows neither is always taken).
  Result<int64_t> PutKv(int64_t job_id, const std::string& key, const std::string& value,
                        std::optional<int64_t> if_version);
  // Adds `delta` to the decimal integer under `key` (0 when absent) in one
  // write: a counter many ranks add to at once without compare-and-set
  // rounds. The entry after the add. kFailedPrecondition when the value is
  // not an integer; kInvalidArgument on overflow; the caps as PutKv.
  Result<KvRecord> AddKv(int64_t job_id, const std::string& key, int64_t delta);
  // Waits up to `wait` for the entry to exist with version >= min_version.
  Result<KvRecord> GetKv(int64_t job_id, const std::string& key, int64_t min_version,
                         std::chrono::milliseconds wait);
  Status DeleteKv(int64_t job_id, const std::string& key);

  // Long-polls of other state (a node's assignments, node_routes.cc): the
  // number of changes so far, and a wait until it is no longer `seen`.
  // False: `until` passed first, or the coordinator stops.
  uint64_t EventSeq() const;
  bool WaitEvent(uint64_t seen, std::chrono::steady_clock::time_point until);
  // How long a node heartbeat may wait: a third of the node TTL and of a
  // lease, so that neither the node's window nor its segments' leases run
  // out while it waits.
  std::chrono::milliseconds NodePollLimit(std::chrono::milliseconds wait) const;

  ServerCounters server_counters() const;
  const CoordinatorOptions& options() const { return options_; }
  TimeMs now() const { return options_.clock(); }

  // Runs one policy pass now (the tick thread calls this; tests may too).
  void Tick();

 private:
  Coordinator(CoordinatorOptions options, std::unique_ptr<Store> store, ClusterState state,
              std::map<std::pair<int64_t, std::string>, KvRecord> kv);

  // Runs `fn` on the state under the exclusive lock, then writes what it
  // changed. On a store error the in-memory state is reloaded from the file,
  // so memory never holds a change the disk does not.
  Status Mutate(const std::function<Status(ClusterState&, TimeMs, Changes*)>& fn);
  // Writes `changes`; then deletes the KV of the jobs among them that ended.
  Status SaveOrRollback(const Changes& changes);  // REQUIRES: mu_ held exclusively
  // Deletes job `job_id`'s KV from the store and memory. REQUIRES: mu_ held
  // exclusively.
  Status DropJobKv(int64_t job_id);
  void MergeHeartbeats();                         // REQUIRES: mu_ held exclusively
  // PutKv's checks and write; its version. Takes mu_ only to read and then
  // to apply, not for the store's write. REQUIRES: write_mu_ held (every
  // writer of state_ and kv_ holds it), mu_ not held.
  Result<int64_t> PutKvAsWriter(int64_t job_id, const std::string& key, const std::string& value,
                                std::optional<int64_t> if_version);
  // Waits until `done(view)` or `until`, closing rounds whose last call passes.
  Result<RendezvousView> AwaitRendezvous(int64_t worker_id,
                                         const std::function<bool(const RendezvousView&)>& done,
                                         std::chrono::steady_clock::time_point until);
  std::chrono::milliseconds LongPollLimit(std::chrono::milliseconds wait) const;
  void WakeTick();
  void NotifyEvent();
  void TickLoop();
  // Closes the windows of nodes silent for node_ttl_seconds, with their
  // notice lead. REQUIRES: mu_ held exclusively. True if one closed.
  bool CloseSilentNodes(TimeMs now, Changes* changes);
  // Chooses the GPU indices of segments that started or grew on node
  // windows (Segment::placement). REQUIRES: mu_ held exclusively.
  void PlaceSegments(const Changes& started, Changes* changes);
  // The segment's MASTER_PORT: the first free one of the range from a
  // place that moves with its id, so a later segment does not meet an
  // earlier one's port still closing (TIME_WAIT).
  int ChooseMasterPort(const Segment& seg) const;

  const CoordinatorOptions options_;
  std::unique_ptr<Store> store_;

  std::mutex write_mu_;  // acquired before mu_
  mutable std::shared_mutex mu_;
  ClusterState state_;
  PlacementIndex placed_;  // state_'s active segments by node window
  Plan last_plan_;
  std::map<std::pair<int64_t, std::string>, KvRecord> kv_;
  // Per job: the number of kv_ entries and their bytes (key + value).
  struct KvUsage {
    int64_t keys = 0;
    int64_t bytes = 0;
  };
  std::map<int64_t, KvUsage> kv_usage_;
  TimeMs usage_flushed_ms_ = 0;

  // Soft heartbeat state: worker id -> (time, step).
  struct Beat {
    TimeMs at = 0;
    HeartbeatReport report;  // the newest of the worker's since the last tick
  };
  mutable std::mutex beats_mu_;
  std::unordered_map<int64_t, Beat> beats_;
  // Soft node heartbeats: window id -> time (guarded by beats_mu_). A
  // window missing here counts from the first tick that sees it, so a
  // restarted stintd gives every node a whole TTL to come back.
  std::unordered_map<int64_t, TimeMs> node_beats_;
  // Soft: segment id -> newest node heartbeat naming it running (merged
  // into Segment::last_heartbeat_ms by the tick), guarded by beats_mu_.
  std::unordered_map<int64_t, TimeMs> segment_beats_;
  // Soft: segment id -> windows whose node reported exit 0 (guarded by
  // write_mu_); a lost entry only delays completion until the agents repeat.
  std::map<int64_t, std::set<int64_t>> exited_ok_;

  mutable std::mutex labels_mu_;
  std::map<std::string, std::string> node_labels_;   // guarded by labels_mu_

  // Long-polls wait for event_seq_ to move.
  mutable std::mutex event_mu_;
  std::condition_variable event_cv_;
  uint64_t event_seq_ = 0;

  std::mutex tick_mu_;
  std::condition_variable tick_cv_;
  bool tick_requested_ = false;
  bool stopping_ = false;  // guarded by tick_mu_; mirrored in stop_
  std::atomic<bool> stop_{false};

  mutable std::mutex counters_mu_;
  ServerCounters counters_;

  std::thread tick_thread_;  // last: started after everything above exists
};

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_COORDINATOR_H_
