// The SQLite store of stintd on real files: every field round-trips, Save
// writes exactly the rows Changes names, a refused file is left untouched,
// one stintd per file, and nothing a Save reported survives less than a
// kill -9.
#include "stintd/store/store.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "stint/coordinator_client.h"
#include "stintd/store/leader_lease.h"
#include "stintd/store/postgres_util.h"
#include "stintd/store/state_rows.h"
#include "stintd/store/store_copy.h"
#include "store_child_job.h"
#include "util/postgres_server.h"
#include "util/status_matchers.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

namespace stint::stintd {
namespace {

using Ms = TimeMs;

std::unique_ptr<Store> OpenOrDie(const std::string& path) {
  auto store = Store::Open(path);
  EXPECT_OK(store);
  return store.ok() ? std::move(*store) : nullptr;
}

ClusterState LoadOrDie(Store* store) {
  auto s = store->Load();
  EXPECT_OK(s);
  return s.ok() ? std::move(*s) : ClusterState{};
}

// Every name in `s`, so a Save writes all of it.
Changes All(const ClusterState& s) { return internal::AllOf(s); }

// Every field away from its default, and the awkward values: kNever,
// INT64_MIN, uint64 max, negative numbers, infinities, subnormals, empty
// strings, an embedded NUL, non-ASCII text.
ClusterState RichState() {
  ClusterState s;
  s.pools["gpu-a"] = Pool{"gpu-a", "Grappe à 8×H100 — 東京"};
  s.pools["empty"] = Pool{"empty", ""};
  Pool& priced = s.pools["gpu-a"];
  priced.pricing = PoolPricing::kOnPrem;
  priced.price_per_gpu_hour = 2.75;
  priced.price_history = {{-1, 0}, {1700000000000, 2.75}};
  priced.storage = {"s3://bucket/runs", "/mnt/ckpt — 東京"};

  Window w;
  w.id = 11;
  w.pool = "gpu-a";
  w.gpus = 64;
  w.start_ms = -5;  // before the epoch
  w.end_ms = kNever;
  w.kind = WindowKind::kSpot;
  w.notice_lead_ms = 120000;
  w.closed_early = true;
  w.node = "node-7";
  w.node_gpus = {0, 3, 7};
  w.node_addr = "10.0.0.7";
  w.declared = true;
  w.joined = true;
  s.windows[w.id] = w;
  Window w2 = w;
  w2.id = std::numeric_limits<int64_t>::max();
  w2.start_ms = std::numeric_limits<int64_t>::min();
  w2.end_ms = 1700000123456;
  w2.kind = WindowKind::kHard;
  w2.closed_early = false;
  s.windows[w2.id] = w2;

  s.teams["vision"] = Team{"vision", 16, -1, 123456.789, 1700000000001};
  s.teams["ünïcødé"] = Team{"ünïcødé", -3, std::numeric_limits<int>::max(), -0.5,
                            std::numeric_limits<int64_t>::min()};
  Team& budgeted = s.teams["vision"];
  budgeted.budget = 1e6;
  budgeted.budget_period_seconds = 7 * 24 * 3600.0;
  budgeted.period_start_ms = 1700000000000;
  budgeted.spent = 12345.5;

  Job j;
  j.id = 42;
  j.name = "llama-7b ✓ \"quoted\" 'single'";
  j.team = "ünïcødé";
  j.pools = {"gpu-a", "gpu-b"};
  j.priority = Priority::kCritical;
  j.min_gpus = 4;
  j.max_gpus = std::numeric_limits<int>::max();
  j.gang = false;
  j.preemptible = false;
  j.checkpoint_seconds = 0.1;
  j.restart_seconds = std::numeric_limits<double>::denorm_min();
  j.checkpoint_interval_seconds = std::numeric_limits<double>::infinity();
  j.remaining_seconds = -std::numeric_limits<double>::max();
  j.submit_ms = 1700000000002;
  j.eligible_ms = -1;
  j.state = JobState::kFailed;
  j.segment_id = 77;
  j.fencing_token = std::numeric_limits<uint64_t>::max();
  j.last_step = -2;
  j.checkpoint_step = std::numeric_limits<int64_t>::min();
  j.checkpoint_ms = kNever;
  j.segments = 9;
  j.preemptions = -7;
  j.lost_gpu_seconds = 1e300;
  j.service_gpu_seconds = 123456.25;
  j.message = std::string("nul\0inside", 10) + "\n\ttabs; DROP TABLE jobs; --";
  j.launch = R"({"command":["python","train.py"],"env":{"K":"V"}})";
  j.crash_ms = {1700000000001, -3};
  j.revoked_ms = {1700000000002};
  j.cost = 99.125;
  j.samples = std::numeric_limits<int64_t>::max();
  j.step_time = {{1, StepTime{0.5, 7}},
                 {1000000, StepTime{1e-9, std::numeric_limits<int64_t>::max()}}};
  j.losses = {{1, 2.5, 77, 1700000000003}, {std::numeric_limits<int64_t>::max(), -1e300, -1, 0}};
  j.eval = R"({"command":["python","eval.py"],"every":3,"gpus":1})";
  j.eval_every = 3;
  j.eval_gpus = 1;
  j.checkpoints = std::numeric_limits<int64_t>::max();
  j.stored["s3://bucket/runs/job"] = {std::numeric_limits<int64_t>::max(), 2,
                                      std::numeric_limits<uint64_t>::max(), "gpu-a", 7, -3};
  j.stored["/nvme/x"] = {0, 1, 0, "", 0, 0};
  s.jobs[j.id] = j;
  Job j2;  // defaults but for the id: the other end of every range
  j2.id = -1;
  j2.name = "";
  j2.team = "vision";
  s.jobs[j2.id] = j2;

  Segment g;
  g.id = 77;
  g.job_id = 42;
  g.allocs = {{11, 8}, {std::numeric_limits<int64_t>::max(), 2}, {-4, -1}};
  g.placement = {{11, {0, 3, 7}}, {12, {}}};
  g.fencing_token = (uint64_t{1} << 63) + 5;
  g.start_ms = 1700000000003;
  g.planned_end_ms = kNever;
  g.state = SegmentState::kCancelled;
  g.notice_reason = NoticeReason::kPreempted;
  g.notice_ms = 1700000000004;
  g.deadline_ms = 1700000000005;
  g.preempted_for = -42;
  g.ended_ms = 1700000000006;
  g.last_heartbeat_ms = 1700000000007;
  g.shrink_release = {{11, 4}, {-4, 0}};
  g.leaving_workers = {5, std::numeric_limits<int64_t>::min()};
  g.shrink_notice_ms = 1700000000010;
  g.shrink_deadline_ms = kNever;
  g.shrink_for = -7;
  g.master_port = 65535;
  g.price_per_gpu_hour = 0.125;
  g.cost = 1e-300;
  g.start_step = 100;
  g.checkpoint_step = std::numeric_limits<int64_t>::max();
  g.first_step = 101;
  g.first_step_ms = 1700000000012;
  g.last_step = -1;
  g.last_step_ms = kNever;
  g.checkpoint_seconds = 12.5;
  g.external_id = "slurm:4003";
  g.notice_to_replicas_seconds = 7.25;
  s.segments[g.id] = g;
  Segment g2;  // no allocations at all
  g2.id = 78;
  g2.job_id = -1;
  g2.state = SegmentState::kNotified;
  g2.notice_reason = NoticeReason::kBudget;
  s.segments[g2.id] = g2;

  Worker k;
  k.id = 5;
  k.job_id = 42;
  k.segment_id = 77;
  k.name = "node-Ω:4242";
  k.fencing_token = 12345678901234567890ull;
  k.registered_ms = 1700000000008;
  k.last_heartbeat_ms = 1700000000009;
  k.released = true;
  k.secret_hash = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  k.node = "nœud-1";
  s.workers[k.id] = k;

  s.node_credentials["node-7"] = NodeCredential{
      "node-7", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", -9};
  s.node_credentials["n.2_x-"] = NodeCredential{"n.2_x-", "", 1700000000012};

  Rendezvous r;
  r.job_id = 7;
  r.generation = std::numeric_limits<uint64_t>::max();
  r.phase = RendezvousPhase::kFormed;
  r.members = {{31, "10.0.0.1:29500", 0}, {30, "[::1]:1", 1}, {32, "hôte:65535", 2}};
  r.previous = {30, std::numeric_limits<int64_t>::min()};
  r.dropped = {std::numeric_limits<int64_t>::max(), 30};
  r.opened_ms = -1;
  r.last_call_ms = kNever;
  r.formed_ms = 1700000000011;
  s.rendezvous[r.job_id] = r;
  Rendezvous empty;
  empty.job_id = 8;
  s.rendezvous[empty.job_id] = empty;

  EvalTask e;
  e.id = 90;
  e.job_id = 42;
  e.step = std::numeric_limits<int64_t>::max();
  e.state = EvalState::kDone;
  e.node = "nœud-1";
  e.gpu = 7;
  e.created_ms = -1;
  e.started_ms = 1700000000013;
  e.ended_ms = kNever;
  e.attempts = 3;
  e.result = R"({"accuracy":0.5,"note":"✓"})";
  e.message = std::string("nul\0inside", 10);
  s.evals[e.id] = e;
  EvalTask waiting;
  waiting.id = 91;
  s.evals[waiting.id] = waiting;

  Counters& c = s.counters;
  c.segments_started = 1;
  c.notices_sent = 2;
  c.preemptions = 3;
  c.revocations = -4;
  c.acks = std::numeric_limits<int64_t>::max();
  c.segments_lost = std::numeric_limits<int64_t>::min();
  c.lost_gpu_seconds = 1.5;
  c.window_gpu_seconds = 2.25e12;
  c.used_gpu_seconds = -std::numeric_limits<double>::infinity();
  c.wait_seconds_sum = 3.14159265358979;
  c.wait_buckets = {0, 1, 2, 3, std::numeric_limits<int64_t>::max(), -1, 6, 7};
  c.accounted_ms = 1700000000010;
  s.price_rules[0] = PriceRule{1.5, 3, 7200};
  s.price_rules[3] = PriceRule{-1, 0, 1};
  s.next_id = 1000;
  s.next_fencing_token = std::numeric_limits<uint64_t>::max() - 1;
  return s;
}

// Doubles compare as bit patterns up to the sign of zero (SQLite stores an
// integral REAL as an integer), so NaN equals NaN.
void ExpectSameDouble(double a, double b, const char* field) {
  if (std::isnan(a) || std::isnan(b)) {
    EXPECT_TRUE(std::isnan(a) && std::isnan(b)) << field << ": " << a << " vs " << b;
  } else {
    EXPECT_EQ(a, b) << field;
  }
}

void ExpectSame(const Pool& a, const Pool& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.description, b.description);
  EXPECT_EQ(a.pricing, b.pricing);
  ExpectSameDouble(a.price_per_gpu_hour, b.price_per_gpu_hour, "price_per_gpu_hour");
  EXPECT_EQ(a.storage, b.storage);
  ASSERT_EQ(a.price_history.size(), b.price_history.size());
  for (size_t i = 0; i < a.price_history.size(); i++) {
    EXPECT_EQ(a.price_history[i].at_ms, b.price_history[i].at_ms);
    ExpectSameDouble(a.price_history[i].price_per_gpu_hour, b.price_history[i].price_per_gpu_hour,
                     "price_history");
  }
}

void ExpectSame(const Window& a, const Window& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.pool, b.pool);
  EXPECT_EQ(a.gpus, b.gpus);
  EXPECT_EQ(a.start_ms, b.start_ms);
  EXPECT_EQ(a.end_ms, b.end_ms);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.notice_lead_ms, b.notice_lead_ms);
  EXPECT_EQ(a.closed_early, b.closed_early);
  EXPECT_EQ(a.node, b.node);
  EXPECT_EQ(a.node_gpus, b.node_gpus);
  EXPECT_EQ(a.node_addr, b.node_addr);
  EXPECT_EQ(a.declared, b.declared);
  EXPECT_EQ(a.joined, b.joined);
}

