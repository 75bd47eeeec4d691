// stint._C.Checkpointer, CheckpointReader, SaveHandle and the LibTorch RNG
// capture: the binding's only translation unit that includes LibTorch.
//
// The Python package flattens a nested state dict into named tensors, byte
// blobs and a structure blob (python_bindings/stint/pytree.py); this file
// moves those through the runtime with the GIL released:
//   save(step, names, tensors, blobs) -> SaveHandle(staged, durable)
//   load(planner, step, verify_all)   -> {"step", "dir", "blobs", "tensors", ...}
// Tensors go through runtime/torch (TorchStateBuilder borrows contiguous CPU
// tensors and copies the others; TorchStateLoader reads in place). Fresh
// tensors for a load are allocated here from the checkpoint's own shapes.
#include <torch/csrc/utils/pybind.h>  // the torch.Tensor <-> at::Tensor caster

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <xxhash.h>

#include "bindings.h"
#include "exit_hook.h"
#include "future.h"
#include "status_to_exception.h"
#include "store_channel.h"
#include "stint/checkpoint_reader.h"
#include "stint/checkpointer.h"
#include "stint/coordinator_commit_channel.h"
#include "stint_torch.h"
#include "torch_device.h"
#include "torch_guard.h"

namespace stint {
namespace python {

namespace py = pybind11;

namespace {

using Clock = std::chrono::steady_clock;

// ---- CheckpointReader --------------------------------------------------------

// A reader that Python owns (CheckpointReader.open) or one borrowed from a
// running load for the duration of the planner callback, after which every
// method raises FailedPreconditionError. Thread-safe: the C++ reader is only
// thread-compatible (one I/O ring, one set of bounce buffers), while Python
// code may call one reader from several threads (torch_checkpointing reads
// files on a pool; two threads draining one ring each waited forever for the
// completion the other had taken), so the calls that release the GIL take
// io_mu() once they released it.
class PyReader {
 public:
  explicit PyReader(std::unique_ptr<CheckpointReader> owned)
      : owned_(std::move(owned)), reader_(owned_.get()) {}
  explicit PyReader(const CheckpointReader* borrowed) : reader_(borrowed) {}

  const CheckpointReader& get() const {
    if (reader_ == nullptr) {
      ThrowStatus(Status::FailedPrecondition(
          "this CheckpointReader belonged to a load planner call that has returned"));
    }
    return *reader_;
  }
  void Invalidate() { reader_ = nullptr; }
  // Held (without the GIL) around each read of the reader's files.
  std::mutex& io_mu() const { return io_mu_; }

