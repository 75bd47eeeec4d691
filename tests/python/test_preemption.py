"""stint.PreemptionWatcher: signals and notify() become a pending notice;
context manager, callback, plan, GIL released while waiting."""

import os
import signal
import threading
import time

import pytest

import stint


def test_sigterm_sets_requested_and_plans_a_save():
    with stint.PreemptionWatcher(grace=60, safety=1) as w:
        assert w.installed and not w.requested and w.notice() is None
        assert w.wait(timeout=0.05) is False
        os.kill(os.getpid(), signal.SIGTERM)  # would kill the process without the watcher
        assert w.wait(timeout=30)
        assert w.requested and w.signals_received >= 1
        n = w.notice()
        assert n.source == "signal SIGTERM"
        assert 0 < n.seconds_to_deadline <= 60
        plan = w.plan(state_bytes=1 << 20, bytes_per_second=1e9, steps_since_durable=3)
        assert plan.preempted and plan.save and 50 < plan.remaining_seconds < 60
        assert plan.reason
        no_time = w.plan(state_bytes=1 << 40, bytes_per_second=1e6, steps_since_durable=3)
        assert no_time.preempted and not no_time.save and no_time.steps_lost == 3
    assert not w.installed
    with pytest.raises(stint.FailedPreconditionError, match="uninstalled"):
        w.requested


def test_notify_from_another_source():
    with stint.PreemptionWatcher(signals=[signal.SIGUSR2]) as w:
        w.notify("coordinator", 5.0)
        assert w.requested and w.notice().source == "coordinator"
        assert w.notice().seconds_to_deadline <= 5.0


def test_only_one_watcher_per_process():
    with stint.PreemptionWatcher():
        with pytest.raises(stint.AlreadyExistsError):
            stint.PreemptionWatcher()
    stint.PreemptionWatcher().uninstall()  # free again


def test_previous_handler_is_chained_and_restored():
    got = []
    old = signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
    try:
        with stint.PreemptionWatcher(signals=[signal.SIGUSR1]) as w:
            os.kill(os.getpid(), signal.SIGUSR1)
            assert w.wait(timeout=30)
        # Python runs its handler at the next bytecode boundary of the main thread.
        for _ in range(1000):
            if got:
                break
        assert got == [signal.SIGUSR1]
        os.kill(os.getpid(), signal.SIGUSR1)  # our handler is gone: Python's runs alone
        for _ in range(1000):
            if len(got) == 2:
                break
        assert got == [signal.SIGUSR1, signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_callback_runs_once_on_notice():
    called = threading.Event()
    notices = []

    def cb(notice):
        notices.append(notice)
        called.set()

    with stint.PreemptionWatcher(callback=cb) as w:
        w.notify("cloud", 30)
        assert called.wait(30)
    assert len(notices) == 1 and notices[0].source == "cloud"


def test_callback_thread_stops_on_uninstall_without_notice():
    w = stint.PreemptionWatcher(callback=lambda n: pytest.fail("no notice was sent"))
    w.uninstall()
    w.uninstall()


def test_wait_releases_the_gil():
    """The main thread runs Python code (sending the signal) while another
    thread is blocked in wait(): with the GIL held there, wait() would time
    out first and return False."""
    with stint.PreemptionWatcher() as w:
        result = []
        entered = threading.Event()

        def waiter():
            entered.set()
            result.append(w.wait(timeout=60))

        t = threading.Thread(target=waiter)
        t.start()
        entered.wait()
        time.sleep(0.2)  # let the waiter get into wait(); the outcome, not the time, is checked
        w.notify("test", 10)
        t.join()
        assert result == [True]


def test_grace_from_the_environment_is_validated(monkeypatch):
    monkeypatch.setenv("STINT_GRACE_SECONDS", "soon")
    with pytest.raises(stint.InvalidArgumentError, match="STINT_GRACE_SECONDS"):
        stint.PreemptionWatcher()


def test_launch_env(monkeypatch):
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
              "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(v, raising=False)
    assert stint.launch_env() == {"rank": 0, "world_size": 1, "local_rank": 0, "node_rank": 0,
                                  "launcher": "none", "master_addr": "", "master_port": 0,
                                  "job_id": "", "restart_count": 0}
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert stint.launch_env()["launcher"] == "torchrun"
    s = stint.ResumableSampler(16, 8)
    assert (s.rank, s.world_size) == (1, 4)
    monkeypatch.setenv("WORLD_SIZE", "x")
    with pytest.raises(stint.InvalidArgumentError, match="WORLD_SIZE"):
        stint.launch_env()


def test_exit_codes():
    assert stint.EXIT_REQUEUE == 75 and stint.EXIT_DO_NOT_REQUEUE == 76


@pytest.mark.parametrize("shield", [True, False])
def test_forked_children_survive_preemption_signals(shield):
    """DataLoader workers are fork()ed; a scheduler signals them too."""
    with stint.PreemptionWatcher(shield_children=shield):
        pid = os.fork()
        if pid == 0:  # the child: signal itself, then report that it lived
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100000):
                pass  # Python runs the (no-op) handler at a bytecode boundary
            os._exit(0)
        _, status = os.waitpid(pid, 0)
    if shield:
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    else:
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
