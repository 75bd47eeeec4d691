// C10dCommitChannel over a real TCPStore (in-process, loopback): a read
// is bounded by the caller's deadline, not by the store's own timeout, when
// the key vanishes between check() and get() (another rank deleted it: the
// commit protocol deletes its keys once every rank has read them).
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <string>
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

}  // namespace
}  // namespace stint
