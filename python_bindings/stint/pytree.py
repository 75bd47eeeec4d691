"""Nested state dicts <-> named tensors, byte blobs and one structure blob.

A checkpoint written by stint.Checkpointer holds every tensor of the state
under a readable dotted name ("model.fc1.weight", "optim.state.3.exp_avg"),
every bytes leaf as a blob, and the blob "stint.pytree": a JSON document that
records the containers, the plain values and where each tensor goes, so
load() rebuilds exactly the nesting that was saved.

The structure format (version 1: the node grammar, how names are made,
shared tensors, reading rules) is written down in runtime/format/FORMAT.md,
section "Python state structure".

A DTensor leaf is a "tensor" node whose meta carries "dtensor": {"mesh":
[sizes], "placements": ["Shard(dim=0)", "Replicate()", ...], "mesh_dims":
[names] when named}, recorded for reading only: a load rebuilds it as a full
plain tensor unless `into` holds a DTensor there, whose own layout is read
(readers of version 1 that predate it ignore the key). In a collective save
every rank writes its own structure; the tensors each rank lists are only
those it writes (stint.distributed.split_plain_tensors() decides for plain
tensors). A plain tensor whose bytes differ between the ranks of a collective
save (an RNG state, a per-rank counter) is saved per rank: its node's meta
carries "per_rank": W, and the checkpoint holds it as a tensor of shape
[W, *shape] whose row r is rank r's (see per_rank_tensors()).
"""

from __future__ import annotations

import collections
import contextlib
import gc
import json
import math
from typing import Any, Dict, Iterable, Iterator, List, Optional, Set, Tuple, Union

import torch

try:  # numpy is optional
    import numpy as _np
except ImportError:  # pragma: no cover - numpy is installed with torch in practice
    _np = None  # type: ignore[assignment]

from . import _C
from . import distributed

Node = Any  # a structure node: a JSON value (see FORMAT.md)
Path = List[Any]  # the keys and indices from the root to a value
Device = Union[str, torch.device, int]

STRUCTURE_BLOB = "stint.pytree"
FORMAT_NAME = "stint.pytree"
FORMAT_VERSION = 1

_MISSING = object()


class Flat:
    """What flatten() produces: the arguments of _C.Checkpointer.save().

    boxes is parallel to tensors: None for a whole (plain) tensor,
    (global_shape, offsets) for a shard: a DTensor's local shard, or a
    per-rank tensor's row. Every plain tensor and the DTensor shards this
    rank writes are listed; the structure names every tensor of the state.
    plain_nodes: {name: the structure nodes of that plain tensor}."""

    __slots__ = ("names", "tensors", "blobs", "root", "boxes", "plain_nodes")

    names: List[str]
    tensors: List[torch.Tensor]
    blobs: Dict[str, bytes]
    root: Node
    boxes: List[Optional[Tuple[List[int], List[int]]]]
    plain_nodes: Dict[str, List[List[Any]]]

    def __init__(self) -> None:
        self.names = []
        self.tensors = []
        self.blobs = {}
        self.root = None
        self.boxes = []
        self.plain_nodes = {}

    def sharded(self) -> bool:
        return any(b is not None for b in self.boxes)

    def mark_per_rank(self, name: str, world_size: int) -> None:
        """Records in the structure that plain tensor `name` is saved per rank
        by `world_size` ranks."""
        for node in self.plain_nodes[name]:
            if len(node) < 3:
                node.append({})
            node[2]["per_rank"] = world_size

    def structure(self) -> bytes:
        """The structure blob."""
        doc = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "root": self.root}
        return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _path_str(path: Path) -> str:
    out = "state"
    for p in path:
        out += "[%r]" % (p,)
    return out


# While flattening, a value's path is kept as a chain (parent chain, key),
# () at the root: each value costs one tuple, and the list is made only for
# an error message.
_Chain = Tuple[Any, ...]


def _chain_str(chain: _Chain) -> str:
    keys = []
    while chain:
        chain, key = chain
        keys.append(key)
    return _path_str(keys[::-1])


def _component(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool) or key is None:
        return repr(key)
    if isinstance(key, int):
        return str(key)
    return repr(key)


def _child(name: str, key: Any) -> str:
    """The dotted name of `key` under `name` (the components joined by ".")."""
    c = key if type(key) is str else _component(key)
    return name + "." + c if name else c


