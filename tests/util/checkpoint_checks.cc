#include "util/checkpoint_checks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "checkpoint/commit.h"
#include "stint/checkpoint_reader.h"
#include "stint/checkpointer.h"
#include "util/status_matchers.h"
#include "util/step_state.h"

namespace stint {

// Loads the newest checkpoint with the real Env and checks it is exactly
// one of the steps that may legitimately be there.
void ExpectNewestLoadsOneOf(const std::string& root, const std::vector<uint64_t>& allowed,
                            const char* engine, uint64_t* loaded, int64_t rows) {
  CheckpointOptions o;
  o.root = root;
  o.io_engine = engine;
  auto ckpt = Checkpointer::Open(o);
  ASSERT_OK(ckpt);
  StepState out(999, rows);
  auto r = (*ckpt)->Load(out.Dests());
  ASSERT_OK(r);
  EXPECT_TRUE(r->skipped.empty()) << r->skipped[0];
  ASSERT_NE(std::find(allowed.begin(), allowed.end(), r->step), allowed.end())
      << "loaded step " << r->step;
  EXPECT_TRUE(out.SameData(StepState(r->step, rows)));
  if (loaded != nullptr) *loaded = r->step;
  EXPECT_EQ(r->blobs.at("step"), std::to_string(r->step));
  // Every committed checkpoint left behind verifies in full.
  auto steps = (*ckpt)->ListCommitted();
  ASSERT_OK(steps);
  for (uint64_t s : *steps) {
    auto reader = CheckpointReader::Open(root + "/" + StepDirName(s));
    ASSERT_OK(reader);
    EXPECT_OK((*reader)->Verify());
  }
  // Open cleaned every leftover.
  auto children = Env::Default()->GetChildren(root);
  ASSERT_OK(children);
  for (const auto& c : *children) EXPECT_NE(c.rfind(".tmp-", 0), 0u) << c;
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(std::streamoff(offset));
  char c = 0;
  f.read(&c, 1);
  c = char(c ^ 0x40);
  f.seekp(std::streamoff(offset));
  f.write(&c, 1);
  ASSERT_TRUE(f.good()) << path;
}

}  // namespace stint
