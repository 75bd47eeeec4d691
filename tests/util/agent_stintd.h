// AgentStintdTest: the setup the stint-agent integration tests share
// (agent_test, agent_nodes_test, agent_elastic_test): a real stintd with
// the pool "gpu" the agents lend their GPUs to, and the window id an agent
// prints when it registers. Header-only: the program paths
// (agent_tool_paths.h) are the including test's macros.
#ifndef STINT_TESTS_UTIL_AGENT_STINTD_H_
#define STINT_TESTS_UTIL_AGENT_STINTD_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "util/agent_tool_paths.h"
#include "util/stintd_process.h"
#include "util/temp_dir.h"

namespace stint {

class AgentStintdTest : public ::testing::Test {
 protected:
  // A stintd with `args` in dir_, its admin client and the pool "gpu".
  void StartStintd(const std::vector<std::string>& args) {
    daemon_ = std::make_unique<StintdProcess>(STINTD_PATH, dir_.path(), args);
    ASSERT_TRUE(daemon_->Start()) << daemon_->output();
    admin_ = std::make_unique<HttpJson>(daemon_->port(), StintdProcess::kAdminToken);
    ASSERT_EQ(admin_->Post("/v1/pools", {{"name", "gpu"}}).status, 201);
  }

  TempDir dir_;
  std::unique_ptr<StintdProcess> daemon_;
  std::unique_ptr<HttpJson> admin_;
};

// The window id an agent printed when it registered; 0 if it did not.
inline int64_t RegisteredWindow(const std::string& output) {
  const std::string marker = "registered: window ";
  const size_t at = output.find(marker);
  return at == std::string::npos ? 0 : std::stoll(output.substr(at + marker.size()));
}

}  // namespace stint

#endif  // STINT_TESTS_UTIL_AGENT_STINTD_H_
