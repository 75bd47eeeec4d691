"""Helpers the fault campaign's modules share (tools/fault_campaign.py,
fault_coordinator.py, fault_leader.py)."""

import socket
import subprocess


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_events(path):
    """A worker's events file as lists of words; [] before it exists."""
    try:
        with open(path) as f:
            return [line.split() for line in f.read().splitlines() if line]
    except FileNotFoundError:
        return []


def wall(event):
    """The wall-clock time a worker logged with an event ("... t=<seconds>")."""
    return float(event[-1][2:])


def end(proc, before=None):
    """Stops a child: `before` (e.g. SIGCONT) first, then SIGTERM, and
    SIGKILL when it is still there 20 s later."""
    if proc.poll() is None:
        if before is not None:
            proc.send_signal(before)
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
