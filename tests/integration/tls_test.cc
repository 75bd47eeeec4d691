// stintd over https: a test CA and a server certificate for 127.0.0.1 are
// made at test time with the openssl command; stintctl, stint-agent and the
// agent's launched workers (the client library, through STINT_CA_FILE)
// verify stintd against that CA. Without it, with another CA, for a host
// the certificate does not name, or over plain HTTP, nothing gets through.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "util/agent_tool_paths.h"
#include "util/stintd_process.h"
#include "util/subprocess.h"
#include "util/temp_dir.h"

#ifndef STINT_COORD_WORKER
#error "STINT_COORD_WORKER must name the coord_worker binary"
#endif

namespace stint {
namespace {

using nlohmann::json;

// A CA (`name`.pem, `name`.key) made by the openssl command; "" on success,
// else what failed.
std::string MakeCa(const TempDir& dir, const std::string& name) {
  RunResult r =
      RunProgram("/usr/bin/openssl",
                 {"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                  "-nodes", "-keyout", dir.Sub(name + ".key"), "-out", dir.Sub(name + ".pem"),
                  "-days", "2", "-subj", "/CN=stint test " + name});
  return r.exit_code == 0 ? "" : r.output;
}

// server.pem / server.key for IP 127.0.0.1 only, signed by the CA "ca".
std::string MakeServerCert(const TempDir& dir) {
  std::ofstream(dir.Sub("server.ext")) << "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                                          "extendedKeyUsage=serverAuth\n";
  RunResult req = RunProgram(
      "/usr/bin/openssl",
      {"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
       dir.Sub("server.key"), "-out", dir.Sub("server.csr"), "-subj", "/CN=127.0.0.1"});
  if (req.exit_code != 0) return req.output;
  RunResult sign = RunProgram(
      "/usr/bin/openssl", {"x509", "-req", "-in", dir.Sub("server.csr"), "-CA", dir.Sub("ca.pem"),
                           "-CAkey", dir.Sub("ca.key"), "-CAcreateserial", "-out",
                           dir.Sub("server.pem"), "-days", "2", "-extfile", dir.Sub("server.ext")});
  return sign.exit_code == 0 ? "" : sign.output;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(MakeCa(certs_, "ca"), "");
    ASSERT_EQ(MakeCa(certs_, "other-ca"), "");
    ASSERT_EQ(MakeServerCert(certs_), "");
  }

  std::vector<std::string> TlsArgs() const {
    return {"--tls-cert",
            certs_.Sub("server.pem"),
            "--tls-key",
            certs_.Sub("server.key"),
            "--tick-seconds",
            "0.05",
            "--lease-ttl-seconds",
            "20",
            "--start-grace-seconds",
            "20"};
  }

  // stintctl with the admin token and `args`.
  RunResult Ctl(const std::string& url, std::vector<std::string> args) {
    std::vector<std::string> all = {"--url", url, "--token", StintdProcess::kAdminToken};
    all.insert(all.end(), args.begin(), args.end());
    return RunProgram(STINTCTL_PATH, all);
  }

  TempDir certs_;
  TempDir dir_;
};

TEST_F(TlsTest, StintctlReachesStintdOnlyThroughItsCa) {
  StintdProcess daemon(STINTD_PATH, dir_.path(), TlsArgs());
  ASSERT_TRUE(daemon.Start()) << daemon.output();
  EXPECT_NE(daemon.output().find("(https)"), std::string::npos) << daemon.output();
  const std::string url = daemon.url();
  ASSERT_EQ(url.rfind("https://", 0), 0u) << url;

  RunResult added = Ctl(url, {"--ca-file", certs_.Sub("ca.pem"), "pools", "add", "gpu"});
  ASSERT_EQ(added.exit_code, 0) << added.output;

  // No CA (the system's do not know the test CA), or another CA.
  for (const std::vector<std::string>& ca :
       {std::vector<std::string>{},
        std::vector<std::string>{"--ca-file", certs_.Sub("other-ca.pem")}}) {
    std::vector<std::string> args = ca;
    args.insert(args.end(), {"pools", "add", "refused"});
    RunResult r = Ctl(url, args);
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_NE(r.output.find("certificate was not verified"), std::string::npos) << r.output;
  }
  // The certificate names 127.0.0.1, not "localhost".
  RunResult wrong_host = Ctl("https://localhost:" + std::to_string(daemon.port()),
                             {"--ca-file", certs_.Sub("ca.pem"), "pools", "add", "refused"});
  EXPECT_EQ(wrong_host.exit_code, 3) << wrong_host.output;
  EXPECT_NE(wrong_host.output.find("certificate was not verified"), std::string::npos)
      << wrong_host.output;
  // Plain HTTP to the TLS port gets no answer.
  RunResult plain =
      Ctl("http://127.0.0.1:" + std::to_string(daemon.port()), {"pools", "add", "refused"});
  EXPECT_EQ(plain.exit_code, 3) << plain.output;
  // A CA file that is not there: a usage error, nothing sent.
  RunResult missing = Ctl(url, {"--ca-file", certs_.Sub("missing.pem"), "pools", "list"});
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("cannot be opened"), std::string::npos) << missing.output;

