#include "util/stintd_process.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace stint {

int64_t WallNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool Eventually(const std::function<bool()>& fn, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (fn()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return fn();
}

std::vector<std::string> SteadyStintdArgs() {
  return {"--tick-seconds",      "0.05", "--safety-seconds",      "1",  "--min-run-seconds", "0",
          "--lease-ttl-seconds", "600",  "--start-grace-seconds", "600"};
}

bool ParseDouble(const std::string& text, double* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && errno != ERANGE;
}

std::map<std::string, double> ParseMetrics(const std::string& text) {
  std::map<std::string, double> samples;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    double v = 0;
    if (sp == std::string::npos || !ParseDouble(line.substr(sp + 1), &v)) {
      ADD_FAILURE() << "not a sample line: " << line;
      continue;
    }
    samples[line.substr(0, sp)] = v;
  }
  return samples;
}

StintdProcess::StintdProcess(std::string binary, std::string dir,
                             std::vector<std::string> extra_args)
    : binary_(std::move(binary)), dir_(std::move(dir)), extra_args_(std::move(extra_args)) {
  std::ofstream(dir_ + "/admin.tokens") << "# test admin token\n" << kAdminToken << "\n";
  std::ofstream(dir_ + "/worker.tokens") << kWorkerToken << "\n";
  std::ofstream(agent_token_file()) << kAgentToken << "\n";
}

StintdProcess::~StintdProcess() {
  if (child_) Kill(SIGKILL);
}

bool StintdProcess::Start() { return Launch("stintd: listening on ") && ReadPort(); }

bool StintdProcess::StartStandby() { return Launch("stintd: standby: "); }

bool StintdProcess::WaitUntilLeading(double seconds) {
  if (!child_) return false;
  if (!child_->WaitForLine("stintd: listening on ", seconds)) return false;
  return ReadPort();
}

bool StintdProcess::ReadPort() {
  const std::string& out = child_->output();
  const size_t at = out.rfind("stintd: listening on ");
  const size_t colon = out.find(':', at + 21);
  port_ = std::stoi(out.substr(colon + 1));
  return true;
}

bool StintdProcess::Launch(const std::string& ready_line) {
  if (child_) return false;
  std::vector<std::string> args = {"--store",
                                   store_.empty() ? db_path() : store_,
                                   "--listen",
                                   "127.0.0.1:" + std::to_string(port_),
                                   "--admin-token-file",
                                   dir_ + "/admin.tokens",
                                   "--worker-token-file",
                                   dir_ + "/worker.tokens",
                                   "--agent-token-file",
                                   agent_token_file()};
  if (!store_.empty()) args.insert(args.end(), {"--logs-dir", dir_ + "/stintd.logs"});
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  child_ = std::make_unique<ChildProcess>(binary_, args);
  if (!child_->started() || !child_->WaitForLine(ready_line)) {
    last_output_ = child_->output();
    child_->Wait();
    child_.reset();
    return false;
  }
  return true;
}

int StintdProcess::Kill(int sig, double limit_seconds) {
  if (!child_) return 0;
  ::kill(child_->pid(), sig);
  const int status = child_->WaitAtMost(limit_seconds);
  last_output_ = child_->output();
  child_.reset();
  return status;
}

std::string StintdProcess::url() const {
  const bool tls =
      std::find(extra_args_.begin(), extra_args_.end(), "--tls-cert") != extra_args_.end();
  return (tls ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(port_);
}

const std::string& StintdProcess::output() const {
  return child_ ? child_->output() : last_output_;
}

namespace {

std::unique_ptr<httplib::Client> KeepAlive(std::unique_ptr<httplib::Client> client,
                                           int timeout_seconds) {
  client->set_read_timeout(timeout_seconds, 0);
  client->set_connection_timeout(timeout_seconds, 0);
  client->set_keep_alive(true);
  client->set_tcp_nodelay(true);
  return client;
}

}  // namespace

HttpJson::HttpJson(int port, std::string token, int timeout_seconds)
    : client_(KeepAlive(std::make_unique<httplib::Client>("127.0.0.1", port), timeout_seconds)),
      token_(std::move(token)) {}

HttpJson::HttpJson(int port, std::string token, const std::string& ca_file)
    : client_(KeepAlive(
          std::make_unique<httplib::Client>("https://127.0.0.1:" + std::to_string(port)), 10)),
      token_(std::move(token)) {
  client_->enable_server_certificate_verification(true);
  client_->set_ca_cert_path(ca_file.c_str());
}

HttpJson::~HttpJson() = default;

namespace {

HttpJson::Response Convert(const httplib::Result& r) {
  HttpJson::Response out;
  if (!r) return out;
  out.status = r->status;
  out.text = r->body;
  out.body = nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  return out;
}

}  // namespace

HttpJson::Response HttpJson::Get(const std::string& path) {
  httplib::Headers h;
  if (!token_.empty()) h.emplace("Authorization", "Bearer " + token_);
  return Convert(client_->Get(path.c_str(), h));
}

HttpJson::Response HttpJson::Post(const std::string& path, const nlohmann::json& body) {
  return PostRaw(path, body.dump());
}

HttpJson::Response HttpJson::PostRaw(const std::string& path, const std::string& body) {
  httplib::Headers h;
  if (!token_.empty()) h.emplace("Authorization", "Bearer " + token_);
  return Convert(client_->Post(path.c_str(), h, body, "application/json"));
}

HttpJson::Response HttpJson::Put(const std::string& path, const nlohmann::json& body) {
  httplib::Headers h;
  if (!token_.empty()) h.emplace("Authorization", "Bearer " + token_);
  return Convert(client_->Put(path.c_str(), h, body.dump(), "application/json"));
}

HttpJson::Response HttpJson::Delete(const std::string& path) {
  httplib::Headers h;
  if (!token_.empty()) h.emplace("Authorization", "Bearer " + token_);
  return Convert(client_->Delete(path.c_str(), h));
}

}  // namespace stint
