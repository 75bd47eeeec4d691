"""stint.elastic against a real stintd on loopback: real worker processes
(examples/python/elastic_ddp.py) forming torch.distributed gloo groups, a
SIGKILLed worker, a joiner, Ctrl-C in a blocked join, and the errors a
worker gets from stintd.

Needs the stintd binary ($STINTD_PATH, set by ctest); skipped without it.
"""

import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
import urllib.request

import pytest

import stint
import stint.elastic

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "python", "elastic_ddp.py")
STINTD = os.environ.get("STINTD_PATH", "")
ADMIN, WORKER = "test-admin-token", "test-worker-token"
DATASET, GLOBAL_BATCH = 240, 12

pytestmark = pytest.mark.skipif(not os.path.exists(STINTD), reason="stintd is not built ($STINTD_PATH)")


class Stintd:
    """tls: (cert, key, ca) files to serve https with (the CA verifies it);
    args: more of stintd's options."""

    def __init__(self, work, tls=None, args=()):
        env = dict(os.environ, STINTD_ADMIN_TOKEN=ADMIN, STINTD_WORKER_TOKEN=WORKER)
        self.log = open(os.path.join(work, "stintd.log"), "w")
        tls_args = ["--tls-cert", tls[0], "--tls-key", tls[1]] if tls else []
        self.context = ssl.create_default_context(cafile=tls[2]) if tls else None
        self.proc = subprocess.Popen(
            [STINTD, "--listen", "127.0.0.1:0", "--db", os.path.join(work, "stintd.db"), "--tick-seconds", "0.05",
             "--lease-ttl-seconds", "3", "--rendezvous-last-call-seconds", "1", "--start-grace-seconds", "120"]
            + tls_args + list(args),
            stdout=subprocess.PIPE, stderr=self.log, env=env, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on ([\d.]+):(\d+)", line)
        assert m, "stintd did not start: %r" % line
        self.url = "%s://%s:%s" % ("https" if tls else "http", m.group(1), m.group(2))

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": "Bearer " + ADMIN, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10, context=self.context) as r:
            return json.loads(r.read().decode())

    def running_job(self, gpus, min_gpus=1, max_gpus=None):
        """A pool, a window of `gpus` and a job whose segment is running."""
        self.call("POST", "/v1/pools", {"name": "p"})
        now = int(time.time() * 1000)
        self.call("POST", "/v1/windows", {"pool": "p", "gpus": gpus, "start_ms": now, "end_ms": now + 3600 * 1000})
        job = self.call("POST", "/v1/jobs", {"name": "j", "pool": "p", "min_gpus": min_gpus,
                                             "max_gpus": max_gpus or gpus, "checkpoint_seconds": 1,
                                             "restart_seconds": 1})
        deadline = time.monotonic() + 30
        while self.call("GET", "/v1/jobs/%d" % job["id"])["state"] != "RUNNING":
            assert time.monotonic() < deadline, "job %d never started" % job["id"]
            time.sleep(0.05)
        return job["id"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.log.close()


@pytest.fixture
def stintd(tmp_path):
    s = Stintd(str(tmp_path))
    yield s
    s.stop()


class Worker:
    def __init__(self, stintd, job, name, args, env, work):
        self.path = os.path.join(work, name + ".log")
        self.log = open(self.path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, EXAMPLE, "--url", stintd.url, "--token", WORKER, "--job", str(job), "--name", name,
             "--pg-timeout", "10", "--join-timeout", "60"] + args,
            stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def text(self):
        with open(self.path) as f:
            return f.read()

    def wait_for(self, pattern, seconds=120, after=0):
        """The first match of `pattern` in the output from offset `after` on."""
        deadline = time.monotonic() + seconds
        regex = re.compile(pattern, re.M)
        while True:
            m = regex.search(self.text(), after)
            if m:
                return m
            assert self.proc.poll() is None or regex.search(self.text(), after), \
                "worker exited %s before printing %r:\n%s" % (self.proc.returncode, pattern, self.text())
            assert time.monotonic() < deadline, "no %r within %ds:\n%s" % (pattern, seconds, self.text())
            time.sleep(0.05)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def test_kill_one_then_add_one_trains_the_reference_model(stintd, tmp_path, python_env):
    steps = 120
    job = stintd.running_job(gpus=3)
    out = str(tmp_path / "result.json")
    # The group starts once it is 3 (one worker may import torch after the
    # other two formed a group, which then grows), trains to step 40, then
    # waits to be 2 (after the kill), to step 80, then waits to be 3 again
    # (after the joiner).
    args = ["--steps", str(steps), "--out", out, "--hold", "0:3", "--hold", "40:2", "--hold", "80:3"]
    workers = [Worker(stintd, job, "w%d" % i, args, python_env, str(tmp_path)) for i in range(3)]
    try:
        three = {w: w.wait_for(r"^GENERATION (\d+) rank (\d) world 3") for w in workers}
        generation = int(three[workers[0]].group(1))
        assert all(int(m.group(1)) == generation for m in three.values()), three
        ranks = {w: int(m.group(2)) for w, m in three.items()}
        victim = next(w for w in workers if ranks[w] == 2)
        rank0 = next(w for w in workers if ranks[w] == 0)
        rank0.wait_for(r"^FIRST_STEP %d" % generation)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        m = rank0.wait_for(r"^GENERATION (\d+) rank 0 world 2 reform_s [\d.]+ step (\d+)",
                           after=three[rank0].end())
        assert int(m.group(2)) <= 40
        joiner = Worker(stintd, job, "w3", args, python_env, str(tmp_path))
        workers.append(joiner)
        joiner.wait_for(r"^GENERATION \d+ rank 2 world 3 reform_s [\d.]+ step (\d+)")
        for w in workers:
            if w is not victim:
                assert w.proc.wait(timeout=120) == 0, w.text()
        assert "DONE step %d rank 0" % steps in rank0.text()
    finally:
        for w in workers:
            w.close()
    ref = str(tmp_path / "reference.json")
    subprocess.run([sys.executable, EXAMPLE, "--reference", "--steps", str(steps), "--out", ref], env=python_env,
                   check=True, stdout=subprocess.DEVNULL)
    got, want = json.load(open(out)), json.load(open(ref))
    assert got["step"] == steps
    assert max(abs(a - b) for a, b in zip(got["params"], want["params"])) < 1e-4
    # Every sample exactly once per epoch: the step the kill broke was not committed twice.
    assert got["seen"] == [steps * GLOBAL_BATCH // DATASET] * DATASET
    assert stintd.call("GET", "/v1/jobs/%d" % job)["state"] == "DONE"


CTRL_C_CHILD = r"""
import os, sys, time
import stint, stint.elastic
w = stint.elastic.ElasticWorker(sys.argv[1], sys.argv[2], int(sys.argv[3]), join_timeout=120)
w.start()
print("JOINING", flush=True)
t0 = time.monotonic()
try:
    w.join(init=False)
except KeyboardInterrupt:
    print("INTERRUPTED after %.1fs" % (time.monotonic() - t0), flush=True)
    try:
        w.join(init=False)  # the interrupted call closed the rendezvous
    except stint.FailedPreconditionError as e:
        print("AGAIN: %s" % e, flush=True)
    w.close()
    sys.exit(0)  # and no thread of stint's keeps the process alive
print("JOINED", flush=True)
sys.exit(1)
"""


def test_ctrl_c_ends_a_join_that_waits_for_peers(stintd, tmp_path, python_env):
    job = stintd.running_job(gpus=2, min_gpus=2)  # one worker alone never forms a group
    child = subprocess.Popen([sys.executable, "-c", CTRL_C_CHILD, stintd.url, WORKER, str(job)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=python_env, text=True)
    try:
        assert child.stdout.readline().strip() == "JOINING"
        deadline = time.monotonic() + 30  # until it waits inside join() for a second worker
        while not stintd.call("GET", "/v1/jobs/%d" % job).get("rendezvous", {}).get("members"):
            assert time.monotonic() < deadline, "the worker never joined the rendezvous"
            time.sleep(0.05)
        time.sleep(0.2)  # its join() call may still be on the wire; either way it is inside join()
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, out
    assert re.search(r"INTERRUPTED after [\d.]+s\nAGAIN: .*closed by an interrupted call", out), out


def test_worker_errors_name_the_cause(stintd, tmp_path):
    job = stintd.running_job(gpus=1)
    with pytest.raises(stint.UnauthenticatedError):
        stint.elastic.ElasticWorker(stintd.url, "not-the-token", job, retry_deadline=0).start()
    # A job that has no running segment: nothing to register with yet.
    pending = stintd.call("POST", "/v1/jobs", {"name": "q", "pool": "p", "min_gpus": 5})
    with pytest.raises(stint.FailedPreconditionError, match="no running segment"):
        stint.elastic.ElasticWorker(stintd.url, WORKER, pending["id"], retry_deadline=0).start()
    # One worker alone in a 1-GPU job forms a group of one.
    with stint.elastic.ElasticWorker(stintd.url, WORKER, job, join_timeout=30) as w:
        gen = w.join(init=False)
        assert (gen.rank, gen.world_size) == (0, 1)
        assert gen.master_port > 0
        w.finished()
    with pytest.raises(stint.FailedPreconditionError):
        w.join(init=False)


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True)


def make_test_ca(d):
    """A CA and a server certificate for 127.0.0.1 signed by it: (cert, key, ca)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", d + "/ca.key", "-out", d + "/ca.pem", "-days", "2",
            "-subj", "/CN=stint test CA")
    openssl("req", *ec, "-keyout", d + "/server.key", "-out", d + "/server.csr", "-subj", "/CN=127.0.0.1")
    with open(d + "/ext", "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", d + "/server.csr", "-CA", d + "/ca.pem", "-CAkey", d + "/ca.key",
            "-CAcreateserial", "-out", d + "/server.pem", "-days", "2", "-extfile", d + "/ext")
    return d + "/server.pem", d + "/server.key", d + "/ca.pem"


# A child that starts a session with url, token and job id given explicitly
# (argv), ca_file given as argv[4] when not "-", and prints what it got.
CA_CHILD = r'''
import sys
import stint, stint.elastic
url, token, job = sys.argv[1], sys.argv[2], int(sys.argv[3])
ca = None if sys.argv[4] == "-" else sys.argv[4]
try:
    s = stint._C.CoordinatorSession.start(url, token, job, ca_file=ca, retry_deadline=0)
    print("SESSION worker=%d" % s.worker_id)
    s.close()
    with stint.elastic.ElasticWorker(url, token, job, ca_file=ca, retry_deadline=0) as w:
        print("ELASTIC worker=%d" % w.session.worker_id)
except stint.UnavailableError as e:
    print("ERROR %s: %s" % (type(e).__name__, e))
'''


def test_explicit_url_token_and_job_verify_https_with_the_ca_argument_or_stint_ca_file(tmp_path, python_env):
    """CoordinatorSession.start and ElasticWorker with url, token and job id
    given take the CA from ca_file= or, without it, from $STINT_CA_FILE; with
    neither the test CA is not trusted and nothing registers."""
    tls = make_test_ca(str(tmp_path))
    daemon = Stintd(str(tmp_path), tls=tls)
    try:
        job = daemon.running_job(gpus=1)

        def child(ca_arg, env_ca):
            env = dict(python_env)
            env.pop("STINT_CA_FILE", None)
            if env_ca:
                env["STINT_CA_FILE"] = env_ca
            out = subprocess.run([sys.executable, "-c", CA_CHILD, daemon.url, WORKER, str(job), ca_arg],
                                 env=env, capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stdout + out.stderr
            return out.stdout

        for ca_arg, env_ca in ((tls[2], None), ("-", tls[2])):
            out = child(ca_arg, env_ca)
            assert re.search(r"^SESSION worker=\d+\nELASTIC worker=\d+$", out, re.M), out
        # Neither: the system's CAs do not know the test CA.
        out = child("-", None)
        assert re.search(r"^ERROR UnavailableError: .*certificate was not verified", out, re.M), out
        # An explicit argument wins over the environment (a CA that is not ours fails).
        other = tmp_path / "other"
        other.mkdir()
        out = child(make_test_ca(str(other))[2], tls[2])
        assert re.search(r"^ERROR UnavailableError: .*certificate was not verified", out, re.M), out
    finally:
        daemon.stop()
