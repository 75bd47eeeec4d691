// SKIP_UNLESS_GPUS(n): skips the current test, with the reason, unless this
// machine has at least `n` usable CUDA devices (cuda/device_probe.h), for
// the tests of the CUDA and NCCL code; they build everywhere CUDA's toolkit
// is found and run where the devices are.
#ifndef STINT_TESTS_UTIL_GPU_SKIP_H_
#define STINT_TESTS_UTIL_GPU_SKIP_H_

#include <gtest/gtest.h>

#include "device_probe.h"

#define SKIP_UNLESS_GPUS(n)                                                                 \
  do {                                                                                      \
    ::stint::Result<int> gpus_ = ::stint::CudaDeviceCount();                                \
    if (!gpus_.ok()) GTEST_SKIP() << "needs a CUDA device: " << gpus_.status().ToString();  \
    if (*gpus_ < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA devices, found " << *gpus_; \
  } while (0)

#endif  // STINT_TESTS_UTIL_GPU_SKIP_H_
