// The worker's side of the coordinator, stintd (HTTP/JSON API v1, described
// in tools/stintd/API.md).
//
//   auto options = stint::CoordinatorOptionsFromEnvironment();  // STINT_COORD_*
//   auto session = stint::CoordinatorSession::Start(*options, watcher.get());
//   ckpt_options.fencing_token = (*session)->fencing_token();
//   ckpt_options.commit_guard = (*session)->client()->CommitGuard();
//   ... every step: (*session)->SetStep(step); if (watcher->requested()) ...
//   ... after the emergency checkpoint is durable: (*session)->Ack(step), exit kExitRequeue
//
// CoordinatorClient is one blocking call per worker endpoint, plus the job's
// KV store. CoordinatorSession registers a worker and then owns two threads:
// one heartbeats, one long-polls for notices; a notice ("the window closes at
// T") reaches the PreemptionWatcher like a signal does, so the training loop
// has a single place to look.
//
// Errors. Every call returns the server's refusal as a Status whose message
// starts with the server's own message:
//   400 kInvalidArgument  401 kUnauthenticated  403 kPermissionDenied
//   404 kNotFound         409 kAlreadyExists, kFailedPrecondition or kAborted
//                             (the server's code says which; kAborted: a KV
//                             compare-and-set lost)
//   410 kAborted, message starting "fenced: ": this worker's segment ended or
//       its fencing token is stale; it must stop working. Test with IsFenced().
//   500 kInternal or kIoError (after the retries)
//   kUnavailable: stintd could not be reached (or answered 502/503/504) within
//       the retry deadline.  kCancelled: the client was shut down.
// Connection failures and 5xx answers are retried with capped, jittered
// exponential backoff until RetryPolicy::deadline (stintd may be restarting:
// its state is in SQLite, so it comes back knowing everything). A call whose
// answer was lost after it was sent is retried only where repeating it is
// harmless (everything except Register and a KV Put with if_version).
// 4xx answers are never retried, nor an https server whose certificate does
// not verify against CoordinatorOptions::ca_file (kUnavailable at once, the
// message says so).
#ifndef STINT_INCLUDE_STINT_COORDINATOR_CLIENT_H_
#define STINT_INCLUDE_STINT_COORDINATOR_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "stint/preemption.h"
#include "stint/status.h"