void ExpectSame(const Team& a, const Team& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.guaranteed_gpus, b.guaranteed_gpus);
  EXPECT_EQ(a.borrow_limit_gpus, b.borrow_limit_gpus);
  ExpectSameDouble(a.usage_gpu_seconds, b.usage_gpu_seconds, "usage_gpu_seconds");
  EXPECT_EQ(a.usage_at_ms, b.usage_at_ms);
  ExpectSameDouble(a.budget, b.budget, "budget");
  ExpectSameDouble(a.budget_period_seconds, b.budget_period_seconds, "budget_period_seconds");
  EXPECT_EQ(a.period_start_ms, b.period_start_ms);
  ExpectSameDouble(a.spent, b.spent, "spent");
}

void ExpectSame(const Job& a, const Job& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.team, b.team);
  EXPECT_EQ(a.pools, b.pools);
  EXPECT_EQ(a.priority, b.priority);
  EXPECT_EQ(a.min_gpus, b.min_gpus);
  EXPECT_EQ(a.max_gpus, b.max_gpus);
  EXPECT_EQ(a.gang, b.gang);
  EXPECT_EQ(a.preemptible, b.preemptible);
  ExpectSameDouble(a.checkpoint_seconds, b.checkpoint_seconds, "checkpoint_seconds");
  ExpectSameDouble(a.restart_seconds, b.restart_seconds, "restart_seconds");
  ExpectSameDouble(a.checkpoint_interval_seconds, b.checkpoint_interval_seconds,
                   "checkpoint_interval_seconds");
  ExpectSameDouble(a.remaining_seconds, b.remaining_seconds, "remaining_seconds");
  EXPECT_EQ(a.submit_ms, b.submit_ms);
  EXPECT_EQ(a.eligible_ms, b.eligible_ms);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.segment_id, b.segment_id);
  EXPECT_EQ(a.fencing_token, b.fencing_token);
  EXPECT_EQ(a.last_step, b.last_step);
  EXPECT_EQ(a.checkpoint_step, b.checkpoint_step);
  EXPECT_EQ(a.checkpoint_ms, b.checkpoint_ms);
  EXPECT_EQ(a.segments, b.segments);
  EXPECT_EQ(a.preemptions, b.preemptions);
  ExpectSameDouble(a.lost_gpu_seconds, b.lost_gpu_seconds, "lost_gpu_seconds");
  EXPECT_EQ(a.message, b.message);
  EXPECT_EQ(a.launch, b.launch);
  EXPECT_EQ(a.crash_ms, b.crash_ms);
  ExpectSameDouble(a.service_gpu_seconds, b.service_gpu_seconds, "service_gpu_seconds");
  EXPECT_EQ(a.revoked_ms, b.revoked_ms);
  ExpectSameDouble(a.cost, b.cost, "cost");
  EXPECT_EQ(a.samples, b.samples);
  ASSERT_EQ(a.step_time.size(), b.step_time.size());
  for (const auto& [gpus, t] : a.step_time) {
    ASSERT_TRUE(b.step_time.count(gpus)) << gpus;
    ExpectSameDouble(t.seconds, b.step_time.at(gpus).seconds, "step_time seconds");
    EXPECT_EQ(t.steps, b.step_time.at(gpus).steps);
  }
  EXPECT_EQ(a.eval, b.eval);
  EXPECT_EQ(a.eval_every, b.eval_every);
  EXPECT_EQ(a.eval_gpus, b.eval_gpus);
  EXPECT_EQ(a.checkpoints, b.checkpoints);
  ASSERT_EQ(a.stored.size(), b.stored.size());
  for (const auto& [location, at] : a.stored) {
    ASSERT_EQ(b.stored.count(location), 1u) << location;
    const StoredStep& bt = b.stored.at(location);
    EXPECT_EQ(at.step, bt.step);
    EXPECT_EQ(at.tier, bt.tier);
    EXPECT_EQ(at.bytes, bt.bytes);
    EXPECT_EQ(at.pool, bt.pool);
    EXPECT_EQ(at.segment_id, bt.segment_id);
    EXPECT_EQ(at.at_ms, bt.at_ms);
  }
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); i++) {
    EXPECT_EQ(a.losses[i].step, b.losses[i].step);
    ExpectSameDouble(a.losses[i].loss, b.losses[i].loss, "loss");
    EXPECT_EQ(a.losses[i].segment_id, b.losses[i].segment_id);
    EXPECT_EQ(a.losses[i].at_ms, b.losses[i].at_ms);
  }
}

void ExpectSame(const Segment& a, const Segment& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.job_id, b.job_id);
  ASSERT_EQ(a.allocs.size(), b.allocs.size());
  for (size_t i = 0; i < a.allocs.size(); ++i) {
    EXPECT_EQ(a.allocs[i].window_id, b.allocs[i].window_id) << "alloc " << i;
    EXPECT_EQ(a.allocs[i].gpus, b.allocs[i].gpus) << "alloc " << i;
  }
  EXPECT_EQ(a.fencing_token, b.fencing_token);
  EXPECT_EQ(a.start_ms, b.start_ms);
  EXPECT_EQ(a.planned_end_ms, b.planned_end_ms);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.notice_reason, b.notice_reason);
  EXPECT_EQ(a.notice_ms, b.notice_ms);
  EXPECT_EQ(a.deadline_ms, b.deadline_ms);
  EXPECT_EQ(a.preempted_for, b.preempted_for);
  EXPECT_EQ(a.ended_ms, b.ended_ms);
  EXPECT_EQ(a.last_heartbeat_ms, b.last_heartbeat_ms);
  ASSERT_EQ(a.placement.size(), b.placement.size());
  for (size_t i = 0; i < a.placement.size(); i++) {
    EXPECT_EQ(a.placement[i].window_id, b.placement[i].window_id);
    EXPECT_EQ(a.placement[i].gpus, b.placement[i].gpus);
  }
  ASSERT_EQ(a.shrink_release.size(), b.shrink_release.size());
  for (size_t i = 0; i < a.shrink_release.size(); ++i) {
    EXPECT_EQ(a.shrink_release[i].window_id, b.shrink_release[i].window_id) << "release " << i;
    EXPECT_EQ(a.shrink_release[i].gpus, b.shrink_release[i].gpus) << "release " << i;
  }
  EXPECT_EQ(a.leaving_workers, b.leaving_workers);
  EXPECT_EQ(a.shrink_notice_ms, b.shrink_notice_ms);
  EXPECT_EQ(a.shrink_deadline_ms, b.shrink_deadline_ms);
  EXPECT_EQ(a.shrink_for, b.shrink_for);
  EXPECT_EQ(a.master_port, b.master_port);
  ExpectSameDouble(a.price_per_gpu_hour, b.price_per_gpu_hour, "segment price");
  ExpectSameDouble(a.cost, b.cost, "segment cost");
  EXPECT_EQ(a.start_step, b.start_step);
  EXPECT_EQ(a.checkpoint_step, b.checkpoint_step);
  EXPECT_EQ(a.first_step, b.first_step);
  EXPECT_EQ(a.first_step_ms, b.first_step_ms);
  EXPECT_EQ(a.last_step, b.last_step);
  EXPECT_EQ(a.last_step_ms, b.last_step_ms);
  ExpectSameDouble(a.checkpoint_seconds, b.checkpoint_seconds, "segment checkpoint_seconds");
  EXPECT_EQ(a.external_id, b.external_id);
  ExpectSameDouble(a.notice_to_replicas_seconds, b.notice_to_replicas_seconds,
                   "segment notice_to_replicas_seconds");
}

