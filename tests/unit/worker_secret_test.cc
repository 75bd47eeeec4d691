// Per-worker secrets (tools/stintd/server/worker_secret.h): SHA-256 against
// the FIPS 180-4 examples, fresh secrets that parse back to their worker and
// are never alike, and tokens of other shapes refused.
#include "stintd/server/worker_secret.h"

#include <set>
#include <string>

#include <gtest/gtest.h>

namespace stint::stintd {
namespace {

TEST(Sha256, MatchesTheStandardExamples) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the length no longer fits the first block's tail.
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(WorkerSecret, FreshSecretsParseBackToTheirWorkerAndDiffer) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; i++) {
    Result<WorkerSecret> s = NewWorkerSecret();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->hash, Sha256Hex(s->random));
    EXPECT_TRUE(seen.insert(s->random).second) << "a secret came twice";
    int64_t id = 0;
    std::string random;
    ASSERT_TRUE(ParseWorkerSecret(s->For(40 + i), &id, &random)) << s->For(40 + i);
    EXPECT_EQ(id, 40 + i);
    EXPECT_EQ(random, s->random);
  }
}

TEST(WorkerSecret, OtherTokensDoNotParse) {
  int64_t id = 0;
  std::string random;
  const std::string r64(64, 'a');
  for (const std::string& t :
       {std::string("worker-token-0123456789abcdef"), std::string(""), "stw1." + r64,
        "stw1.0." + r64, "stw1.-3." + r64, "stw1.x." + r64, "stw1.7." + r64.substr(1),
        "stw2.7." + r64, "stw1.7" + r64}) {
    EXPECT_FALSE(ParseWorkerSecret(t, &id, &random)) << t;
  }
}

// RFC 4231 test cases 1 (a short key) and 6 (a key longer than a block).
TEST(HmacSha256Hex, MatchesRfc4231) {
  EXPECT_EQ(HmacSha256Hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(HmacSha256Hex(std::string(131, '\xaa'),
                          "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(ScopedToken, JobAndSegmentTokensParseBackAndOthersDoNot) {
  const std::string mac(64, 'c');
  ScopedToken t;
  ASSERT_TRUE(ParseScopedToken("stj1.12." + mac, &t));
  EXPECT_EQ(t.job, 12);
  EXPECT_EQ(t.segment, 0);
  EXPECT_EQ(t.Text(), "stj1.12." + mac);
  ASSERT_TRUE(ParseScopedToken("stg1.7.node.a-1." + mac, &t));  // node names may hold dots
  EXPECT_EQ(t.segment, 7);
  EXPECT_EQ(t.node, "node.a-1");
  EXPECT_EQ(t.mac, mac);
  EXPECT_EQ(t.Text(), "stg1.7.node.a-1." + mac);
  for (const std::string& bad :
       {"stj1.0." + mac, "stj1.x." + mac, "stj1.3.n." + mac, "stj1.3." + mac.substr(1),
        "stg1.7." + mac, "stg1.7.." + mac, "stw1.7." + mac, std::string("worker-token")}) {
    EXPECT_FALSE(ParseScopedToken(bad, &t)) << bad;
  }
}

TEST(ConstantTimeEqual, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEqual("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abcd"));
  EXPECT_FALSE(ConstantTimeEqual("", "a"));
  EXPECT_TRUE(ConstantTimeEqual("", ""));
}

}  // namespace
}  // namespace stint::stintd
