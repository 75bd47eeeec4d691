"""torchrun --rdzv-backend=stint against a real stintd on loopback: two
torchrun processes ("nodes") form one gloo group through the job's KV at
stintd; one node dies (its agent and its worker SIGKILLed, as a machine
would); torchrun restarts the survivor's worker, which forms a group of one.
The backend's client also speaks https to a stintd with a test certificate,
verified against the test CA (and refused without it). And stint-agent
launches a job through torchrun when its launch spec says so: one torchrun
per node, forming the group at stintd.

The backend is found the way torchrun finds any out-of-tree one: through
the `torchrun.handlers` entry point. In a build tree there is no installed
distribution, so the test writes one (a dist-info holding pyproject.toml's
entry point) next to the module under test.

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
import tomllib
import urllib.error
import urllib.request

import pytest

from test_elastic import ADMIN, REPO, STINTD, WORKER, Stintd

import stint
from stint.torchrun import StintKv, StintRendezvousBackend
from torch.distributed.elastic.rendezvous import RendezvousConnectionError

pytestmark = pytest.mark.skipif(not os.path.exists(STINTD),
                                reason="stintd is not built ($STINTD_PATH)")

TRAIN = r'''
import os, sys, time
import torch, torch.distributed as dist
out, node = sys.argv[1], os.environ["NODE"]
with open(os.path.join(out, node + ".pid"), "w") as f:
    f.write(str(os.getpid()))
dist.init_process_group("gloo")
with open(os.path.join(out, node + ".log"), "a") as f:
    f.write("world=%d rank=%d restart=%s\n" % (dist.get_world_size(), dist.get_rank(),
                                               os.environ["TORCHELASTIC_RESTART_COUNT"]))
t = torch.ones(1)
while True:  # a peer that dies fails this; torchrun then restarts us
    dist.all_reduce(t)
    time.sleep(0.05)
'''


def entry_point_site(tmp_path):
    """A folder with a dist-info declaring pyproject.toml's torchrun handler."""
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        handlers = tomllib.load(f)["project"]["entry-points"]["torchrun.handlers"]
    info = tmp_path / "site" / "stint_torchrun_test-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: stint-torchrun-test\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        "[torchrun.handlers]\n" + "".join("%s = %s\n" % kv for kv in handlers.items()))
    return str(tmp_path / "site")


def lines(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def wait_until(what, predicate, seconds, procs):
    deadline = time.monotonic() + seconds
    while not predicate():
        for name, p in procs.items():
            assert p.poll() is None, "torchrun %s exited %s before %s" % (name, p.returncode, what)
        assert time.monotonic() < deadline, "no %s within %d s" % (what, seconds)
        time.sleep(0.1)


def test_two_nodes_form_one_dies_the_other_reforms(tmp_path):
    daemon = Stintd(str(tmp_path))
    procs = {}
    try:
        daemon.call("POST", "/v1/pools", {"name": "p"})
        submitted = daemon.call("POST", "/v1/jobs", {"name": "torchrun", "pool": "p", "min_gpus": 1})
        job, job_token = submitted["id"], submitted["registration_token"]
        out = tmp_path / "out"
        out.mkdir()
        (tmp_path / "train.py").write_text(TRAIN)
        module_dir = os.path.dirname(os.path.dirname(os.path.abspath(stint.__file__)))
        endpoint = daemon.url[len("http://"):]
        for node in ("a", "b"):
            env = dict(os.environ, NODE=node, STINT_COORD_TOKEN=job_token,
                       PYTHONPATH=os.pathsep.join([entry_point_site(tmp_path / node), module_dir]))
            log = open(tmp_path / ("torchrun-%s.log" % node), "w")
            procs[node] = subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", "--rdzv-backend=stint",
                 "--rdzv-endpoint=" + endpoint, "--rdzv-id=%d" % job, "--nnodes=1:2",
                 "--nproc-per-node=1", "--max-restarts=5", "--monitor-interval=0.2",
                 "--local-addr=127.0.0.1",
                 "--rdzv-conf=join_timeout=120,last_call_timeout=2,keep_alive_interval=1,"
                 "keep_alive_max_attempt=2,close_timeout=10",
                 str(tmp_path / "train.py"), str(out)],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        a_log, b_log = str(out / "a.log"), str(out / "b.log")

        def formed_two():
            return any(l.startswith("world=2") for l in lines(a_log)) and \
                any(l.startswith("world=2") for l in lines(b_log))
        # Importing torch and forming on 2 shared cores: generous.
        wait_until("group of two", formed_two, 180, procs)
        # The rendezvous lives in the job's KV at stintd.
        state = daemon.call("GET", "/v1/jobs/%d/kv/torchrun/state" % job)
        assert state["version"] >= 1

        # Node b dies: its agent, then its worker.
        b_worker = int((out / "b.pid").read_text())
        os.killpg(procs["b"].pid, signal.SIGKILL)
        procs.pop("b").wait(timeout=30)
        os.kill(b_worker, signal.SIGKILL)
        formed_before = len(lines(a_log))
        wait_until("group of one", lambda: any(l.startswith("world=1")
                                               for l in lines(a_log)[formed_before:]), 120, procs)
        last = lines(a_log)[-1]
        assert last.startswith("world=1 rank=0"), lines(a_log)
        assert int(last.split("restart=")[1]) >= 1, lines(a_log)  # torchrun restarted the worker
    finally:
        for p in procs.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=30)
        for pid_file in (tmp_path / "out").glob("*.pid"):
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        daemon.stop()


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True)