void ExpectSame(const EvalTask& a, const EvalTask& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.job_id, b.job_id);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.node, b.node);
  EXPECT_EQ(a.gpu, b.gpu);
  EXPECT_EQ(a.created_ms, b.created_ms);
  EXPECT_EQ(a.started_ms, b.started_ms);
  EXPECT_EQ(a.ended_ms, b.ended_ms);
  EXPECT_EQ(a.attempts, b.attempts);
  EXPECT_EQ(a.result, b.result);
  EXPECT_EQ(a.message, b.message);
}

void ExpectSame(const NodeCredential& a, const NodeCredential& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.secret_hash, b.secret_hash);
  EXPECT_EQ(a.issued_ms, b.issued_ms);
}

void ExpectSame(const Worker& a, const Worker& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.job_id, b.job_id);
  EXPECT_EQ(a.segment_id, b.segment_id);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.fencing_token, b.fencing_token);
  EXPECT_EQ(a.registered_ms, b.registered_ms);
  EXPECT_EQ(a.last_heartbeat_ms, b.last_heartbeat_ms);
  EXPECT_EQ(a.released, b.released);
  EXPECT_EQ(a.secret_hash, b.secret_hash);
  EXPECT_EQ(a.node, b.node);
}

void ExpectSame(const Rendezvous& a, const Rendezvous& b) {
  EXPECT_EQ(a.job_id, b.job_id);
  EXPECT_EQ(a.generation, b.generation);
  EXPECT_EQ(a.phase, b.phase);
  ASSERT_EQ(a.members.size(), b.members.size());
  for (size_t i = 0; i < a.members.size(); ++i) {
    EXPECT_EQ(a.members[i].worker_id, b.members[i].worker_id);
    EXPECT_EQ(a.members[i].endpoint, b.members[i].endpoint);
    EXPECT_EQ(a.members[i].rank, b.members[i].rank);
  }
  EXPECT_EQ(a.previous, b.previous);
  EXPECT_EQ(a.dropped, b.dropped);
  EXPECT_EQ(a.opened_ms, b.opened_ms);
  EXPECT_EQ(a.last_call_ms, b.last_call_ms);
  EXPECT_EQ(a.formed_ms, b.formed_ms);
}

void ExpectSame(const Counters& a, const Counters& b) {
  EXPECT_EQ(a.segments_started, b.segments_started);
  EXPECT_EQ(a.notices_sent, b.notices_sent);
  EXPECT_EQ(a.preemptions, b.preemptions);
  EXPECT_EQ(a.revocations, b.revocations);
  EXPECT_EQ(a.acks, b.acks);
  EXPECT_EQ(a.segments_lost, b.segments_lost);
  ExpectSameDouble(a.lost_gpu_seconds, b.lost_gpu_seconds, "lost_gpu_seconds");
  ExpectSameDouble(a.window_gpu_seconds, b.window_gpu_seconds, "window_gpu_seconds");
  ExpectSameDouble(a.used_gpu_seconds, b.used_gpu_seconds, "used_gpu_seconds");
  ExpectSameDouble(a.wait_seconds_sum, b.wait_seconds_sum, "wait_seconds_sum");
  EXPECT_EQ(a.wait_buckets, b.wait_buckets);
  EXPECT_EQ(a.accounted_ms, b.accounted_ms);
}

template <typename Map>
void ExpectSameMap(const Map& a, const Map& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [key, obj] : a) {
    SCOPED_TRACE(::testing::Message() << what << " " << key);
    auto it = b.find(key);
    ASSERT_NE(it, b.end());
    ExpectSame(obj, it->second);
  }
}

void ExpectSameState(const ClusterState& a, const ClusterState& b) {
  ExpectSameMap(a.pools, b.pools, "pool");
  ExpectSameMap(a.windows, b.windows, "window");
  ExpectSameMap(a.teams, b.teams, "team");
  ExpectSameMap(a.jobs, b.jobs, "job");
  ExpectSameMap(a.segments, b.segments, "segment");
  ExpectSameMap(a.workers, b.workers, "worker");
  ExpectSameMap(a.rendezvous, b.rendezvous, "rendezvous");
  ExpectSameMap(a.node_credentials, b.node_credentials, "node credential");
  ExpectSameMap(a.evals, b.evals, "evaluation");
  ExpectSame(a.counters, b.counters);
  for (size_t i = 0; i < a.price_rules.size(); i++) {
    ExpectSameDouble(a.price_rules[i].max_price_per_gpu_hour,
                     b.price_rules[i].max_price_per_gpu_hour, "max_price_per_gpu_hour");
    EXPECT_EQ(a.price_rules[i].spot_fallback_revocations,
              b.price_rules[i].spot_fallback_revocations);
    ExpectSameDouble(a.price_rules[i].spot_fallback_window_seconds,
                     b.price_rules[i].spot_fallback_window_seconds, "spot_fallback_window_seconds");
  }
  EXPECT_EQ(a.next_id, b.next_id);
  EXPECT_EQ(a.next_fencing_token, b.next_fencing_token);
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Runs `sql` on `path` with a plain sqlite3 connection (not the store);
// returns the first column of the last row, or "error: ..." on failure.
std::string RawSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  std::string out;
  if (rc != SQLITE_OK) {
    out = std::string("error: open: ") + sqlite3_errmsg(db);
    sqlite3_close(db);
    return out;
  }
  char* err = nullptr;
  rc = sqlite3_exec(
      db, sql.c_str(),
      [](void* o, int n, char** values, char**) {
        *static_cast<std::string*>(o) = n > 0 && values[0] != nullptr ? values[0] : "";
        return 0;
      },
      &out, &err);
  if (rc != SQLITE_OK) out = std::string("error: ") + (err != nullptr ? err : sqlite3_errstr(rc));
  sqlite3_free(err);
  if (sqlite3_close(db) != SQLITE_OK) out = "error: close";
  return out;
}

// ---------------------------------------------------------------------------
// What every engine must do: SQLite in a temp file, PostgreSQL in a fresh
// database of one server per test process (skipped without PostgreSQL).

class StoreEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void TearDownTestSuite() { postgres_.reset(); }
  void SetUp() override {
    if (GetParam() == "sqlite") {
      where_ = dir_.Sub("stintd.db");
      return;
    }
    if (postgres_ == nullptr && postgres_why_.empty())
      postgres_ = PostgresServer::Start(&postgres_why_);
    if (postgres_ == nullptr) GTEST_SKIP() << postgres_why_;
    std::string why;
    where_ = postgres_->CreateDatabase("stintd_" + std::to_string(++databases_), &why);
    ASSERT_FALSE(where_.empty()) << why;
  }
  std::unique_ptr<Store> Open() { return OpenOrDie(where_); }

  TempDir dir_;
  std::string where_;  // the file or the URL
  static std::unique_ptr<PostgresServer> postgres_;
  static std::string postgres_why_;  // why there is none
  static int databases_;
};
std::unique_ptr<PostgresServer> StoreEngineTest::postgres_;
std::string StoreEngineTest::postgres_why_;
int StoreEngineTest::databases_ = 0;

INSTANTIATE_TEST_SUITE_P(Engines, StoreEngineTest, ::testing::Values("sqlite", "postgres"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST_P(StoreEngineTest, ANewStoreLoadsAnEmptyState) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->path(), where_);
  ClusterState s = LoadOrDie(store.get());
  ExpectSameState(s, ClusterState{});
  auto kv = store->LoadKv();
  ASSERT_OK(kv);
  EXPECT_TRUE(kv->empty());
}

TEST_P(StoreEngineTest, EveryFieldOfARichStateSurvivesReopen) {
  const ClusterState rich = RichState();
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    Status s = store->Save(rich, All(rich));
    ASSERT_OK(s);
    // The same connection reads back what it wrote...
    ExpectSameState(rich, LoadOrDie(store.get()));
  }
  // ...and so does a fresh one after a clean close.
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ExpectSameState(rich, LoadOrDie(store.get()));
}

