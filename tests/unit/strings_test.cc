// runtime/base/strings.h: the strict decimal parser the peer file service
// reads ports, byte ranges and step names with.
#include "base/strings.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace stint {
namespace {

TEST(ParseDecimalU64, WholeNumbersUpToTheLargestUint64) {
  uint64_t v = 7;
  EXPECT_TRUE(ParseDecimalU64("0", &v));
  EXPECT_EQ(v, 0u);
  EXPECT_TRUE(ParseDecimalU64("00042", &v));
  EXPECT_EQ(v, 42u);
  EXPECT_TRUE(ParseDecimalU64("18446744073709551615", &v));
  EXPECT_EQ(v, UINT64_MAX);
}

TEST(ParseDecimalU64, RefusesAnythingElseAndLeavesTheOutputAlone) {
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "0x10", "1e3", "12a",
                          "18446744073709551616",    // UINT64_MAX + 1
                          "99999999999999999999",    // 20 digits, too large
                          "000000000000000000001"}) {  // 21 digits
    uint64_t v = 7;
    EXPECT_FALSE(ParseDecimalU64(bad, &v)) << "'" << bad << "'";
    EXPECT_EQ(v, 7u) << "'" << bad << "'";
  }
}

TEST(AllDigits, OnlyAsciiDigitsAndNotEmpty) {
  EXPECT_TRUE(AllDigits("0123456789"));
  EXPECT_FALSE(AllDigits(""));
  EXPECT_FALSE(AllDigits("12 "));
  EXPECT_FALSE(AllDigits("\xd9\xa3"));  // ARABIC-INDIC DIGIT THREE
}

TEST(PercentEncode, KeepsUnreservedBytesAndSlashWhenAskedEncodesTheRestOnce) {
  EXPECT_EQ(PercentEncode("aZ09-._~"), "aZ09-._~");
  EXPECT_EQ(PercentEncode("a/b c%"), "a%2Fb%20c%25");
  EXPECT_EQ(PercentEncode("a/b c%", true), "a/b%20c%25");
  EXPECT_EQ(PercentEncode("\xC3\xA9\x7F"), "%C3%A9%7F");  // each byte, upper-case hex
  EXPECT_EQ(PercentEncode(std::string("\0", 1)), "%00");
}

TEST(ParseContentRange, FirstLastAndTotalOrNothing) {
  uint64_t first = 0, last = 0, total = 0;
  ASSERT_TRUE(ParseContentRange("bytes 5-9/100", &first, &last, &total));
  EXPECT_EQ(first, 5u);
  EXPECT_EQ(last, 9u);
  EXPECT_EQ(total, 100u);
  EXPECT_TRUE(ParseContentRange("bytes 0-0/1", &first, &last, nullptr));
  EXPECT_FALSE(ParseContentRange("bytes 5-9/*", &first, &last, &total));
  EXPECT_FALSE(ParseContentRange("bytes */100", &first, &last, &total));
  EXPECT_FALSE(ParseContentRange("items 5-9/100", &first, &last, &total));
  EXPECT_FALSE(ParseContentRange("bytes 9/5-100", &first, &last, &total));
  EXPECT_FALSE(ParseContentRange("bytes -5-9/100", &first, &last, &total));
}

}  // namespace
}  // namespace stint
