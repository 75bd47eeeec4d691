// Durable state of stintd: one SQLite file (the embedded default), or a
// PostgreSQL database (postgres_store.cc), with the same tables.
//
// Save() returns only after the transaction is durable (SQLite: WAL with
// synchronous=FULL; PostgreSQL: committed on the server's WAL), so every
// change stintd acknowledges survives a kill -9 or a power cut. Soft state
// (heartbeat times) is not written per heartbeat; after a restart every
// lease starts a fresh TTL.
#ifndef STINT_TOOLS_STINTD_STORE_STORE_H_
#define STINT_TOOLS_STINTD_STORE_STORE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stintd/core/model.h"
#include "stintd/core/transitions.h"
#include "stint/status.h"

namespace stint::stintd {

// One entry of the job-scoped key-value store used for rendezvous, as stintd
// keeps it (per job). Workers read it through the client as stint::KvEntry.
struct KvRecord {
  int64_t job_id = 0;
  std::string key;
  std::string value;
  int64_t version = 0;  // 1 for the first write, +1 per write
  TimeMs updated_ms = 0;
};

// What a store shared by several stintds checks before every write: that
// the lease (leader_lease.h) is still at this stintd's epoch.
struct StoreFence {
  std::string holder;
  int64_t epoch = 0;
  // Runs on the first write refused for a newer epoch (stintd exits: an
  // old leader must not act).
  std::function<void(const Status&)> on_fenced;
  // A write transaction idle this long is ended by the server, so a paused
  // stintd cannot hold back a takeover with its share lock.
  std::chrono::milliseconds idle_limit{2500};
};

class Store {
 public:
  // Opens or creates the store `where` names: a postgresql:// (or
  // postgres://) URL, "sqlite:PATH", or a plain path (SQLite).
  // kFailedPrecondition for a store written by a newer schema or held by
  // another stintd; kDataLoss for a file that is not an SQLite database or
  // fails its integrity check; kUnavailable for a server that cannot be
  // reached; the message names the file or the URL (without a password).
  static Result<std::unique_ptr<Store>> Open(const std::string& where);
  virtual ~Store() = default;

  // Everything saved so far (an empty state for a new file).
  virtual Result<ClusterState> Load() = 0;
  // Writes the rows named by `changes` as they are in `s` (a named object
  // missing from `s` is deleted), in one durable transaction.
  virtual Status Save(const ClusterState& s, const Changes& changes) = 0;

  virtual Result<std::vector<KvRecord>> LoadKv() = 0;
  virtual Status PutKv(const KvRecord& entry) = 0;
  virtual Status DeleteKv(int64_t job_id, const std::string& key) = 0;
  // Every entry of job `job_id` (a job that ended keeps none), in one
  // durable transaction.
  virtual Status DeleteJobKv(int64_t job_id) = 0;

  // From now on every write transaction first checks, under a share lock
  // on the lease row, that the lease is at `fence.epoch` held by
  // `fence.holder`, and else is refused with kAborted ("fenced: ...").
  // kUnimplemented for a store that only one stintd can open (SQLite).
  virtual Status SetFence(StoreFence fence) = 0;

  // The file, or the URL without its password.
  virtual const std::string& path() const = 0;
};

// The two engines (Store::Open picks by the name's form).
Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path);
Result<std::unique_ptr<Store>> OpenPostgresStore(const std::string& url);

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_STORE_STORE_H_