class _Flattener:
    """One flatten(): every value is visited once with its path (a chain) and
    its dotted name, built as the walk descends (thousands of tensors per
    save: nothing per value is recomputed from the root)."""

    def __init__(self) -> None:
        self.flat = Flat()
        self.tensor_names: Set[str] = set()
        self.blob_names: Set[str] = {STRUCTURE_BLOB}
        # (address, shape, stride, dtype, device) -> name
        self.by_view: Dict[Tuple[Any, ...], str] = {}
        self.by_id: Dict[int, str] = {}  # id(DTensor) -> name

    @staticmethod
    def _unique(name: str, used: Set[str]) -> str:
        if name and name not in used:
            used.add(name)
            return name
        k = 1
        while "%s#%d" % (name, k) in used:
            k += 1
        name = "%s#%d" % (name, k)
        used.add(name)
        return name

    def _view_key(self, t: torch.Tensor) -> Optional[Tuple[Any, ...]]:
        # The first element's address with shape, stride, dtype and device
        # names one view of one storage. Called for every tensor of every
        # save: no storage object is made for it.
        if t.layout != torch.strided or t.numel() == 0:
            return None
        try:
            ptr = t.data_ptr()
        except (RuntimeError, NotImplementedError):
            return None
        if ptr == 0:
            return None
        return (ptr, t.shape, t.stride(), t.dtype, t.device)

    def tensor(self, t: torch.Tensor, name: str) -> str:
        key = self._view_key(t)
        if key is not None and key in self.by_view:
            return self.by_view[key]
        name = self._unique(name, self.tensor_names)
        self.flat.names.append(name)
        self.flat.tensors.append(t)
        self.flat.boxes.append(None)
        if key is not None:
            self.by_view[key] = name
        return name

    def dtensor(self, dt: Any, chain: _Chain, name: str) -> str:
        if id(dt) in self.by_id:
            return self.by_id[id(dt)]
        name = self._unique(name, self.tensor_names)
        box = distributed.dtensor_box(dt, "%s (%s)" % (_chain_str(chain), name))
        if box is not None and distributed.writes(dt):
            self.flat.names.append(name)
            self.flat.tensors.append(distributed.local_tensor(dt))
            self.flat.boxes.append(box)
        self.by_id[id(dt)] = name
        return name

    def _plain(self, node: List[Any]) -> List[Any]:
        self.flat.plain_nodes.setdefault(node[1], []).append(node)
        return node

    def key(self, k: Any, chain: _Chain) -> Node:
        if k is None or isinstance(k, (bool, str, int, float)):
            return self.node(k, chain, "")
        if type(k) is tuple:
            return ["tuple", [self.key(x, chain) for x in k]]
        raise TypeError("%s: cannot checkpoint a dict key of type %s (supported: str, int, float, "
                        "bool, None and tuples of them)" % (_chain_str(chain), type(k).__name__))

    def items(self, d: Dict[Any, Any], chain: _Chain, name: str) -> List[List[Node]]:
        out = []
        for k, v in d.items():
            kt = type(k)
            out.append([k if kt is str or kt is int else self.key(k, chain),
                        self.node(v, (chain, k), _child(name, k))])
        return out

    def _tensor_node(self, x: torch.Tensor, name: str) -> Node:
        name = self.tensor(x, name)
        meta = {}
        if x.device.type != "cpu":
            meta["device"] = str(x.device)
        if x.requires_grad:
            meta["grad"] = True
        return self._plain(["tensor", name, meta] if meta else ["tensor", name])

    def node(self, x: Any, chain: _Chain, name: str) -> Node:
        t = type(x)
        if x is None or t is bool or t is str or t is int:
            return x
        # The common containers and plain tensors first (exact types: their
        # subclasses take the checks below).
        if t is torch.Tensor:
            return self._tensor_node(x, name)
        if t is dict:
            return ["dict", self.items(x, chain, name)]
        if t is float:
            return ["float", x.hex()]
        if _np is not None and isinstance(x, _np.generic):
            return ["np", x.dtype.str, self.node(x.item(), chain, name)]
        for base in (bool, str, int, float):
            if isinstance(x, base):
                raise TypeError("%s: cannot checkpoint an object of type %s, a subclass of %s: it "
                                "would load as a plain %s" % (_chain_str(chain), t.__qualname__,
                                                              base.__name__, base.__name__))
        if distributed.is_dtensor(x):
            name = self.dtensor(x, chain, name)
            meta: Any = {"dtensor": distributed.dtensor_meta(x)}
            local = distributed.local_tensor(x)
            if local.device.type != "cpu":
                meta["device"] = str(local.device)
            if x.requires_grad:
                meta["grad"] = True
            return ["tensor", name, meta]
        if isinstance(x, torch.Tensor):
            return self._tensor_node(x, name)
        if isinstance(x, collections.OrderedDict):
            meta = getattr(x, "_metadata", None)
            return ["odict", self.items(x, chain, name),
                    self.node(meta, (chain, "_metadata"), _child(name, "_metadata"))
                    if meta is not None else None]
        if isinstance(x, dict):
            return ["dict", self.items(x, chain, name)]
        if t is list or t is tuple:
            return [t.__name__, [self.node(v, (chain, i), _child(name, i))
                                 for i, v in enumerate(x)]]
        if isinstance(x, (bytes, bytearray, memoryview)):
            name = self._unique(name, self.blob_names)
            self.flat.blobs[name] = bytes(x)
            return ["bytes", name]
        if isinstance(x, torch.dtype):
            return ["dtype", str(x).replace("torch.", "")]
        if isinstance(x, torch.device):
            return ["device", str(x)]
        if _np is not None and isinstance(x, _np.ndarray):
            try:
                tensor = torch.from_numpy(_np.ascontiguousarray(x))
            except TypeError as e:
                raise TypeError("%s: cannot checkpoint a numpy array of dtype %s (%s)"
                                % (_chain_str(chain), x.dtype, e)) from None
            return self._plain(["ndarray", self.tensor(tensor, name)])
        raise TypeError("%s: cannot checkpoint an object of type %s (supported: tensors, numpy "
                        "arrays, dict, OrderedDict, list, tuple, int, float, bool, str, bytes, None; "
                        "use its state_dict())" % (_chain_str(chain), t.__qualname__))


