// store_child MODE DB: the second process of store_test.
//   open DB   Opens the store, prints "open: <status>", exits 0 when it
//             opened, 1 when it did not.
//   hold DB   Opens the store, prints "held", waits for SIGUSR1, closes it,
//             prints "closed", waits for SIGUSR1 again, exits 0.
//   write DB  Opens the store and, forever: saves job CrashJob(id) for the
//             next id and prints "saved ID" once Save returned, then puts KV
//             (ID, "k") and prints "kv ID". store_test SIGKILLs it.
// Each line is one write(2) to a pipe, so a kill never leaves half a line.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "stintd/store/store.h"
#include "store_child_job.h"

namespace {

void Say(const std::string& line) {
  std::string l = line + "\n";
  const char* p = l.data();
  size_t n = l.size();
  while (n > 0) {
    ssize_t w = write(1, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      _exit(3);  // the test reads our stdout; without it there is no point going on
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

int Fail(const char* what, const stint::Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  return 1;
}

void WaitForUsr1(const sigset_t& set) {
  int sig = 0;
  while (sigwait(&set, &sig) != 0 || sig != SIGUSR1) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: store_child open|hold|write DB\n");
    return 2;
  }
  const std::string mode = argv[1];
  const std::string db = argv[2];
  using stint::stintd::Store;

  if (mode == "open") {
    auto store = Store::Open(db);
    Say("open: " + (store.ok() ? std::string("OK") : store.status().ToString()));
    return store.ok() ? 0 : 1;
  }

  if (mode == "hold") {
    // Blocked before anything can send it, so no signal is lost.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    if (sigprocmask(SIG_BLOCK, &set, nullptr) != 0) return 1;
    auto store = Store::Open(db);
    if (!store.ok()) return Fail("open", store.status());
    Say("held");
    WaitForUsr1(set);
    store->reset();
    Say("closed");
    WaitForUsr1(set);
    return 0;
  }

  if (mode == "write") {
    auto store = Store::Open(db);
    if (!store.ok()) return Fail("open", store.status());
    auto loaded = (*store)->Load();
    if (!loaded.ok()) return Fail("load", loaded.status());
    stint::stintd::ClusterState s = std::move(*loaded);
    for (;;) {
      const int64_t id = s.next_id++;
      s.jobs[id] = stint::test::CrashJob(id);
      s.counters.segments_started = id;
      stint::stintd::Changes c;
      c.jobs.insert(id);
      c.counters = true;
      stint::Status st = (*store)->Save(s, c);
      if (!st.ok()) return Fail("save", st);
      Say("saved " + std::to_string(id));
      st = (*store)->PutKv(stint::test::CrashKv(id));
      if (!st.ok()) return Fail("put kv", st);
      Say("kv " + std::to_string(id));
    }
  }

  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
