"""stint.PreemptionWatcher: preemption notices for a Python training loop.

    with stint.PreemptionWatcher(grace=120) as watcher:   # SIGTERM, SIGUSR1
        for step in ...:
            train_step()
            if watcher.requested:                         # one atomic load
                plan = watcher.plan(state_bytes=..., bytes_per_second=...)
                if plan.save: save_and_wait()
                sys.exit(stint.EXIT_REQUEUE)

The signal handler only writes one byte to a pipe; a runtime thread turns it
into a notice with a deadline (received + grace; $STINT_GRACE_SECONDS
overrides grace). Handlers installed before are chained. notify() adds
notices from other sources (a coordinator, a cloud metadata poller).

callback=fn calls fn(notice) once, on a helper thread, when the first
notice arrives (to log it, or to tell a data pipeline to stop prefetching).
The step boundary stays the place to act on it: save there, not in fn.

Processes forked while a watcher is installed (DataLoader workers) do not
die of the preemption signals: schedulers such as Slurm signal every process
of a job, and a worker killed that way would make the DataLoader raise in
the middle of the emergency checkpoint. Such a child runs a no-op Python
handler for them instead (reset to the default by exec()), also after
DataLoader's worker loop installs its own SIGTERM handler, and the training
process shuts its workers down when it exits. shield_children=False keeps
the default action. Workers started with the "spawn" method are fresh
interpreters: pass worker_init_fn=stint.shield_from_preemption to the
DataLoader to get the same.

At most one watcher is installed per process (AlreadyExistsError otherwise).
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
from types import FrameType
from typing import Any, Callable, Dict, Iterable, Literal, Optional, Tuple

from . import _C

_DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
_shielded: Tuple[int, ...] = ()  # the installed watcher's signals, if it shields forked children
_with_callback: "set[PreemptionWatcher]" = set()  # watchers whose callback thread runs


@atexit.register
def _stop_callbacks_at_exit() -> None:
    """Joins every callback thread while it may still take the GIL: a daemon
    thread that wakes from wait() once finalization began is ended inside
    native code, which aborts the process (SIGABRT) after it chose its exit
    code. The signals stay handled (keep_until_exit() still holds)."""
    for watcher in list(_with_callback):
        watcher._stop_callback()


def _ignore_in_child(signum: int, frame: Optional[FrameType]) -> None:
    pass


def shield_from_preemption(*_: Any, signals: Optional[Iterable[int]] = None) -> None:
    """Makes this process (a DataLoader worker) survive the preemption
    signals (default SIGTERM, SIGUSR1) with a no-op handler. Usable as a
    DataLoader worker_init_fn."""
    for s in (signals or _shielded or _DEFAULT_SIGNALS):
        try:
            signal.signal(s, _ignore_in_child)
        except (ValueError, OSError):  # not the main thread, or an invalid signal
            pass


def _after_fork_in_child() -> None:
    if not _shielded:
        return
    shield_from_preemption()
    # A DataLoader worker's loop starts by installing torch's own SIGTERM
    # handler (print, then die): shield again right after it.
    import sys
    handling = sys.modules.get("torch.utils.data._utils.signal_handling")
    original = getattr(handling, "_set_worker_signal_handlers", None)
    if original is not None and not getattr(original, "_stint_shielded", False):
        def set_worker_signal_handlers(*args: Any, **kwargs: Any) -> None:
            original(*args, **kwargs)
            shield_from_preemption()
        set_worker_signal_handlers._stint_shielded = True  # type: ignore[attr-defined]
        handling._set_worker_signal_handlers = set_worker_signal_handlers  # type: ignore[union-attr]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class PreemptionNotice:
    __slots__ = ("source", "seconds_since_received", "seconds_to_deadline")

    source: str
    seconds_since_received: float
    seconds_to_deadline: float

    def __init__(self, source: str, seconds_since_received: float,
                 seconds_to_deadline: float) -> None:
        self.source = source                                  # "signal SIGTERM", "coordinator", ...
        self.seconds_since_received = seconds_since_received
        self.seconds_to_deadline = seconds_to_deadline        # negative once passed

    def __repr__(self) -> str:
        return "<stint.PreemptionNotice %s, deadline in %.1f s>" % (self.source, self.seconds_to_deadline)


def _notice(d: Optional[Dict[str, Any]]) -> Optional[PreemptionNotice]:
    return None if d is None else PreemptionNotice(d["source"], d["seconds_since_received"],
                                                   d["seconds_to_deadline"])


class PreemptionWatcher:
    def __init__(self, signals: Optional[Iterable[int]] = None, *, grace: Optional[float] = None,
                 safety: Optional[float] = None,
                 callback: Optional[Callable[[Optional[PreemptionNotice]], Any]] = None,
                 shield_children: bool = True) -> None:
        """Installs the watcher. signals: signal numbers (default SIGTERM and
        SIGUSR1); grace: seconds from a signal to the hard kill (default 30);
        safety: seconds kept free before the deadline (default 2)."""
        global _shielded
        signals = list(_DEFAULT_SIGNALS if signals is None else [int(s) for s in signals])
        self._c = _C.PreemptionWatcher.install(signals, grace, safety)
        if shield_children:
            _shielded = tuple(signals)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if callback is not None:
            self._thread = threading.Thread(target=self._watch, args=(callback,),
                                            name="stint-preemption-callback", daemon=True)
            self._thread.start()
            _with_callback.add(self)

    def _watch(self, callback: Callable[[Optional[PreemptionNotice]], Any]) -> None:
        while not self._stop.is_set():
            try:
                if self._c.wait(0.5):
                    break
            except _C.FailedPreconditionError:  # uninstalled meanwhile
                return
        if not self._stop.is_set():
            callback(self.notice())

    @property
    def requested(self) -> bool:
        """True once a notice is pending. Cheap: check it every step."""
        return self._c.requested

    @property
    def installed(self) -> bool:
        return self._c.installed

    @property
    def signals_received(self) -> int:
        return self._c.signals_received

    def notice(self) -> Optional[PreemptionNotice]:
        """The pending notice (PreemptionNotice), or None."""
        return _notice(self._c.notice())

    def notify(self, source: str, deadline_in: float) -> None:
        """A notice from another source: the resources go away in `deadline_in` seconds."""
        self._c.notify(str(source), float(deadline_in))

    def plan(self, state_bytes: int = 0, bytes_per_second: float = 0.0, fixed_seconds: float = 0.05,
             steps_since_durable: int = 0) -> _C.PreemptionPlan:
        """PreemptionPlan for the pending notice, now: .save (an emergency
        checkpoint fits the remaining grace at that throughput; unknown
        throughput means try), .steps_lost, .remaining_seconds, .reason."""
        return self._c.plan(int(state_bytes), float(bytes_per_second), float(fixed_seconds),
                            int(steps_since_durable))

    def keep_until_exit(self) -> None:
        """The run is over (finished, or stopping to be requeued): from now
        until the process exits the signals stay caught, also after
        uninstall(), so a signal arriving while the process winds down cannot
        turn its exit code into a kill. Late signals are dropped; handlers
        installed before are still chained. Resumable calls it."""
        self._c.keep_until_exit()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks (GIL released, Ctrl-C works) until a notice is pending or
        `timeout` seconds pass; returns requested."""
        return self._c.wait(timeout)

    def uninstall(self) -> None:
        """Stops the watcher and restores the previous signal handlers (unless
        keep_until_exit() was called). Idempotent."""
        global _shielded
        self._stop.set()
        if self._c.installed:
            _shielded = ()
        self._c.uninstall()
        self._stop_callback()

    def _stop_callback(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None
        _with_callback.discard(self)

    def __enter__(self) -> PreemptionWatcher:
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        self.uninstall()
        return False

    def __repr__(self) -> str:
        return "<stint.PreemptionWatcher %s>" % (
            ("requested" if self._c.requested else "waiting") if self._c.installed else "uninstalled")
