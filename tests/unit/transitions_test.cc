// The coordinator's state transitions: validation that changes nothing on
// error, the segment lifecycle, fencing, and time accounting.
#include "stintd/core/transitions.h"

#include "stintd/core/accounting.h"
#include "stintd/core/evals.h"

#include <cmath>

#include <gtest/gtest.h>

#include <limits>

#include "util/status_matchers.h"

namespace stint::stintd {
namespace {

constexpr TimeMs kT0 = 1'800'000'000'000;  // an arbitrary wall-clock origin

class TransitionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(AddPool(s_, Pool{"p", ""}, 0, &c_));
    Window w;
    w.pool = "p";
    w.gpus = 8;
    w.start_ms = kT0;
    w.end_ms = kT0 + 3'600'000;
    window_ = AddWindow(s_, w, kT0, &c_).value();
    ASSERT_OK(PutTeam(s_, Team{"ml", 4, 2, 0, 0}, 0, &c_));
  }

  int64_t Submit(int min_gpus, const std::string& team = "ml") {
    Job j;
    j.name = "job";
    j.team = team;
    j.min_gpus = min_gpus;
    j.max_gpus = min_gpus;
    return SubmitJob(s_, j, kT0, &c_).value();
  }

  // Starts `job` on `gpus` GPUs of the window, as a plan would.
  int64_t Start(int64_t job, int gpus, TimeMs now = kT0) {
    Plan plan;
    plan.starts.push_back(StartDecision{job, {Allocation{window_, gpus}}, kT0 + 3'600'000});
    Changes ch;
    ApplyPlan(s_, plan, now, &ch);
    EXPECT_TRUE(ch.jobs.count(job));
    return s_.jobs.at(job).segment_id;
  }

  ClusterState s_;
  Changes c_;
  int64_t window_ = 0;
};

