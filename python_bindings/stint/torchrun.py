"""A torchrun rendezvous backend that keeps its state at stintd.

    STINT_COORD_TOKEN=<the job's registration_token> torchrun --rdzv-backend=stint \\
        --rdzv-endpoint=HOST:PORT --rdzv-id=JOB --nnodes=1:4 --nproc-per-node=N train.py

torchrun finds the backend through the ``torchrun.handlers`` entry point
that the ``stint`` package declares (``stint = stint.torchrun:handler``).
The rendezvous is torch's own ``DynamicRendezvousHandler`` (the one behind
``--rdzv-backend=c10d``); only where it keeps things differs: its state and
the c10d Store the agents share live in the KV of stintd job ``JOB``
(tools/stintd/API.md, "KV"), under ``torchrun/``. No node hosts them, so a
node that dies takes nothing of the rendezvous with it: the others re-form
without it (torchrun restarts their workers), and a node that joins later
finds them. Every wait is bounded by torch's timeouts (``--rdzv-conf``
join_timeout, last_call_timeout, keep_alive_interval, ...).

Configuration:
  ``--rdzv-endpoint``  ``host:port`` (http) or ``https://host:port``.
  ``--rdzv-id``        the stintd job id (a positive integer).
  token                ``$STINT_COORD_TOKEN``, else ``$STINT_WORKER_SECRET``,
                       else the first line of ``--rdzv-conf token_file=PATH``:
                       a credential of job ``JOB`` only, which reaches
                       nothing else: the job's ``registration_token`` (what
                       ``POST /v1/jobs`` answers), or the segment token
                       stint-agent sets in ``STINT_COORD_TOKEN`` for a
                       torchrun launch. The shared worker token does not
                       reach a job's KV (stintd answers 403). The workers
                       torchrun starts inherit it: each one that uses stint's
                       coordinator registers itself with it and works with a
                       secret of its own (tools/stintd/API.md, "Credentials").
  CA (https)           ``--rdzv-conf ca_file=PATH``, else ``$STINT_CA_FILE``,
                       else the system's CAs.
  key prefix           ``--rdzv-conf prefix=P`` (default ``torchrun``): the
                       state is ``P/state``, the store ``P/store/...``
                       (stint-agent gives each segment its own).

Exit codes: torchrun exits 1 whenever a worker failed, so a job whose
workers all exited 75 (stint.EXIT_REQUEUE: preempted, checkpoint taken) would
look like a crash to Slurm, stint-agent or any wrapper. Launch through
``python -m stint.torchrun`` (the same arguments as torchrun, any rendezvous
backend) instead: it is torchrun, except that it exits 75 when every worker
of its last run exited 75, whether they stopped on their own (a notice to
one rank, agreed by stint.Resumable) or after torchrun itself was signalled
and passed the signal on. Keep ``--max-restarts`` at 0 for preemptible jobs:
torchrun restarts workers that exited 75 in place otherwise.
"""

import base64
import datetime
import hashlib
import json
import os
import re
import ssl
import sys
import time
import urllib.error
import urllib.request
from typing import Callable, Dict, List, Optional, Tuple

import torch.distributed as dist
from torch.distributed.elastic.rendezvous import (
    RendezvousConnectionError,
    RendezvousHandler,
    RendezvousParameters,
    RendezvousStateError,
)
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    RendezvousBackend,
    Token,
    create_handler,
)

__all__ = ["StintKv", "StintRendezvousBackend", "StintStore", "create_stint_handler", "handler",
           "main"]

_KEY_OK = re.compile(r"[A-Za-z0-9./-]")  # stintd allows [A-Za-z0-9._/-]; "_" escapes
_MAX_KEY = 200
_MAX_POLL_SECONDS = 30  # one long-poll; stintd caps them at 60 s