 private:
  std::unique_ptr<CheckpointReader> owned_;
  const CheckpointReader* reader_;
  mutable std::mutex io_mu_;
};

py::list TensorInfos(const CheckpointReader& reader) {
  py::list out;
  for (const TensorInfo& t : reader.tensors()) {
    py::dict d;
    d["name"] = t.name;
    d["dtype"] = std::string(DTypeName(t.dtype));
    d["shape"] = py::tuple(py::cast(t.shape));
    d["shards"] = t.shards;
    py::list boxes;
    for (const ShardInfo& s : t.shard_boxes) {
      py::dict b;
      b["offsets"] = py::tuple(py::cast(s.offsets));
      b["extents"] = py::tuple(py::cast(s.extents));
      b["file"] = s.file;
      b["raw_bytes"] = s.raw_bytes;
      boxes.append(std::move(b));
    }
    d["shard_boxes"] = std::move(boxes);
    d["raw_bytes"] = t.raw_bytes;
    out.append(std::move(d));
  }
  return out;
}

// A tensor for load() to fill. Large ones get page-aligned memory of their
// own, so the reader reads their chunks straight into them (O_DIRECT needs
// the alignment) instead of through a bounce buffer and a copy.
at::Tensor NewLoadTensor(const TensorInfo& info) {
  constexpr uint64_t kPageAlignedFrom = 1u << 20;
  const auto options = at::TensorOptions().dtype(TorchScalarType(info.dtype));
  const uint64_t bytes = uint64_t(NumElements(info.shape)) * DTypeSize(info.dtype);
  if (bytes < kPageAlignedFrom) return torch::empty(info.shape, options);
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0) return torch::empty(info.shape, options);
  return torch::from_blob(p, info.shape, [](void* q) { std::free(q); }, options);
}

// New CPU tensors for `names`, as stored, with their destinations appended to
// *dests. kDataLoss for a name the checkpoint does not hold (the caller's
// list comes from the checkpoint's own structure blob).
Status FreshTensors(const CheckpointReader& reader, const std::vector<std::string>& names,
                    std::vector<TensorDest>* dests,
                    std::vector<std::pair<std::string, at::Tensor>>* out) {
  std::map<std::string, TensorInfo> stored;
  for (auto& info : reader.tensors()) stored.emplace(info.name, info);
  std::set<std::string> seen;
  return Guard("allocating tensors for " + reader.dir(), [&]() -> Status {
    for (const std::string& name : names) {
      if (!seen.insert(name).second) continue;
      auto it = stored.find(name);
      if (it == stored.end()) {
        return Status::DataLoss(reader.dir() + ": tensor '" + name +
                                "' is named by the state structure but not in the manifest");
      }
      const TensorInfo& info = it->second;
      at::Tensor t = NewLoadTensor(info);
      TensorDest d;
      d.name = name;
      d.dtype = info.dtype;
      d.global_shape = info.shape;
      d.data = t.numel() > 0 ? t.data_ptr() : nullptr;
      dests->push_back(std::move(d));
      out->emplace_back(name, std::move(t));
    }
    return Status::OK();
  });
}

py::dict TensorDict(std::vector<std::pair<std::string, at::Tensor>> tensors) {
  py::dict d;
  for (auto& [name, t] : tensors) d[py::str(name)] = py::cast(std::move(t));
  return d;
}

// ---- Checkpointer ------------------------------------------------------------

struct PySaveHandle {
  uint64_t step;
  bool skipped;
  Future staged;
  Future durable;
  Future replicated;
};

py::dict StatsDict(const CheckpointerStats& s) {
  py::dict d;
  d["saves"] = s.saves;
  d["skipped"] = s.skipped;
  d["failed"] = s.failed;
  d["committed"] = s.committed;
  if (s.last) {
    py::dict last;
    last["step"] = s.last->step;
    last["raw_bytes"] = s.last->raw_bytes;
    last["stored_bytes"] = s.last->stored_bytes;
    last["referenced_bytes"] = s.last->referenced_bytes;
    last["matched_in_place_bytes"] = s.last->matched_in_place_bytes;
    last["compressed"] = s.last->compressed;
    last["compress_decision"] = s.last->compress_decision;
    last["snapshot_seconds"] = s.last->snapshot_seconds;
    last["persist_seconds"] = s.last->persist_seconds;
    last["commit_seconds"] = s.last->commit_seconds;
    last["engine"] = s.last->engine;
    last["staged_seconds"] = s.last->staged_seconds;
    last["device_copy_seconds"] = s.last->device_copy_seconds;
    d["last"] = std::move(last);
  } else {
    d["last"] = py::none();
  }
  auto replica_dict = [](const std::optional<ReplicaStats>& r) -> py::object {
    if (!r) return py::none();
    py::dict out;
    out["step"] = r->step;
    out["bytes"] = r->bytes;
    out["replicate_seconds"] = r->replicate_seconds;
    out["durable_seconds"] = r->durable_seconds;
    return py::object(std::move(out));
  };
  d["replicated"] = s.replicated;
  d["replica_failed"] = s.replica_failed;
  d["replica_superseded"] = s.replica_superseded;
  d["last_replica"] = replica_dict(s.last_replica);
  d["last_replica_error"] = s.last_replica_error;
  d["peer_replicated"] = s.peer_replicated;
  d["peer_replica_failed"] = s.peer_replica_failed;
  d["last_peer_replica"] = replica_dict(s.last_peer_replica);
  d["last_peer_replica_error"] = s.last_peer_replica_error;
  return d;
}

// A shard's place in its tensor: (global shape, offsets); its extents are the
// tensor's sizes.
using Box = std::pair<std::vector<int64_t>, std::vector<int64_t>>;

// One in-place destination a load planner returned.
struct InPlaceTarget {
  std::string name;
  at::Tensor tensor;
  std::optional<Box> box;  // none: the whole tensor
};

// What a load planner call prepared; replaced by every call (the runtime
// falls back to older checkpoints and plans each).
struct LoadPlan {
  std::unique_ptr<TorchStateLoader> loader;  // in-place destinations
  std::vector<std::pair<std::string, at::Tensor>> fresh;
  std::optional<py::error_already_set> python_error;  // a non-stint exception to re-raise
};

// What a Checkpointer's commit guards ask stintd through: a client of the
// worker registration stint-agent put in the environment, or a session's.
struct CommitFencing {
  std::unique_ptr<CoordinatorClient> client;
  std::shared_ptr<CoordinatorSession> session;
};

// Owns one Checkpointer. Thread-compatible, like the Checkpointer: one Python
// thread saves and loads (the GIL is released inside, so calls from several
// threads would interleave).
class PyCheckpointer {
 public:
  PyCheckpointer(std::unique_ptr<Checkpointer> ckpt, std::unique_ptr<CommitChannel> channel,
                 std::unique_ptr<DeviceCopier> copier, CommitFencing fencing)
      : fencing_(std::move(fencing)),
        copier_(std::move(copier)),
        channel_(std::move(channel)),
        ckpt_(std::move(ckpt)),
        // Closed at interpreter exit if still open: its threads are joined
        // while they may still take the GIL (exit_hook.h).
        exit_close_([this] { Close(); }) {}
  // Finishes queued saves (the Checkpointer's destructor). Without a store
  // the GIL stays held: the persist thread never needs it, and releasing it
  // during interpreter shutdown is not safe. With one, the persist thread
  // takes the GIL to reach the store, so it is released (the channel refuses
  // calls once the interpreter is finalizing).
  ~PyCheckpointer() {
    exit_close_ = ExitClose();  // before anything goes: the hook may not run it any more
    if (channel_ != nullptr && ckpt_ != nullptr) Close();
  }