def test_the_backend_verifies_an_https_stintd_against_its_ca(tmp_path):
    """The backend's KV client over https: with the CA the state goes in and
    out by compare-and-set; without it nothing is sent."""
    d = str(tmp_path)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", d + "/ca.key", "-out", d + "/ca.pem", "-days", "2",
            "-subj", "/CN=stint test CA")
    openssl("req", *ec, "-keyout", d + "/server.key", "-out", d + "/server.csr",
            "-subj", "/CN=127.0.0.1")
    (tmp_path / "ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", d + "/server.csr", "-CA", d + "/ca.pem", "-CAkey", d + "/ca.key",
            "-CAcreateserial", "-out", d + "/server.pem", "-days", "2", "-extfile", d + "/ext")
    env = dict(os.environ, STINTD_ADMIN_TOKEN=ADMIN, STINTD_WORKER_TOKEN=WORKER)
    proc = subprocess.Popen([STINTD, "--listen", "127.0.0.1:0", "--db", d + "/stintd.db",
                             "--tls-cert", d + "/server.pem", "--tls-key", d + "/server.key"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"listening on [\d.]+:(\d+) \(https\)", line)
        assert m, line
        url = "https://127.0.0.1:" + m.group(1)
        ctx = ssl.create_default_context(cafile=d + "/ca.pem")
        req = urllib.request.Request(url + "/v1/jobs", method="POST", data=json.dumps(
            {"name": "j", "min_gpus": 1}).encode(), headers={"Authorization": "Bearer " + ADMIN})
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            submitted = json.loads(r.read())
        job, job_token = submitted["id"], submitted["registration_token"]

        # The shared worker token reaches no job's KV: the job's own token does.
        with pytest.raises(RendezvousConnectionError, match="HTTP 403"):
            StintKv(url, job, WORKER, ca_file=d + "/ca.pem").get("torchrun/state")
        backend = StintRendezvousBackend(StintKv(url, job, job_token, ca_file=d + "/ca.pem"))
        assert backend.get_state() is None
        state, token, ok = backend.set_state(b"first")
        assert ok and state == b"first"
        assert backend.set_state(b"stale", token=token + 5) == (b"first", token, False)
        assert backend.set_state(b"second", token=token)[2]
        assert backend.get_state()[0] == b"second"

        untrusted = StintRendezvousBackend(StintKv(url, job, job_token))  # the system's CAs only
        with pytest.raises(RendezvousConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            untrusted.get_state()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


ALL_REDUCE = r'''
import os, sys
import torch, torch.distributed as dist
import stint
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
# Under torchrun each rank registers itself with the segment token the agent
# gave the launcher: a worker (and secret) of its own, none inherited.
assert "STINT_WORKER_SECRET" not in os.environ
session = stint._C.CoordinatorSession.start()
with open(os.path.join(sys.argv[1], "rank-%d" % dist.get_rank()), "w") as f:
    f.write("world=%d sum=%d worker=%d node=%s" % (
        dist.get_world_size(), int(t.item()), session.worker_id, os.environ["STINT_WORKER_NAME"]))
session.close()
'''


def test_stint_agent_launches_a_job_through_torchrun(tmp_path, monkeypatch):
    agent_binary = os.path.join(os.path.dirname(os.path.dirname(STINTD)), "stint-agent",
                                "stint-agent")
    if not os.path.exists(agent_binary):
        pytest.skip("stint-agent is not built next to stintd")
    monkeypatch.setenv("STINTD_AGENT_TOKEN", "test-agent-token")  # for the stintd started here
    daemon = Stintd(str(tmp_path))
    agents = []
    try:
        daemon.call("POST", "/v1/pools", {"name": "p"})
        out = tmp_path / "out"
        out.mkdir()
        (tmp_path / "all_reduce.py").write_text(ALL_REDUCE)
        module_dir = os.path.dirname(os.path.dirname(os.path.abspath(stint.__file__)))
        for node, gpu in (("n1", "0"), ("n2", "1")):
            agents.append(subprocess.Popen(
                [agent_binary, "--coord", daemon.url, "--pool", "p", "--gpus", gpu, "--node", node,
                 "--spot", "--addr", "127.0.0.1", "--heartbeat-seconds", "0.2",
                 "--workdir", str(tmp_path / node)],
                env=dict(os.environ, STINT_AGENT_TOKEN="test-agent-token"),
                stdout=open(tmp_path / (node + ".log"), "w"), stderr=subprocess.STDOUT))
        launch = {"command": [sys.executable, str(tmp_path / "all_reduce.py"), str(out)],
                  "torchrun": [sys.executable, "-m", "torch.distributed.run"],
                  "env": {"PYTHONPATH": os.pathsep.join([entry_point_site(tmp_path), module_dir])}}
        job = daemon.call("POST", "/v1/jobs", {"name": "through-torchrun", "pool": "p",
                                               "min_gpus": 2, "launch": launch})["id"]
        deadline = time.monotonic() + 180  # two torchruns and two workers import torch
        while daemon.call("GET", "/v1/jobs/%d" % job)["state"] not in ("DONE", "FAILED"):
            assert time.monotonic() < deadline, daemon.call("GET", "/v1/jobs/%d" % job)
            for a in agents:
                assert a.poll() is None, "an agent exited %s" % a.returncode
            time.sleep(0.1)
        final = daemon.call("GET", "/v1/jobs/%d" % job)
        if final["state"] != "DONE":
            print(json.dumps(final, indent=1))
            for n in ("n1", "n2"):
                print(n, (tmp_path / (n + ".log")).read_text())
        assert final["state"] == "DONE", final["message"]
        # One group of two over both nodes, formed through stintd.
        got = sorted((out / name).read_text() for name in ("rank-0", "rank-1"))
        assert [g.split(" worker=")[0] for g in got] == ["world=2 sum=2"] * 2, got
        assert len({g.split(" worker=")[1].split(" ")[0] for g in got}) == 2, got
        assert {g.split(" node=")[1].split(":")[0] for g in got} == {"n1", "n2"}, got
        segment = daemon.call("GET", "/v1/jobs/%d" % job)["segments"][0]["id"]
        # The rendezvous went through the job's KV, which went with the job (DONE).
        with pytest.raises(urllib.error.HTTPError) as gone:
            daemon.call("GET", "/v1/jobs/%d/kv/torchrun/segment-%d/state" % (job, segment))
        assert gone.value.code == 404
    finally:
        for a in agents:
            a.send_signal(signal.SIGTERM)
            a.wait(timeout=30)
        daemon.stop()