namespace stint {

namespace internal {
class HttpJsonClient;
}

struct RetryPolicy {
  // Total time one call may spend retrying; zero means one attempt.
  // Default: 60 s (a restarting stintd is back well within that).
  std::chrono::milliseconds deadline{std::chrono::seconds(60)};
  // First pause; doubled after each attempt up to max_backoff; each pause is
  // drawn uniformly from [pause/2, pause] so many workers do not hammer a
  // restarting stintd in lockstep. Default: 100 ms, 5 s.
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{std::chrono::seconds(5)};
  // Called before each pause with the failed attempt's number (1-based) and
  // error, e.g. to log "stintd unreachable, retrying". Runs on the calling
  // thread; must not call back into the client. Default: none.
  std::function<void(int attempt, const Status& error)> on_retry;
};

struct WorkerRegistration {
  uint64_t worker_id = 0;
  uint64_t job_id = 0;
  uint64_t segment_id = 0;
  uint64_t fencing_token = 0;                       // this incarnation's: its checkpoints carry it
  std::chrono::milliseconds lease_ttl{0};           // heartbeat within this or be fenced
  std::chrono::milliseconds heartbeat_interval{0};  // the server's advice
  // This incarnation's own credential: the worker calls below send it
  // instead of options().token (stintd accepts nothing else on
  // /v1/workers/{id}/*). Empty from a stintd older than per-worker secrets;
  // the calls then send options().token, as before.
  std::string secret;
};

// What a worker reports with a heartbeat besides its lease.
struct WorkerProgress {
  std::optional<uint64_t> step;     // the newest finished step
  std::optional<uint64_t> samples;  // samples trained on so far
  std::optional<double> loss;       // the training loss at loss_step
  std::optional<uint64_t> loss_step;
};

struct CoordinatorOptions {
  // "http://host:port" or "https://host:port" (a trailing "/" is allowed,
  // no other path). Default: http://127.0.0.1:7077, stintd's default.
  // Several, separated by commas: the stintds sharing one database, of
  // which one leads; calls go to the one that answers (the others do not
  // serve, or answer 503), so a takeover costs retries, not failures.
  std::string url = "http://127.0.0.1:7077";
  // https: PEM file of the CA certificates stintd's certificate must chain
  // to (a self-signed stintd certificate given here pins it), and the URL's
  // host must be named in it. Default: "" (the system's CAs). Ignored for
  // http.
  std::string ca_file;
  // Sent as "Authorization: Bearer <token>" by Register(), and by the KV
  // calls and CheckFencing until this client holds a worker's secret: the
  // worker calls, and once registered the KV and the fencing check too,
  // send the secret Register() got (WorkerRegistration::secret). The
  // token: the job's registration_token (POST /v1/jobs answers it; it
  // reaches that job only), a segment's (stint-agent gives it to torchrun
  // launches), or the shared worker token (it only registers: no KV or
  // fencing check before registering). Default: "" (the server answers 401).
  std::string token;
  // The stintd job this process works for. REQUIRES: non-zero for every call
  // except CheckFencing with an explicit job.
  uint64_t job_id = 0;
  // Shown by stintctl and in the server's logs. Default: "<hostname>:<pid>".
  std::string worker_name;
  // Time to establish a TCP connection. Default: 2 s.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(2)};
  // Time to wait for an answer, on top of a long-poll's own wait. Default: 10 s.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(10)};
  RetryPolicy retry;
  // CommitGuard() refuses a commit when the coordinator says the fencing token
  // expires sooner than this (it also absorbs clock skew between this host
  // and stintd's). Default: 1 s.
  std::chrono::milliseconds fencing_margin{std::chrono::seconds(1)};
  // A registration its launcher (stint-agent) made for this process: the
  // first Register() adopts it instead of calling stintd, and with its
  // secret `token` may stay empty (the secret then serves the KV and the
  // fencing check too, for this job only). Default: none.
  std::optional<WorkerRegistration> preregistered;
};

// Options from the environment a launcher sets for a worker:
//   STINT_COORD_URL    (optional; default http://127.0.0.1:7077; several:
//                      comma-separated, see CoordinatorOptions::url)
//   STINT_CA_FILE      (optional; CoordinatorOptions::ca_file)
//   STINT_COORD_TOKEN  (required unless STINT_WORKER_SECRET is set; under a
//                      torchrun launch stint-agent sets the segment's
//                      registration token here, so each rank registers itself)
//   STINT_JOB_ID       (required; a positive integer)
//   STINT_WORKER_NAME  (optional; default <hostname>:<pid>)
//   STINT_WORKER_ID, STINT_WORKER_SECRET, STINT_FENCING_TOKEN,
//   STINT_SEGMENT_ID, STINT_LEASE_TTL_SECONDS, STINT_HEARTBEAT_INTERVAL_SECONDS
//                      (stint-agent: the registration it made for this
//                      process, CoordinatorOptions::preregistered; the first
//                      three together or none)
// Empty counts as unset. kInvalidArgument naming the variable when a
// required one is missing or a value is malformed.
Result<CoordinatorOptions> CoordinatorOptionsFromEnvironment();

// True for the error of a call (or a commit refused by CommitGuard) that
// means "this worker is fenced: stop, do not commit, do not retry".
bool IsFenced(const Status& status);


struct CoordinatorNotice {
  // "window_close", "revoked", "preempted", "cancelled", "shrink", "budget" (its team's
  // budget is spent), "migrate" (a cheaper pool has room): each means checkpoint and stop
  std::string reason;
  int64_t deadline_ms = 0;  // wall clock (ms since the Unix epoch): the GPUs go away
  int64_t notice_ms = 0;    // wall clock: when the server sent it
};

// The server's view of this worker (heartbeat and notice answers).
struct WorkerView {
  bool active = false;
  uint64_t fencing_token = 0;
  uint64_t segment_id = 0;
  std::string segment_state;  // "running", "notified", "ended", ...
  std::optional<CoordinatorNotice> notice;
};

struct FencingCheck {
  bool valid = false;
  std::optional<int64_t> valid_until_ms;  // wall clock; nullopt: no known end
  std::string reason;                     // why not valid, as stintd says ("" if it does not)
};

struct KvEntry {
  std::string key;
  std::string value;
  uint64_t version = 0;
  int64_t updated_ms = 0;
};

struct RendezvousMemberInfo {
  uint64_t worker_id = 0;
  std::string endpoint;  // host:port
  int rank = -1;
};

// The job's rendezvous as one worker sees it (API.md "Rendezvous").
struct RendezvousInfo {
  uint64_t generation = 0;
  bool formed = false;   // false: a round is open ("joining")
  bool member = false;   // this worker is in the round or the formed group
  bool standby = false;  // the group is full; this worker waits for a place
  int rank = -1;         // formed and member
  int world_size = 0;    // formed: the group's size; joining: joined so far
  int min_workers = 0;
  int max_workers = 0;
  std::string master_endpoint;                // formed: rank 0's endpoint
  std::vector<RendezvousMemberInfo> members;  // formed: by rank
  std::vector<uint64_t> previous;             // worker ids of the previous generation, by rank
  // This worker's answer: a formed generation newer than `known`, with it.
  bool ready(uint64_t known) const { return formed && member && generation > known; }
};

// Thread-safe: calls may run concurrently (each uses its own keep-alive
// connection from a small pool, so a long-poll never delays a heartbeat).
class CoordinatorClient {
 public:
  // Checks the options (kInvalidArgument for a malformed url); connects lazily.
  static Result<std::unique_ptr<CoordinatorClient>> Create(const CoordinatorOptions& options);
  ~CoordinatorClient();  // REQUIRES: no call in progress (Shutdown() ends them)
  CoordinatorClient(const CoordinatorClient&) = delete;
  CoordinatorClient& operator=(const CoordinatorClient&) = delete;

