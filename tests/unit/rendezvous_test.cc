// Rendezvous rounds: closing at max or after the last call, rank order by
// survivors, re-forming on a join, a failure report or a lost member, and
// standbys beyond the segment's size.
#include "stintd/core/rendezvous.h"

#include <gtest/gtest.h>

#include "util/status_matchers.h"

namespace stint::stintd {
namespace {

constexpr TimeMs kT0 = 1'800'000'000'000;

class RendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.rendezvous_last_call_seconds = 2;
    config_.lease_ttl_seconds = 10;
    Changes c;
    ASSERT_OK(AddPool(s_, Pool{"p", ""}, 0, &c));
    Window w;
    w.pool = "p";
    w.gpus = 8;
    w.start_ms = kT0;
    w.end_ms = kT0 + 3'600'000;
    const int64_t window = AddWindow(s_, w, kT0, &c).value();
    Job j;
    j.name = "elastic";
    j.min_gpus = 2;
    j.max_gpus = 3;
    job_ = SubmitJob(s_, j, kT0, &c).value();
    Plan plan;
    plan.starts.push_back(StartDecision{job_, {Allocation{window, 3}}, kT0 + 3'600'000});
    ApplyPlan(s_, plan, kT0, &c);
  }

  int64_t Register(const std::string& name) {
    Changes c;
    return RegisterWorker(s_, job_, name, kT0, &c).value().id;
  }

  RendezvousView Join(int64_t worker, uint64_t known, TimeMs now) {
    Changes c;
    Result<RendezvousView> v =
        JoinRendezvous(s_, worker, "h" + std::to_string(worker) + ":1", known, now, config_, &c);
    EXPECT_OK(v);
    return v.ok() ? *v : RendezvousView{};
  }

  RendezvousView View(int64_t worker) { return ViewRendezvous(s_, worker).value(); }

  Changes Advance(TimeMs now) {
    Changes c;
    AdvanceRendezvous(s_, now, config_, &c);
    return c;
  }

  // Keeps `workers` heartbeating at `now` (as the tick's merge would).
  void Beat(std::initializer_list<int64_t> workers, TimeMs now) {
    for (int64_t w : workers) s_.workers.at(w).last_heartbeat_ms = now;
  }

  // Whether `worker`'s own token passes the commit check at `now`.
  bool Valid(int64_t worker, TimeMs now) {
    TimeMs until = 0;
    return FencingValid(s_, job_, s_.workers.at(worker).fencing_token, now, &until);
  }

  ClusterState s_;
  PolicyConfig config_;
  int64_t job_ = 0;
};

TEST_F(RendezvousTest, ClosesAtOnceWhenTheSegmentIsFull) {
  const int64_t a = Register("a"), b = Register("b"), c = Register("c");
  EXPECT_EQ(Join(a, 0, kT0).phase, RendezvousPhase::kJoining);
  RendezvousView vb = Join(b, 0, kT0);
  EXPECT_EQ(vb.phase, RendezvousPhase::kJoining);
  EXPECT_EQ(vb.last_call_ms, kT0 + 2000) << "min reached: the last call starts";
  RendezvousView vc = Join(c, 0, kT0 + 10);
  ASSERT_TRUE(vc.ready(0));
  EXPECT_EQ(vc.generation, 1u);
  EXPECT_EQ(vc.world_size, 3);
  EXPECT_EQ(vc.rank, 2);
  EXPECT_EQ(View(a).rank, 0);
  EXPECT_EQ(View(b).rank, 1);
  EXPECT_EQ(vc.master_endpoint, "h" + std::to_string(a) + ":1");
  EXPECT_EQ(vc.min_workers, 2);
  EXPECT_EQ(vc.max_workers, 3);
}

TEST_F(RendezvousTest, ClosesWithMinWorkersOnlyAfterTheLastCall) {
  const int64_t a = Register("a"), b = Register("b");
  Join(a, 0, kT0);
  Join(b, 0, kT0);
  EXPECT_TRUE(Advance(kT0 + 1999).rendezvous.empty());
  EXPECT_EQ(View(a).phase, RendezvousPhase::kJoining);
  EXPECT_EQ(NextRendezvousDeadline(s_), kT0 + 2000);
  EXPECT_FALSE(Advance(kT0 + 2000).rendezvous.empty());
  EXPECT_TRUE(View(a).ready(0));
  EXPECT_EQ(View(b).world_size, 2);
  EXPECT_EQ(NextRendezvousDeadline(s_), kNever);
}

