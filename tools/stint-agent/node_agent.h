// NodeAgent: one machine's GPUs lent to stintd as a window (API.md,
// "Nodes"). Register() makes (or, after a restart of the agent, finds) the
// node's window; Run() heartbeats until a stop signal arrives, then closes
// the window, or until stintd closed it (an admin, or a silence longer than
// stintd's node TTL), or until the window's end passed.
//
// Confined to the thread that calls Run(): the signals it waits for must be
// blocked in every thread (main() blocks them before anything starts).
#ifndef STINT_TOOLS_STINT_AGENT_NODE_AGENT_H_
#define STINT_TOOLS_STINT_AGENT_NODE_AGENT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stint/status.h"

namespace stint {
namespace internal {
class HttpJsonClient;
}

namespace agent {

struct NodeAgentOptions {
  std::string url = "http://127.0.0.1:7077";  // stintd
  std::string token;                           // an agent token (--agent-token-file of stintd)
  std::string node;                            // REQUIRES: [A-Za-z0-9._-]{1,128}
  std::string pool;                            // REQUIRES: exists in stintd
  std::vector<int> gpus;                       // GPU indices on this machine; REQUIRES: non-empty
  // The window's end (ms since the epoch); nullopt: open-ended, which
  // stintd accepts only for spot windows.
  std::optional<int64_t> end_ms;
  bool spot = false;
  double notice_lead_seconds = 0;  // spot: the notice its segments get when it closes
  std::string workdir;             // per-segment logs go here; created if missing
  // Between heartbeats. stintd closes the window of a node silent for its
  // --node-ttl-seconds (default 30), so this must be well below that.
  // Default: 5 s.
  std::chrono::milliseconds heartbeat_interval{std::chrono::seconds(5)};
  // How long one call may retry an unreachable stintd. Default: 10 s.
  std::chrono::milliseconds call_deadline{std::chrono::seconds(10)};
};

// Why Run() returned.
enum class AgentExit {
  kStopped,         // a stop signal: the window was closed by us
  kWindowClosed,    // stintd closed the window (410), or its end passed
  kCloseFailed,     // a stop signal, but stintd could not be told
};

class NodeAgent {
 public:
  // Checks the options (kInvalidArgument naming the flag); connects lazily.
  static Result<std::unique_ptr<NodeAgent>> Create(NodeAgentOptions options);
  ~NodeAgent();
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  // Registers the node. On success window_id() is its window. kAlreadyExists
  // when the node is registered with another pool or other GPUs, or its
  // window is closing; kUnavailable when stintd cannot be reached.
  Status Register();
  int64_t window_id() const { return window_id_; }

  // Heartbeats every heartbeat_interval until one of `stop_signals` is
  // delivered (REQUIRES: blocked in every thread) or the window ends.
  // Progress lines go to stdout ("stint-agent: ..."), errors to stderr.
  AgentExit Run(const std::vector<int>& stop_signals);

 private:
  explicit NodeAgent(NodeAgentOptions options, std::unique_ptr<internal::HttpJsonClient> http);
  Status CloseWindow();

  const NodeAgentOptions options_;
  const std::unique_ptr<internal::HttpJsonClient> http_;
  int64_t window_id_ = 0;
  int64_t window_end_ms_ = 0;  // 0: none known (open-ended)
};

}  // namespace agent
}  // namespace stint

#endif  // STINT_TOOLS_STINT_AGENT_NODE_AGENT_H_
