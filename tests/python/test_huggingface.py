"""stint.huggingface against the real transformers.Trainer (tiny GPT-2 from a
config, CPU, nothing downloaded): SIGTERM mid-epoch exits 75 after an
emergency checkpoint, SIGKILL loses only the steps after the last durable
save; resume_from_checkpoint=True then matches an uninterrupted run bit for
bit (per-step parameter sums, the final model)."""

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("transformers")
import torch  # noqa: E402
from util import assert_replayed, finish_run, run_output  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "examples", "huggingface", "train.py")
STEPS = 12       # 10 steps per epoch, saves every 4
TIMEOUT = 300    # one run: the Trainer's start, 12 tiny steps, its exit


def _run(tmp, env, *args):
    out = open(tmp / "out.txt", "ab")
    return subprocess.Popen([sys.executable, SCRIPT, "--out", str(tmp / "run"), "--steps", str(STEPS),
                             "--record", str(tmp / "rec")] + list(args),
                            env=env, cwd=str(tmp), stdout=out, stderr=subprocess.STDOUT)




def _records(tmp):
    out = {}
    for line in (tmp / "rec").read_text().splitlines():
        step, value = line.split()
        out.setdefault(int(step), []).append(value)
    return out


def _model(tmp):
    import stint
    with stint.Checkpointer(str(tmp / "run" / "stint"), read_only=True) as c:
        return c.load(step=STEPS)["model"]


@pytest.fixture
def env(python_env):
    return dict(python_env, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    got = {}

    def get(env):
        if not got:
            tmp = tmp_path_factory.mktemp("hf-reference")
            p = _run(tmp, env)
            assert finish_run(p, tmp, TIMEOUT) == 0, run_output(tmp)
            got["r"] = (_records(tmp), _model(tmp))
        return got["r"]
    return get


@pytest.mark.parametrize("how", ["notice", "sigkill"])
def test_kill_and_resume_matches(tmp_path, env, reference, how):
    records, model = reference(env)
    pause = 6 if how == "notice" else 7
    p = _run(tmp_path, env, "--pause-at", str(pause))
    deadline = time.monotonic() + TIMEOUT
    while not (tmp_path / "rec.paused").exists():
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            pytest.fail("run did not reach step %d:\n%s" % (pause, run_output(tmp_path)))
        time.sleep(0.02)
    if how == "notice":
        p.send_signal(signal.SIGTERM)
        assert finish_run(p, tmp_path, TIMEOUT) == 75, run_output(tmp_path)
        assert os.path.isfile(tmp_path / "run" / "hf" / "checkpoint-6" / "stint.json")
    else:
        p.kill()
        p.wait()
    hf = tmp_path / "run" / "hf"
    durable = max([int(n.split("-")[1]) for n in os.listdir(hf) if n.startswith("checkpoint-")
                   and not n.endswith(".stint-tmp")] or [0])  # 4, or 0 if its commit had not ended
    p = _run(tmp_path, env)
    assert finish_run(p, tmp_path, TIMEOUT) == 0, run_output(tmp_path)
    # sigkill: the steps after the newest durable one, trained twice (alike)
    assert_replayed(_records(tmp_path), records, STEPS,
                    range(durable + 1, pause + 1) if how == "sigkill" else None)
    mine = _model(tmp_path)
    assert mine.keys() == model.keys()
    for k in model:
        assert torch.equal(mine[k], model[k]), k
