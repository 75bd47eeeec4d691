"""RNG capture and restore: every LibTorch default generator (CPU and each
CUDA device, through the runtime's capture_torch_rng), Python's `random`
and numpy's global RandomState (np.random.*).

    rng = stint.capture_rng()   # a plain state object: checkpoint it
    ...
    stint.restore_rng(rng)

Generators a program creates itself (torch.Generator(), np.random.default_rng(),
random.Random()) are not global: checkpoint their state with the rest of the
program's state.

In a collective stint.Checkpointer every rank saves and loads back its own
RNG state: capture_rng()'s bytes and plain values are kept per rank, and a
state held as a tensor (torch.get_rng_state(), a generator's get_state())
that differs between ranks is saved per rank (see stint.distributed).
"""

from __future__ import annotations

import random
from typing import Any, Dict

from . import _C

try:
    import numpy as _np
except ImportError:  # pragma: no cover
    _np = None  # type: ignore[assignment]


def capture_rng() -> Dict[str, Any]:
    """{'torch': {'cpu': bytes, 'cuda:0': bytes, ...}, 'python': random.getstate(),
    'numpy': {...} or None}: saveable with Checkpointer.save()."""
    state: Dict[str, Any] = {"torch": _C.capture_torch_rng(), "python": random.getstate(), "numpy": None}
    if _np is not None:
        name, key, pos, has_gauss, gauss = _np.random.get_state(legacy=True)
        state["numpy"] = {"bit_generator": str(name), "key": _np.asarray(key, dtype=_np.uint32).tobytes(),
                          "pos": int(pos), "has_gauss": int(has_gauss), "gauss": float(gauss)}
    return state


def restore_rng(state: Dict[str, Any]) -> None:
    """Restores what capture_rng() returned. InvalidArgumentError for a state
    of another shape or a CUDA device this process lacks."""
    if not isinstance(state, dict) or "torch" not in state or "python" not in state:
        raise _C.InvalidArgumentError("not an RNG state from stint.capture_rng()")
    _C.restore_torch_rng(dict(state["torch"]))
    py = state["python"]
    try:
        random.setstate(py if isinstance(py, tuple) else tuple(py))
    except (TypeError, ValueError) as e:
        raise _C.InvalidArgumentError("Python random state: %s" % e) from None
    np_state = state.get("numpy")
    if np_state is not None:
        if _np is None:
            raise _C.FailedPreconditionError("the RNG state holds numpy's, but numpy is not installed")
        key = _np.frombuffer(np_state["key"], dtype=_np.uint32).copy()
        _np.random.set_state((np_state["bit_generator"], key, np_state["pos"],
                              np_state["has_gauss"], np_state["gauss"]))