  const CoordinatorOptions& options() const { return options_; }

  // Joins options().job_id as a new worker. On success the client remembers
  // the registration: the worker calls below use it. kFailedPrecondition when
  // the job has no running segment (it is pending: try again later). The
  // first call adopts options().preregistered when there is one, without
  // calling stintd.
  Result<WorkerRegistration> Register();
  // The last successful Register(); nullopt before.
  std::optional<WorkerRegistration> registration() const;
  // Acts for a worker registered through another client (a second client
  // whose calls can be cancelled on their own by Shutdown()).
  void UseRegistration(const WorkerRegistration& registration);

  // The worker calls. REQUIRES: Register() succeeded (else kFailedPrecondition).
  // Heartbeat renews the lease; `step` (optional) is the newest finished step.
  Result<WorkerView> Heartbeat(std::optional<uint64_t> step = std::nullopt);
  // The same, with the worker's progress (stintd keeps the job's loss curve
  // and its pace per world size; a loss that is not finite is not sent).
  Result<WorkerView> Heartbeat(const WorkerProgress& progress);
  // Long-poll: returns at once when a notice is pending or the segment ended,
  // else when one is sent, else after `wait` (at most 60 s; whole seconds)
  // with view.notice empty.
  Result<WorkerView> WaitNotice(std::chrono::seconds wait = std::chrono::seconds(30));
  Status ReportProgress(uint64_t step, std::optional<double> remaining_seconds = std::nullopt);
  // A checkpoint of `step` is durable; it took `seconds` (the server's
  // checkpoint estimate for preemption notices is learnt from these). For
  // an emergency checkpoint, `notice_to_replicas_seconds`: from the notice
  // to durable and on its replicas (the segment's figure).
  Status ReportCheckpoint(uint64_t step, double seconds,
                          std::optional<uint64_t> bytes = std::nullopt,
                          std::optional<double> notice_to_replicas_seconds = std::nullopt);
  // `step` is committed at `location`: the job's root (tier 1) or replica
  // root (tier 2; a path or an s3:// prefix), as this worker names it,
  // holding `bytes`. stintd starts and moves the job only where its newest
  // step can be read (API.md, "Storage").
  Status ReportStored(const std::string& location, int tier, uint64_t step, uint64_t bytes);
  // After a notice: the checkpoint of `step` is durable and this worker is
  // done with its GPUs; the job goes back to the queue.
  Status Ack(uint64_t step);
  // The job is complete.
  Status Finished();
  // This worker leaves (e.g. a failed rank) without ending the job.
  Status Leave();

