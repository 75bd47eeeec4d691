// C10dCommitChannel over a real TCPStore (in-process, loopback): a read
// is bounded by the caller's deadline, not by the store's own timeout, when
// the key vanishes between check() and get() (another rank deleted it: the
// commit protocol deletes its keys once every rank has read them); a wait
// for a key ends when another connection sets it, or at the caller's
// deadline with the connection still usable; several keys read at once.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "c10d_commit_channel.h"
#include "util/status_matchers.h"

namespace stint {
namespace {

using Clock = std::chrono::steady_clock;

// A store whose check() finds a key and then deletes it, as another rank
// would between this rank's check() and get(). Everything else is the
// wrapped store's.
class VanishingKeyStore final : public c10d::Store {
 public:
  explicit VanishingKeyStore(c10::intrusive_ptr<c10d::Store> inner) : inner_(std::move(inner)) {}

  c10::intrusive_ptr<c10d::Store> clone() override {
    return c10::make_intrusive<VanishingKeyStore>(inner_->clone());
  }
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    inner_->set(key, value);
  }
  std::vector<uint8_t> get(const std::string& key) override { return inner_->get(key); }
  int64_t add(const std::string& key, int64_t value) override { return inner_->add(key, value); }
  bool deleteKey(const std::string& key) override { return inner_->deleteKey(key); }
  bool check(const std::vector<std::string>& keys) override {
    const bool found = inner_->check(keys);
    for (const std::string& k : keys) inner_->deleteKey(k);
    return found;
  }
  int64_t getNumKeys() override { return inner_->getNumKeys(); }
  void wait(const std::vector<std::string>& keys) override { inner_->wait(keys); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    inner_->wait(keys, timeout);
  }
  const std::chrono::milliseconds& getTimeout() const noexcept override {
    return inner_->getTimeout();
  }
  void setTimeout(const std::chrono::milliseconds& timeout) override {
    inner_->setTimeout(timeout);
  }

 private:
  c10::intrusive_ptr<c10d::Store> inner_;
};

// A TCPStore server on an ephemeral loopback port whose own reads wait
// `timeout` for a missing key.
c10::intrusive_ptr<c10d::TCPStore> ServeStore(std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = 0;
  o.isServer = true;
  o.waitWorkers = false;
  o.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
}

TEST(C10dCommitChannelTest, AReadOfAKeyDeletedAfterCheckEndsAtTheCallersDeadline) {
  // The store would wait 10 minutes; the caller gives the read 300 ms.
  constexpr auto kStoreTimeout = std::chrono::minutes(10);
  auto server = ServeStore(kStoreTimeout);
  C10dCommitChannel channel(c10::make_intrusive<VanishingKeyStore>(server), "test TCPStore");
  ASSERT_OK(channel.Set("decision", "{}"));
  // A set is not acknowledged; a check on the same connection is answered
  // after it, so the channel's own connection then finds the key.
  ASSERT_TRUE(server->check({"decision"}));

  const Clock::time_point start = Clock::now();
  Result<std::optional<std::string>> got =
      channel.GetBy("decision", start + std::chrono::milliseconds(300));
  const auto took = Clock::now() - start;
  // Not a timing threshold on speed: the bound tells "ended at the
  // caller's deadline" from "waited for the store's own 10 minutes".
  EXPECT_LT(took, kStoreTimeout / 4) << "the read waited for the store's own timeout";
  ASSERT_FALSE(got.ok()) << "the key was deleted; the read cannot have found it";
  EXPECT_EQ(got.status().code(), Code::kDeadlineExceeded) << got.status().ToString();
  EXPECT_NE(got.status().ToString().find("test TCPStore: get decision"), std::string::npos)
      << got.status().ToString();

  // The channel's own writes and reads are unaffected by the read's
  // shortened timeout: a later read of a present key on a plain store works.
  C10dCommitChannel plain(server, "test TCPStore");
  ASSERT_OK(plain.Set("answer/1", "7"));
  ASSERT_TRUE(server->check({"answer/1"}));  // the set is in (see above)
  auto answer = plain.GetBy("answer/1", Clock::now() + std::chrono::seconds(60));
  ASSERT_OK(answer);
  ASSERT_TRUE(answer->has_value());
  EXPECT_EQ(**answer, "7");
  EXPECT_EQ(server->getTimeout(), std::chrono::milliseconds(kStoreTimeout));
}

TEST(C10dCommitChannelTest, AWaitEndsWhenAnotherConnectionSetsTheKeyOrAtTheDeadline) {
  constexpr auto kStoreTimeout = std::chrono::minutes(10);
  auto server = ServeStore(kStoreTimeout);
  C10dCommitChannel waiter(server, "test TCPStore");

  // Nobody sets it: nullopt at the deadline, not an error, and not the
  // store's own 10 minutes.
  const Clock::time_point start = Clock::now();
  auto none = waiter.WaitFor("bell", start + std::chrono::milliseconds(200));
  ASSERT_OK(none);
  EXPECT_FALSE(none->has_value());
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(200)) << "it did not wait";
  EXPECT_LT(Clock::now() - start, kStoreTimeout / 4) << "it waited for the store's own timeout";

  // The cancelled wait left the connection usable: a second wait gets the
  // key another connection sets while it waits.
  std::thread setter([&] {
    C10dCommitChannel other(server->clone(), "other");
    // Most likely while the wait is in place; before it is as correct (the
    // wait then returns at once), so the pause decides nothing.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_OK(other.Set("bell", "rung"));
  });
  auto rung = waiter.WaitFor("bell", Clock::now() + std::chrono::seconds(60));
  setter.join();
  ASSERT_OK(rung);
  ASSERT_TRUE(rung->has_value());
  EXPECT_EQ(**rung, "rung");

  // A key already there is returned at once, even past the deadline.
  auto again = waiter.WaitFor("bell", Clock::now() - std::chrono::seconds(1));
  ASSERT_OK(again);
  ASSERT_TRUE(again->has_value());
  EXPECT_EQ(**again, "rung");
}

TEST(C10dCommitChannelTest, ManyKeysAreReadAtOnceAndAMissingOneIsNullopt) {
  auto server = ServeStore(std::chrono::minutes(10));
  C10dCommitChannel channel(server, "test TCPStore");
  for (int r = 0; r < 5; ++r)
    ASSERT_OK(channel.Set("report/" + std::to_string(r), std::to_string(r * r)));
  ASSERT_TRUE(server->check({"report/4"}));  // the sets are in (see above)
  const auto deadline = Clock::now() + std::chrono::seconds(60);

  auto all = channel.GetMany({"report/0", "report/2", "report/4"}, deadline);
  ASSERT_OK(all);
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0], std::optional<std::string>("0"));
  EXPECT_EQ((*all)[1], std::optional<std::string>("4"));
  EXPECT_EQ((*all)[2], std::optional<std::string>("16"));

  // One missing: the others still come back, without waiting for it.
  const Clock::time_point start = Clock::now();
  auto some = channel.GetMany({"report/1", "report/9", "report/3"}, deadline);
  ASSERT_OK(some);
  ASSERT_EQ(some->size(), 3u);
  EXPECT_EQ((*some)[0], std::optional<std::string>("1"));
  EXPECT_FALSE((*some)[1].has_value());
  EXPECT_EQ((*some)[2], std::optional<std::string>("9"));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30)) << "it waited for the missing key";
}

}  // namespace
}  // namespace stint