TEST_F(RendezvousTest, BelowMinTheRoundStaysOpen) {
  const int64_t a = Register("a");
  Join(a, 0, kT0);
  Advance(kT0 + 3'000'000);
  EXPECT_EQ(View(a).phase, RendezvousPhase::kJoining);
  EXPECT_EQ(View(a).last_call_ms, 0);
}

TEST_F(RendezvousTest, JoiningAgainIsIdempotent) {
  const int64_t a = Register("a"), b = Register("b"), c = Register("c");
  Join(a, 0, kT0);
  Join(b, 0, kT0);
  Join(c, 0, kT0);
  const Rendezvous before = s_.rendezvous.at(job_);
  Changes ch;
  Result<RendezvousView> again = JoinRendezvous(s_, b, "hb:1", 0, kT0 + 5, config_, &ch);
  ASSERT_OK(again);
  EXPECT_TRUE(again->ready(0));
  EXPECT_EQ(again->generation, 1u);
  EXPECT_EQ(again->rank, before.members[1].rank);
  EXPECT_TRUE(ch.rendezvous.empty()) << "an answered re-join writes nothing";
}

TEST_F(RendezvousTest, AFailureReportOpensTheNextRoundAndSurvivorsKeepTheirOrder) {
  const int64_t a = Register("a"), b = Register("b"), c = Register("c");
  Join(a, 0, kT0);
  Join(b, 0, kT0);
  Join(c, 0, kT0);
  // a's collective failed (b died): it re-joins saying it knew generation 1.
  RendezvousView va = Join(a, 1, kT0 + 100);
  EXPECT_EQ(va.generation, 2u);
  EXPECT_EQ(va.phase, RendezvousPhase::kJoining);
  EXPECT_EQ(View(b).generation, 2u) << "everyone sees the new generation";
  EXPECT_FALSE(View(b).member);
  Join(c, 1, kT0 + 200);
  Beat({a, c}, kT0 + 2200);
  Advance(kT0 + 2200);
  RendezvousView vc = View(c);
  ASSERT_TRUE(vc.ready(1));
  EXPECT_EQ(vc.world_size, 2);
  EXPECT_EQ(View(a).rank, 0);
  EXPECT_EQ(vc.rank, 1) << "c was after a in generation 1";
  EXPECT_EQ(vc.previous, (std::vector<int64_t>{a, b, c}));
}

TEST_F(RendezvousTest, ANewWorkerGrowsTheGroupAndIsRankedLast) {
  const int64_t a = Register("a"), b = Register("b");
  Join(a, 0, kT0);
  Join(b, 0, kT0);
  Advance(kT0 + 2000);
  ASSERT_TRUE(View(a).ready(0));
  const int64_t c = Register("c");
  RendezvousView vc = Join(c, 0, kT0 + 3000);
  EXPECT_EQ(vc.generation, 2u);
  EXPECT_EQ(vc.phase, RendezvousPhase::kJoining);
  Join(b, 1, kT0 + 3100);
  RendezvousView va = Join(a, 1, kT0 + 3200);
  ASSERT_TRUE(va.ready(1)) << "three joined: full, closed at once";
  EXPECT_EQ(va.rank, 0);
  EXPECT_EQ(View(b).rank, 1);
  EXPECT_EQ(View(c).rank, 2);
}

TEST_F(RendezvousTest, AWorkerBeyondTheSegmentSizeIsAStandbyUntilAMemberLeaves) {
  const int64_t a = Register("a"), b = Register("b"), c = Register("c"), d = Register("d");
  Join(a, 0, kT0);
  Join(b, 0, kT0);
  Join(c, 0, kT0);
  RendezvousView vd = Join(d, 0, kT0 + 10);
  EXPECT_TRUE(vd.standby);
  EXPECT_FALSE(vd.member);
  EXPECT_EQ(vd.generation, 1u) << "a standby does not disturb the formed group";
  EXPECT_FALSE(Valid(d, kT0 + 10)) << "a standby has saved nothing of the group";
  EXPECT_TRUE(Valid(a, kT0 + 10));
  Changes ch;
  ASSERT_OK(ReleaseWorker(s_, b, kT0 + 20, &ch));
  Advance(kT0 + 20);
  EXPECT_EQ(View(a).generation, 2u);
  Join(d, 0, kT0 + 30);
  Join(a, 1, kT0 + 30);
  RendezvousView vc = Join(c, 1, kT0 + 30);
  ASSERT_TRUE(vc.ready(1));
  EXPECT_EQ(View(a).rank, 0);
  EXPECT_EQ(vc.rank, 1);
  EXPECT_EQ(View(d).rank, 2);
  EXPECT_TRUE(Valid(d, kT0 + 30)) << "a member of the formed generation now";
  EXPECT_FALSE(Valid(b, kT0 + 30));
}

