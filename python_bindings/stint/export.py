"""Export a stint checkpoint to PyTorch's own formats, so no checkpoint is locked in.

    python -m stint.export --format torch ROOT OUT.pt [--step N]
    python -m stint.export --format dcp   ROOT OUT_DIR [--step N]

`torch` writes one torch.save file that `torch.load(OUT.pt)` reads; `dcp`
writes a torch.distributed.checkpoint directory (FileSystemWriter) that
`dcp.load(state_dict, checkpoint_id=OUT_DIR)` and
`torch.distributed.checkpoint.format_utils.dcp_to_torch_save` read. The
step is the newest committed one under ROOT unless --step names one.

The state is the one stint.dcp's StorageReader presents: nested as the
saving planner flattened it (tensors whole, at their global shape; non-tensor
values as DCP saved them). Blobs that were not written through stint.dcp
(raw bytes of a plain stint.Checkpointer save) are not torch.save'd values:
the export fails on them.

In a process with the whole state in memory: run it on one machine with room
for the full state.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, Optional, Sequence

import torch
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
from torch.distributed.checkpoint.state_dict_saver import _save_state_dict

from . import dcp as stint_dcp

__all__ = ["load_state", "export"]

FORMATS = ("torch", "dcp")


def load_state(root: str, step: Optional[int] = None) -> Dict[str, Any]:
    """The whole state of step `step` (default: the newest) under `root`, as nested dicts."""
    state: Dict[str, Any] = {}
    _load_state_dict(state, storage_reader=stint_dcp.StorageReader(root, step=step),
                     planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    return state


def export(root: str, out: str, format: str, step: Optional[int] = None) -> None:
    """Writes the checkpoint at `root` (step `step`, default the newest) to `out` as `format`."""
    if format not in FORMATS:
        raise ValueError("stint export: format must be one of %s, got %r" % (FORMATS, format))
    state = load_state(root, step)
    if format == "torch":
        torch.save(state, out)
    else:
        _save_state_dict(state, storage_writer=FileSystemWriter(out), no_dist=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stint.export",
        description="Export a stint checkpoint as a torch.save file or a DCP directory.")
    parser.add_argument("--format", required=True, choices=FORMATS)
    parser.add_argument("--step", type=int, default=None,
                        help="the step to export (default: the newest committed)")
    parser.add_argument("root", help="the stint checkpoint root")
    parser.add_argument("out", help="the torch.save file, or the DCP directory, to write")
    args = parser.parse_args(argv)
    try:
        export(os.fspath(args.root), os.fspath(args.out), args.format, args.step)
    except Exception as e:  # one line, naming what failed, for a command line
        print("stint export: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