TEST_P(StoreEngineTest, NanSurvivesAsNan) {
  ClusterState s;
  s.teams["t"] = Team{"t", 1, 2, std::numeric_limits<double>::quiet_NaN(), 3};
  s.counters.wait_seconds_sum = std::numeric_limits<double>::quiet_NaN();
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    Status st = store->Save(s, All(s));
    ASSERT_OK(st);
  }
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ExpectSameState(s, LoadOrDie(store.get()));
}

TEST_P(StoreEngineTest, SaveWritesExactlyTheNamedRowsAndDeletesTheAbsentOnes) {
  ClusterState s = RichState();
  auto store = Open();
  ASSERT_NE(store, nullptr);
  Status st = store->Save(s, All(s));
  ASSERT_OK(st);

  // Changed in memory, but only some of it named.
  ClusterState next = s;
  next.jobs[42].state = JobState::kRunning;  // named: written
  next.jobs[42].last_step = 999;
  next.jobs[-1].message = "not named";  // not named: not written
  next.jobs[43] = next.jobs[42];        // new, named
  next.jobs[43].id = 43;
  next.pools.erase("empty");         // gone, named: deleted
  next.windows.erase(11);            // gone, not named: stays
  next.workers[5].released = false;  // named
  next.segments.erase(78);           // gone, named
  next.teams["new-team"] = Team{"new-team", 1, 2, 3, 4};
  next.counters.acks = 17;  // counters not named: not written
  Changes c;
  c.jobs = {42, 43, 12345};  // 12345 is absent from both: deleting nothing is fine
  c.pools = {"empty"};
  c.workers = {5};
  c.segments = {78};
  c.teams = {"new-team"};
  st = store->Save(next, c);
  ASSERT_OK(st);

  ClusterState want = s;
  want.jobs[42] = next.jobs[42];
  want.jobs[43] = next.jobs[43];
  want.pools.erase("empty");
  want.workers[5] = next.workers[5];
  want.segments.erase(78);
  want.teams["new-team"] = next.teams["new-team"];
  ExpectSameState(want, LoadOrDie(store.get()));
  store.reset();
  store = Open();
  ASSERT_NE(store, nullptr);
  ExpectSameState(want, LoadOrDie(store.get()));

  // Everything named as deleted: the tables empty out.
  ClusterState empty;
  Changes everything = All(want);
  st = store->Save(empty, everything);
  ASSERT_OK(st);
  ExpectSameState(empty, LoadOrDie(store.get()));
}

TEST_P(StoreEngineTest, CountersAreWrittenOnlyWhenNamed) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ClusterState s;
  s.next_id = 50;
  s.next_fencing_token = 60;
  s.counters.notices_sent = 7;
  s.counters.wait_buckets = {1, 2, 3};
  s.pools["p"] = Pool{"p", "d"};
  Changes pools_only;
  pools_only.pools = {"p"};
  Status st = store->Save(s, pools_only);
  ASSERT_OK(st);
  ClusterState got = LoadOrDie(store.get());
  EXPECT_EQ(got.next_id, 1);
  EXPECT_EQ(got.counters.notices_sent, 0);
  EXPECT_EQ(got.pools.count("p"), 1u);

  Changes counters;
  counters.counters = true;
  st = store->Save(s, counters);
  ASSERT_OK(st);
  got = LoadOrDie(store.get());
  EXPECT_EQ(got.next_id, 50);
  EXPECT_EQ(got.next_fencing_token, 60u);
  ExpectSame(s.counters, got.counters);

  s.counters.notices_sent = 8;
  s.counters.wait_buckets.clear();
  st = store->Save(s, counters);  // overwrites the one meta row
  ASSERT_OK(st);
  ExpectSame(s.counters, LoadOrDie(store.get()).counters);

  // An empty Changes writes nothing and succeeds.
  st = store->Save(RichState(), Changes{});
  ASSERT_OK(st);
  EXPECT_TRUE(LoadOrDie(store.get()).jobs.empty());
}

TEST_P(StoreEngineTest, AFailedSaveLeavesNothingOfItAndTheStoreUsable) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ClusterState before;
  before.pools["kept"] = Pool{"kept", "from before"};
  Status st = store->Save(before, All(before));
  ASSERT_OK(st);

  // Pools, windows and teams are written before jobs; the job's state is
  // no known value, so the Save fails after those rows went in.
  ClusterState bad = RichState();
  bad.pools["kept"] = Pool{"kept", "overwritten?"};
  bad.jobs[42].state = static_cast<JobState>(99);
  st = store->Save(bad, All(bad));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("job 42"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find(where_), std::string::npos) << st.ToString();

  // A job filed under another id is refused the same way.
  ClusterState misfiled;
  misfiled.jobs[7].id = 8;
  st = store->Save(misfiled, All(misfiled));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("job 8"), std::string::npos) << st.ToString();

  ExpectSameState(before, LoadOrDie(store.get()));
  // The transaction was rolled back, not left open: later Saves commit.
  ClusterState good = RichState();
  st = store->Save(good, All(good));
  ASSERT_OK(st);
  store.reset();
  store = Open();
  ASSERT_NE(store, nullptr);
  ClusterState want = good;
  want.pools["kept"] = before.pools["kept"];  // not in `good`, so not named: untouched
  ExpectSameState(want, LoadOrDie(store.get()));
}

TEST_P(StoreEngineTest, KvPutOverwriteDeleteAndReload) {
  std::string binary;
  for (int i = 0; i < 256; ++i) binary.push_back(static_cast<char>(i));
  const std::string big(1 << 20, 'x');  // the largest value the API allows
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    for (const KvRecord& e :
         {KvRecord{1, "rank/0", binary, 1, 100}, KvRecord{1, "empty", "", 1, 101},
          KvRecord{2, "rank/0", big, 1, 102}, KvRecord{-3, "ключ", "значение", 4, -1},
          KvRecord{1, "gone", "soon", 1, 103}}) {
      Status st = store->PutKv(e);
      ASSERT_OK(st);
    }
    Status st = store->PutKv(KvRecord{1, "rank/0", "second", 2, 200});  // overwrite
    ASSERT_OK(st);
    st = store->DeleteKv(1, "gone");
    ASSERT_OK(st);
    st = store->DeleteKv(1, "never-there");
    ASSERT_OK(st);
    st = store->DeleteKv(2, "empty");  // same key, other job: deletes nothing
    ASSERT_OK(st);
  }
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto kv = store->LoadKv();
  ASSERT_OK(kv);
  // Ordered by (job_id, key).
  const std::vector<KvRecord> want = {
      KvRecord{-3, "ключ", "значение", 4, -1}, KvRecord{1, "empty", "", 1, 101},
      KvRecord{1, "rank/0", "second", 2, 200}, KvRecord{2, "rank/0", big, 1, 102}};
  ASSERT_EQ(kv->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ((*kv)[i].job_id, want[i].job_id);
    EXPECT_EQ((*kv)[i].key, want[i].key);
    EXPECT_TRUE((*kv)[i].value == want[i].value);  // not EXPECT_EQ: 1 MiB in a failure message
    EXPECT_EQ((*kv)[i].version, want[i].version);
    EXPECT_EQ((*kv)[i].updated_ms, want[i].updated_ms);
  }
  // A binary value keeps every byte.
  ASSERT_OK(store->PutKv(KvRecord{9, "b", binary, 1, 1}));
  kv = store->LoadKv();
  ASSERT_OK(kv);
  EXPECT_EQ(kv->back().value, binary);
  // The KV and the cluster state are separate tables.
  EXPECT_TRUE(LoadOrDie(store.get()).jobs.empty());
}