  Checkpointer& get() const {
    if (ckpt_ == nullptr) ThrowStatus(Status::FailedPrecondition("the checkpointer is closed"));
    return *ckpt_;
  }

  void Close() {
    std::unique_ptr<Checkpointer> c = std::move(ckpt_);
    pending_.clear();
    ReleasedGil nogil;
    c.reset();  // waits for pending saves; before channel_, which they use
  }
  bool closed() const { return ckpt_ == nullptr; }

  PySaveHandle Save(uint64_t step, const std::vector<std::string>& names,
                    const std::vector<at::Tensor>& tensors, const py::dict& blobs,
                    const std::optional<std::vector<std::optional<Box>>>& boxes,
                    const std::optional<std::vector<bool>>& forward,
                    const std::optional<std::vector<bool>>& frozen) {
    Checkpointer& ckpt = get();
    if (names.size() != tensors.size() || (boxes && boxes->size() != tensors.size()) ||
        (forward && forward->size() != tensors.size()) ||
        (frozen && frozen->size() != tensors.size())) {
      ThrowStatus(
          Status::InvalidArgument("save: " + std::to_string(names.size()) + " names and " +
                                  (boxes ? std::to_string(boxes->size()) : std::string("no")) +
                                  " boxes for " + std::to_string(tensors.size()) + " tensors"));
    }
    std::vector<std::pair<std::string, std::string>> blob_bytes;
    for (auto item : blobs) {
      blob_bytes.emplace_back(item.first.cast<std::string>(), item.second.cast<std::string>());
    }
    std::optional<Result<SaveHandle>> handle;
    {
      ReleasedGil nogil;
      // The State it builds holds the tensors until their copies completed.
      TorchStateBuilder builder;
      Status s;
      for (size_t i = 0; i < names.size() && s.ok(); ++i) {
        const std::optional<Box>* box = boxes ? &(*boxes)[i] : nullptr;
        const WriteBarrier when = forward && (*forward)[i] ? WriteBarrier::kForward
                                                           : WriteBarrier::kOptimizerStep;
        s = box != nullptr && box->has_value()
                ? builder.AddShard(names[i], tensors[i], (*box)->first, (*box)->second, when)
                : builder.AddTensor(names[i], tensors[i], when);
        if (s.ok() && frozen && (*frozen)[i]) s = builder.MarkFrozen(names[i]);
      }
      for (auto& [name, bytes] : blob_bytes) {
        if (!s.ok()) break;
        s = builder.AddBlob(name, std::move(bytes));
      }
      if (s.ok()) {
        handle.emplace(ckpt.Save(step, builder.state()));
      } else {
        handle.emplace(s.WithContext("save step " + std::to_string(step)));
      }
    }
    SaveHandle h = ValueOrThrow(std::move(*handle));
    Prune();
    Future durable(h.durable, h.step, "durable");
    if (!h.skipped) pending_.push_back(durable);  // skipped: the caller learnt it from the handle
    // A handle made from an error has no tier-2 future of its own: the error is its outcome.
    Future replicated(h.replicated.valid() ? h.replicated : h.durable, h.step, "replicated");
    return PySaveHandle{h.step, h.skipped, Future(h.staged, h.step, "staged"), durable,
                        replicated};
  }

  void BeforeWrite(const std::string& barrier, double timeout_seconds) {
    Checkpointer& ckpt = get();
    WriteBarrier when;
    if (barrier == "forward") {
      when = WriteBarrier::kForward;
    } else if (barrier == "optimizer_step") {
      when = WriteBarrier::kOptimizerStep;
    } else {
      ThrowStatus(Status::InvalidArgument("barrier must be 'forward' or 'optimizer_step', got '" +
                                          barrier + "'"));
    }
    Status s;
    {
      ReleasedGil nogil;
      // The stream that writes next is the device's current stream at this
      // moment (the hook runs right before the write), not the one saved from.
      s = ckpt.BeforeWrite(when, Millis(timeout_seconds), CurrentCudaStream);
    }
    ThrowIfError(s);
  }

  void WaitStaged(double timeout_seconds) {
    Checkpointer& ckpt = get();
    Status s;
    {
      ReleasedGil nogil;
      s = ckpt.WaitStaged(Millis(timeout_seconds));
    }
    ThrowIfError(s);
  }

  void FlushReplication(double timeout_seconds) {
    Checkpointer& ckpt = get();
    Status s;
    {
      ReleasedGil nogil;
      s = ckpt.FlushReplication(Millis(timeout_seconds));
    }
    ThrowIfError(s);
  }