class StintKv:
    """The KV of one stintd job over HTTP(S): one connection per call, so it
    may be used from several threads at once (torch heartbeats on its own)."""

    def __init__(self, url: str, job_id: int, token: str, ca_file: Optional[str] = None,
                 timeout: float = 10.0):
        self.url = url.rstrip("/")
        self.job_id = job_id
        self._token = token
        self._timeout = timeout
        self._context = None
        if self.url.startswith("https://"):
            self._context = ssl.create_default_context(cafile=ca_file or None)
        elif not self.url.startswith("http://"):
            raise ValueError("stintd url must start with http:// or https:// (got %r)" % url)

    def _call(self, method: str, key: str, body: Optional[dict] = None,
              query: str = "", wait: float = 0.0) -> Tuple[int, dict]:
        """(HTTP status, JSON body); 404 and 409 are answers, other errors raise."""
        path = "/v1/jobs/%d/kv/%s%s" % (self.job_id, key, query)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": "Bearer " + self._token, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self._timeout + wait,
                                        context=self._context) as r:
                return r.status, json.loads(r.read().decode() or "null")
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            if e.code in (404, 409):
                return e.code, {}
            try:
                message = json.loads(text)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = text[:200]
            raise RendezvousConnectionError("stintd refused %s %s: HTTP %d: %s" % (
                method, path, e.code, message)) from None
        except (urllib.error.URLError, OSError) as e:
            raise RendezvousConnectionError("cannot reach stintd at %s (%s %s): %s" % (
                self.url, method, path, getattr(e, "reason", e))) from None

    def get(self, key: str, wait: float = 0.0) -> Optional[Tuple[str, int]]:
        """(value, version), or None when the key is absent (after waiting
        up to `wait` seconds for it to appear)."""
        query = "?wait_seconds=%g" % wait if wait > 0 else ""
        status, body = self._call("GET", key, query=query, wait=wait)
        if status == 404:
            return None
        return body["value"], int(body["version"])

    def put(self, key: str, value: str, if_version: Optional[int] = None) -> Optional[int]:
        """The new version; None when `if_version` did not match (0: absent)."""
        body = {"value": value}
        if if_version is not None:
            body["if_version"] = if_version
        status, answer = self._call("PUT", key, body)
        return None if status == 409 else int(answer["version"])

    def delete(self, key: str) -> None:
        self._call("DELETE", key)


def _encode(value: bytes) -> str:
    return base64.b64encode(value).decode()


def _decode(text: str) -> bytes:
    return base64.b64decode(text.encode())


def _as_bytes(value) -> bytes:
    return value if isinstance(value, bytes) else (
        bytes(value) if isinstance(value, (bytearray, list)) else str(value).encode())


class StintRendezvousBackend(RendezvousBackend):
    """torch's rendezvous state in one KV entry; its version is the fencing
    token, so set_state is stintd's compare-and-set (``if_version``)."""

    def __init__(self, kv: StintKv, key: str = "torchrun/state"):
        self._kv = kv
        self._key = key

    @property
    def name(self) -> str:
        return "stint"

    def get_state(self) -> Optional[Tuple[bytes, Token]]:
        found = self._kv.get(self._key)
        if found is None:
            return None
        return self._state(found)

    def set_state(self, state: bytes, token: Optional[Token] = None
                  ) -> Optional[Tuple[bytes, Token, bool]]:
        if token is not None and not isinstance(token, int):
            raise RendezvousStateError("stint rendezvous: a token must be a KV version (int)")
        version = self._kv.put(self._key, _encode(state), 0 if token is None else token)
        if version is not None:
            return state, version, True
        current = self.get_state()  # lost the race: what won
        if current is None:
            return None
        return current[0], current[1], False

    def _state(self, found: Tuple[str, int]) -> Tuple[bytes, Token]:
        try:
            return _decode(found[0]), found[1]
        except ValueError as e:
            raise RendezvousStateError("stint rendezvous: the state at %s is corrupt: %s" % (
                self._key, e)) from None


class StintStore(dist.Store):
    """A c10d Store in a stintd job's KV, shared by the torchrun agents of
    the job (torch wraps it in a PrefixStore per round). get() and wait()
    long-poll stintd up to the store's timeout, then raise DistStoreError."""

    def __init__(self, kv: StintKv, prefix: str = "torchrun/store"):
        super().__init__()
        self._kv = kv
        self._prefix = prefix

    def _key(self, key: str) -> str:
        escaped = "".join(c if _KEY_OK.match(c) else "_%02x" % ord(c) for c in key
                          ) if key.isascii() else None
        if escaped is not None and len(self._prefix) + 3 + len(escaped) <= _MAX_KEY:
            return "%s/k/%s" % (self._prefix, escaped)
        return "%s/h/%s" % (self._prefix, hashlib.sha256(key.encode()).hexdigest())

    def _wait_for(self, key: str, timeout: Optional[datetime.timedelta]) -> Tuple[str, int]:
        seconds = (timeout or self.timeout).total_seconds()
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            found = self._kv.get(self._key(key), wait=min(max(left, 0.0), _MAX_POLL_SECONDS))
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                raise dist.DistStoreError("stint store: key %r did not appear within %.0f s" % (
                    key, seconds))

    def set(self, key, value) -> None:
        self._kv.put(self._key(key), _encode(_as_bytes(value)))

    def get(self, key) -> bytes:
        return _decode(self._wait_for(key, None)[0])

    def add(self, key, amount: int) -> int:
        return self._update(key, lambda old: str(int(old or b"0") + amount).encode(), int)

    def compare_set(self, key, expected, desired) -> bytes:
        expected, desired = _as_bytes(expected), _as_bytes(desired)
        while True:
            found = self._kv.get(self._key(key))
            if found is None:
                if expected:
                    return expected
                if self._kv.put(self._key(key), _encode(desired), 0) is not None:
                    return desired
                continue
            current = _decode(found[0])
            if current != expected:
                return current
            if self._kv.put(self._key(key), _encode(desired), found[1]) is not None:
                return desired

    def check(self, keys: List[str]) -> bool:
        return all(self._kv.get(self._key(k)) is not None for k in keys)

    def wait(self, keys: List[str], timeout: Optional[datetime.timedelta] = None) -> None:
        for k in keys:
            self._wait_for(k, timeout)

    def delete_key(self, key) -> bool:
        existed = self._kv.get(self._key(key)) is not None
        self._kv.delete(self._key(key))
        return existed

    def _update(self, key, change: Callable[[Optional[bytes]], bytes], result):
        """change(old value or None) written by compare-and-set until it wins."""
        while True:
            found = self._kv.get(self._key(key))
            new = change(None if found is None else _decode(found[0]))
            version = 0 if found is None else found[1]
            if self._kv.put(self._key(key), _encode(new), version) is not None:
                return result(new)


