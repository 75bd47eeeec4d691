// ASSERT_OK / EXPECT_OK: gtest assertions on a stint::Status or a
// stint::Result<T>. On failure they print the expression and the Status
// ("DATA_LOSS: rank-00000.stint chunk 3: checksum mismatch"), so a failing
// test says why without a `<< s.ToString()` at every call. Both accept
// further `<< context` like any gtest assertion, and evaluate expr once.
//
//   ASSERT_OK(ckpt->Flush());
//   auto reader = Reader::Open(path);
//   ASSERT_OK(reader) << path;
#ifndef STINT_TESTS_UTIL_STATUS_MATCHERS_H_
#define STINT_TESTS_UTIL_STATUS_MATCHERS_H_

#include <gtest/gtest.h>

#include "stint/status.h"

namespace stint {
namespace testing {

// A gtest predicate-formatter: success for an OK Status, otherwise a failure
// naming the expression and the Status.
inline ::testing::AssertionResult IsOkFormat(const char* expr, const Status& status) {
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "Expected: " << expr << " is OK\n  Actual: " << status.ToString();
}

template <typename T>
::testing::AssertionResult IsOkFormat(const char* expr, const Result<T>& result) {
  return IsOkFormat(expr, result.status());
}

}  // namespace testing
}  // namespace stint

#define EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::stint::testing::IsOkFormat, expr)
#define ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::stint::testing::IsOkFormat, expr)

#endif  // STINT_TESTS_UTIL_STATUS_MATCHERS_H_
