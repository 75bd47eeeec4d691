// The rows store_child's write mode saves for an id, so store_test can check
// that each one it finds after a kill -9 is whole.
#ifndef STINT_TESTS_INTEGRATION_STORE_CHILD_JOB_H_
#define STINT_TESTS_INTEGRATION_STORE_CHILD_JOB_H_

#include <cstdint>
#include <string>

#include "stintd/store/store.h"

namespace stint::test {

inline stintd::Job CrashJob(int64_t id) {
  stintd::Job j;
  j.id = id;
  j.name = "crash-" + std::to_string(id);
  j.team = "team-" + std::to_string(id % 7);
  j.priority = static_cast<stintd::Priority>(id % 4);
  j.min_gpus = 1 + static_cast<int>(id % 3);
  j.max_gpus = 8;
  j.submit_ms = 1700000000000 + id;
  j.last_step = id * 100;
  j.message = std::string(static_cast<size_t>(id % 300), 'm');  // rows of varying size
  return j;
}

inline stintd::KvRecord CrashKv(int64_t id) {
  stintd::KvRecord e;
  e.job_id = id;
  e.key = "k";
  e.value = "value-" + std::to_string(id);
  e.version = 1;
  e.updated_ms = id;
  return e;
}

}  // namespace stint::test

#endif  // STINT_TESTS_INTEGRATION_STORE_CHILD_JOB_H_