def flatten(state: Any) -> Flat:
    """Splits `state` into named tensors, blobs and the structure (see module
    doc). Every plain tensor is listed (in a collective save
    stint.distributed.split_plain_tensors() then decides which rank writes
    it); DTensors are listed as local shards by the ranks
    stint.distributed.writes() picks."""
    f = _Flattener()
    f.flat.root = f.node(state, (), "")
    return f.flat


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the duration (a load or
    a save).

    A load or save of a large state makes tens of thousands of short-lived
    lists and dicts (the structure and its JSON, the plan, the rebuilt state)
    that reference counting frees. While they live they count towards the collector's
    thresholds and get promoted, so in a process holding torch a load of
    2,300 tensors could set off a full collection of the whole heap (about
    as long as reading 300 MiB). Paused, they die young; what the load
    returns is tracked as usual once the collector runs again."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def parse_structure(blob: bytes, where: str) -> Node:
    """The root NODE of a structure blob; DataLossError when it is malformed."""
    try:
        doc = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise _C.DataLossError("%s: blob '%s' is not valid JSON: %s" % (where, STRUCTURE_BLOB, e)) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME or "root" not in doc:
        raise _C.DataLossError("%s: blob '%s' is not a stint state structure" % (where, STRUCTURE_BLOB))
    version = doc.get("version")
    if version != FORMAT_VERSION:
        raise _C.UnimplementedError("%s: state structure version %r; this stint reads version %d"
                                    % (where, version, FORMAT_VERSION))
    return doc["root"]


class _Bad(Exception):
    pass


def _kind(node: Node) -> str:
    if isinstance(node, list) and node and isinstance(node[0], str):
        return node[0]
    if node is None or isinstance(node, (bool, int, str)):
        return "leaf"
    raise _Bad("unexpected node %r" % (node,))


def _tensor_nodes(node: Node) -> Iterator[Node]:
    """The tensor and ndarray nodes of a structure, depth first; _Bad (or
    IndexError/TypeError/ValueError) where it is malformed."""
    kind = _kind(node)
    if kind in ("tensor", "ndarray"):
        yield node
    elif kind in ("dict", "odict"):
        for _, v in node[1]:
            yield from _tensor_nodes(v)
    elif kind in ("list", "tuple"):
        for v in node[1]:
            yield from _tensor_nodes(v)


