#include "util/postgres_server.h"

#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#ifndef STINT_PG_BINDIR
#define STINT_PG_BINDIR ""
#endif

namespace stint {
namespace {

constexpr const char* kUser = "stintd";  // the superuser initdb makes
constexpr int kPort = 5432;              // names the socket file only: no TCP

}  // namespace

std::vector<std::string> PostgresServer::Command(const std::string& program,
                                                 const std::vector<std::string>& args) const {
  std::vector<std::string> cmd;
  if (geteuid() == 0) cmd = {"/usr/bin/setpriv", "--reuid=postgres", "--regid=postgres",
                             "--init-groups"};
  cmd.push_back(std::string(STINT_PG_BINDIR) + "/" + program);
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

std::unique_ptr<PostgresServer> PostgresServer::Start(std::string* why) {
  const std::string bindir = STINT_PG_BINDIR;
  if (bindir.empty() || access((bindir + "/postgres").c_str(), X_OK) != 0) {
    *why = "PostgreSQL is not installed (no postgres in '" + bindir +
           "'; tools/setup.sh installs postgresql)";
    return nullptr;
  }
  std::unique_ptr<PostgresServer> pg(new PostgresServer());
  char tmpl[] = "/tmp/stint-pg-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    *why = "mkdtemp failed";
    return nullptr;
  }
  pg->base_ = tmpl;
  if (geteuid() == 0) {
    const passwd* pw = getpwnam("postgres");
    if (pw == nullptr || chown(tmpl, pw->pw_uid, pw->pw_gid) != 0) {
      *why = "running as root, and there is no user 'postgres' to run the server as";
      return nullptr;
    }
  }
  std::vector<std::string> init = pg->Command(
      "initdb", {"-D", pg->base_ + "/data", "-U", kUser, "--auth=trust", "--no-sync", "-E",
                 "UTF8", "--locale=C"});
  RunResult r = RunProgram(init[0], std::vector<std::string>(init.begin() + 1, init.end()));
  if (r.exit_code != 0) {
    *why = "initdb failed: " + r.output;
    return nullptr;
  }
  std::vector<std::string> cmd =
      pg->Command("postgres", {"-D", pg->base_ + "/data", "-k", pg->base_, "-p",
                               std::to_string(kPort), "-c", "listen_addresses=", "-c",
                               "max_connections=40", "-c", "shared_buffers=16MB"});
  pg->server_ = std::make_unique<ChildProcess>(
      cmd[0], std::vector<std::string>(cmd.begin() + 1, cmd.end()));
  const std::string info = "host=" + pg->base_ + " port=" + std::to_string(kPort) +
                           " dbname=postgres user=" + kUser + " connect_timeout=2";
  // A first start takes seconds on a loaded machine: a wide margin.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (PQping(info.c_str()) != PQPING_OK) {
    if (std::chrono::steady_clock::now() > deadline) {
      *why = "the server did not accept connections within 60 s";
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pg;
}

PostgresServer::~PostgresServer() {
  if (server_ != nullptr) {
    // The postmaster; its backends exit once they see it gone.
    kill(server_->pid(), SIGKILL);
    server_->WaitAtMost(30);
  }
  std::error_code ec;
  std::filesystem::remove_all(base_, ec);
}

std::string PostgresServer::Url(const std::string& database) const {
  return "postgresql:///" + database + "?host=" + base_ + "&port=" + std::to_string(kPort) +
         "&user=" + kUser;
}

std::string PostgresServer::CreateDatabase(const std::string& name, std::string* why) {
  PGconn* c = PQconnectdb(Url("postgres").c_str());
  std::string url;
  if (PQstatus(c) != CONNECTION_OK) {
    *why = PQerrorMessage(c);
  } else {
    PGresult* res = PQexec(c, ("CREATE DATABASE " + name).c_str());
    if (PQresultStatus(res) == PGRES_COMMAND_OK) {
      url = Url(name);
    } else {
      *why = PQresultErrorMessage(res);
    }
    PQclear(res);
  }
  PQfinish(c);
  return url;
}

}  // namespace stint
