// PostgresServer: a real PostgreSQL server a test starts (initdb into a
// directory of its own, `postgres` listening on a unix socket there only,
// no TCP port), stopped and removed at destruction. The binaries come from
// STINT_PG_BINDIR (`pg_config --bindir` at configure time); when they are
// missing Start() says why and the test skips. As root the server runs as
// the user "postgres" (PostgreSQL refuses root), through setpriv, which
// execs it: the process the test kills is the postmaster itself.
#ifndef STINT_TESTS_UTIL_POSTGRES_SERVER_H_
#define STINT_TESTS_UTIL_POSTGRES_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "util/subprocess.h"

namespace stint {

class PostgresServer {
 public:
  // initdb, then the server, ready to accept connections (60 s at most);
  // null with *why when PostgreSQL is not installed or does not start.
  static std::unique_ptr<PostgresServer> Start(std::string* why);
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // Creates an empty database; its URL (postgresql:///NAME?host=...), or ""
  // with *why.
  std::string CreateDatabase(const std::string& name, std::string* why);
  std::string Url(const std::string& database) const;

 private:
  PostgresServer() = default;
  // The command line for `program` from the bindir, as "postgres" when root.
  std::vector<std::string> Command(const std::string& program,
                                   const std::vector<std::string>& args) const;

  std::string base_;  // our directory: data/ and the socket
  std::unique_ptr<ChildProcess> server_;
};

}  // namespace stint

#endif  // STINT_TESTS_UTIL_POSTGRES_SERVER_H_