def tensor_names(root: Node) -> Optional[List[str]]:
    """Every tensor name the structure refers to, in order, once each (None
    when the structure is malformed)."""
    out: List[str] = []
    seen: Set[str] = set()
    try:
        for node in _tensor_nodes(root):
            if node[1] not in seen:
                seen.add(node[1])
                out.append(node[1])
    except (_Bad, IndexError, TypeError, ValueError):
        return None
    return out


def per_rank_tensors(root: Node, where: str) -> Dict[str, int]:
    """{name: the world size that saved it} for every per-rank plain tensor
    the structure refers to (see the module doc); DataLossError when the
    structure is malformed."""
    out: Dict[str, int] = {}
    try:
        for node in _tensor_nodes(root):
            meta = node[2] if len(node) > 2 and isinstance(node[2], dict) else {}
            world = meta.get("per_rank")
            if world is not None:
                if type(world) is not int or world < 1:
                    raise _Bad("tensor '%s': per_rank %r is not a world size" % (node[1], world))
                out[node[1]] = world
    except (_Bad, IndexError, TypeError, ValueError) as e:
        raise _C.DataLossError("%s: malformed state structure (%s)" % (where, e)) from None
    return out


def _decode_key(node: Node, where: str) -> Any:
    if node is None or type(node) in (str, int, bool):  # most keys: no nested decoder
        return node
    return decode(node, {}, {}, where, None)


InPlace = Tuple[Any, ...]  # (name, tensor) or (name, local shard, global_shape, offsets)


def in_place_item(name: str, target: torch.Tensor) -> Optional[InPlace]:
    """What a load planner returns for filling `target` in place: (name,
    tensor) for a plain tensor, (name, local shard, global_shape, offsets)
    for a DTensor, None for a DTensor this rank holds no part of."""
    if distributed.is_dtensor(target):
        box = distributed.dtensor_box(target, "tensor '%s' of `into`" % name)
        if box is None:
            return None
        return (name, distributed.local_tensor(target), box[0], box[1])
    return (name, target)


def plan_in_place(root: Node, into: Any, strict: bool, where: str,
                  targets: Optional[Dict[str, torch.Tensor]] = None
                  ) -> Tuple[List[InPlace], List[str]]:
    """Matches the structure against `into` (a state of the same shape whose
    tensors are to be filled in place). Returns (in_place, fresh [name]);
    in_place items are in_place_item()'s. targets, when given, receives
    {name: the tensor of `into`} for every tensor filled in place (DTensors
    whose shard is empty on this rank included). With strict, NotFoundError
    names every tensor of `into` that the checkpoint does not hold."""
    in_place: List[InPlace] = []
    fresh: List[str] = []
    placed: Set[str] = set()
    fresh_set: Set[str] = set()
    matched: Set[int] = set()  # id() of the tensors of `into` that get filled

    def tensor(name: str, target: Any) -> None:
        if isinstance(target, torch.Tensor):
            if name not in placed:
                placed.add(name)
                item = in_place_item(name, target)
                if item is not None:
                    in_place.append(item)
                if targets is not None:
                    targets[name] = target
            matched.add(id(target))
        elif name not in fresh_set:
            fresh_set.add(name)
            fresh.append(name)

    def walk(node: Node, target: Any) -> None:
        kind = _kind(node)
        if kind in ("tensor", "ndarray"):
            if kind == "ndarray" and _np is not None and isinstance(target, _np.ndarray):
                try:
                    target = torch.from_numpy(target) if target.flags["C_CONTIGUOUS"] else _MISSING
                except TypeError:
                    target = _MISSING
            tensor(node[1], target if isinstance(target, torch.Tensor) else _MISSING)
        elif kind in ("dict", "odict"):
            is_map = isinstance(target, dict)
            for k, v in node[1]:
                walk(v, target.get(_decode_key(k, where), _MISSING) if is_map else _MISSING)
        elif kind in ("list", "tuple"):
            same = isinstance(target, (list, tuple)) and len(target) == len(node[1])
            for i, v in enumerate(node[1]):
                walk(v, target[i] if same else _MISSING)

    try:
        walk(root, into)
    except (_Bad, IndexError, TypeError, ValueError) as e:
        raise _C.DataLossError("%s: malformed state structure (%s)" % (where, e)) from None

    if strict:
        missing: List[str] = []

        def find(x: Any, path: Path) -> None:
            if isinstance(x, torch.Tensor):
                if id(x) not in matched:
                    missing.append(_path_str(path))
            elif isinstance(x, dict):
                for k, v in x.items():
                    find(v, path + [k])
            elif isinstance(x, (list, tuple)):
                for i, v in enumerate(x):
                    find(v, path + [i])

        find(into, [])
        if missing:
            shown = ", ".join(missing[:5]) + (" and %d more" % (len(missing) - 5) if len(missing) > 5 else "")
            raise _C.NotFoundError("%s: the checkpoint has no tensor for %s of `into` (pass strict=False "
                                   "to load anyway)" % (where, shown))
    return in_place, fresh