// What is PostgreSQL's own: the leader lease and its fence, a database that is
// not (or not yet) ours refused, no password in a message, and a copy of a
// whole SQLite store into an empty database (stintd migrate).
class StorePostgresTest : public StoreEngineTest {
 protected:
  // Runs `sql` on the test's database with a plain libpq connection.
  std::string Sql(const std::string& sql) {
    PGconn* c = PQconnectdb(where_.c_str());
    PGresult* r = PQexec(c, sql.c_str());
    std::string out = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0
                          ? PQgetvalue(r, 0, 0)
                          : PQresultStatus(r) == PGRES_COMMAND_OK ? "" : "error";
    PQclear(r);
    PQfinish(c);
    return out;
  }
};
INSTANTIATE_TEST_SUITE_P(Engines, StorePostgresTest, ::testing::Values("postgres"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// Issue 45, item 2: two stintds on one database. The lease goes to one at
// a time, by the database's clock, and a takeover raises the epoch; the
// old leader's store then refuses every write (and says so once through
// on_fenced), and none of them reaches the database.
TEST_P(StorePostgresTest, AfterATakeoverTheOldLeadersWritesAreRefused) {
  const std::chrono::milliseconds lease(300);
  auto a_lease = LeaderLease::Open(where_, "a", "http://a:1", lease);
  auto b_lease = LeaderLease::Open(where_, "b", "http://b:1", lease);
  ASSERT_OK(a_lease.status());
  ASSERT_OK(b_lease.status());
  Result<int64_t> a_epoch = (*a_lease)->TryAcquire();
  ASSERT_OK(a_epoch.status());
  ASSERT_EQ(*a_epoch, 1);
  Result<int64_t> b_first = (*b_lease)->TryAcquire();
  ASSERT_OK(b_first.status());
  EXPECT_EQ(*b_first, 0);  // a holds it

  auto a_store = Open();
  int fenced = 0;
  StoreFence fence;
  fence.holder = "a";
  fence.epoch = *a_epoch;
  fence.on_fenced = [&](const Status&) { fenced++; };
  ASSERT_OK(a_store->SetFence(fence));
  ClusterState s;
  s.pools["before"] = Pool{"before", "written by the leader"};
  Changes c;
  c.pools = {"before"};
  ASSERT_OK(a_store->Save(s, c));

  Result<LeaderView> view = (*b_lease)->Read();
  ASSERT_OK(view.status());
  EXPECT_EQ(view->holder, "a");
  EXPECT_EQ(view->url, "http://a:1");
  ASSERT_EQ(view->standbys.size(), 1u);
  EXPECT_EQ(view->standbys[0].url, "http://b:1");

  // a stops renewing (paused): b takes the lease once it ran out by the
  // database's clock, at the next epoch.
  const auto deadline = std::chrono::steady_clock::now() + 100 * lease;
  int64_t b_epoch = 0;
  while (b_epoch == 0 && std::chrono::steady_clock::now() < deadline) {
    Result<int64_t> got = (*b_lease)->TryAcquire();
    ASSERT_OK(got.status());
    b_epoch = *got;
    if (b_epoch == 0) std::this_thread::sleep_for(lease / 10);
  }
  ASSERT_EQ(b_epoch, 2);

  // a wakes: its renewal and its writes are refused, and nothing lands.
  Status renewed = (*a_lease)->Renew(*a_epoch);
  EXPECT_EQ(renewed.code(), Code::kAborted) << renewed.ToString();
  EXPECT_TRUE(IsFenced(renewed)) << renewed.ToString();
  s.pools["late"] = Pool{"late", "written after the takeover"};
  c.pools = {"late"};
  Status late = a_store->Save(s, c);
  EXPECT_TRUE(IsFenced(late)) << late.ToString();
  EXPECT_NE(late.message().find("epoch 2"), std::string::npos) << late.ToString();
  EXPECT_TRUE(IsFenced(a_store->PutKv(KvRecord{7, "k", "v", 1, 0})));
  EXPECT_TRUE(IsFenced(a_store->DeleteJobKv(7)));
  EXPECT_EQ(fenced, 3);
  ClusterState now = LoadOrDie(a_store.get());
  EXPECT_EQ(now.pools.count("before"), 1u);
  EXPECT_EQ(now.pools.count("late"), 0u);

  // b's store, fenced at the new epoch, writes.
  auto b_store = Store::Open(where_);
  ASSERT_OK(b_store.status());
  ASSERT_OK((*b_store)->SetFence(StoreFence{"b", b_epoch, nullptr}));
  ASSERT_OK((*b_store)->Save(s, c));
  EXPECT_EQ(LoadOrDie(b_store->get()).pools.count("late"), 1u);
  // A lease given up ends at once.
  ASSERT_OK((*b_lease)->Renew(b_epoch));
  ASSERT_OK((*b_lease)->Release(b_epoch));
  Result<int64_t> again = (*a_lease)->TryAcquire();
  ASSERT_OK(again.status());
  EXPECT_EQ(*again, 3);
  // The journal, in id order: each epoch's takeover, then its writes.
  EXPECT_EQ(Sql("SELECT string_agg(epoch || ' ' || what, ', ' ORDER BY id) FROM stintd_journal"),
            "1 takeover, 1 write, 2 takeover, 2 write, 3 takeover");
}

// The row locks of leader_lease.h: a write transaction in flight (the lease
// row FOR KEY SHARE) never holds the leader's renewal up, and a takeover
// waits for it; once it ends, the takeover goes through.
TEST_P(StorePostgresTest, RenewalsPassTheLeadersWritesAndATakeoverWaitsForThem) {
  const std::chrono::milliseconds lease(400);
  auto a = LeaderLease::Open(where_, "a", "http://a:1", lease);
  auto b = LeaderLease::Open(where_, "b", "http://b:1", lease);
  ASSERT_OK(a.status());
  ASSERT_OK(b.status());
  Result<int64_t> epoch = (*a)->TryAcquire();
  ASSERT_OK(epoch.status());
  ASSERT_EQ(*epoch, 1);

  PGconn* writer = PQconnectdb(where_.c_str());
  ASSERT_EQ(PQstatus(writer), CONNECTION_OK);
  auto exec = [&](const char* sql) {
    PGresult* r = PQexec(writer, sql);
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    PQclear(r);
    return ok;
  };
  ASSERT_TRUE(exec("BEGIN"));
  ASSERT_TRUE(exec("SELECT epoch FROM stintd_leader WHERE id = 1 FOR KEY SHARE"));
  // Renewed while the write is open (a renewal that waited would time out
  // at lock_timeout, one lease).
  for (int i = 0; i < 3; i++) ASSERT_OK((*a)->Renew(*epoch));
  // The lease runs out, but the write in flight holds the takeover back.
  std::this_thread::sleep_for(lease + lease / 2);
  Result<int64_t> held = (*b)->TryAcquire();
  ASSERT_OK(held.status());
  EXPECT_EQ(*held, 0);
  ASSERT_TRUE(exec("COMMIT"));
  PQfinish(writer);
  Result<int64_t> taken = (*b)->TryAcquire();
  ASSERT_OK(taken.status());
  EXPECT_EQ(*taken, 2);
}

// A connection the server ended (a restart, a failover, an idle limit):
// the write on it fails and leaves the store refusing; the reload that
// follows connects again and reads what is durable, and writes go on.
TEST_P(StorePostgresTest, AReloadConnectsAgainAfterTheServerEndedTheConnection) {
  auto store = Open();
  ClusterState s;
  s.pools["kept"] = Pool{"kept", "before the connection ended"};
  Changes c;
  c.pools = {"kept"};
  ASSERT_OK(store->Save(s, c));
  EXPECT_EQ(Sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = "
                "current_database() AND pid <> pg_backend_pid()"),
            "1");
  s.pools["lost"] = Pool{"lost", "sent on the ended connection"};
  c.pools = {"lost"};
  EXPECT_FALSE(store->Save(s, c).ok());
  EXPECT_FALSE(store->Save(s, c).ok());  // refusing until reloaded
  ClusterState now = LoadOrDie(store.get());
  EXPECT_EQ(now.pools.count("kept"), 1u);
  EXPECT_EQ(now.pools.count("lost"), 0u);
  ASSERT_OK(store->Save(s, c));
  EXPECT_EQ(LoadOrDie(store.get()).pools.count("lost"), 1u);
}

TEST_P(StorePostgresTest, ADatabaseThatIsNotOursOrNewerIsRefusedAndLeftAsItWas) {
  ASSERT_EQ(Sql("CREATE TABLE jobs (id BIGINT)"), "");
  auto store = Store::Open(where_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kFailedPrecondition) << store.status().ToString();
  EXPECT_NE(store.status().message().find("jobs"), std::string::npos) << store.status().ToString();
  EXPECT_EQ(Sql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"), "1");

  ASSERT_EQ(Sql("DROP TABLE jobs"), "");
  ASSERT_NE(Open(), nullptr);  // creates the schema
  ASSERT_EQ(Sql("UPDATE stintd_schema SET version = 14"), "");
  store = Store::Open(where_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kFailedPrecondition) << store.status().ToString();
  EXPECT_NE(store.status().message().find("version 14"), std::string::npos)
      << store.status().ToString();
}

TEST_P(StorePostgresTest, NoPasswordInAMessageOrThePath) {
  EXPECT_EQ(internal::RedactPostgresUrl("postgresql://stintd:s3cr3t@db.example:5432/stintd"),
            "postgresql://stintd:***@db.example:5432/stintd");
  EXPECT_EQ(internal::RedactPostgresUrl("postgresql:///stintd?host=/tmp&password=s3cr3t&user=a"),
            "postgresql:///stintd?host=/tmp&password=***&user=a");
  // Nobody listens on port 1: refused at once.
  auto store = Store::Open("postgresql://stintd:s3cr3t@127.0.0.1:1/stintd?connect_timeout=5");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kUnavailable) << store.status().ToString();
  EXPECT_EQ(store.status().message().find("s3cr3t"), std::string::npos)
      << store.status().ToString();
  auto opened = Open();
  ASSERT_NE(opened, nullptr);
  EXPECT_EQ(opened->path(), where_);
}

TEST_P(StorePostgresTest, CopyStoreMovesAWholeSqliteStoreIntoAnEmptyDatabase) {
  const ClusterState rich = RichState();
  const std::string file = dir_.Sub("from.db");
  {
    auto from = OpenOrDie(file);
    ASSERT_NE(from, nullptr);
    ASSERT_OK(from->Save(rich, All(rich)));
    ASSERT_OK(from->PutKv(KvRecord{42, "rank/0", std::string("a\0b", 3), 2, 7}));
  }
  auto from = OpenOrDie("sqlite:" + file);
  auto to = Open();
  ASSERT_NE(from, nullptr);
  ASSERT_NE(to, nullptr);
  Result<StoreCopyStats> copied = CopyStore(*from, *to);
  ASSERT_OK(copied);
  EXPECT_EQ(copied->jobs, static_cast<int64_t>(rich.jobs.size()));
  EXPECT_EQ(copied->kv, 1);
  ExpectSameState(rich, LoadOrDie(to.get()));
  auto kv = to->LoadKv();
  ASSERT_OK(kv);
  ASSERT_EQ(kv->size(), 1u);
  EXPECT_EQ((*kv)[0].value, std::string("a\0b", 3));
  // Never over a store that holds anything.
  Result<StoreCopyStats> again = CopyStore(*from, *to);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kFailedPrecondition) << again.status().ToString();
}

