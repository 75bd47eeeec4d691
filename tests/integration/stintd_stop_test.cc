// SIGTERM to a real stintd while clients hold connections open: an idle
// keep-alive connection after a request, a connection that never sent one,
// and a long-poll waiting for a job's logs. stintd must exit 0 promptly: the
// long-poll is answered and the idle connections are closed, instead of the
// server waiting out their keep-alive (30 s) before it can return.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "util/stintd_process.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

// A plain TCP connection to 127.0.0.1:port, closed on destruction.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
      error_ = std::string("socket: ") + std::strerror(errno);
      return;
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
      error_ = std::string("connect: ") + std::strerror(errno);
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  const std::string& error() const { return error_; }

  bool Send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error_ = std::string("send: ") + std::strerror(errno);
        return false;
      }
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // Reads what arrives until `done(received)` holds, the peer closes, or
  // `seconds` pass. Returns false on a read error.
  bool ReadUntil(const std::function<bool(const std::string&)>& done, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!done(received_) && !closed_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return true;
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, static_cast<int>(left.count()));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        error_ = std::string("poll: ") + std::strerror(errno);
        return false;
      }
      if (r == 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        // A reset is a close as far as these tests go.
        if (errno == ECONNRESET) {
          closed_ = true;
          break;
        }
        error_ = std::string("recv: ") + std::strerror(errno);
        return false;
      }
      if (n == 0) closed_ = true;
      received_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }

  // This end's port (0 if unknown).
  int local_port() const {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
    return ntohs(addr.sin_port);
  }

  // Whether anything (data or a close) is readable right now.
  bool Readable() {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

  const std::string& received() const { return received_; }
  bool closed() const { return closed_; }

 private:
  int fd_ = -1;
  std::string error_;
  std::string received_;
  bool closed_ = false;
};

// Whether the server's end of the loopback connection from `client_port`
// to `server_port` exists and has read everything sent to it (its receive
// queue in /proc/net/tcp is empty): then the request is in its handler.
bool ServerReadItAll(int server_port, int client_port) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    // "  N: 0100007F:1F95 0100007F:A2B4 01 00000000:00000000 ..."
    unsigned local_port = 0, remote_port = 0, tx = 0, rx = 0;
    if (std::sscanf(line.c_str(), " %*d: %*8[0-9A-Fa-f]:%x %*8[0-9A-Fa-f]:%x %*x %x:%x",
                    &local_port, &remote_port, &tx, &rx) != 4) {
      continue;
    }
    if (int(local_port) == server_port && int(remote_port) == client_port) return rx == 0;
  }
  return false;
}

bool HasWholeResponse(const std::string& s) {
  const size_t head_end = s.find("\r\n\r\n");
  if (head_end == std::string::npos) return false;
  const size_t cl = s.find("Content-Length: ");
  if (cl == std::string::npos || cl > head_end) return true;
  return s.size() >= head_end + 4 + std::stoul(s.substr(cl + 16));
}

std::string Request(const std::string& path, const std::string& token) {
  return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + token +
         "\r\nConnection: keep-alive\r\n\r\n";
}

