// Which stintd leads the ones that share one PostgreSQL database: a lease
// row judged by the database's clock, and a fencing epoch that grows at
// each takeover.
//
// The row (table stintd_leader, one row) names the holder, the URL clients
// reach it at, the epoch and when the lease ends (now() + lease at the last
// renewal). A stintd takes the lease only when it has ended by now() on the
// server, never by its own clock, and the epoch goes up by one when it does.
// Stores fenced with that epoch (Store::SetFence) check it with the row
// locked FOR KEY SHARE in every write transaction; a takeover locks it FOR
// UPDATE, so it waits for the writes in flight and every later write of
// the old leader is refused. A renewal's UPDATE of the lease's end takes a
// lock that write transactions do not conflict with.
//
// Every stintd also keeps a row in stintd_members (holder, URL, last seen),
// which is how the leader lists its standbys. stintd_journal gets a row
// (epoch, "takeover") at each takeover and one (epoch, "write") in each
// fenced write transaction: ordered by id its epochs never go down, which
// is what a fault test checks to show that no old leader wrote late.
//
// Transaction-scoped statements only (no session advisory lock): correct
// behind PgBouncer's transaction pooling and across a database failover.
// Each LeaderLease has its own connection; thread-compatible.
#ifndef STINT_TOOLS_STINTD_STORE_LEADER_LEASE_H_
#define STINT_TOOLS_STINTD_STORE_LEADER_LEASE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stint/status.h"

namespace stint::stintd {

struct LeaseMember {
  std::string holder;
  std::string url;
  double seen_seconds_ago = 0;  // by the database's clock
};

struct LeaderView {
  std::string holder;  // empty: nobody has led yet
  std::string url;
  int64_t epoch = 0;
  double expires_in_seconds = 0;  // negative: the lease has ended
  // Every stintd seen within three leases, but the leader.
  std::vector<LeaseMember> standbys;
};

class LeaderLease {
 public:
  // Connects to `url` and creates the two tables when missing. `holder`
  // names this process (unique among the stintds), `advertise_url` is where
  // its clients reach it once it leads.
  static Result<std::unique_ptr<LeaderLease>> Open(const std::string& url, std::string holder,
                                                   std::string advertise_url,
                                                   std::chrono::milliseconds lease);
  ~LeaderLease();

  // One attempt: takes the lease when it has ended (or was never taken),
  // raising the epoch. The new epoch, or 0 while another stintd holds it.
  // Also records this stintd as seen.
  Result<int64_t> TryAcquire();
  // Extends the lease held at `epoch` to now() + lease. kAborted, its
  // message starting "fenced", when another stintd has taken it since.
  Status Renew(int64_t epoch);
  // The lease row and the standbys.
  Result<LeaderView> Read();
  // Gives the lease up at once (ends it now), so a standby need not wait
  // for it to run out. Nothing when `epoch` is no longer ours.
  Status Release(int64_t epoch);

  const std::string& holder() const { return holder_; }
  std::chrono::milliseconds lease() const { return lease_; }

 private:
  struct Conn;
  LeaderLease(std::unique_ptr<Conn> conn, std::string url, std::string shown, std::string holder,
              std::string advertise_url, std::chrono::milliseconds lease);
  Status Reconnect();

  std::unique_ptr<Conn> conn_;
  const std::string url_;  // with its password, to reconnect
  const std::string shown_;  // the URL without its password
  const std::string holder_;
  const std::string advertise_url_;
  const std::chrono::milliseconds lease_;
};

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_STORE_LEADER_LEASE_H_
