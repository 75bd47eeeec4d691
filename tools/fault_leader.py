"""The fault campaign's stintd leadership faults (issue 45): two stintds on
one PostgreSQL database (a real server the campaign starts, Debian's
postgresql), under load, one fault each:

  leader_kill  kill -9 of the leading stintd
  leader_stop  SIGSTOP of the leading stintd past its lease, SIGCONT once the
               standby leads: it must exit 75 without acting
  pg_restart   PostgreSQL stopped (fast shutdown) and started again
  db_cut       the leader runs in a network namespace of its own, reaching
               the database over a veth pair (TCP); the link is cut: the
               leader must stop acting and exit 75 before the standby
               takes over (needs root and ip netns; skipped otherwise)

Load: writer threads submit jobs through the list of both URLs (the way
clients follow the leader) and count each one stintd acknowledged; the
pool has a window, so stintd starts segments for them (and, with no
workers registering, requeues them after the start grace) all along.

After each fault:
  - some stintd leads and serves within a deadline (the takeover time is
    recorded: median and worst per kind at the end);
  - every acknowledged job is there (0 acked writes lost);
  - no job has two active segments (0 double starts);
  - stintd_journal, in id order, never goes down in epoch: no write of an
    old leader landed after a takeover (0 actions by a fenced leader);
  - a paused old leader exited 75 saying it was fenced.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

from fault_util import end, free_port

KINDS = ["leader_kill", "leader_stop", "pg_restart", "db_cut"]
ADMIN = "leader-campaign-admin-token"
# A takeover needs a lease, a poll and a load; a loaded 2-core machine gets
# a wide margin.
TAKEOVER_LEASES = 30


def pg_bindir():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return os.path.dirname(found[-1]) if found else None


class Postgres:
    """initdb + postgres on a private unix socket (no TCP), as user postgres
    when run as root."""

    def __init__(self, base, listen=""):
        self.bindir = pg_bindir()
        self.base = base
        self.listen = listen  # a TCP address besides the socket ("": none)
        self.data = os.path.join(base, "data")
        self.proc = None
        self.log = os.path.join(base, "postgres.log")

    def command(self, program, *args):
        cmd = ["/usr/bin/setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"] \
            if os.geteuid() == 0 else []
        return cmd + [os.path.join(self.bindir, program)] + list(args)

    def init(self):
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres", "postgres")
        subprocess.run(self.command("initdb", "-D", self.data, "-U", "stintd", "--auth=trust",
                                    "--no-sync", "-E", "UTF8", "--locale=C"),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=120)
        if self.listen:
            with open(os.path.join(self.data, "pg_hba.conf"), "a") as f:
                f.write("host all all %s/32 trust\n" % Net.NS_IP)
        self.start()

    def start(self):
        log = open(self.log, "a")
        self.proc = subprocess.Popen(
            self.command("postgres", "-D", self.data, "-k", self.base, "-p", "5432", "-c",
                         "listen_addresses=" + self.listen, "-c", "max_connections=60", "-c",
                         "shared_buffers=16MB"), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 60
        while self.sql("postgres", "SELECT 1", quiet=True) != "1":
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("PostgreSQL did not start: see " + self.log)
            time.sleep(0.1)

    def stop(self):
        """A fast shutdown (SIGINT): sessions are cut, as in a failover."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def url(self, db):
        return "postgresql:///%s?host=%s&port=5432&user=stintd" % (db, self.base)

    def tcp_url(self, db):
        return "postgresql://stintd@%s:5432/%s?connect_timeout=2" % (self.listen, db)


    def sql(self, db, query, quiet=False):
        r = subprocess.run(["psql", "-At", "-h", self.base, "-p", "5432", "-U", "stintd", "-d", db,
                            "-c", query], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            if not quiet:
                print("psql: %s" % r.stderr.strip(), flush=True)
            return None
        return r.stdout.strip()


class Net:
    """A network namespace joined to this one by a veth pair: the leader
    of a db_cut fault runs there and reaches PostgreSQL over TCP."""
    # A /30 of its own per campaign process: campaigns may run side by side.
    SUBNET = "10.231.%d." % (os.getpid() % 250)
    HOST_IP, NS_IP = SUBNET + "1", SUBNET + "2"

    def __init__(self):
        tag = "%d" % (os.getpid() % 100000)
        self.ns, self.host_if = "stint-cut-" + tag, "stcut" + tag

    @staticmethod
    def possible():
        return os.geteuid() == 0 and shutil.which("ip") is not None

    def up(self):
        ip = lambda *a: subprocess.run(["ip"] + list(a), check=True, capture_output=True, timeout=30)
        ip("netns", "add", self.ns)
        ip("link", "add", self.host_if, "type", "veth", "peer", "name", "eth0", "netns", self.ns)
        ip("addr", "add", self.HOST_IP + "/30", "dev", self.host_if)
        ip("link", "set", self.host_if, "up")
        ip("-n", self.ns, "addr", "add", self.NS_IP + "/30", "dev", "eth0")
        ip("-n", self.ns, "link", "set", "eth0", "up")
        ip("-n", self.ns, "link", "set", "lo", "up")

    def link(self, up):
        subprocess.run(["ip", "link", "set", self.host_if, "up" if up else "down"], check=True,
                       capture_output=True, timeout=30)

    def down(self):
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, timeout=30)