def _device_for(saved: Optional[str], map_location: Any, name: str,
                where: str) -> Optional[torch.device]:
    if isinstance(map_location, dict):
        # {"cuda:1": "cuda:0", ...}, as torch.load takes it; others as saved.
        if saved is not None and saved in map_location:
            return torch.device(map_location[saved])
        map_location = None
    if map_location is not None:
        return torch.device(map_location)
    if saved is None:
        return None
    device = torch.device(saved)
    if device.type != "cuda":
        return device
    # Saved on a GPU this process lacks: the same index modulo the visible
    # GPUs, or the CPU when there are none (never refused).
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        return torch.device("cpu")
    if (device.index or 0) >= count:
        return torch.device("cuda", (device.index or 0) % count)
    return device


def decode(root: Node, tensors: Dict[str, torch.Tensor], blobs: Dict[str, bytes], where: str,
           map_location: Optional[Device], in_place_names: Iterable[str] = ()) -> Any:
    """Rebuilds the saved object. `tensors` maps names to loaded tensors (the
    `into` targets for in_place_names, new CPU tensors otherwise); fresh
    tensors are moved to their saved device (or map_location) and get their
    requires_grad back."""
    done: Dict[str, torch.Tensor] = {}

    def tensor(node: Node) -> torch.Tensor:
        name = node[1]
        if name in done:
            return done[name]
        if name not in tensors:
            raise _Bad("tensor '%s' was not loaded" % name)
        t = tensors[name]
        if name not in in_place_names:
            meta = node[2] if len(node) > 2 and isinstance(node[2], dict) else {}
            device = _device_for(meta.get("device"), map_location, name, where)
            if device is not None and t.device != device:
                t = t.to(device)
            if meta.get("grad"):
                t.requires_grad_(True)
        done[name] = t
        return t

    def dec(node: Node) -> Any:
        kind = _kind(node)
        if kind == "leaf":
            return node
        if kind == "float":
            return float.fromhex(node[1])
        if kind == "tensor":
            return tensor(node)
        if kind == "ndarray":
            t = tensor(node)
            return t.numpy() if t.device.type == "cpu" else t.cpu().numpy()
        if kind == "dict":
            return {dec(k): dec(v) for k, v in node[1]}
        if kind == "odict":
            d = collections.OrderedDict((dec(k), dec(v)) for k, v in node[1])
            if len(node) > 2 and node[2] is not None:
                d._metadata = dec(node[2])  # type: ignore[attr-defined]
            return d
        if kind == "list":
            return [dec(v) for v in node[1]]
        if kind == "tuple":
            return tuple(dec(v) for v in node[1])
        if kind == "bytes":
            if node[1] not in blobs:
                raise _Bad("blob '%s' is missing" % node[1])
            return blobs[node[1]]
        if kind == "np":
            if _np is None:
                raise _C.UnimplementedError("%s: the state holds numpy scalars; install numpy" % where)
            return _np.dtype(node[1]).type(dec(node[2]))
        if kind == "dtype":
            dt = getattr(torch, node[1], None)
            if not isinstance(dt, torch.dtype):
                raise _Bad("unknown dtype %r" % node[1])
            return dt
        if kind == "device":
            return torch.device(node[1])
        raise _Bad("unknown node kind %r" % kind)

    try:
        return dec(root)
    except (_Bad, IndexError, TypeError, ValueError, KeyError) as e:
        raise _C.DataLossError("%s: malformed state structure (%s)" % (where, e)) from None