// ---------------------------------------------------------------------------
// Files the store must refuse, and leave as they were.

TEST(StoreOpen, NewerSchemaVersionIsRefusedAndTheFileLeftAsItWas) {
  TempDir dir;
  const std::string path = dir.Sub("stintd.db");
  {
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    ClusterState s = RichState();
    ASSERT_OK(store->Save(s, All(s)));
  }
  ASSERT_EQ(RawSql(path, "PRAGMA user_version=14; PRAGMA user_version"), "14");
  const std::string bytes = ReadWholeFile(path);
  auto store = Store::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kFailedPrecondition) << store.status().ToString();
  EXPECT_NE(store.status().message().find(path), std::string::npos) << store.status().ToString();
  EXPECT_NE(store.status().message().find("version 14"), std::string::npos)
      << store.status().ToString();
  EXPECT_NE(store.status().message().find("1 to 13"), std::string::npos)
      << store.status().ToString();
  EXPECT_TRUE(ReadWholeFile(path) == bytes) << "a refused open changed the file";
  EXPECT_FALSE(Exists(path + "-wal"));
}

TEST(StoreOpen, GarbageFileIsDataLossNamingThePathAndUntouched) {
  TempDir dir;
  const std::string path = dir.Sub("not-a-db");
  std::string garbage;
  std::mt19937 rng(7);
  for (int i = 0; i < 8192; ++i) garbage.push_back(static_cast<char>(rng()));
  ASSERT_TRUE(WriteWholeFile(path, garbage)) << path;
  auto store = Store::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kDataLoss) << store.status().ToString();
  EXPECT_NE(store.status().message().find(path), std::string::npos) << store.status().ToString();
  EXPECT_TRUE(ReadWholeFile(path) == garbage) << "a refused open changed the file";
  EXPECT_FALSE(Exists(path + "-wal"));
  EXPECT_FALSE(Exists(path + "-journal"));

  // Text that is not SQLite either, e.g. a config file passed as --db.
  ASSERT_TRUE(WriteWholeFile(path, "listen = \"0.0.0.0:8080\"\n")) << path;
  store = Store::Open(path);
  EXPECT_EQ(store.status().code(), Code::kDataLoss) << store.status().ToString();
  EXPECT_EQ(ReadWholeFile(path), "listen = \"0.0.0.0:8080\"\n");
}

TEST(StoreOpen, TruncatedFileIsDataLossAndUntouched) {
  TempDir dir;
  const std::string path = dir.Sub("stintd.db");
  {
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    // Enough rows for a file of many pages.
    ClusterState s;
    for (int64_t id = 1; id <= 400; ++id) s.jobs[id] = test::CrashJob(id + 1000);
    for (auto& [id, job] : s.jobs) job.id = id;
    ASSERT_OK(store->Save(s, All(s)));
  }
  ASSERT_FALSE(Exists(path + "-wal")) << "a clean close checkpoints and removes the WAL";
  const std::string whole = ReadWholeFile(path);
  ASSERT_GT(whole.size(), 16u * 4096);
  for (size_t size : {whole.size() / 2, whole.size() - 4096, size_t{60}}) {
    SCOPED_TRACE(::testing::Message() << "truncated to " << size << " of " << whole.size());
    const std::string cut = whole.substr(0, size);
    ASSERT_TRUE(WriteWholeFile(path, cut)) << path;
    auto store = Store::Open(path);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), Code::kDataLoss) << store.status().ToString();
    EXPECT_NE(store.status().message().find(path), std::string::npos) << store.status().ToString();
    EXPECT_TRUE(ReadWholeFile(path) == cut) << "a refused open changed the file";
  }
}

TEST(StoreOpen, DamagedPageFailsTheIntegrityCheck) {
  TempDir dir;
  const std::string path = dir.Sub("stintd.db");
  {
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    ClusterState s;
    for (int64_t id = 1; id <= 400; ++id) s.jobs[id] = test::CrashJob(id);
    ASSERT_OK(store->Save(s, All(s)));
  }
  std::string bytes = ReadWholeFile(path);
  ASSERT_GT(bytes.size(), 8u * 4096);
  // Scribble over the header of a page past the schema and the tables'
  // roots: the file header stays valid, the jobs b-tree does not.
  for (size_t i = 6 * 4096; i < 6 * 4096 + 64; ++i) bytes[i] = static_cast<char>(0xA5);
  ASSERT_TRUE(WriteWholeFile(path, bytes)) << path;
  auto store = Store::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kDataLoss) << store.status().ToString();
  EXPECT_NE(store.status().message().find(path), std::string::npos) << store.status().ToString();
  EXPECT_TRUE(ReadWholeFile(path) == bytes) << "a refused open changed the file";
}

TEST(StoreOpen, OtherSqliteDatabaseIsRefusedAndUntouched) {
  TempDir dir;
  const std::string path = dir.Sub("other.db");
  ASSERT_EQ(RawSql(path,
                   "CREATE TABLE people (name TEXT); INSERT INTO people VALUES ('ann'); "
                   "SELECT count(*) FROM people"),
            "1");
  const std::string bytes = ReadWholeFile(path);
  auto store = Store::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kFailedPrecondition) << store.status().ToString();
  EXPECT_NE(store.status().message().find(path), std::string::npos) << store.status().ToString();
  EXPECT_TRUE(ReadWholeFile(path) == bytes) << "a refused open changed the file";
}

TEST(StoreOpen, MissingDirectoryIsAnIoError) {
  TempDir dir;
  const std::string path = dir.Sub("no/such/dir/stintd.db");
  auto store = Store::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kIoError) << store.status().ToString();
  EXPECT_NE(store.status().message().find(path), std::string::npos) << store.status().ToString();
}

TEST(StoreOpen, InMemoryDatabaseIsRefusedForWantOfAWal) {
  auto store = Store::Open(":memory:");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kIoError) << store.status().ToString();
  EXPECT_NE(store.status().message().find("WAL"), std::string::npos) << store.status().ToString();
}