class Stintd:
    def __init__(self, binary, store, workdir, name, env, lease, netns=None):
        self.binary, self.store, self.name, self.env, self.lease = binary, store, name, env, lease
        self.netns = netns  # run in this namespace, listening on Net.NS_IP
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.host = Net.NS_IP if netns else "127.0.0.1"
        self.url = "http://%s:%d" % (self.host, self.port)
        self.proc = None
        self.log = os.path.join(self.dir, "stintd.log")

    def start(self):
        log = open(self.log, "a")
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        # Beyond loopback over plain HTTP: the veth stays on this host.
        insecure = ["--insecure"] if self.netns else []
        self.proc = subprocess.Popen(
            prefix + [self.binary, "--store", self.store, "--listen", "%s:%d" % (self.host, self.port)]
            + insecure + [
             "--logs-dir", os.path.join(self.dir, "logs"), "--leader-lease-seconds",
             str(self.lease), "--tick-seconds", "0.1", "--start-grace-seconds", "1",
             "--lease-ttl-seconds", "4", "--min-run-seconds", "0"],
            env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def output(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def end(self):
        if self.proc is not None:
            end(self.proc, signal.SIGCONT)


def call(url, method, path, body=None, timeout=5):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Authorization": "Bearer " + ADMIN,
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"null")


class LeaderFaults:
    """One PostgreSQL for the campaign, a database and two stintds per fault."""

    def __init__(self, campaign):
        self.c = campaign
        self.pg = None
        self.net = None  # for db_cut, once made
        self.databases = 0
        self.takeovers = {k: [] for k in KINDS}
        self.lease = campaign.args.leader_lease_seconds
        self.deadline = TAKEOVER_LEASES * self.lease

    def available(self, kind):
        if pg_bindir() is None or shutil.which("psql") is None:
            return False
        return kind != "db_cut" or Net.possible()

    def close(self):
        """The server, its directory and the namespace; once is enough."""
        if self.pg is not None:
            self.pg.stop()
            shutil.rmtree(self.pg.base, ignore_errors=True)
            self.pg = None
        if self.net is not None:
            self.net.down()
            self.net = None

    def summary(self):
        for kind, times in self.takeovers.items():
            if times:
                print("takeover after %s: median %.2f s, worst %.2f s over %d (lease %.0f s)" % (
                    kind, statistics.median(times), max(times), len(times), self.lease))

    def run(self, kind, label):
        if self.pg is None:
            if Net.possible() and "db_cut" in self.c.args.kinds.split(","):
                self.net = Net()
                self.net.up()
            # Its own directory under /tmp: the server's user must reach it
            # (the campaign's is private), and a socket path is short.
            self.pg = Postgres(tempfile.mkdtemp(prefix="stint-pg-"),
                               listen=Net.HOST_IP if self.net else "")
            self.pg.init()
        self.databases += 1
        db = "leader_%d" % self.databases
        subprocess.run(["psql", "-h", self.pg.base, "-p", "5432", "-U", "stintd", "-d", "postgres",
                        "-c", "CREATE DATABASE " + db], check=True, capture_output=True, timeout=60)
        env = dict(self.c.env, STINTD_ADMIN_TOKEN=ADMIN, STINTD_WORKER_TOKEN="leader-worker-token")
        work = os.path.join(self.c.work, label)
        daemons = [Stintd(self.c.stintd_bin, self.pg.url(db), work, n, env, self.lease)
                   for n in ("a", "b")]
        if kind == "db_cut":  # the first leader beyond the link that is cut
            daemons[0] = Stintd(self.c.stintd_bin, self.pg.tcp_url(db), work, "a", env, self.lease,
                                netns=self.net.ns)
        try:
            self._fault(kind, db, daemons, label)
        finally:
            for d in daemons:
                d.end()
            if kind == "db_cut":
                self.net.link(True)

    def _leader(self, daemons, deadline):
        """The daemon that serves GET /v1/leader (and says it leads), or None."""
        while time.monotonic() < deadline:
            for d in daemons:
                if d.proc is None or d.proc.poll() is not None:
                    continue
                try:
                    if call(d.url, "GET", "/v1/leader", timeout=2)["leader"]["url"] == d.url:
                        return d
                except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError):
                    pass
            time.sleep(0.05)
        return None

    def _fault(self, kind, db, daemons, label):
        a, b = daemons
        a.start()
        leader = self._leader([a], time.monotonic() + self.deadline)
        if leader is None:
            return self.c.fail("%s: the first stintd did not lead:\n%s" % (label, a.output()[-2000:]))
        b.start()
        call(a.url, "POST", "/v1/pools", {"name": "p"})
        call(a.url, "POST", "/v1/windows", {"pool": "p", "gpus": 4,
                                            "end_ms": int(time.time() * 1000) + 3600 * 1000})
        acked, stop = [], threading.Event()
        urls = [a.url, b.url]

        def writer(n):
            i = 0
            while not stop.is_set():
                name = "w%d-%d" % (n, i)
                for url in urls:  # the list, as clients follow the leader
                    try:
                        call(url, "POST", "/v1/jobs", {"name": name, "pool": "p", "min_gpus": 1})
                        acked.append(name)
                        i += 1
                        break
                    except (OSError, urllib.error.URLError, ValueError):
                        continue
                else:
                    time.sleep(0.05)

        threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(3)]
        for t in threads:
            t.start()
        time.sleep(self.c.rng.uniform(0.5, 2.0))  # load before the fault
        old = leader
        t0 = time.monotonic()
        if kind == "leader_kill":
            old.proc.kill()
            old.proc.wait()
        elif kind == "leader_stop":
            old.proc.send_signal(signal.SIGSTOP)
        elif kind == "db_cut":
            self.net.link(False)
        else:
            self.pg.stop()
            time.sleep(self.c.rng.uniform(0.2, 1.5))
            self.pg.start()
            # A stintd whose database went away exits (crash-only); the
            # operator's supervisor restarts it: so does the campaign.
            t0 = time.monotonic()
        deadline = time.monotonic() + self.deadline
        new = None
        while new is None and time.monotonic() < deadline:
            if kind == "pg_restart":
                for d in daemons:
                    if d.proc.poll() is not None:
                        d.start()
            others = [d for d in daemons if d is not old] if kind != "pg_restart" else daemons
            new = self._leader(others, min(deadline, time.monotonic() + 2))
        if new is None:
            stop.set()
            return self.c.fail("%s: no stintd leads %.0f s after %s:\n%s\n%s" % (
                label, self.deadline, kind, a.output()[-1500:], b.output()[-1500:]))
        self.takeovers[kind].append(time.monotonic() - t0)
        if kind in ("leader_stop", "db_cut"):
            # Paused: it wakes now. Cut off: it stopped on its own.
            old.proc.send_signal(signal.SIGCONT)
            try:
                code = old.proc.wait(timeout=self.deadline)
            except subprocess.TimeoutExpired:
                code = None
            if code != 75 or "fenced: " not in old.output():
                self.c.fail("%s: the old leader did not exit 75 fenced (exit %s):\n%s" % (
                    label, code, old.output()[-1500:]))
        time.sleep(self.c.rng.uniform(0.5, 1.5))  # load after the takeover
        stop.set()
        for t in threads:
            t.join(timeout=30)
        self._check(db, new, acked, label)

    def _check(self, db, leader, acked, label):
        jobs = call(leader.url, "GET", "/v1/jobs", timeout=30)["jobs"]
        names = {j["name"] for j in jobs}
        lost = [n for n in acked if n not in names]
        if lost:
            self.c.fail("%s: %d of %d acknowledged jobs lost: %s" % (
                label, len(lost), len(acked), lost[:10]))
        segments = call(leader.url, "GET", "/v1/segments", timeout=30).get("segments", [])
        active = {}
        for s in segments:
            if s.get("state") in ("running", "notified"):
                active.setdefault(s.get("job_id"), []).append(s.get("id"))
        doubled = {j: ids for j, ids in active.items() if len(ids) > 1}
        if doubled:
            self.c.fail("%s: jobs with two active segments: %s" % (label, doubled))
        epochs = self.pg.sql(db, "SELECT string_agg(epoch::text, ' ' ORDER BY id) FROM stintd_journal")
        seq = [int(e) for e in (epochs or "").split()]
        if not seq or any(x > y for x, y in zip(seq, seq[1:])):
            self.c.fail("%s: the journal's epochs go down (an old leader wrote late): %s" % (
                label, epochs[:400] if epochs else epochs))
        self.c.log("  %s: %d jobs acknowledged, all there; %d journal rows, epochs %d..%d" % (
            label, len(acked), len(seq), seq[0] if seq else 0, seq[-1] if seq else 0))