  // Only the first pool was made.
  HttpJson admin(daemon.port(), StintdProcess::kAdminToken, certs_.Sub("ca.pem"));
  auto pools = admin.Get("/v1/pools");
  ASSERT_EQ(pools.status, 200) << pools.text;
  ASSERT_EQ(pools.body["pools"].size(), 1u) << pools.text;
  EXPECT_EQ(pools.body["pools"][0]["name"], "gpu");
}

// SIGTERM while a client holds an idle https keep-alive connection and
// another has connected without starting its TLS handshake: stintd exits 0
// at once rather than when their keep-alive or read timeout (30 s) ends.
TEST_F(TlsTest, SigtermEndsStintdPromptlyWithIdleTlsConnections) {
  StintdProcess daemon(STINTD_PATH, dir_.path(), TlsArgs());
  ASSERT_TRUE(daemon.Start()) << daemon.output();
  HttpJson admin(daemon.port(), StintdProcess::kAdminToken, certs_.Sub("ca.pem"));
  ASSERT_EQ(admin.Get("/v1/pools").status, 200);  // the connection stays open, idle

  const int silent = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(silent, 0) << std::strerror(errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(daemon.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(silent, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << std::strerror(errno);
  // Its connection is accepted and waits for a handshake once another
  // request on a fresh connection has been answered.
  HttpJson second(daemon.port(), StintdProcess::kAdminToken, certs_.Sub("ca.pem"));
  ASSERT_EQ(second.Get("/v1/pools").status, 200);

  const auto start = std::chrono::steady_clock::now();
  const int status = daemon.Kill(SIGTERM, 10);  // the bound only turns a hang into a failure
  std::printf("stintd (https) exited %.3f s after SIGTERM\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  ::close(silent);
  ASSERT_TRUE(WIFEXITED(status)) << "stintd did not exit within 10 s of SIGTERM (SIGKILLed)\n"
                                 << daemon.output();
  EXPECT_EQ(WEXITSTATUS(status), 0) << daemon.output();
}

// The agent registers over https with --ca-file and hands the CA to its
// workers (STINT_CA_FILE): coord_worker's session, KV and fencing check all
// go over https with nothing but the agent's environment.
TEST_F(TlsTest, AnAgentAndItsWorkersVerifyStintdThroughTheCaFile) {
  StintdProcess daemon(STINTD_PATH, dir_.path(), TlsArgs());
  ASSERT_TRUE(daemon.Start()) << daemon.output();
  HttpJson admin(daemon.port(), StintdProcess::kAdminToken, certs_.Sub("ca.pem"));
  ASSERT_EQ(admin.Post("/v1/pools", {{"name", "gpu"}}).status, 201);
  ASSERT_EQ(admin.Post("/v1/pools", {{"name", "elsewhere"}}).status, 201);
  auto other = admin.Post("/v1/jobs", {{"name", "other"}, {"pool", "elsewhere"}, {"min_gpus", 1}});
  ASSERT_EQ(other.status, 201) << other.text;

  // Without the CA the agent cannot register: exit 3, stintd unreachable.
  RunResult refused =
      RunProgram(STINT_AGENT_PATH, {"--coord", daemon.url(), "--token-file",
                                    daemon.agent_token_file(), "--pool", "gpu", "--gpus", "0",
                                    "--node", "n0", "--spot", "--workdir", dir_.Sub("agent-n0")});
  EXPECT_EQ(refused.exit_code, 3) << refused.output;
  EXPECT_NE(refused.output.find("certificate was not verified"), std::string::npos)
      << refused.output;

  ChildProcess agent(STINT_AGENT_PATH,
                     {"--coord", daemon.url(), "--ca-file", certs_.Sub("ca.pem"), "--token-file",
                      daemon.agent_token_file(), "--pool", "gpu", "--gpus", "0,1", "--node", "n1",
                      "--spot", "--heartbeat-seconds", "0.1", "--workdir", dir_.Sub("agent-n1")});
  ASSERT_TRUE(agent.WaitForLine("stint-agent: node n1 registered: window ")) << agent.output();
  json spec = {{"name", "over-tls"},
               {"pool", "gpu"},
               {"min_gpus", 2},
               {"launch",
                {{"command", {STINT_COORD_WORKER}},
                 {"env", {{"OTHER_JOB", std::to_string(other.body["id"].get<int64_t>())}}}}}};
  auto submitted = admin.Post("/v1/jobs", spec);
  ASSERT_EQ(submitted.status, 201) << submitted.text;
  const std::string job = std::to_string(submitted.body["id"].get<int64_t>());
  // Two workers register, heartbeat and put a key each, then exit 0.
  ASSERT_TRUE(Eventually([&] { return admin.Get("/v1/jobs/" + job).body["state"] == "DONE"; }, 30))
      << admin.Get("/v1/jobs/" + job).text << agent.output();
  const json seg = admin.Get("/v1/jobs/" + job).body["segments"][0];
  for (int rank = 0; rank < 2; rank++) {
    const std::string log = ReadWholeFile(dir_.Sub("agent-n1") + "/job-" + job + "/segment-" +
                                          std::to_string(seg["id"].get<int64_t>()) + "/rank-" +
                                          std::to_string(rank) + ".log");
    EXPECT_NE(log.find("coord_worker: ok"), std::string::npos) << log;
  }
  ASSERT_EQ(kill(agent.pid(), SIGTERM), 0);
  bool killed = false;
  const int status = agent.WaitAtMost(20, &killed);
  EXPECT_TRUE(!killed && WIFEXITED(status) && WEXITSTATUS(status) == 0) << agent.output();
}

// With a certificate stintd may listen beyond loopback without --insecure;
// a certificate it cannot load, or half a pair, stops it at start.
TEST_F(TlsTest, ACertificateLetsStintdListenBeyondLoopback) {
  std::ofstream(dir_.Sub("admin.tokens")) << StintdProcess::kAdminToken << "\n";
  std::ofstream(dir_.Sub("worker.tokens")) << StintdProcess::kWorkerToken << "\n";
  const std::vector<std::string> base = {"--db",
                                         dir_.Sub("stintd.db"),
                                         "--admin-token-file",
                                         dir_.Sub("admin.tokens"),
                                         "--worker-token-file",
                                         dir_.Sub("worker.tokens"),
                                         "--listen",
                                         "0.0.0.0:0"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  RunResult half = RunProgram(STINTD_PATH, with({"--tls-cert", certs_.Sub("server.pem")}));
  EXPECT_EQ(half.exit_code, 2) << half.output;
  EXPECT_NE(half.output.find("go together"), std::string::npos) << half.output;
  // The CA's key is not the server certificate's.
  RunResult mismatched =
      RunProgram(STINTD_PATH,
                 with({"--tls-cert", certs_.Sub("server.pem"), "--tls-key", certs_.Sub("ca.key")}));
  EXPECT_EQ(mismatched.exit_code, 1) << mismatched.output;
  EXPECT_NE(mismatched.output.find("cannot load the TLS certificate"), std::string::npos)
      << mismatched.output;

  ChildProcess daemon(STINTD_PATH, with({"--tls-cert", certs_.Sub("server.pem"), "--tls-key",
                                         certs_.Sub("server.key")}));
  ASSERT_TRUE(daemon.WaitForLine("stintd: listening on ")) << daemon.output();
  EXPECT_NE(daemon.output().find("(https)"), std::string::npos) << daemon.output();
  ASSERT_EQ(kill(daemon.pid(), SIGTERM), 0);
  bool killed = false;
  const int status = daemon.WaitAtMost(30, &killed);
  EXPECT_TRUE(!killed && WIFEXITED(status) && WEXITSTATUS(status) == 0) << daemon.output();
}

}  // namespace
}  // namespace stint