TEST_F(TransitionsTest, InvalidRequestsChangeNothing) {
  const ClusterState before = s_;
  Changes ch;
  Job j;
  j.name = "j";
  j.min_gpus = 0;
  EXPECT_EQ(SubmitJob(s_, j, kT0, &ch).status().code(), Code::kInvalidArgument);
  j.min_gpus = 4;
  j.max_gpus = 2;
  EXPECT_EQ(SubmitJob(s_, j, kT0, &ch).status().code(), Code::kInvalidArgument);
  j.max_gpus = 4;
  j.team = "nobody";
  EXPECT_EQ(SubmitJob(s_, j, kT0, &ch).status().code(), Code::kNotFound);
  j.team = "ml";
  j.checkpoint_seconds = NAN;
  EXPECT_EQ(SubmitJob(s_, j, kT0, &ch).status().code(), Code::kInvalidArgument);
  Window w;
  w.pool = "nowhere";
  w.gpus = 1;
  w.end_ms = kT0 + 1000;
  EXPECT_EQ(AddWindow(s_, w, kT0, &ch).status().code(), Code::kNotFound);
  w.pool = "p";
  w.end_ms = kNever;  // a hard window needs an end
  EXPECT_EQ(AddWindow(s_, w, kT0, &ch).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(AddPool(s_, Pool{"p", ""}, 0, &ch).code(), Code::kAlreadyExists);
  EXPECT_EQ(AddPool(s_, Pool{"has space", ""}, 0, &ch).code(), Code::kInvalidArgument);
  EXPECT_EQ(PutTeam(s_, Team{"t", -1, -1, 0, 0}, 0, &ch).code(), Code::kInvalidArgument);
  EXPECT_EQ(CancelJob(s_, 999, "", kT0, &ch).code(), Code::kNotFound);
  EXPECT_TRUE(ch.empty());
  EXPECT_EQ(s_.jobs.size(), before.jobs.size());
  EXPECT_EQ(s_.windows.size(), before.windows.size());
  EXPECT_EQ(s_.next_id, before.next_id);
}

TEST_F(TransitionsTest, JobsWithoutATeamGoToTheDefaultTeam) {
  Job j;
  j.name = "anonymous";
  j.min_gpus = 1;
  j.max_gpus = 1;
  Changes ch;
  const int64_t id = SubmitJob(s_, j, kT0, &ch).value();
  EXPECT_EQ(s_.jobs.at(id).team, kDefaultTeam);
  EXPECT_TRUE(s_.teams.count(kDefaultTeam));
  EXPECT_TRUE(ch.teams.count(kDefaultTeam));
}

TEST_F(TransitionsTest, EachSegmentGetsANewFencingToken) {
  const int64_t job = Submit(4);
  const int64_t seg1 = Start(job, 4);
  const uint64_t seg_token1 = s_.jobs.at(job).fencing_token;
  EXPECT_EQ(s_.segments.at(seg1).fencing_token, seg_token1);
  TimeMs until = 0;
  // The segment's own token is no worker's: it never passes.
  EXPECT_FALSE(FencingValid(s_, job, seg_token1, kT0, &until));

  Worker w = RegisterWorker(s_, job, "host:1", kT0, &c_).value();
  const uint64_t token1 = w.fencing_token;
  EXPECT_GT(token1, seg_token1);
  EXPECT_EQ(s_.jobs.at(job).fencing_token, token1) << "the job shows the newest token";
  EXPECT_TRUE(FencingValid(s_, job, token1, kT0, &until));
  EXPECT_EQ(until, kNever);
  Changes ch;
  ASSERT_OK(AckSegment(s_, w.id, 100, kT0 + 1000, &ch));
  EXPECT_EQ(s_.segments.at(seg1).state, SegmentState::kEnded);
  EXPECT_EQ(s_.jobs.at(job).state, JobState::kPending);
  EXPECT_EQ(s_.jobs.at(job).checkpoint_step, 100);
  EXPECT_EQ(s_.jobs.at(job).eligible_ms, kT0 + 1000);
  EXPECT_TRUE(s_.workers.at(w.id).released);
  EXPECT_FALSE(FencingValid(s_, job, token1, kT0 + 1000, &until));

  const int64_t seg2 = Start(job, 4, kT0 + 2000);
  EXPECT_GT(s_.segments.at(seg2).fencing_token, token1);
  const uint64_t token2 = RegisterWorker(s_, job, "host:2", kT0 + 2000, &c_)->fencing_token;
  EXPECT_GT(token2, s_.segments.at(seg2).fencing_token);
  EXPECT_NE(seg2, seg1);
  // The old worker stays fenced: it cannot act for the new incarnation.
  EXPECT_EQ(AckSegment(s_, w.id, 200, kT0 + 3000, &ch).code(), Code::kAborted);
  EXPECT_FALSE(ViewWorker(s_, w.id)->active);
  EXPECT_FALSE(FencingValid(s_, job, token1, kT0 + 3000, &until));
  EXPECT_TRUE(FencingValid(s_, job, token2, kT0 + 3000, &until));
}

TEST_F(TransitionsTest, EachWorkerIncarnationHoldsATokenOfItsOwn) {
  const int64_t job = Submit(4);
  const int64_t seg = Start(job, 4);
  const Worker a = RegisterWorker(s_, job, "host:1", kT0, &c_).value();
  const Worker b = RegisterWorker(s_, job, "host:2", kT0, &c_).value();
  EXPECT_NE(a.fencing_token, b.fencing_token);
  EXPECT_GT(a.fencing_token, s_.segments.at(seg).fencing_token);
  EXPECT_GT(b.fencing_token, a.fencing_token) << "drawn from one growing counter";
  EXPECT_EQ(ViewWorker(s_, b.id)->fencing_token, b.fencing_token) << "views carry the worker's own";
  TimeMs until = 0;
  EXPECT_TRUE(FencingValid(s_, job, a.fencing_token, kT0, &until));
  EXPECT_TRUE(FencingValid(s_, job, b.fencing_token, kT0, &until));

  // b leaves: its token is stale, a's is not, and the segment goes on.
  Changes ch;
  ASSERT_OK(ReleaseWorker(s_, b.id, kT0 + 10, &ch));
  std::string why;
  EXPECT_FALSE(FencingValid(s_, job, b.fencing_token, kT0 + 10, &until, &why));
  EXPECT_NE(why.find("left"), std::string::npos) << why;
  EXPECT_TRUE(FencingValid(s_, job, a.fencing_token, kT0 + 10, &until));
  EXPECT_TRUE(ViewWorker(s_, a.id)->active);
  // The same process registering again is a new incarnation, newer token.
  const Worker b2 = RegisterWorker(s_, job, "host:2", kT0 + 20, &c_).value();
  EXPECT_GT(b2.fencing_token, b.fencing_token);
  EXPECT_TRUE(FencingValid(s_, job, b2.fencing_token, kT0 + 20, &until));
  EXPECT_FALSE(FencingValid(s_, job, b.fencing_token, kT0 + 20, &until));
  // A token of another job, or one never issued, is refused with a reason.
  EXPECT_FALSE(FencingValid(s_, job, b2.fencing_token + 100, kT0 + 20, &until, &why));
  EXPECT_NE(why.find("holds it"), std::string::npos) << why;
  EXPECT_FALSE(FencingValid(s_, job, 0, kT0 + 20, &until));

  // The next segment's tokens are larger than every token of this one.
  ASSERT_OK(AckSegment(s_, a.id, 10, kT0 + 30, &ch));
  EXPECT_FALSE(FencingValid(s_, job, a.fencing_token, kT0 + 30, &until));
  const int64_t seg2 = Start(job, 4, kT0 + 40);
  const Worker c = RegisterWorker(s_, job, "host:3", kT0 + 40, &c_).value();
  EXPECT_GT(s_.segments.at(seg2).fencing_token, b2.fencing_token);
  EXPECT_GT(c.fencing_token, s_.segments.at(seg2).fencing_token);
  EXPECT_TRUE(FencingValid(s_, job, c.fencing_token, kT0 + 40, &until));
  EXPECT_FALSE(FencingValid(s_, job, b2.fencing_token, kT0 + 40, &until));
}

// A store from before schema version 4 gave all workers of a segment one
// token: it stays valid while any of them may commit.
TEST_F(TransitionsTest, ATokenSharedByOldWorkersIsValidWhileAnyHolderIs) {
  const int64_t job = Submit(4);
  const int64_t seg = Start(job, 4);
  const uint64_t shared = s_.segments.at(seg).fencing_token;
  const int64_t a = RegisterWorker(s_, job, "host:1", kT0, &c_)->id;
  const int64_t b = RegisterWorker(s_, job, "host:2", kT0, &c_)->id;
  s_.workers.at(a).fencing_token = shared;
  s_.workers.at(b).fencing_token = shared;
  TimeMs until = 0;
  EXPECT_TRUE(FencingValid(s_, job, shared, kT0, &until));
  Changes ch;
  ASSERT_OK(ReleaseWorker(s_, a, kT0 + 1, &ch));
  EXPECT_TRUE(FencingValid(s_, job, shared, kT0 + 1, &until));
  ASSERT_OK(ReleaseWorker(s_, b, kT0 + 2, &ch));
  EXPECT_FALSE(FencingValid(s_, job, shared, kT0 + 2, &until));
}

TEST_F(TransitionsTest, ANoticedSegmentIsFencedAtItsDeadline) {
  const int64_t job = Submit(4);
  const int64_t seg = Start(job, 4);
  Plan plan;
  plan.notices.push_back(NoticeDecision{seg, kT0 + 30'000, NoticeReason::kPreempted, 77});
  Changes ch;
  ApplyPlan(s_, plan, kT0 + 10'000, &ch);
  const Segment& sg = s_.segments.at(seg);
  EXPECT_EQ(sg.state, SegmentState::kNotified);
  EXPECT_EQ(sg.notice_ms, kT0 + 10'000);
  EXPECT_EQ(sg.preempted_for, 77);
  EXPECT_EQ(s_.counters.preemptions, 1);
  TimeMs until = 0;
  const uint64_t token = RegisterWorker(s_, job, "host:1", kT0 + 10'000, &c_)->fencing_token;
  EXPECT_TRUE(FencingValid(s_, job, token, kT0 + 29'999, &until));
  EXPECT_EQ(until, kT0 + 30'000);
  EXPECT_FALSE(FencingValid(s_, job, token, kT0 + 30'000, &until));
  // A second notice for the same segment is ignored.
  plan.notices[0].deadline_ms = kT0 + 99'000;
  ApplyPlan(s_, plan, kT0 + 11'000, &ch);
  EXPECT_EQ(s_.segments.at(seg).deadline_ms, kT0 + 30'000);
  EXPECT_EQ(s_.counters.notices_sent, 1);
}

// An emergency checkpoint's notice-to-replicas figure: the segment keeps the
// slowest rank's; a checkpoint without one leaves it; a bad one is refused.
TEST_F(TransitionsTest, ASegmentKeepsTheSlowestRanksNoticeToReplicasFigure) {
  const int64_t job = Submit(2);
  const int64_t seg = Start(job, 2);
  Worker a = RegisterWorker(s_, job, "host:1", kT0, &c_).value();
  Worker b = RegisterWorker(s_, job, "host:2", kT0, &c_).value();
  Changes ch;
  EXPECT_EQ(s_.segments.at(seg).notice_to_replicas_seconds, -1);
  ASSERT_OK(ReportCheckpoint(s_, a.id, 10, 1.0, 0, kT0 + 1'000, &ch));
  EXPECT_EQ(s_.segments.at(seg).notice_to_replicas_seconds, -1);
  ASSERT_OK(ReportCheckpoint(s_, a.id, 11, 1.0, 0, kT0 + 2'000, &ch, 4.5));
  ASSERT_OK(ReportCheckpoint(s_, b.id, 11, 1.0, 0, kT0 + 2'000, &ch, 6.25));
  ASSERT_OK(ReportCheckpoint(s_, a.id, 11, 1.0, 0, kT0 + 2'000, &ch, 5.0));
  EXPECT_EQ(s_.segments.at(seg).notice_to_replicas_seconds, 6.25);
  EXPECT_TRUE(ch.segments.count(seg));
  for (double bad : {-1.0, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    Status s = ReportCheckpoint(s_, a.id, 12, 1.0, 0, kT0 + 3'000, &ch, bad);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("notice_to_replicas_seconds"), std::string::npos) << s.ToString();
  }
  EXPECT_EQ(s_.segments.at(seg).notice_to_replicas_seconds, 6.25);
}

TEST_F(TransitionsTest, LostSegmentsChargeTheWorkSinceTheLastCheckpoint) {
  const int64_t job = Submit(4);
  const int64_t seg = Start(job, 4);
  Worker w = RegisterWorker(s_, job, "host:1", kT0, &c_).value();
  Changes ch;
  ASSERT_OK(ReportCheckpoint(s_, w.id, 50, 20.0, 1 << 30, kT0 + 60'000, &ch));
  EXPECT_DOUBLE_EQ(s_.jobs.at(job).checkpoint_seconds, 0.3 * 30 + 0.7 * 20);
  Plan plan;
  plan.lost.push_back(LostDecision{seg, "no ack by the deadline"});
  ApplyPlan(s_, plan, kT0 + 100'000, &ch);
  EXPECT_EQ(s_.segments.at(seg).state, SegmentState::kLost);
  EXPECT_EQ(s_.jobs.at(job).state, JobState::kPending);
  EXPECT_DOUBLE_EQ(s_.jobs.at(job).lost_gpu_seconds,
                   4 * 40.0);  // 4 GPUs x 40 s since the checkpoint
  EXPECT_DOUBLE_EQ(s_.counters.lost_gpu_seconds, 160.0);
  EXPECT_EQ(s_.counters.segments_lost, 1);
  EXPECT_NE(s_.jobs.at(job).message.find("no ack"), std::string::npos);
}

TEST_F(TransitionsTest, WorkersOnlyJoinARunningSegment) {
  const int64_t job = Submit(4);
  Changes ch;
  EXPECT_EQ(RegisterWorker(s_, job, "w", kT0, &ch).status().code(), Code::kFailedPrecondition);
  Start(job, 4);
  EXPECT_EQ(RegisterWorker(s_, job, "", kT0, &ch).status().code(), Code::kInvalidArgument);
  Worker w = RegisterWorker(s_, job, "w", kT0, &ch).value();
  ASSERT_OK(FinishJob(s_, w.id, kT0 + 5000, &ch));
  EXPECT_EQ(s_.jobs.at(job).state, JobState::kDone);
  EXPECT_EQ(RegisterWorker(s_, job, "w2", kT0, &ch).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(Heartbeat(s_, w.id, HeartbeatReport{1, {}, {}, {}}, kT0 + 6000)->active, false);
  EXPECT_EQ(Heartbeat(s_, 12345, HeartbeatReport{1, {}, {}, {}}, kT0).status().code(),
            Code::kNotFound);
}

TEST_F(TransitionsTest, CancelEndsARunningSegment) {
  const int64_t job = Submit(4);
  const int64_t seg = Start(job, 4);
  Changes ch;
  ASSERT_OK(CancelJob(s_, job, "user asked", kT0 + 1, &ch));
  EXPECT_EQ(s_.jobs.at(job).state, JobState::kCancelled);
  EXPECT_EQ(s_.segments.at(seg).state, SegmentState::kCancelled);
  EXPECT_EQ(s_.jobs.at(job).message, "cancelled: user asked");
  EXPECT_EQ(CancelJob(s_, job, "", kT0 + 2, &ch).code(), Code::kFailedPrecondition);
  EXPECT_EQ(SetPriority(s_, job, Priority::kHigh, &ch).code(), Code::kFailedPrecondition);
}

TEST_F(TransitionsTest, ClosingAWindowMovesItsEndNeverLater) {
  Changes ch;
  ASSERT_OK(CloseWindow(s_, window_, 60'000, kT0 + 1000, &ch));
  EXPECT_EQ(s_.windows.at(window_).end_ms, kT0 + 61'000);
  EXPECT_TRUE(s_.windows.at(window_).closed_early);
  // A longer lead cannot extend it again.
  ASSERT_OK(CloseWindow(s_, window_, 600'000, kT0 + 2000, &ch));
  EXPECT_EQ(s_.windows.at(window_).end_ms, kT0 + 61'000);
  ASSERT_OK(CloseWindow(s_, window_, 0, kT0 + 3000, &ch));
  EXPECT_EQ(s_.windows.at(window_).end_ms, kT0 + 3000);
  EXPECT_EQ(CloseWindow(s_, window_, 0, kT0 + 4000, &ch).code(), Code::kFailedPrecondition);
  // A future window closed before it opens becomes empty.
  Window future;
  future.pool = "p";
  future.gpus = 2;
  future.start_ms = kT0 + 100'000;
  future.end_ms = kT0 + 200'000;
  const int64_t id = AddWindow(s_, future, kT0, &ch).value();
  ASSERT_OK(CloseWindow(s_, id, 0, kT0 + 5000, &ch));
  EXPECT_EQ(s_.windows.at(id).end_ms, s_.windows.at(id).start_ms);
  EXPECT_FALSE(s_.windows.at(id).open_at(kT0 + 100'000));
}

TEST_F(TransitionsTest, AccountTimeIntegratesUsageWithHalfLifeDecay) {
  const int64_t job = Submit(4);
  Start(job, 4);
  PolicyConfig config;
  config.usage_half_life_seconds = 100;
  Changes ch;
  AccountTime(s_, kT0, config, &ch);  // starts the clock
  AccountTime(s_, kT0 + 10'000, config, &ch);
  EXPECT_DOUBLE_EQ(s_.counters.window_gpu_seconds, 8 * 10.0);
  EXPECT_DOUBLE_EQ(s_.counters.used_gpu_seconds, 4 * 10.0);
  const double after_10s = s_.teams.at("ml").usage_gpu_seconds;
  EXPECT_GT(after_10s, 0);
  // With nothing running, usage halves every half-life.
  Changes end;
  ASSERT_OK(CancelJob(s_, job, "", kT0 + 10'000, &end));
  AccountTime(s_, kT0 + 110'000, config, &ch);
  EXPECT_NEAR(s_.teams.at("ml").usage_gpu_seconds, after_10s / 2, 1e-9);
}

TEST_F(TransitionsTest, AccountTimeAddsAttainedServiceOnlyWhileRunning) {
  const int64_t running = Submit(4);
  const int64_t waiting = Submit(4);
  Start(running, 4);
  PolicyConfig config;
  Changes ch;
  AccountTime(s_, kT0, config, &ch);
  AccountTime(s_, kT0 + 10'000, config, &ch);
  AccountTime(s_, kT0 + 25'000, config, &ch);
  EXPECT_DOUBLE_EQ(s_.jobs.at(running).service_gpu_seconds,
                   4 * 25.0);  // no decay: it is what the job had
  EXPECT_DOUBLE_EQ(s_.jobs.at(waiting).service_gpu_seconds, 0);
  Changes end;
  ASSERT_OK(CancelJob(s_, running, "", kT0 + 25'000, &end));
  AccountTime(s_, kT0 + 100'000, config, &ch);
  EXPECT_DOUBLE_EQ(s_.jobs.at(running).service_gpu_seconds, 4 * 25.0);
}

TEST_F(TransitionsTest, AShrinkNoticesOnlyTheRanksThatLeaveAndReformsWithoutThem) {
  const int64_t job = Submit(8);
  const int64_t seg = Start(job, 8);
  std::vector<int64_t> workers;  // one per 2 GPUs, rank order = registration order
  for (int i = 0; i < 4; i++) {
    workers.push_back(RegisterWorker(s_, job, "w" + std::to_string(i), kT0, &c_).value().id);
  }
  Plan plan;
  plan.shrinks.push_back(ShrinkDecision{seg, {Allocation{window_, 4}}, kT0 + 40'000, 99});
  Changes ch;
  ApplyPlan(s_, plan, kT0 + 1000, &ch);
  EXPECT_TRUE(ch.segments.count(seg));
  // Half the GPUs go: the two newest workers (the highest ranks) leave.
  for (size_t i = 0; i < workers.size(); i++) {
    const WorkerView v = ViewWorker(s_, workers[i]).value();
    EXPECT_TRUE(v.active) << i;
    if (i >= 2) {
      EXPECT_EQ(v.notice_reason, NoticeReason::kShrink) << i;
      EXPECT_EQ(v.deadline_ms, kT0 + 40'000) << i;
      EXPECT_EQ(v.notice_ms, kT0 + 1000) << i;
    } else {
      EXPECT_EQ(v.notice_reason, NoticeReason::kNone) << i;
    }
  }
  EXPECT_EQ(s_.segments.at(seg).gpus(), 8) << "the leaving ranks hold their GPUs to the deadline";
  Changes at;
  ApplyPlan(s_, Plan(), kT0 + 40'000, &at);
  EXPECT_EQ(s_.segments.at(seg).gpus(), 4);
  EXPECT_EQ(s_.segments.at(seg).state, SegmentState::kRunning);
  EXPECT_TRUE(at.workers.count(workers[2]) && at.workers.count(workers[3]));
  EXPECT_FALSE(ViewWorker(s_, workers[3]).value().active) << "a leaving worker is released";
  EXPECT_TRUE(ViewWorker(s_, workers[0]).value().active);
  EXPECT_EQ(ViewWorker(s_, workers[0]).value().notice_reason, NoticeReason::kNone);
}

TEST_F(TransitionsTest, AGrowAddsGpusToTheRunningSegment) {
  const int64_t job = Submit(4);
  const int64_t seg = Start(job, 4);
  Plan plan;
  plan.grows.push_back(GrowDecision{seg, {Allocation{window_, 2}}});
  Changes ch;
  ApplyPlan(s_, plan, kT0 + 1000, &ch);
  EXPECT_TRUE(ch.segments.count(seg));
  ASSERT_EQ(s_.segments.at(seg).allocs.size(), 1u);
  EXPECT_EQ(s_.segments.at(seg).gpus(), 6);
}

TEST_F(TransitionsTest, StartsRecordTheirWaitInTheHistogram) {
  const int64_t job = Submit(2);
  Start(job, 2, kT0 + 30'000);  // waited 30 s
  const auto& bounds = WaitBucketsSeconds();
  ASSERT_EQ(s_.counters.wait_buckets.size(), bounds.size());
  for (size_t i = 0; i < bounds.size(); i++) {
    EXPECT_EQ(s_.counters.wait_buckets[i], bounds[i] >= 30 ? 1 : 0) << bounds[i];
  }
  EXPECT_DOUBLE_EQ(s_.counters.wait_seconds_sum, 30.0);
  EXPECT_EQ(s_.counters.segments_started, 1);
}

// A worker crash reported while the segment runs (the agent starts the
// worker again) counts for the crash-loop guard but leaves the segment
// running; the limit-th crash in the window fails the job and loses the
// segment; a crash of an ended segment is refused.
TEST_F(TransitionsTest, AWorkerCrashIsCountedAndOnlyTheLimitEndsTheSegment) {
  const int64_t job = Submit(2);
  const int64_t seg = Start(job, 2);
  Changes ch;
  bool relaunch = false;
  ASSERT_OK(ReportWorkerCrash(s_, seg, 9, "rank 1: boom", 3, 60'000, kT0 + 1000, &ch, &relaunch));
  EXPECT_TRUE(relaunch);
  EXPECT_EQ(s_.segments.at(seg).state, SegmentState::kRunning);
  EXPECT_EQ(s_.jobs.at(job).state, JobState::kRunning);
  EXPECT_EQ(s_.jobs.at(job).crash_ms, (std::vector<TimeMs>{kT0 + 1000}));
  EXPECT_TRUE(ch.jobs.count(job));
  // Out of the window: forgotten.
  ASSERT_OK(ReportWorkerCrash(s_, seg, 9, "", 3, 60'000, kT0 + 70'000, &ch, &relaunch));
  EXPECT_TRUE(relaunch);
  ASSERT_OK(ReportWorkerCrash(s_, seg, 9, "", 3, 60'000, kT0 + 71'000, &ch, &relaunch));
  EXPECT_TRUE(relaunch);
  EXPECT_EQ(s_.jobs.at(job).crash_ms.size(), 2u);
  ASSERT_OK(
      ReportWorkerCrash(s_, seg, 9, "rank 0: again", 3, 60'000, kT0 + 72'000, &ch, &relaunch));
  EXPECT_FALSE(relaunch);
  EXPECT_EQ(s_.segments.at(seg).state, SegmentState::kLost);
  EXPECT_EQ(s_.jobs.at(job).state, JobState::kFailed);
  EXPECT_NE(s_.jobs.at(job).message.find("crash loop: 3 crashes"), std::string::npos)
      << s_.jobs.at(job).message;
  EXPECT_NE(s_.jobs.at(job).message.find("rank 0: again"), std::string::npos);
  EXPECT_EQ(ReportWorkerCrash(s_, seg, 9, "", 3, 60'000, kT0 + 73'000, &ch, &relaunch).code(),
            Code::kFailedPrecondition);
  EXPECT_EQ(ReportWorkerCrash(s_, 999, 9, "", 3, 60'000, kT0, &ch, &relaunch).code(),
            Code::kNotFound);
}

// --- prices, budgets and what segments achieved (accounting.h) ---

TEST_F(TransitionsTest, ASegmentIsChargedAtThePriceInForceWhenItStarted) {
  Changes ch;
  ASSERT_OK(SetPoolPrice(s_, "p", 2, kT0, &ch));
  EXPECT_TRUE(ch.pools.count("p"));
  const ClusterState before = s_;
  EXPECT_EQ(SetPoolPrice(s_, "p", -1, kT0, &ch).code(), Code::kInvalidArgument);
  EXPECT_EQ(SetPoolPrice(s_, "p", NAN, kT0, &ch).code(), Code::kInvalidArgument);
  EXPECT_EQ(SetPoolPrice(s_, "nowhere", 1, kT0, &ch).code(), Code::kNotFound);
  EXPECT_EQ(s_.pools.at("p").price_history.size(), before.pools.at("p").price_history.size());

  const int64_t job = Submit(4);
  const int64_t seg = Start(job, 4);
  EXPECT_EQ(s_.segments.at(seg).price_per_gpu_hour, 2);
  ASSERT_OK(SetPoolPrice(s_, "p", 5, kT0 + 1000, &ch));  // a later price: not this segment's
  ASSERT_EQ(s_.pools.at("p").price_history.size(), 2u);
  EXPECT_EQ(s_.pools.at("p").price_history[1].at_ms, kT0 + 1000);
  EXPECT_EQ(s_.pools.at("p").price_history[1].price_per_gpu_hour, 5);
  s_.counters.accounted_ms = kT0;
  AccountTime(s_, kT0 + 1'800'000, PolicyConfig(), &ch);  // half an hour of 4 GPUs at 2
  EXPECT_NEAR(s_.segments.at(seg).cost, 4.0, 1e-9);
  EXPECT_NEAR(s_.jobs.at(job).cost, 4.0, 1e-9);
  EXPECT_NEAR(s_.teams.at("ml").spent, 4.0, 1e-9);
  // The next segment of the job pays the new price.
  const Worker w = RegisterWorker(s_, job, "w", kT0 + 1'800'000, &ch).value();
  ASSERT_OK(AckSegment(s_, w.id, 10, kT0 + 1'800'000, &ch));
  EXPECT_EQ(s_.segments.at(Start(job, 4, kT0 + 1'800'000)).price_per_gpu_hour, 5);
}

TEST_F(TransitionsTest, ABudgetPeriodStartsOverWhenItEnds) {
  Changes ch;
  Team t = s_.teams.at("ml");
  t.budget = 100;
  t.budget_period_seconds = 3600;
  ASSERT_OK(PutTeam(s_, t, kT0, &ch));
  EXPECT_EQ(s_.teams.at("ml").period_start_ms, kT0);
  t.budget_period_seconds = 60;  // shorter than an hour: refused
  EXPECT_EQ(PutTeam(s_, t, kT0, &ch).code(), Code::kInvalidArgument);
  t.budget_period_seconds = 3600;
  t.budget = -5;
  EXPECT_EQ(PutTeam(s_, t, kT0, &ch).code(), Code::kInvalidArgument);
  ASSERT_OK(SetPoolPrice(s_, "p", 1, kT0, &ch));
  Start(Submit(2), 2);
  s_.counters.accounted_ms = kT0;
  AccountTime(s_, kT0 + 3'000'000, PolicyConfig(), &ch);  // 50 min x 2 GPUs
  EXPECT_NEAR(s_.teams.at("ml").spent, 100.0 / 60, 1e-9);
  AccountTime(s_, kT0 + 3'700'000, PolicyConfig(), &ch);  // into the next period
  EXPECT_EQ(s_.teams.at("ml").period_start_ms, kT0 + 3'600'000);
  EXPECT_NEAR(s_.teams.at("ml").spent, 2 * 700.0 / 3600, 1e-9);
  // An admin raising the budget keeps what was spent.
  t.budget = 200;
  ASSERT_OK(PutTeam(s_, t, kT0 + 3'700'000, &ch));
  EXPECT_NEAR(s_.teams.at("ml").spent, 2 * 700.0 / 3600, 1e-9);
  EXPECT_EQ(s_.teams.at("ml").period_start_ms, kT0 + 3'600'000);
}

// A segment resumed from step 100 restarts for 30 s, then steps once a
// second at 4 GPUs; its checkpoint at step 150 keeps 50 steps; it is
// lost at step 160.
TEST_F(TransitionsTest, HeartbeatsGiveThePaceLossCurveAndEfficiency) {
  Changes ch;
  const int64_t job = Submit(4);
  s_.jobs.at(job).checkpoint_step = 100;
  const int64_t seg = Start(job, 4);
  EXPECT_EQ(s_.segments.at(seg).start_step, 100);
  const Worker w = RegisterWorker(s_, job, "w", kT0, &ch).value();
  auto beat = [&](int64_t step, TimeMs at, std::optional<double> loss) {
    HeartbeatReport r;
    r.step = step;
    r.loss = loss;
    r.samples = step * 32;
    ASSERT_TRUE(Heartbeat(s_, w.id, r, at).value().active);
  };
  beat(100, kT0 + 10'000, std::nullopt);  // still restarting
  beat(101, kT0 + 30'000, 2.5);
  beat(101, kT0 + 31'000, 2.4);  // the same step again: one point per step
  beat(130, kT0 + 59'000, 2.0);
  ASSERT_OK(ReportCheckpoint(s_, w.id, 150, 4.0, 0, kT0 + 80'000, &ch));
  beat(160, kT0 + 89'000, 1.5);
  const Job& j = s_.jobs.at(job);
  EXPECT_EQ(j.samples, 160 * 32);
  ASSERT_EQ(j.losses.size(), 3u);
  EXPECT_EQ(j.losses[0].step, 101);
  EXPECT_EQ(j.losses[0].loss, 2.5);
  EXPECT_EQ(j.losses[2].segment_id, seg);
  ASSERT_EQ(j.step_time.count(4), 1u);
  EXPECT_NEAR(j.step_time.at(4).pace(), 1.0, 1e-9);  // (89 - 30) s / (160 - 101) steps
  EXPECT_EQ(j.step_time.at(4).steps, 59);

  Plan lost;
  lost.lost.push_back(LostDecision{seg, "all worker leases expired"});
  ApplyPlan(s_, lost, kT0 + 100'000, &ch);
  const JobFigures f = FigureJob(s_, s_.jobs.at(job), kT0 + 200'000);
  ASSERT_EQ(f.segments.size(), 1u);
  const SegmentFigures& g = f.segments[0];
  EXPECT_NEAR(g.held_gpu_seconds, 4 * 100.0, 1e-9);
  EXPECT_NEAR(g.restart_gpu_seconds, 4 * 30.0, 1e-9);
  EXPECT_NEAR(g.checkpoint_gpu_seconds, 4 * 4.0, 1e-9);
  EXPECT_EQ(g.kept_steps, 50);
  EXPECT_NEAR(g.useful_gpu_seconds, 4 * 50.0, 1e-9);
  EXPECT_NEAR(g.lost_gpu_seconds, 4 * 10.0, 1e-9);
  EXPECT_NEAR(f.efficiency, 0.5, 1e-9);

  // The next segment resumes at 150: the curve goes on from there, its
  // first point marks the segment's start.
  const int64_t next = Start(job, 4, kT0 + 300'000);
  EXPECT_EQ(s_.segments.at(next).start_step, 150);
  const Worker w2 = RegisterWorker(s_, job, "w2", kT0 + 300'000, &ch).value();
  HeartbeatReport r;
  r.step = 151;
  r.loss = 1.6;
  ASSERT_OK(Heartbeat(s_, w2.id, r, kT0 + 330'000).status());
  EXPECT_EQ(s_.jobs.at(job).losses.back().segment_id, next);
  EXPECT_EQ(s_.jobs.at(job).losses.back().step, 151);
}

TEST_F(TransitionsTest, ALongLossCurveIsThinnedKeepingItsEnds) {
  Changes ch;
  const int64_t job = Submit(1);
  Start(job, 1);
  const Worker w = RegisterWorker(s_, job, "w", kT0, &ch).value();
  const int64_t steps = 3 * static_cast<int64_t>(kMaxLossPoints);
  for (int64_t step = 1; step <= steps; step++) {
    HeartbeatReport r;
    r.step = step;
    r.loss = 1.0 / static_cast<double>(step);
    ASSERT_OK(Heartbeat(s_, w.id, r, kT0 + step).status());
  }
  const std::vector<LossPoint>& losses = s_.jobs.at(job).losses;
  EXPECT_LE(losses.size(), kMaxLossPoints);
  EXPECT_GT(losses.size(), kMaxLossPoints / 2);
  EXPECT_EQ(losses.front().step, 1);
  EXPECT_EQ(losses.back().step, steps);
  for (size_t i = 1; i < losses.size(); i++) ASSERT_LT(losses[i - 1].step, losses[i].step);
}

// --- evaluations (evals.h) ---

// A job of `gpus` GPUs that evaluates every `every`-th checkpoint.
Job EvaluatedJob(int gpus, int every) {
  Job spec;
  spec.name = "j";
  spec.team = "ml";
  spec.min_gpus = spec.max_gpus = gpus;
  spec.eval = R"({"command":["eval"]})";
  spec.eval_every = every;
  return spec;
}

TEST_F(TransitionsTest, EvaluationsAreQueuedPlacedOnLeftoversAndSuperseded) {
  Changes ch;
  // A node window with GPUs 0-3; a job on GPUs 0 and 1 evaluates every
  // second checkpoint on one GPU.
  Window node;
  node.pool = "p";
  node.gpus = 4;
  node.start_ms = kT0;
  node.end_ms = kT0 + 3'600'000;
  node.node = "n1";
  node.node_gpus = {0, 1, 2, 3};
  const int64_t nw = AddWindow(s_, node, kT0, &ch).value();
  node = s_.windows.at(nw);
  Job spec = EvaluatedJob(2, 2);
  spec.eval_gpus = 1;
  const int64_t job = SubmitJob(s_, spec, kT0, &ch).value();
  Plan plan;
  plan.starts.push_back(StartDecision{job, {Allocation{nw, 2}}, kT0 + 3'600'000});
  ApplyPlan(s_, plan, kT0, &ch);
  Segment& seg = s_.segments.at(s_.jobs.at(job).segment_id);
  seg.placement = {Placement{nw, {0, 1}}};
  const Worker w = RegisterWorker(s_, job, "w", kT0, &ch).value();

  ASSERT_OK(ReportCheckpoint(s_, w.id, 10, 1, 0, kT0 + 1, &ch));
  EXPECT_TRUE(s_.evals.empty());  // every second checkpoint
  ASSERT_OK(ReportCheckpoint(s_, w.id, 20, 1, 0, kT0 + 2, &ch));
  ASSERT_EQ(s_.evals.size(), 1u);
  ASSERT_OK(ReportCheckpoint(s_, w.id, 30, 1, 0, kT0 + 3, &ch));
  ASSERT_OK(ReportCheckpoint(s_, w.id, 40, 1, 0, kT0 + 4, &ch));
  // Step 20's evaluation never ran: step 40's replaced it.
  ASSERT_EQ(s_.evals.size(), 2u);
  const EvalTask& old = s_.evals.begin()->second;
  const int64_t newest = s_.evals.rbegin()->first;
  EXPECT_EQ(old.state, EvalState::kSuperseded);
  EXPECT_EQ(s_.evals.at(newest).step, 40);

  // Placed on the first GPU no segment holds; with no slot, nowhere.
  EXPECT_TRUE(PlaceEvaluations(s_, node, 0, kT0 + 5, &ch).empty());
  EXPECT_EQ(PlaceEvaluations(s_, node, 1, kT0 + 5, &ch), std::vector<int64_t>{newest});
  EXPECT_EQ(s_.evals.at(newest).state, EvalState::kRunning);
  EXPECT_EQ(s_.evals.at(newest).gpu, 2);
  EXPECT_EQ(s_.evals.at(newest).attempts, 1);
  // A segment placed on its GPU stops it: it waits, and starts again on
  // the GPU left over.
  seg.placement[0].gpus = {0, 1, 2};
  EXPECT_EQ(PlaceEvaluations(s_, node, 1, kT0 + 6, &ch), std::vector<int64_t>{newest});
  EXPECT_EQ(s_.evals.at(newest).gpu, 3);
  EXPECT_EQ(s_.evals.at(newest).attempts, 2);
  seg.placement[0].gpus = {0, 1, 2, 3};
  EXPECT_TRUE(PlaceEvaluations(s_, node, 1, kT0 + 7, &ch).empty());
  EXPECT_EQ(s_.evals.at(newest).state, EvalState::kPending);
  EXPECT_NE(s_.evals.at(newest).message.find("GPU 3 of node n1 went to a training segment"),
            std::string::npos);

  // Its result, reported by the node running it; another node's report,
  // or one for a task not running, changes nothing.
  seg.placement[0].gpus = {0, 1};
  PlaceEvaluations(s_, node, 1, kT0 + 8, &ch);
  ASSERT_OK(ReportEvaluation(s_, "n2", newest, 0, R"({"acc":1})", "", kT0 + 9, &ch));
  EXPECT_EQ(s_.evals.at(newest).state, EvalState::kRunning);
  ASSERT_OK(ReportEvaluation(s_, "n1", newest, 0, R"({"acc":0.9})", "", kT0 + 9, &ch));
  EXPECT_EQ(s_.evals.at(newest).state, EvalState::kDone);
  EXPECT_EQ(s_.evals.at(newest).result, R"({"acc":0.9})");
  EXPECT_EQ(ReportEvaluation(s_, "n1", 999999, 0, "", "", kT0, &ch).code(), Code::kNotFound);

  // An evaluation running on a node that left waits again.
  ASSERT_OK(ReportCheckpoint(s_, w.id, 50, 1, 0, kT0 + 10, &ch));
  ASSERT_OK(ReportCheckpoint(s_, w.id, 60, 1, 0, kT0 + 11, &ch));
  const int64_t last = s_.evals.rbegin()->first;
  PlaceEvaluations(s_, node, 1, kT0 + 12, &ch);
  ASSERT_EQ(s_.evals.at(last).state, EvalState::kRunning);
  Window other = node;
  other.node = "n2";
  ASSERT_OK(CloseWindow(s_, nw, 0, kT0 + 13, &ch));
  PlaceEvaluations(s_, other, 0, kT0 + 14, &ch);
  EXPECT_EQ(s_.evals.at(last).state, EvalState::kPending);
  // A CPU-only evaluation needs a slot, no GPU.
  s_.jobs.at(job).eval_gpus = 0;
  Window cpu_only = other;
  cpu_only.node_gpus.clear();
  EXPECT_EQ(PlaceEvaluations(s_, cpu_only, 1, kT0 + 15, &ch), std::vector<int64_t>{last});
  EXPECT_EQ(s_.evals.at(last).gpu, -1);
}

// Results are kept however many there are; superseded and failed
// evaluations only the newest kKeptWithoutResult of them per job, the older
// ones deleted from the state and the store (named in the changes).
TEST_F(TransitionsTest, EvaluationsWithoutAResultAreKeptOnlyTheNewestFew) {
  Changes ch;
  const int64_t job = SubmitJob(s_, EvaluatedJob(1, 1), kT0, &ch).value();
  Job& j = s_.jobs.at(job);
  int64_t step = 0;
  std::vector<int64_t> created;
  auto queue = [&] {
    QueueEvaluation(s_, j, ++step, kT0 + step, &ch);
    created.push_back(s_.evals.rbegin()->first);
  };
  auto count = [&](EvalState state) {
    return std::count_if(s_.evals.begin(), s_.evals.end(),
                         [&](const auto& e) { return e.second.state == state; });
  };
  const size_t kMany = 3 * kKeptWithoutResult;
  std::set<int64_t> done;
  for (size_t i = 0; i < kMany; ++i) {
    queue();
    if (i % 3 == 0) {  // a third end with a result, a third fail, a third are superseded
      EvalTask& e = s_.evals.at(created.back());
      e.state = i % 2 == 0 ? EvalState::kDone : EvalState::kFailed;
      if (e.state == EvalState::kDone) done.insert(e.id);
    }
  }
  queue();
  ch = Changes();
  queue();  // supersedes the one before
  EXPECT_EQ(size_t(count(EvalState::kSuperseded) + count(EvalState::kFailed)), kKeptWithoutResult);
  EXPECT_EQ(count(EvalState::kPending), 1);
  for (int64_t id : done) EXPECT_EQ(s_.evals.count(id), 1u) << id;  // results stay
  // What was deleted is named so the store deletes its rows.
  size_t named = 0;
  for (int64_t id : ch.evals) named += s_.evals.count(id) == 0;
  EXPECT_GE(named, 1u);
  // The kept ones are the newest.
  int64_t oldest_kept = INT64_MAX, newest_gone = 0;
  for (int64_t id : created) {
    auto e = s_.evals.find(id);
    if (e == s_.evals.end()) {
      newest_gone = std::max(newest_gone, id);
    } else if (e->second.state == EvalState::kSuperseded || e->second.state == EvalState::kFailed) {
      oldest_kept = std::min(oldest_kept, id);
    }
  }
  EXPECT_GT(newest_gone, 0);
  EXPECT_LT(newest_gone, oldest_kept);
}

}  // namespace
}  // namespace stint::stintd