  // Asks whether the worker incarnation that `fencing_token` names may still
  // commit for the job: every registration gets a token of its own, stale
  // once that worker left, its segment ended (or passed its deadline), or
  // the job's rendezvous dropped it (tools/stintd/API.md, "Fencing"). The
  // first form checks this worker's registration (kFailedPrecondition
  // before Register()).
  Result<FencingCheck> CheckFencing();
  Result<FencingCheck> CheckFencing(uint64_t job_id, uint64_t fencing_token);

  // For CheckpointOptions::commit_guard. OK only when the coordinator
  // confirms this worker's token is current and valid for at least
  // options().fencing_margin more; otherwise kAborted "fenced: ..." (or the
  // error of the check itself: a token that cannot be confirmed is refused,
  // because a zombie that cannot reach stintd must not commit either).
  Status GuardCommit(uint64_t step);
  // GuardCommit bound to this client. REQUIRES: the client outlives every
  // Checkpointer holding the function.
  std::function<Status(uint64_t step)> CommitGuard();

  // The steps of the job (options().job_id) that an evaluation is queued or
  // running on (tools/stintd/API.md, "Evaluation"): retention of the job's
  // checkpoints must keep them until the evaluation ends. None (not an
  // error) from a stintd that does not know the job or pinned steps.
  Result<std::set<uint64_t>> PinnedSteps();
  // PinnedSteps bound to this client, for CheckpointOptions::retention_pins.
  // REQUIRES: the client outlives every Checkpointer holding the function.
  std::function<Result<std::set<uint64_t>>()> RetentionPins();

  // Joins the job's rendezvous, advertising `endpoint` (host:port where this
  // worker's group store listens if it becomes rank 0), and waits up to
  // `wait` (at most 60 s) for a formed generation newer than
  // `known_generation` with this worker in it. known_generation is the
  // generation this worker last belonged to (0: none): re-joining with the
  // current one says "it failed here" and opens the next round. An answer
  // that is not ready(known_generation) means "not yet": join again.
  Result<RendezvousInfo> JoinRendezvous(const std::string& endpoint, uint64_t known_generation,
                                        std::chrono::milliseconds wait = std::chrono::seconds(30));
  // Long-poll: answers when the job's generation differs from
  // `known_generation`, or after `wait` (at most 60 s).
  Result<RendezvousInfo> WaitRendezvous(uint64_t known_generation,
                                        std::chrono::milliseconds wait = std::chrono::seconds(30));

  // The job's KV store (options().job_id), e.g. for rendezvous.
  // Put: if_version 0 means "only if absent"; nullopt means unconditional.
  // Returns the new version; kAborted when if_version does not match.
  Result<uint64_t> Put(const std::string& key, const std::string& value,
                       std::optional<uint64_t> if_version = std::nullopt);
  // Get: waits up to `wait` (whole seconds) for the key to exist with
  // version >= min_version; kNotFound if it does not by then.
  Result<KvEntry> Get(const std::string& key, std::chrono::seconds wait = std::chrono::seconds(0),
                      uint64_t min_version = 0);
  Status Delete(const std::string& key);
  // Adds `delta` to the counter under `key` (a decimal integer, 0 when
  // absent) in one atomic write, and returns the sum: ranks counting at
  // once need no compare-and-set rounds. kFailedPrecondition when the value
  // is not an integer.
  Result<int64_t> Add(const std::string& key, int64_t delta);