  // Raises the first failure since the previous flush() that Python has not
  // seen: a save's that its durable future did not hand out (result() or
  // exception()), else one that belongs to no save (retention) or the
  // timeout. A failure a durable future handed out is not raised again.
  void Flush(double timeout_seconds) {
    Checkpointer& ckpt = get();
    const Clock::time_point deadline = Clock::now() + Millis(timeout_seconds);
    // Wait for our own saves interruptibly first; Flush() then finds the
    // queue idle (or very nearly) and returns the first background error.
    for (const auto& f : pending_) {
      double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      bool ready = WaitWithoutGil([&f](auto slice) { return f.WaitFor(slice); },
                                  std::max(0.0, left));
      if (!ready) break;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    Status s;
    {
      ReleasedGil nogil;
      s = ckpt.Flush(std::max(left, std::chrono::milliseconds(0)));
    }
    std::optional<Status> unseen;
    bool seen_already = false;  // s is the failure of a save Python saw
    std::vector<Future> still_running;
    for (const auto& f : pending_) {
      if (!f.done()) {
        still_running.push_back(f);
        continue;
      }
      Status d = f.Outcome();
      if (d.ok()) continue;
      if (!f.reported()) {
        if (!unseen) unseen = d.WithContext("background save of step " + std::to_string(f.step()));
      } else if (s.code() == d.code() && s.message().size() >= d.message().size() &&
                 s.message().compare(s.message().size() - d.message().size(),
                                     d.message().size(), d.message()) == 0) {
        seen_already = true;  // the checkpointer's copy of it, with context
      }
    }
    pending_ = std::move(still_running);
    if (unseen) ThrowStatus(*unseen);
    if (!seen_already) ThrowIfError(s);
  }

  py::dict Load(const py::object& planner, std::optional<uint64_t> step, bool verify_all) {
    Checkpointer& ckpt = get();
    LoadOptions options;
    options.step = step;
    options.verify_all = verify_all;
    LoadPlan plan;
    // Called by Load() on this thread, without the GIL, once per candidate checkpoint.
    DestPlanner dest_planner =
        [&](const CheckpointReader& reader) -> Result<std::vector<TensorDest>> {
      py::gil_scoped_acquire gil;
      plan.loader.reset();
      plan.fresh.clear();
      py::object view = py::cast(std::make_unique<PyReader>(&reader));
      py::object out;
      try {
        out = planner(view);
      } catch (py::error_already_set& e) {
        view.cast<PyReader&>().Invalidate();
        // A stint error keeps its code, so DataLossError from the planner
        // (say, a damaged structure blob) falls back to an older checkpoint.
        if (std::optional<Status> s = StatusFromPythonError(e)) return *s;
        plan.python_error.emplace(std::move(e));
        return Status::Cancelled("the load planner raised a Python exception");
      }
      view.cast<PyReader&>().Invalidate();
      std::vector<InPlaceTarget> in_place;
      std::vector<std::string> fresh_names;
      try {
        auto parsed = out.cast<std::pair<py::list, std::vector<std::string>>>();
        for (const auto& item : parsed.first) {
          auto t = item.cast<py::tuple>();
          if (t.size() != 2 && t.size() != 4) throw py::cast_error();
          InPlaceTarget target{t[0].cast<std::string>(), t[1].cast<at::Tensor>(), std::nullopt};
          if (t.size() == 4) {
            target.box.emplace(t[2].cast<std::vector<int64_t>>(),
                               t[3].cast<std::vector<int64_t>>());
          }
          in_place.push_back(std::move(target));
        }
        fresh_names = std::move(parsed.second);
      } catch (const py::cast_error&) {
        return Status::InvalidArgument(
            "the load planner must return ([(name, tensor) or (name, tensor, global_shape, "
            "offsets), ...], [name, ...])");
      }
      ReleasedGil nogil;
      TorchLoadOptions load_options;
      load_options.device_destinations = copier_ != nullptr;
      plan.loader = std::make_unique<TorchStateLoader>(load_options);
      for (auto& target : in_place) {
        STINT_RETURN_IF_ERROR(target.box
                                  ? plan.loader->AddShard(target.name, target.tensor,
                                                          target.box->first, target.box->second)
                                  : plan.loader->AddTensor(target.name, target.tensor));
      }
      STINT_ASSIGN_OR_RETURN(std::vector<TensorDest> dests, plan.loader->Planner()(reader));
      std::set<std::string> targets;
      for (auto& target : in_place) targets.insert(target.name);
      for (const auto& name : fresh_names) {
        if (targets.count(name) != 0) {
          return Status::InvalidArgument("tensor '" + name +
                                         "' was asked for both in place and as a new tensor");
        }
      }
      STINT_RETURN_IF_ERROR(FreshTensors(reader, fresh_names, &dests, &plan.fresh));
      return dests;
    };

    std::optional<Result<LoadResult>> result;
    {
      ReleasedGil nogil;
      result.emplace(ckpt.Load(dest_planner, options));
      if (result->ok() && plan.loader != nullptr) {
        Status finished = plan.loader->Finish();  // staged copies, version bumps
        if (!finished.ok()) result.emplace(finished);
      }
    }
    if (plan.python_error) throw std::move(*plan.python_error);
    LoadResult r = ValueOrThrow(std::move(*result));
    py::dict d;
    d["step"] = r.step;
    d["dir"] = r.dir;
    py::dict blobs;
    for (const auto& [name, bytes] : r.blobs) blobs[py::str(name)] = py::bytes(bytes);
    d["blobs"] = std::move(blobs);
    d["tensors"] = TensorDict(std::move(plan.fresh));
    d["skipped"] = py::cast(r.skipped);
    d["skipped_steps"] = py::cast(r.skipped_steps);
    return d;
  }

  // The steps a listing of one tier returns, without the GIL while it lists.
  std::vector<uint64_t> ListSteps(Result<std::vector<uint64_t>> (Checkpointer::*list)()) const {
    Checkpointer& ckpt = get();
    std::optional<Result<std::vector<uint64_t>>> r;
    {
      ReleasedGil nogil;
      r.emplace((ckpt.*list)());
    }
    return ValueOrThrow(std::move(*r));
  }
  std::vector<uint64_t> ListCommitted() const { return ListSteps(&Checkpointer::ListCommitted); }
  std::vector<uint64_t> ListReplicated() const { return ListSteps(&Checkpointer::ListReplicated); }

  std::unique_ptr<PyReader> OpenReader(uint64_t step) const {
    Checkpointer& ckpt = get();
    std::optional<Result<std::unique_ptr<CheckpointReader>>> r;
    {
      ReleasedGil nogil;
      r.emplace(ckpt.OpenReader(step));
    }
    return std::make_unique<PyReader>(ValueOrThrow(std::move(*r)));
  }

  void Quarantine(uint64_t step) {
    Checkpointer& ckpt = get();
    Status s;
    {
      ReleasedGil nogil;
      s = ckpt.Quarantine(step);
    }
    ThrowIfError(s);
  }

  void MarkComplete(uint64_t step, const std::string& info) {
    Checkpointer& ckpt = get();
    Status s;
    {
      ReleasedGil nogil;
      s = ckpt.MarkComplete(step, info);
    }
    ThrowIfError(s);
  }

  // (step, info JSON text) or None.
  py::object Completion() {
    Checkpointer& ckpt = get();
    std::optional<Result<std::optional<CompletionMarker>>> r;
    {
      ReleasedGil nogil;
      r.emplace(ckpt.Completion());
    }
    std::optional<CompletionMarker> m = ValueOrThrow(std::move(*r));
    if (!m) return py::none();
    return py::make_tuple(m->step, m->info);
  }

  void ClearCompletion() {
    Checkpointer& ckpt = get();
    Status s;
    {
      ReleasedGil nogil;
      s = ckpt.ClearCompletion();
    }
    ThrowIfError(s);
  }

  py::dict Stats() const { return StatsDict(get().stats()); }
  std::string root() const { return get().options().root; }

 private:
  // Drops the saves that committed; failed ones stay for flush().
  void Prune() {
    std::vector<Future> left;
    for (auto& f : pending_) {
      if (!f.done() || !f.Outcome().ok()) left.push_back(f);
    }
    pending_ = std::move(left);
  }

  CommitFencing fencing_;                     // outlives ckpt_ (declared first); may be empty
  std::unique_ptr<DeviceCopier> copier_;      // outlives ckpt_; may be null
  std::unique_ptr<CommitChannel> channel_;   // outlives ckpt_ (declared first)
  std::unique_ptr<Checkpointer> ckpt_;
  // Durable futures of saves not committed yet or failed, since the last flush().
  std::vector<Future> pending_;
  ExitClose exit_close_;  // last: registered once the rest exists
};

std::unique_ptr<PyCheckpointer> OpenCheckpointer(
    const std::string& root, const std::string& job_id, uint64_t fencing_token, uint64_t chunk_size,
    bool compress, int zstd_level, size_t staging_bytes, size_t staging_max_bytes,
    const std::string& busy_policy, double block_timeout, double copy_timeout, int keep_last, uint64_t keep_every, const std::string& io_engine,
    bool direct_io, unsigned io_queue_depth, unsigned io_size, unsigned threads, int rank,
    int world_size, const py::object& store, double commit_timeout, bool read_only,
    const std::string& snapshot, bool cuda, bool incremental, bool compress_auto,
    double lock_wait, const py::object& fencing, const std::string& node_id, int peer_replicas,
    const std::string& peer_replica_dir, const std::string& replica_root, int replica_keep_last,
    uint64_t replica_keep_every) {
  CheckpointOptions o;
  if (replica_keep_last < 0) ThrowStatus(Status::InvalidArgument("replica_keep_last must be >= 0"));
  o.replica_root = replica_root;
  o.replica_keep_last = replica_keep_last;
  o.replica_keep_every = replica_keep_every;
  if (peer_replicas < 0) ThrowStatus(Status::InvalidArgument("peer_replicas must be >= 0"));
  o.node_id = node_id;
  o.peer_replicas = peer_replicas;
  o.peer_replica_dir = peer_replica_dir;
  o.incremental = incremental;
  o.compress_auto = compress_auto;
  if (snapshot == "eager") {
    o.snapshot = SnapshotMode::kEager;
  } else if (snapshot == "lazy") {
    o.snapshot = SnapshotMode::kLazy;
  } else {
    ThrowStatus(Status::InvalidArgument("snapshot must be 'eager' or 'lazy', got '" + snapshot + "'"));
  }
  std::unique_ptr<DeviceCopier> copier;
  if (cuda) {
    // CUDA tensors go through pinned staging on copy streams; without a
    // usable device they are refused at save with a clear error.
    auto made = NewTorchDeviceCopier();
    if (made.ok()) copier = std::move(*made);
    o.device_copier = copier.get();
  }
  o.read_only = read_only;
  if (lock_wait < 0) ThrowStatus(Status::InvalidArgument("lock_wait must be >= 0"));
  o.lock_wait = Millis(lock_wait);
  o.rank = rank;
  o.world_size = world_size;
  std::unique_ptr<CommitChannel> channel;
  if (!store.is_none()) {
    channel = NewStoreChannel(store);
    o.commit_channel = channel.get();
  }
  if (commit_timeout < 0) ThrowStatus(Status::InvalidArgument("commit_timeout must be >= 0"));
  o.commit_timeout = Millis(commit_timeout);
  o.root = root;
  o.job_id = job_id;
  o.fencing_token = fencing_token;
  o.chunk_size = chunk_size;
  o.compress = compress;
  o.zstd_level = zstd_level;
  o.staging_bytes = staging_bytes;
  o.staging_max_bytes = staging_max_bytes;
  if (busy_policy == "block") {
    o.busy_policy = BusyPolicy::kBlock;
  } else if (busy_policy == "skip") {
    o.busy_policy = BusyPolicy::kSkip;
  } else {
    ThrowStatus(Status::InvalidArgument("busy_policy must be 'block' or 'skip', got '" +
                                        busy_policy + "'"));
  }
  if (block_timeout < 0) ThrowStatus(Status::InvalidArgument("block_timeout must be >= 0"));
  if (copy_timeout <= 0) ThrowStatus(Status::InvalidArgument("copy_timeout must be > 0"));
  o.copy_timeout = Millis(copy_timeout);
  if (keep_last < 0) ThrowStatus(Status::InvalidArgument("keep_last must be >= 0"));
  o.block_timeout = Millis(block_timeout);
  o.keep_last = keep_last;
  o.keep_every = keep_every;
  o.io_engine = io_engine;
  o.direct_io = direct_io;
  o.io_queue_depth = io_queue_depth;
  o.io_size = io_size;
  o.threads = threads;
  // fencing: True checks the worker registration stint-agent put in the
  // environment (none outside stint-agent), False nothing, a session its own.
  CommitFencing fenced_by;
  if (py::isinstance<py::bool_>(fencing)) {
    if (fencing.cast<bool>()) fenced_by.client = ValueOrThrow(FenceCommitsFromEnvironment(&o));
  } else if (!read_only) {
    fenced_by.session = SessionOf(fencing, "fencing");
    ThrowIfError(FenceCommits(fenced_by.session->client(), &o));
  }
  if ((fenced_by.client != nullptr || fenced_by.session != nullptr) && o.lock_wait.count() == 0) {
    // Under stintd the writer this one replaces (a requeued segment's, cut
    // off from stintd) lets go of the root at its next fenced commit: wait.
    o.lock_wait = std::chrono::minutes(2);
  }
  std::optional<Result<std::unique_ptr<Checkpointer>>> opened;
  {
    ReleasedGil nogil;
    opened.emplace(Checkpointer::Open(o));
  }
  return std::make_unique<PyCheckpointer>(ValueOrThrow(std::move(*opened)), std::move(channel),
                                          std::move(copier), std::move(fenced_by));
}

// stint._C.SaveHandle: what save() returns.
void BindSaveHandle(py::module_& m) {
  py::class_<PySaveHandle>(m, "SaveHandle",
                           "A started save: `staged` (the state may be modified again; already "
                           "done when save() returns) and `durable` (committed on disk). "
                           "Unpacks as (staged, durable).")
      .def_readonly("step", &PySaveHandle::step)
      .def_readonly("skipped", &PySaveHandle::skipped,
                    "busy_policy='skip' found the staging pool full; the futures hold why.")
      .def_readonly("staged", &PySaveHandle::staged)
      .def_readonly("durable", &PySaveHandle::durable)
      .def_readonly("replicated", &PySaveHandle::replicated,
                    "Committed on tier 2 (replica_root); done at once without one. Cancelled "
                    "when a newer step was replicated instead.")
      .def("__iter__",
           [](const PySaveHandle& h) {
             return py::iter(py::make_tuple(py::cast(h.staged), py::cast(h.durable)));
           })
      .def("__len__", [](const PySaveHandle&) { return 2; })
      .def("__repr__", [](const PySaveHandle& h) {
        return "<stint.SaveHandle step " + std::to_string(h.step) +
               (h.skipped          ? " skipped>"
                : h.durable.done() ? " durable>"
                                   : " persisting>");
      });
}

// stint._C.Checkpointer: save, the lazy barrier, load, flush and the rest.
void BindCheckpointerClass(py::module_& m) {
  py::class_<PyCheckpointer>(m, "Checkpointer",
                             "Asynchronous, crash-consistent checkpoints of named tensors and "
                             "byte blobs (stint.Checkpointer adds nested state dicts).")
      .def(py::init(&OpenCheckpointer), py::arg("root"), py::kw_only(), py::arg("job_id") = "",
           py::arg("fencing_token") = 0, py::arg("chunk_size") = 8u << 20,
           py::arg("compress") = false, py::arg("zstd_level") = 1, py::arg("staging_bytes") = 0,
           py::arg("staging_max_bytes") = 0, py::arg("busy_policy") = "block",
           py::arg("block_timeout") = 600.0, py::arg("copy_timeout") = 600.0,
           py::arg("keep_last") = 3, py::arg("keep_every") = 0, py::arg("io_engine") = "auto",
           py::arg("direct_io") = true, py::arg("io_queue_depth") = 32,
           py::arg("io_size") = 4u << 20, py::arg("threads") = 0, py::arg("rank") = 0,
           py::arg("world_size") = 1, py::arg("store") = py::none(),
           py::arg("commit_timeout") = 0.0, py::arg("read_only") = false,
           py::arg("snapshot") = "eager", py::arg("cuda") = false,
           py::arg("incremental") = false, py::arg("compress_auto") = false,
           py::arg("lock_wait") = 0.0,
           py::arg("fencing") = true, py::arg("node_id") = "", py::arg("peer_replicas") = 0,
           py::arg("peer_replica_dir") = "", py::arg("replica_root") = "",
           py::arg("replica_keep_last") = 3, py::arg("replica_keep_every") = 0,
           "fencing: True (default): under stint-agent (its worker registration in the "
           "environment), every commit first asks stintd whether this worker incarnation (and, "
           "with several ranks, every rank's) is still current, and a stale one fails the save "
           "with AbortedError 'fenced: ...' without touching LATEST; False: no check; a "
           "CoordinatorSession: its registration.")
      .def("save", &PyCheckpointer::Save, py::arg("step"), py::arg("names"), py::arg("tensors"),
           py::arg("blobs"), py::arg("boxes") = py::none(), py::arg("forward") = py::none(),
           py::arg("frozen") = py::none(),
           "Snapshots the tensors and blobs (GIL released) and returns a SaveHandle; the data "
           "is persisted and committed in the background. boxes: per tensor None (the whole "
           "tensor) or (global_shape, offsets) of the shard it holds. forward: per tensor True "
           "when the forward pass writes it (a BatchNorm buffer), so its copy goes first and "
           "before_write('forward') waits for it. frozen: per tensor True when its bytes are "
           "those of the previous save (incremental checkpoints reference it without copying). "
           "CUDA tensors and lazy host snapshots are copied after save() returned: see "
           "before_write().")
      .def("before_write", &PyCheckpointer::BeforeWrite, py::arg("barrier"),
           py::arg("timeout") = 600.0,
           "The lazy barrier: 'forward' before the forward pass, 'optimizer_step' before the "
           "optimizer step. Blocks on host copies still running; for CUDA copies the stream "
           "current now (torch.cuda.current_stream() of each device with copies in flight: the "
           "one the next write is enqueued on) waits on the device instead.")
      .def("wait_staged", &PyCheckpointer::WaitStaged, py::arg("timeout") = 600.0,
           "Blocks until every save's copies (host and CUDA) completed.")
      .def("load", &PyCheckpointer::Load, py::arg("planner"), py::arg("step") = py::none(),
           py::arg("verify_all") = false,
           "Loads the newest checkpoint that verifies (or `step`). planner(reader) returns "
           "([(name, tensor to fill in place) or (name, tensor, global_shape, offsets) for a "
           "shard], [names to read into new tensors]).")
      .def("flush", &PyCheckpointer::Flush, py::arg("timeout") = 600.0,
           "Waits until every save is durable or failed; raises the first failure since the "
           "previous flush() that no durable future raised or returned already.")
      .def("list_committed", &PyCheckpointer::ListCommitted)
      .def("list_replicated", &PyCheckpointer::ListReplicated,
           "The steps committed on tier 2 (replica_root), oldest first; [] without one.")
      .def("open_reader", &PyCheckpointer::OpenReader, py::arg("step"), py::keep_alive<0, 1>(),
           "A CheckpointReader of committed `step` as load() sees it: on node-local roots the "
           "files this node lacks are read from the job's other nodes. Keeps this Checkpointer "
           "alive; close() it only after the reader is done.")
      .def("quarantine", &PyCheckpointer::Quarantine, py::arg("step"))
      .def("mark_complete", &PyCheckpointer::MarkComplete, py::arg("step"), py::arg("info") = "{}")
      .def("completion", &PyCheckpointer::Completion)
      .def("clear_completion", &PyCheckpointer::ClearCompletion)
      .def("stats", &PyCheckpointer::Stats)
      .def("flush_replication", &PyCheckpointer::FlushReplication, py::arg("timeout") = 600.0,
           "Waits until the committed saves are on their replicas: tier 2, and on node-local "
           "roots this node's part held by its peer replicas and the parts this node holds "
           "copied; raises the first replication error.")
      .def("close", &PyCheckpointer::Close, "Waits for pending saves and closes. Idempotent.")
      .def_property_readonly("closed", &PyCheckpointer::closed)
      .def_property_readonly("root", &PyCheckpointer::root);
}

// stint._C.CheckpointReader: read-only access to one committed checkpoint.
void BindReader(py::module_& m) {
  py::class_<PyReader>(m, "CheckpointReader", "Read-only access to one committed checkpoint.")
      .def_static(
          "open",
          [](const std::string& dir, const std::string& io_engine, bool direct_io,
             unsigned threads) {
            ReaderOptions o;
            o.io_engine = io_engine;
            o.direct_io = direct_io;
            o.threads = threads;
            std::optional<Result<std::unique_ptr<CheckpointReader>>> r;
            {
              ReleasedGil nogil;
              r.emplace(CheckpointReader::Open(dir, o));
            }
            return std::make_unique<PyReader>(ValueOrThrow(std::move(*r)));
          },
          py::arg("dir"), py::arg("io_engine") = "auto", py::arg("direct_io") = true,
          py::arg("threads") = 0)
      .def_property_readonly("dir", [](const PyReader& r) { return r.get().dir(); })
      .def_property_readonly("step", [](const PyReader& r) { return r.get().step(); })
      .def_property_readonly("job_id", [](const PyReader& r) { return r.get().job_id(); })
      .def_property_readonly("world_size", [](const PyReader& r) { return r.get().world_size(); })
      .def(
          "tensors", [](const PyReader& r) { return TensorInfos(r.get()); },
          "[{'name', 'dtype', 'shape', 'shards', 'raw_bytes'}, ...]")
      .def("blob_names", [](const PyReader& r) { return r.get().blob_names(); })
      .def(
          "read_blob",
          [](const PyReader& r, const std::string& name) {
            const CheckpointReader& reader = r.get();
            std::optional<Result<std::string>> b;
            {
              ReleasedGil nogil;
              std::lock_guard<std::mutex> io(r.io_mu());
              b.emplace(reader.ReadBlob(name));
            }
            return py::bytes(ValueOrThrow(std::move(*b)));
          },
          py::arg("name"))
      .def(
          "read",
          [](const PyReader& r, std::optional<std::vector<std::string>> names) {
            const CheckpointReader& reader = r.get();
            std::vector<std::string> wanted;
            if (names) {
              wanted = *names;
            } else {
              for (const auto& t : reader.tensors()) wanted.push_back(t.name);
            }
            std::vector<TensorDest> dests;
            std::vector<std::pair<std::string, at::Tensor>> out;
            Status s;
            {
              ReleasedGil nogil;
              std::lock_guard<std::mutex> io(r.io_mu());
              s = FreshTensors(reader, wanted, &dests, &out);
              if (s.code() == Code::kDataLoss && names) {
                s = Status::NotFound(s.message());  // the caller's name, not the checkpoint's fault
              }
              if (s.ok()) s = reader.Read(dests);
            }
            ThrowIfError(s);
            return TensorDict(std::move(out));
          },
          py::arg("names") = py::none(),
          "Reads tensors (all when names is None) into new CPU tensors: {name: tensor}.")
      .def(
          "verify",
          [](const PyReader& r) {
            const CheckpointReader& reader = r.get();
            std::optional<Result<VerifyReport>> v;
            {
              ReleasedGil nogil;
              std::lock_guard<std::mutex> io(r.io_mu());
              v.emplace(reader.Verify());
            }
            VerifyReport report = ValueOrThrow(std::move(*v));
            py::dict d;
            d["files"] = report.files;
            d["chunks"] = report.chunks;
            d["stored_bytes"] = report.stored_bytes;
            return d;
          },
          "Reads every chunk and checks every checksum; DataLossError naming the file and chunk.");
}

// Module functions the Python package builds on: LibTorch RNG state and
// tensor digests.
void BindTorchHelpers(py::module_& m) {
  m.def(
      "capture_torch_rng",
      []() {
        std::map<std::string, std::string> states = ValueOrThrow(CaptureTorchRng());
        py::dict d;
        for (const auto& [name, bytes] : states) d[py::str(name)] = py::bytes(bytes);
        return d;
      },
      "Every default LibTorch generator: {'cpu': bytes, 'cuda:0': bytes, ...}.");
  m.def(
      "restore_torch_rng",
      [](const std::map<std::string, std::string>& states) {
        ThrowIfError(RestoreTorchRng(states));
      },
      py::arg("states"));
  m.def(
      "tensor_digests",
      [](const std::vector<at::Tensor>& tensors) {
        std::vector<std::string> out;
        out.reserve(tensors.size());
        for (const at::Tensor& t : tensors) {
          if (!t.device().is_cpu() || !t.is_contiguous()) {
            ThrowStatus(Status::InvalidArgument(
                "tensor_digests: takes contiguous CPU tensors (call .cpu().contiguous())"));
          }
        }
        {
          ReleasedGil nogil;
          for (const at::Tensor& t : tensors) {
            XXH128_hash_t h = XXH3_128bits(t.data_ptr(), t.numel() * t.element_size());
            XXH128_canonical_t c;
            XXH128_canonicalFromHash(&c, h);
            out.emplace_back(reinterpret_cast<const char*>(c.digest), sizeof(c.digest));
          }
        }
        py::list digests;
        for (const auto& d : out) digests.append(py::bytes(d));
        return digests;
      },
      py::arg("tensors"),
      "XXH3-128 of each tensor's bytes (contiguous CPU tensors): a collective save compares "
      "them across ranks to find plain tensors that are not replicated.");
}

}  // namespace

void BindCheckpointer(py::module_& m) {
  BindSaveHandle(m);
  BindCheckpointerClass(m);
  BindReader(m);
  BindTorchHelpers(m);
}

}  // namespace python
}  // namespace stint
