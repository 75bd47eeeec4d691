// StintdProcess: a real stintd on a free loopback port with its own SQLite
// file and token files, for integration tests; HttpJson: a small JSON client
// for it. The process is SIGKILLed on destruction if still running.
#ifndef STINT_TESTS_UTIL_STINTD_PROCESS_H_
#define STINT_TESTS_UTIL_STINTD_PROCESS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/subprocess.h"

namespace httplib {
class Client;
}

namespace stint {

// Wall-clock milliseconds since the epoch: stintd's time base.
int64_t WallNowMs();

// Polls `fn` every 20 ms until it holds; the bound only turns a hang into a
// failure.
bool Eventually(const std::function<bool()>& fn, double seconds = 20);

// A whole string as a double (strtod, no trailing characters, in range).
bool ParseDouble(const std::string& text, double* out);

// Prometheus text: "name{labels}" (exactly as written) -> value, for every
// sample line; a line that is neither a sample nor a comment fails the test.
std::map<std::string, double> ParseMetrics(const std::string& text);

// stintd flags for tests that read a state and check it again later: a
// fast tick, and leases and start grace long enough that nothing expires
// meanwhile.
std::vector<std::string> SteadyStintdArgs();

class StintdProcess {
 public:
  static constexpr const char* kAdminToken = "admin-token-0123456789abcdef";
  static constexpr const char* kWorkerToken = "worker-token-0123456789abcdef";
  static constexpr const char* kAgentToken = "agent-token-0123456789abcdef";
  // dir/agent.tokens holds kAgentToken (stint-agent's --token-file).
  std::string agent_token_file() const { return dir_ + "/agent.tokens"; }

  // `dir` holds the database (dir/stintd.db) and the token files; it
  // outlives restarts, which is the point.
  StintdProcess(std::string binary, std::string dir, std::vector<std::string> extra_args = {});
  ~StintdProcess();

  // Starts stintd (again, after Kill) and waits for "listening on". Port 0
  // means a fresh free port; a restart asks for the previous port so that
  // clients reconnect to the same address.
  bool Start();
  // With a store another stintd leads: starts stintd and waits for it to
  // say it stands by. WaitUntilLeading() then waits for it to take over
  // and serve (false: it did not within `seconds`, or exited).
  bool StartStandby();
  bool WaitUntilLeading(double seconds);
  // Sends `sig` and reaps; a stintd still running after `limit_seconds`
  // (a shutdown hang) is SIGKILLed. Returns the wait status.
  int Kill(int sig, double limit_seconds = 60);
  bool running() const { return child_ != nullptr; }
  pid_t pid() const { return child_ ? child_->pid() : -1; }
  int port() const { return port_; }
  // The port the next Start() asks for (0: any free one).
  void set_port(int port) { port_ = port; }
  // https when the extra arguments give --tls-cert.
  std::string url() const;
  std::string db_path() const { return dir_ + "/stintd.db"; }
  // Where the next Start() keeps the state (--store): a postgresql:// URL
  // or an SQLite path; default db_path().
  void set_store(std::string where) { store_ = std::move(where); }
  const std::string& output() const;  // of the current or last process

 private:
  bool Launch(const std::string& ready_line);
  bool ReadPort();  // from the last "listening on" line

  std::string binary_, dir_;
  std::vector<std::string> extra_args_;
  std::string store_;  // empty: db_path()
  std::unique_ptr<ChildProcess> child_;
  std::string last_output_;
  int port_ = 0;
};

class HttpJson {
 public:
  struct Response {
    int status = 0;  // 0: no answer (connection refused, timeout)
    nlohmann::json body;
    std::string text;
  };
  HttpJson(int port, std::string token, int timeout_seconds = 10);
  // Over https to 127.0.0.1:port, verifying the server against `ca_file`.
  HttpJson(int port, std::string token, const std::string& ca_file);
  ~HttpJson();
  Response Get(const std::string& path);
  Response Post(const std::string& path, const nlohmann::json& body);
  Response PostRaw(const std::string& path, const std::string& body);
  Response Put(const std::string& path, const nlohmann::json& body);
  Response Delete(const std::string& path);

 private:
  std::unique_ptr<httplib::Client> client_;
  std::string token_;
};

}  // namespace stint

#endif  // STINT_TESTS_UTIL_STINTD_PROCESS_H_