  // Ends every call in progress (they return kCancelled) and refuses all
  // later ones, promptly: for shutting down threads blocked in a long-poll.
  // Irreversible. Thread-safe.
  void Shutdown();

 private:
  CoordinatorClient(const CoordinatorOptions& options,
                    std::unique_ptr<internal::HttpJsonClient> http);
  Result<WorkerRegistration> RequireRegistration() const;
  // The bearer token of the job-scoped calls (KV, fencing check): the
  // worker's secret once there is one, else "" for options().token.
  std::string JobToken() const;

  const CoordinatorOptions options_;
  const std::unique_ptr<internal::HttpJsonClient> http_;
  mutable std::mutex mu_;
  std::optional<WorkerRegistration> registration_;  // guarded by mu_
  bool adopted_ = false;                            // guarded by mu_: preregistered was used
};

// A registered worker kept alive: a heartbeat every interval and a standing
// long-poll for notices, on two threads the session owns. A notice becomes
// watcher->Notify("coordinator <reason>", deadline) with the wall-clock
// deadline converted to steady_clock; a fenced worker (410, or a view that is
// no longer active or carries another token) becomes
// Notify("coordinator fenced", now) and fenced() turns true.
//
// Thread-safe. The destructor stops and joins both threads promptly (it
// cancels a long-poll in progress); it does not Leave(): call Ack(),
// Finished() or Leave() first, or let the lease expire. Background errors
// other than fencing (stintd unreachable past the retry deadline) are kept
// in last_error() and the threads carry on: the lease, not this process,
// decides when the worker is gone.
class CoordinatorSession {
 public:
  // Creates a client, registers (retrying kFailedPrecondition "no active
  // segment" is the caller's business), and starts the threads.
  // REQUIRES: `watcher` is null or outlives the session.
  static Result<std::unique_ptr<CoordinatorSession>> Start(const CoordinatorOptions& options,
                                                           PreemptionWatcher* watcher);
  ~CoordinatorSession();
  CoordinatorSession(const CoordinatorSession&) = delete;
  CoordinatorSession& operator=(const CoordinatorSession&) = delete;

  const WorkerRegistration& registration() const { return registration_; }
  uint64_t fencing_token() const { return registration_.fencing_token; }
  bool fenced() const;
  // The newest notice (nullopt before the first).
  std::optional<CoordinatorNotice> notice() const;
  // The last error of a background call (OK once a later call succeeded).
  Status last_error() const;

  // The step sent with the next heartbeat. Cheap; call it every step.
  void SetStep(uint64_t step);
  // The training loss of the newest step and the samples trained on so
  // far, sent with the next heartbeat (stintd's loss curve and efficiency
  // figures). Cheap; call them every step. A loss that is not finite is
  // not sent.
  void ReportLoss(double loss);
  void SetSamples(uint64_t samples);
  Status ReportCheckpoint(uint64_t step, double seconds,
                          std::optional<uint64_t> bytes = std::nullopt) {
    return client_->ReportCheckpoint(step, seconds, bytes);
  }
  // The client's calls; once one succeeds the worker is done with its
  // segment, so the session stops heartbeating and the segment's end that
  // follows is expected (not reported as fenced, no notice).
  Status Ack(uint64_t step);
  Status Finished();
  Status Leave();
  // For everything else (KV, progress, CommitGuard). Lives as long as the session.
  CoordinatorClient* client() { return client_.get(); }

 private:
  class Impl;
  CoordinatorSession(std::unique_ptr<CoordinatorClient> client, WorkerRegistration registration,
                     PreemptionWatcher* watcher);

  std::unique_ptr<CoordinatorClient> client_;
  const WorkerRegistration registration_;
  std::unique_ptr<Impl> impl_;  // the threads; destroyed (joined) first
};

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_COORDINATOR_CLIENT_H_