TEST_F(RendezvousTest, EachWorkerHoldsItsOwnTokenAndAllMembersAreValid) {
  const int64_t a = Register("a"), b = Register("b");
  EXPECT_NE(s_.workers.at(a).fencing_token, s_.workers.at(b).fencing_token);
  // Before anyone joins, the segment does not use the rendezvous.
  EXPECT_TRUE(Valid(a, kT0));
  Join(a, 0, kT0);
  EXPECT_FALSE(Valid(a, kT0)) << "the first round is open: nobody is in a group yet";
  EXPECT_FALSE(Valid(b, kT0)) << "b has not joined, but a worker of its segment has";
  Join(b, 0, kT0);
  Advance(kT0 + 2000);
  ASSERT_TRUE(View(a).ready(0));
  EXPECT_TRUE(Valid(a, kT0 + 2000));
  EXPECT_TRUE(Valid(b, kT0 + 2000));
}

TEST_F(RendezvousTest, AWorkerDroppedForLeaseExpiryIsFencedWhileTheOthersStayValid) {
  const int64_t a = Register("a"), b = Register("b"), c = Register("c");
  Join(a, 0, kT0);
  Join(b, 0, kT0);
  Join(c, 0, kT0);
  ASSERT_TRUE(View(a).ready(0));
  Beat({a, c}, kT0 + 9000);
  Advance(kT0 + 10'001);  // b was last heard at T0
  EXPECT_EQ(View(a).generation, 2u);
  EXPECT_EQ(s_.rendezvous.at(job_).dropped, (std::vector<int64_t>{b}));
  EXPECT_FALSE(Valid(b, kT0 + 10'001)) << "dropped: its lease expired";
  EXPECT_TRUE(Valid(a, kT0 + 10'001)) << "survivors keep their tokens while the round is open";
  EXPECT_TRUE(Valid(c, kT0 + 10'001));
  EXPECT_TRUE(ViewWorker(s_, b)->active) << "b may come back, but not commit";
  TimeMs until = 0;
  std::string why;
  EXPECT_FALSE(FencingValid(s_, job_, s_.workers.at(b).fencing_token, kT0 + 10'001, &until, &why));
  EXPECT_NE(why.find("dropped"), std::string::npos) << why;

  // The survivors re-form without b.
  Join(a, 1, kT0 + 10'100);
  Join(c, 1, kT0 + 10'100);
  Beat({a, c}, kT0 + 12'100);
  Advance(kT0 + 12'100);
  ASSERT_TRUE(View(a).ready(1));
  EXPECT_TRUE(s_.rendezvous.at(job_).dropped.empty());
  EXPECT_TRUE(Valid(a, kT0 + 12'100));
  EXPECT_TRUE(Valid(c, kT0 + 12'100));
  EXPECT_FALSE(Valid(b, kT0 + 12'100));

  // b comes back: a grow round, in which a and c stay valid and b not yet.
  Beat({a, b, c}, kT0 + 13'000);
  RendezvousView vb = Join(b, 0, kT0 + 13'000);
  EXPECT_EQ(vb.generation, 3u);
  EXPECT_FALSE(Valid(b, kT0 + 13'000));
  EXPECT_TRUE(Valid(a, kT0 + 13'000));
  Join(a, 2, kT0 + 13'100);
  ASSERT_TRUE(Join(c, 2, kT0 + 13'100).ready(2));
  EXPECT_TRUE(Valid(b, kT0 + 13'100)) << "a member of the newest generation";
}

TEST_F(RendezvousTest, AGenerationFormedWithoutAWorkerFencesIt) {
  const int64_t a = Register("a"), b = Register("b"), c = Register("c");
  Join(a, 0, kT0);
  Join(b, 0, kT0);
  Join(c, 0, kT0);
  // a's collective failed: the round it opens does not fence anyone yet.
  Join(a, 1, kT0 + 100);
  EXPECT_TRUE(Valid(b, kT0 + 100));
  Join(c, 1, kT0 + 200);
  Beat({a, b, c}, kT0 + 2200);
  Advance(kT0 + 2200);
  ASSERT_TRUE(View(a).ready(1));
  EXPECT_EQ(View(a).world_size, 2);
  // b's lease is fine and it is still active, but it is not in the group.
  EXPECT_TRUE(ViewWorker(s_, b)->active);
  EXPECT_FALSE(Valid(b, kT0 + 2200));
  EXPECT_TRUE(Valid(a, kT0 + 2200));
  EXPECT_TRUE(Valid(c, kT0 + 2200));
}

TEST_F(RendezvousTest, AWorkerThatLeavesIsFencedAtOnceAndDroppedFromTheRound) {
  const int64_t a = Register("a"), b = Register("b");
  Join(a, 0, kT0);
  Join(b, 0, kT0);
  Advance(kT0 + 2000);
  ASSERT_TRUE(View(a).ready(0));
  const int64_t c = Register("c");
  Join(c, 0, kT0 + 3000);  // grows: round 2 opens
  EXPECT_FALSE(Valid(c, kT0 + 3000)) << "a newcomer in an open round";
  EXPECT_TRUE(Valid(b, kT0 + 3000));
  Changes ch;
  ASSERT_OK(ReleaseWorker(s_, b, kT0 + 3100, &ch));
  EXPECT_FALSE(Valid(b, kT0 + 3100)) << "no tick needed";
  Beat({a, c}, kT0 + 3200);
  EXPECT_FALSE(Advance(kT0 + 3200).rendezvous.empty());
  EXPECT_EQ(s_.rendezvous.at(job_).dropped, (std::vector<int64_t>{b}));
  EXPECT_TRUE(Valid(a, kT0 + 3200));
}

TEST_F(RendezvousTest, ANewSegmentIsNotFencedByTheOldSegmentsGroup) {
  const int64_t a = Register("a"), b = Register("b");
  Join(a, 0, kT0);
  Join(b, 0, kT0);
  Advance(kT0 + 2000);
  ASSERT_TRUE(View(a).ready(0));
  Changes ch;
  ASSERT_OK(AckSegment(s_, a, 5, kT0 + 3000, &ch));
  Advance(kT0 + 3000);
  Plan plan;
  plan.starts.push_back(StartDecision{job_, {Allocation{s_.windows.begin()->first, 2}}, kNever});
  ApplyPlan(s_, plan, kT0 + 4000, &ch);
  const int64_t d = Register("d");
  EXPECT_GT(s_.workers.at(d).fencing_token, s_.workers.at(b).fencing_token);
  EXPECT_TRUE(Valid(d, kT0 + 4000)) << "no worker of the new segment joined yet";
  EXPECT_FALSE(Valid(a, kT0 + 4000));
  Join(d, 0, kT0 + 4000);
  EXPECT_FALSE(Valid(d, kT0 + 4000)) << "its segment uses the rendezvous now";
}

TEST_F(RendezvousTest, AnExpiredLeaseRemovesTheMemberAndBumpsTheGeneration) {
  const int64_t a = Register("a"), b = Register("b"), c = Register("c");
  Join(a, 0, kT0);
  Join(b, 0, kT0);
  Join(c, 0, kT0);
  Beat({a, b, c}, kT0 + 5000);
  EXPECT_TRUE(Advance(kT0 + 10'000).rendezvous.empty()) << "within the TTL nothing changes";
  Beat({a, b}, kT0 + 14'000);
  EXPECT_FALSE(Advance(kT0 + 15'001).rendezvous.empty());
  EXPECT_EQ(View(a).generation, 2u);
  // A joining round drops a silent worker too.
  Join(a, 1, kT0 + 15'100);
  Join(c, 1, kT0 + 15'100);
  Beat({a}, kT0 + 26'000);
  Advance(kT0 + 26'000);
  const RendezvousView va = View(a);
  EXPECT_EQ(va.phase, RendezvousPhase::kJoining);
  EXPECT_EQ(va.world_size, 1) << "c's lease (last heard at T0+5 s) expired";
}

TEST_F(RendezvousTest, FencedAndUnknownWorkersAndBadEndpointsAreRefused) {
  const int64_t a = Register("a");
  Changes ch;
  EXPECT_EQ(JoinRendezvous(s_, 999, "h:1", 0, kT0, config_, &ch).status().code(), Code::kNotFound);
  EXPECT_EQ(JoinRendezvous(s_, a, "no-port", 0, kT0, config_, &ch).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(JoinRendezvous(s_, a, "", 0, kT0, config_, &ch).status().code(),
            Code::kInvalidArgument);
  ASSERT_OK(ReleaseWorker(s_, a, kT0, &ch));
  ch = Changes();
  Result<RendezvousView> v = JoinRendezvous(s_, a, "h:1", 0, kT0, config_, &ch);
  EXPECT_EQ(v.status().code(), Code::kAborted) << v.status().ToString();
  EXPECT_TRUE(ch.rendezvous.empty());
}

}  // namespace
}  // namespace stint::stintd