TEST(StoreOpen, TheFileIsInWalModeAtTheCurrentVersion) {
  TempDir dir;
  const std::string path = dir.Sub("stintd.db");
  {
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
  }
  EXPECT_EQ(RawSql(path, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(RawSql(path, "PRAGMA user_version"), "13");
  EXPECT_EQ(RawSql(path, "PRAGMA quick_check"), "ok");
  // Reopened as often as wanted.
  for (int i = 0; i < 3; ++i) {
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
  }
}

// Older files open with everything they held and gain what they lack: a
// version-1 file the rendezvous table (and the columns below), a version-2
// file the jobs column service_gpu_seconds, 0 for the jobs already there,
// a version-3 file the rendezvous column dropped, empty for the rows there,
// a version-4 file the workers column secret_hash, empty for the rows there,
// a version-5 file the windows columns node and node_gpus, empty, a
// version-6 file jobs.launch, segments.placement and windows.node_addr.
// What a file older than version 6 lacks (the node of a window).
#define kDropVersion13 " ALTER TABLE pools DROP COLUMN storage; ALTER TABLE jobs DROP COLUMN stored;"
#define kDropVersion12 kDropVersion13 " ALTER TABLE segments DROP COLUMN notice_to_replicas_seconds;"
#define kDropVersion11 kDropVersion12 " ALTER TABLE segments DROP COLUMN external_id;"
#define kDropVersion10                                                                           \
  kDropVersion11                                                                                 \
  " ALTER TABLE pools DROP COLUMN pricing; ALTER TABLE pools DROP COLUMN price_per_gpu_hour;"    \
  " ALTER TABLE pools DROP COLUMN price_history; ALTER TABLE teams DROP COLUMN budget;"          \
  " ALTER TABLE teams DROP COLUMN budget_period_seconds; ALTER TABLE teams DROP COLUMN"          \
  " period_start_ms; ALTER TABLE teams DROP COLUMN spent; ALTER TABLE jobs DROP COLUMN"          \
  " revoked_ms; ALTER TABLE jobs DROP COLUMN cost; ALTER TABLE jobs DROP COLUMN samples;"        \
  " ALTER TABLE jobs DROP COLUMN step_time; ALTER TABLE jobs DROP COLUMN losses;"                \
  " ALTER TABLE segments DROP COLUMN price_per_gpu_hour; ALTER TABLE segments DROP COLUMN cost;" \
  " ALTER TABLE segments DROP COLUMN start_step; ALTER TABLE segments DROP COLUMN"               \
  " checkpoint_step; ALTER TABLE segments DROP COLUMN first_step; ALTER TABLE segments DROP"     \
  " COLUMN first_step_ms; ALTER TABLE segments DROP COLUMN last_step; ALTER TABLE segments DROP" \
  " COLUMN last_step_ms; ALTER TABLE segments DROP COLUMN checkpoint_seconds; ALTER TABLE meta"  \
  " DROP COLUMN price_rules; ALTER TABLE jobs DROP COLUMN eval; ALTER TABLE jobs DROP COLUMN"    \
  " eval_every; ALTER TABLE jobs DROP COLUMN eval_gpus; ALTER TABLE jobs DROP COLUMN"            \
  " checkpoints; DROP TABLE evals;"
#define kDropVersion9                                                                             \
  kDropVersion10                                                                                  \
      " ALTER TABLE segments DROP COLUMN shrink_release; ALTER TABLE segments DROP COLUMN"        \
      " leaving_workers; ALTER TABLE segments DROP COLUMN shrink_notice_ms; ALTER TABLE segments" \
      " DROP COLUMN shrink_deadline_ms; ALTER TABLE segments DROP COLUMN shrink_for; ALTER TABLE" \
      " workers DROP COLUMN node; ALTER TABLE windows DROP COLUMN declared; ALTER TABLE windows " \
      "DROP"                                                                                      \
      " COLUMN joined; ALTER TABLE segments DROP COLUMN master_port; DROP TABLE node_credentials;"
#define kDropCrashColumn " ALTER TABLE jobs DROP COLUMN crash_ms;" kDropVersion9
#define kDropLaunchColumns                                                                 \
  " ALTER TABLE jobs DROP COLUMN launch; ALTER TABLE segments DROP COLUMN placement; ALTER " \
  "TABLE windows DROP COLUMN node_addr;" kDropCrashColumn
#define kDropNodeColumns \
  " ALTER TABLE windows DROP COLUMN node; ALTER TABLE windows DROP COLUMN node_gpus;" kDropLaunchColumns

void ExpectMigratedKeepingItsRows(const std::string& downgrade_sql, const std::string& version,
                                  bool had_rendezvous, bool had_service = false,
                                  bool had_dropped = false, bool had_secrets = false,
                                  bool had_nodes = false, bool had_launch = false,
                                  bool had_crashes = false, bool had_shrinks = false,
                                  bool had_prices = false, bool had_external = false,
                                  bool had_replicas_figure = false) {
  TempDir dir;
  const std::string path = dir.Sub("stintd.db");
  ClusterState s = RichState();
  if (!had_rendezvous) s.rendezvous.clear();
  {
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    ASSERT_OK(store->Save(s, All(s)));
  }
  ASSERT_EQ(
      RawSql(path, downgrade_sql + " PRAGMA user_version=" + version + "; PRAGMA user_version"),
      version);
  if (!had_service) {
    for (auto& [id, job] : s.jobs) job.service_gpu_seconds = 0;
  }
  if (!had_dropped) {
    for (auto& [id, r] : s.rendezvous) r.dropped.clear();
  }
  if (!had_secrets) {
    for (auto& [id, w] : s.workers) w.secret_hash.clear();
  }
  for (auto& [id, w] : s.windows) {
    if (!had_nodes) {
      w.node.clear();
      w.node_gpus.clear();
    }
    if (!had_launch) w.node_addr.clear();
    if (!had_shrinks) {
      w.declared = false;
      w.joined = false;
    }
  }
  if (!had_shrinks) {
    s.node_credentials.clear();
    for (auto& [id, seg] : s.segments) seg.master_port = 0;
  }
  for (auto& [id, j] : s.jobs) {
    if (!had_launch) j.launch.clear();
  }
  if (!had_launch) {
    for (auto& [id, seg] : s.segments) seg.placement.clear();
  }
  if (!had_crashes) {
    for (auto& [id, j] : s.jobs) j.crash_ms.clear();
  }
  // No file before version 9 held a shrink in flight, a worker's node, an
  // admin window on nodes, a master port or a node credential.
  if (!had_shrinks) {
    for (auto& [id, seg] : s.segments) {
      seg.shrink_release.clear();
      seg.leaving_workers.clear();
      seg.shrink_notice_ms = seg.shrink_deadline_ms = 0;
      seg.shrink_for = 0;
    }
    for (auto& [id, w] : s.workers) w.node.clear();
  }
  // No file before version 10 held a price, a budget or what a segment achieved.
  if (!had_prices) {
    for (auto& [name, p] : s.pools) p = Pool{p.name, p.description};
    for (auto& [name, t] : s.teams) {
      t.budget = -1;
      t.budget_period_seconds = 30 * 24 * 3600.0;
      t.period_start_ms = 0;
      t.spent = 0;
    }
    for (auto& [id, j] : s.jobs) {
      j.revoked_ms.clear();
      j.cost = 0;
      j.samples = 0;
      j.step_time.clear();
      j.losses.clear();
      j.eval.clear();
      j.eval_every = j.eval_gpus = 0;
      j.checkpoints = 0;
    }
    s.evals.clear();
    for (auto& [id, seg] : s.segments) {
      seg.price_per_gpu_hour = seg.cost = seg.checkpoint_seconds = 0;
      seg.start_step = seg.checkpoint_step = seg.first_step = seg.last_step = -1;
      seg.first_step_ms = seg.last_step_ms = 0;
    }
    s.price_rules = {};
  }
  // No file before version 11 named a segment's executor id, none before
  // 12 held a notice-to-replicas figure.
  for (auto& [id, seg] : s.segments) {
    if (!had_external) seg.external_id.clear();
    if (!had_replicas_figure) seg.notice_to_replicas_seconds = -1;
  }
  // None before 13 knew where a job's steps are or what storage a pool reaches.
  for (auto& [name, p] : s.pools) p.storage.clear();
  for (auto& [id, j] : s.jobs) j.stored.clear();
  {
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    Result<ClusterState> loaded = store->Load();
    ASSERT_OK(loaded);
    ExpectSameState(s, *loaded);
    s = RichState();
    ASSERT_OK(store->Save(s, All(s)));
  }
  EXPECT_EQ(RawSql(path, "PRAGMA user_version"), "13");
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  Result<ClusterState> loaded = store->Load();
  ASSERT_OK(loaded);
  ExpectSameState(s, *loaded);
}

TEST(StoreOpen, VersionOneFileIsMigratedKeepingItsRows) {
  ExpectMigratedKeepingItsRows(
      "DROP TABLE rendezvous; ALTER TABLE jobs DROP COLUMN service_gpu_seconds; ALTER TABLE "
      "workers DROP COLUMN secret_hash;" kDropNodeColumns,
      "1",
      /*had_rendezvous=*/false);
}

TEST(StoreOpen, VersionTwoFileIsMigratedKeepingItsRows) {
  ExpectMigratedKeepingItsRows(
      "ALTER TABLE jobs DROP COLUMN service_gpu_seconds; ALTER TABLE rendezvous DROP COLUMN "
      "dropped; ALTER TABLE workers DROP COLUMN secret_hash;" kDropNodeColumns,
      "2", /*had_rendezvous=*/true);
}

// Version 3 fenced per segment: its workers of one segment may share a
// token, which the migration keeps as it is (FencingValid accepts it while
// any holder may commit).
TEST(StoreOpen, VersionThreeFileIsMigratedKeepingItsRows) {
  ExpectMigratedKeepingItsRows(
      "ALTER TABLE rendezvous DROP COLUMN dropped; ALTER TABLE workers DROP COLUMN secret_hash;"
      kDropNodeColumns,
      "3", /*had_rendezvous=*/true, /*had_service=*/true);
}

// Version 4 gave workers no secret: their rows keep an empty secret_hash,
// which lets them act with the shared worker token (API.md, Credentials).
TEST(StoreOpen, VersionFourFileIsMigratedKeepingItsRows) {
  ExpectMigratedKeepingItsRows("ALTER TABLE workers DROP COLUMN secret_hash;" kDropNodeColumns,
                               "4", /*had_rendezvous=*/true, /*had_service=*/true,
                               /*had_dropped=*/true);
}

// Version 5 knew no nodes: its windows are admin-declared ones.
TEST(StoreOpen, VersionFiveFileIsMigratedKeepingItsRows) {
  ExpectMigratedKeepingItsRows(kDropNodeColumns, "5", /*had_rendezvous=*/true,
                               /*had_service=*/true, /*had_dropped=*/true,
                               /*had_secrets=*/true);
}

// Version 7 knew no crash-loop guard.
TEST(StoreOpen, VersionSevenFileIsMigratedKeepingItsRows) {
  ExpectMigratedKeepingItsRows(kDropCrashColumn, "7", /*had_rendezvous=*/true,
                               /*had_service=*/true, /*had_dropped=*/true,
                               /*had_secrets=*/true, /*had_nodes=*/true, /*had_launch=*/true);
}

// Version 8 kept a shrink in flight in memory only, no worker's node, no
// admin windows on nodes, master ports or node credentials.
TEST(StoreOpen, VersionEightFileIsMigratedKeepingItsRows) {
  ExpectMigratedKeepingItsRows(kDropVersion9, "8", /*had_rendezvous=*/true,
                               /*had_service=*/true, /*had_dropped=*/true,
                               /*had_secrets=*/true, /*had_nodes=*/true, /*had_launch=*/true,
                               /*had_crashes=*/true);
}

// Version 9 knew no prices, budgets, loss curves or segment figures.
TEST(StoreOpen, VersionNineFileIsMigratedKeepingItsRows) {
  ExpectMigratedKeepingItsRows(kDropVersion10, "9", /*had_rendezvous=*/true,
                               /*had_service=*/true, /*had_dropped=*/true,
                               /*had_secrets=*/true, /*had_nodes=*/true, /*had_launch=*/true,
                               /*had_crashes=*/true, /*had_shrinks=*/true);
}

// Version 10 kept no executor's id of a segment (stintd --slurm's Slurm job).
TEST(StoreOpen, VersionTenFileIsMigratedKeepingItsRows) {
  ExpectMigratedKeepingItsRows(kDropVersion11, "10", /*had_rendezvous=*/true,
                               /*had_service=*/true, /*had_dropped=*/true,
                               /*had_secrets=*/true, /*had_nodes=*/true, /*had_launch=*/true,
                               /*had_crashes=*/true, /*had_shrinks=*/true, /*had_prices=*/true);
}

// Version 11 kept no segment's notice-to-replicas figure.
TEST(StoreOpen, VersionElevenFileIsMigratedKeepingItsRows) {
  ExpectMigratedKeepingItsRows(kDropVersion12, "11", /*had_rendezvous=*/true,
                               /*had_service=*/true, /*had_dropped=*/true,
                               /*had_secrets=*/true, /*had_nodes=*/true, /*had_launch=*/true,
                               /*had_crashes=*/true, /*had_shrinks=*/true, /*had_prices=*/true,
                               /*had_external=*/true);
}

// Version 12 kept no job's locations and no pool's storage.
TEST(StoreOpen, VersionTwelveFileIsMigratedKeepingItsRows) {
  ExpectMigratedKeepingItsRows(kDropVersion13, "12", /*had_rendezvous=*/true,
                               /*had_service=*/true, /*had_dropped=*/true,
                               /*had_secrets=*/true, /*had_nodes=*/true, /*had_launch=*/true,
                               /*had_crashes=*/true, /*had_shrinks=*/true, /*had_prices=*/true,
                               /*had_external=*/true, /*had_replicas_figure=*/true);
}

// Version 6 knew no launch specs, placements or node addresses.
TEST(StoreOpen, VersionSixFileIsMigratedKeepingItsRows) {
  ExpectMigratedKeepingItsRows(kDropLaunchColumns, "6", /*had_rendezvous=*/true,
                               /*had_service=*/true, /*had_dropped=*/true,
                               /*had_secrets=*/true, /*had_nodes=*/true);
}

// ---------------------------------------------------------------------------
// One stintd per file.

TEST(StoreLock, SecondOpenInTheSameProcessIsRefused) {
  TempDir dir;
  const std::string path = dir.Sub("stintd.db");
  auto first = OpenOrDie(path);
  ASSERT_NE(first, nullptr);
  auto second = Store::Open(path);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kFailedPrecondition) << second.status().ToString();
  EXPECT_NE(second.status().message().find("in use by another stintd"), std::string::npos)
      << second.status().ToString();
  first.reset();
  EXPECT_NE(OpenOrDie(path), nullptr);
}

TEST(StoreLock, AnotherProcessIsRefusedWhileWeHoldItAndAllowedAfterClose) {
  TempDir dir;
  const std::string path = dir.Sub("stintd.db");
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  RunResult r = RunProgram(STINT_STORE_CHILD, {"open", path});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("FAILED_PRECONDITION"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(path + " is in use by another stintd"), std::string::npos) << r.output;
  // Still ours and intact after the refused attempt.
  ClusterState s = RichState();
  ASSERT_OK(store->Save(s, All(s)));
  store.reset();
  r = RunProgram(STINT_STORE_CHILD, {"open", path});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("open: OK"), std::string::npos) << r.output;
}