def _kv_from_params(params: RendezvousParameters) -> StintKv:
    endpoint = (params.endpoint or "").strip()
    if not endpoint:
        raise ValueError("stint rendezvous: give --rdzv-endpoint=HOST:PORT (stintd)")
    url = endpoint if "://" in endpoint else "http://" + endpoint
    try:
        job_id = int(params.run_id)
    except ValueError:
        job_id = 0
    if job_id <= 0:
        raise ValueError("stint rendezvous: --rdzv-id must be the stintd job id (got %r)"
                         % params.run_id)
    token = os.environ.get("STINT_COORD_TOKEN") or os.environ.get("STINT_WORKER_SECRET") or ""
    token_file = params.get("token_file")
    if not token and token_file:
        with open(token_file) as f:
            lines = (line.strip() for line in f)
            token = next((line for line in lines if line and not line.startswith("#")), "")
    if not token:
        raise ValueError("stint rendezvous: no token: set $STINT_COORD_TOKEN (the job's "
                         "registration_token) or --rdzv-conf token_file=PATH")
    ca_file = params.get("ca_file") or os.environ.get("STINT_CA_FILE") or None
    return StintKv(url, job_id, token, ca_file)


def create_stint_handler(params: RendezvousParameters) -> RendezvousHandler:
    """torch's DynamicRendezvousHandler over stintd's KV (see the module doc)."""
    kv = _kv_from_params(params)
    prefix = params.get("prefix") or "torchrun"
    if not re.fullmatch(r"[A-Za-z0-9._/-]{1,100}", prefix):
        raise ValueError("stint rendezvous: prefix must match [A-Za-z0-9._/-]{1,100} (got %r)"
                         % prefix)
    return create_handler(StintStore(kv, prefix + "/store"),
                          StintRendezvousBackend(kv, prefix + "/state"), params)


def handler() -> Callable[[RendezvousParameters], RendezvousHandler]:
    """The ``torchrun.handlers`` entry point: torch calls it and registers
    what it returns under the entry point's name, ``stint``."""
    return create_stint_handler


_EXIT_REQUEUE = 75  # stint.EXIT_REQUEUE (runtime/include/stint/preemption.h)


def _worker_exit_codes(pcontext) -> Dict[int, Optional[int]]:
    """{local rank: exit code} of the workers a closed torchrun process
    context ran (a worker started from a command line); {} for others."""
    handlers = getattr(pcontext, "subprocess_handlers", None) or {}
    return {rank: h.proc.returncode for rank, h in handlers.items()}


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m stint.torchrun ARGS``: torchrun ARGS, exiting 75 when every
    worker of its last run exited 75 (see the module doc); otherwise exactly
    what torchrun does."""
    from torch.distributed import run as torch_run
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing import api as processes
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    # torchrun reaps its workers in PContext.close() (after a worker failed,
    # and when it was signalled) and reports their codes nowhere else in full.
    last_exits: Dict[int, Optional[int]] = {}
    torch_close = processes.PContext.close

    def close(self, *args, **kwargs):
        try:
            return torch_close(self, *args, **kwargs)
        finally:
            last_exits.clear()
            last_exits.update(_worker_exit_codes(self))

    processes.PContext.close = close
    try:
        torch_run.main(argv)
    except (ChildFailedError, SignalException):
        if not last_exits or any(code != _EXIT_REQUEUE for code in last_exits.values()):
            raise
        print("stint.torchrun: all %d workers exited %d (requeue): exit %d"
              % (len(last_exits), _EXIT_REQUEUE, _EXIT_REQUEUE), file=sys.stderr, flush=True)
        return _EXIT_REQUEUE
    finally:
        processes.PContext.close = torch_close
    return 0


if __name__ == "__main__":
    sys.exit(main())