TEST(StintdStop, SigtermEndsPromptlyWithIdleKeepAliveConnectionsAndALongPoll) {
  TempDir dir;
  StintdProcess daemon(STINTD_PATH, dir.path(), SteadyStintdArgs());
  ASSERT_TRUE(daemon.Start()) << daemon.output();
  HttpJson admin(daemon.port(), StintdProcess::kAdminToken);
  ASSERT_EQ(admin.Post("/v1/pools", {{"name", "p"}}).status, 201);
  const auto job = admin.Post("/v1/jobs", {{"name", "j"}, {"pool", "p"}, {"min_gpus", 1}});
  ASSERT_EQ(job.status, 201) << job.text;
  const std::string job_path = "/v1/jobs/" + std::to_string(job.body.value("id", 0));

  // One request answered, then the connection stays open and idle.
  RawConnection idle(daemon.port());
  ASSERT_EQ(idle.error(), "");
  ASSERT_TRUE(idle.Send(Request(job_path, StintdProcess::kAdminToken))) << idle.error();
  ASSERT_TRUE(idle.ReadUntil(HasWholeResponse, 30)) << idle.error();
  ASSERT_EQ(idle.received().rfind("HTTP/1.1 200", 0), 0u) << idle.received();
  ASSERT_FALSE(idle.closed());

  // Connected, nothing sent.
  RawConnection silent(daemon.port());
  ASSERT_EQ(silent.error(), "");

  // A long-poll for logs that never come (the job is only queued).
  RawConnection poll(daemon.port());
  ASSERT_EQ(poll.error(), "");
  ASSERT_TRUE(
      poll.Send(Request(job_path + "/logs?after=0&wait_seconds=60", StintdProcess::kWorkerToken)))
      << poll.error();
  // stintd has read the request (so it is in the handler, which answers
  // even once stopping has begun) and has not answered it: it waits.
  ASSERT_TRUE(Eventually([&] { return ServerReadItAll(daemon.port(), poll.local_port()); }, 30))
      << "stintd never read the long-poll request";
  ASSERT_FALSE(poll.Readable()) << "the long-poll answered before its wait";

  const auto start = std::chrono::steady_clock::now();
  // The wait bound only turns a hang into a failure; 10 s is a third of the
  // keep-alive timeout that used to hold the stop.
  const int status = daemon.Kill(SIGTERM, 10);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("stintd exited %.3f s after SIGTERM\n", seconds);
  ASSERT_TRUE(WIFEXITED(status)) << "stintd did not exit within 10 s of SIGTERM (SIGKILLed)\n"
                                 << daemon.output();
  EXPECT_EQ(WEXITSTATUS(status), 0) << daemon.output();

  // The long-poll got its answer before the server went; every connection
  // is closed.
  ASSERT_TRUE(poll.ReadUntil([](const std::string&) { return false; }, 10)) << poll.error();
  EXPECT_EQ(poll.received().rfind("HTTP/1.1 200", 0), 0u) << poll.received();
  EXPECT_TRUE(poll.closed());
  for (RawConnection* c : {&idle, &silent}) {
    ASSERT_TRUE(c->ReadUntil([](const std::string&) { return false; }, 10)) << c->error();
    EXPECT_TRUE(c->closed());
  }
}

// The nice values of a process's threads (field 19 of /proc/PID/task/TID/stat).
std::vector<int> ThreadNiceValues(pid_t pid) {
  std::vector<int> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir.c_str()), closedir);
  if (d == nullptr) return out;
  while (const dirent* e = readdir(d.get())) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(dir + "/" + e->d_name + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');  // the name may hold spaces
    if (paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(paren + 2));
    std::string f;
    // Fields 3.. follow the name; nice is field 19.
    for (int i = 3; i <= 19 && fields >> f; i++) {
      if (i == 19) out.push_back(std::stoi(f));
    }
  }
  return out;
}

// --http-nice: the threads that answer requests run at that nice value, the
// rest (the tick thread that plans, the accepting thread) at the process's.
TEST(StintdThreads, HttpThreadsRunAtTheirNiceValueAndThePlannerDoesNot) {
  TempDir dir;
  std::vector<std::string> args = SteadyStintdArgs();
  args.insert(args.end(), {"--http-nice", "7", "--http-threads", "4"});
  StintdProcess daemon(STINTD_PATH, dir.path(), args);
  ASSERT_TRUE(daemon.Start()) << daemon.output();
  // Four connections at once: every pool thread has answered a request.
  std::vector<std::unique_ptr<RawConnection>> conns;
  for (int i = 0; i < 4; i++) {
    conns.push_back(std::make_unique<RawConnection>(daemon.port()));
    ASSERT_EQ(conns.back()->error(), "");
    ASSERT_TRUE(conns.back()->Send(Request("/v1/pools", StintdProcess::kAdminToken)));
  }
  for (auto& c : conns) {
    ASSERT_TRUE(c->ReadUntil(HasWholeResponse, 30)) << c->error();
    ASSERT_EQ(c->received().rfind("HTTP/1.1 200", 0), 0u) << c->received();
  }
  std::vector<int> nice = ThreadNiceValues(daemon.pid());
  EXPECT_EQ(std::count(nice.begin(), nice.end(), 7), 4) << ::testing::PrintToString(nice);
  EXPECT_GE(std::count(nice.begin(), nice.end(), 0), 2)
      << "main, tick and accepting threads: " << ::testing::PrintToString(nice);
  const int status = daemon.Kill(SIGTERM, 30);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << daemon.output();
}

}  // namespace
}  // namespace stint