TEST(StoreLock, WeAreRefusedWhileAnotherProcessHoldsItAndAllowedAfterItCloses) {
  TempDir dir;
  const std::string path = dir.Sub("stintd.db");
  ChildProcess holder(STINT_STORE_CHILD, {"hold", path});
  ASSERT_TRUE(holder.started());
  ASSERT_TRUE(holder.WaitForLine("held")) << holder.output();
  for (int i = 0; i < 2; ++i) {
    auto store = Store::Open(path);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), Code::kFailedPrecondition) << store.status().ToString();
    EXPECT_NE(store.status().message().find("in use by another stintd"), std::string::npos)
        << store.status().ToString();
  }
  // The holder closes the store but lives on: the lock went with the close.
  ASSERT_EQ(kill(holder.pid(), SIGUSR1), 0);
  ASSERT_TRUE(holder.WaitForLine("closed")) << holder.output();
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  ExpectSameState(ClusterState{}, LoadOrDie(store.get()));
  store.reset();
  ASSERT_EQ(kill(holder.pid(), SIGUSR1), 0);
  int status = holder.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << holder.output();
}

// ---------------------------------------------------------------------------
// kill -9: every Save that returned is in the file.

// The ids after "saved " (or "kv ") in complete lines of `out`.
std::set<int64_t> Reported(const std::string& out, const std::string& prefix) {
  std::set<int64_t> ids;
  std::istringstream lines(out);
  std::string line;
  size_t consumed = 0;
  while (std::getline(lines, line)) {
    consumed += line.size() + 1;
    if (consumed > out.size()) break;  // the last line had no newline: cut by the kill
    if (line.compare(0, prefix.size(), prefix) == 0) {
      ids.insert(std::stoll(line.substr(prefix.size())));
    }
  }
  return ids;
}

TEST(StoreCrash, KillNineNeverLosesASaveThatReturned) {
  const int rounds = std::getenv("STINT_KILLS") ? std::atoi(std::getenv("STINT_KILLS")) : 8;
  const uint32_t seed = uint32_t(std::chrono::steady_clock::now().time_since_epoch().count());
  std::mt19937 rng(seed);
  std::printf("seed %u, %d kills\n", seed, rounds);
  TempDir dir;
  const std::string path = dir.Sub("stintd.db");
  std::set<int64_t> saved;
  std::set<int64_t> kv;
  std::set<int64_t> in_file;  // job ids found after the previous kills
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round << ", seed " << seed);
    ChildProcess writer(STINT_STORE_CHILD, {"write", path});
    ASSERT_TRUE(writer.started());
    if (round % 3 == 0) {
      // Early: maybe while it opens, creates the schema or loads.
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    } else {
      // Late: after at least one Save, anywhere in the loop.
      ASSERT_TRUE(writer.WaitForLine("saved ")) << writer.output();
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200000));
    }
    ASSERT_EQ(kill(writer.pid(), SIGKILL), 0);
    const int wstatus = writer.Wait();
    ASSERT_TRUE(WIFSIGNALED(wstatus)) << "the writer exited by itself: " << writer.output();
    const std::set<int64_t> now_saved = Reported(writer.output(), "saved ");
    const std::set<int64_t> now_kv = Reported(writer.output(), "kv ");
    saved.insert(now_saved.begin(), now_saved.end());
    kv.insert(now_kv.begin(), now_kv.end());

    // First as SQLite itself sees the file the kill left...
    EXPECT_EQ(RawSql(path, "PRAGMA quick_check"), "ok");
    // ...then through the store.
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    ClusterState s = LoadOrDie(store.get());
    for (int64_t id : saved) {
      auto it = s.jobs.find(id);
      ASSERT_NE(it, s.jobs.end()) << "job " << id << " was reported saved and is gone";
      SCOPED_TRACE(::testing::Message() << "job " << id);
      ExpectSame(test::CrashJob(id), it->second);
    }
    // At most the one Save in flight at this kill went in unreported, and
    // every job that is there is whole.
    int unreported = 0;
    for (const auto& [id, job] : s.jobs) {
      SCOPED_TRACE(::testing::Message() << "job " << id);
      ExpectSame(test::CrashJob(id), job);
      if (saved.count(id) == 0 && in_file.count(id) == 0) ++unreported;
    }
    EXPECT_LE(unreported, 1);
    in_file.clear();
    for (const auto& [id, job] : s.jobs) in_file.insert(id);
    if (!s.jobs.empty()) {
      EXPECT_EQ(s.next_id, s.jobs.rbegin()->first + 1) << "next_id saved with its job";
      EXPECT_EQ(s.counters.segments_started, s.jobs.rbegin()->first);
    }
    auto entries = store->LoadKv();
    ASSERT_OK(entries);
    std::set<int64_t> kv_ids;
    for (const KvRecord& e : *entries) {
      kv_ids.insert(e.job_id);
      EXPECT_EQ(e.value, test::CrashKv(e.job_id).value);
    }
    for (int64_t id : kv) EXPECT_EQ(kv_ids.count(id), 1u) << "kv " << id << " reported and gone";
    if (HasFailure()) return;
  }
  std::printf("%zu saves reported over %d kills\n", saved.size(), rounds);
}

}  // namespace
}  // namespace stint::stintd
