"""The boxes of consecutive tensors cut into groups that fit the staging budget: one C load
each. A tensor larger than a group is cut into pieces of whole boxes where that reads no byte
twice, else (on devices that copy) into bands: the next rows of each of its boxes, assembled on
the devices (_parts)."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .._dtypes import NAMES, numpy_dtype
from ..checkpoint import Tensor
from ._shardings import Box, Item

ALIGN = 64  # bytes: XLA's CPU client adopts a host buffer this aligned instead of copying it
Group = list[Item]


def padded(nbytes: int) -> int:
    """A box's room in a slab: boxes start 64-byte aligned."""
    return -(-nbytes // ALIGN) * ALIGN


def _box_bytes(box: Box, itemsize: int) -> int:
    """A box's bytes, as room in a slab."""
    return padded(math.prod(box[3]) * itemsize)  # Python ints: exact, and 10x np.prod's speed


def distinct(boxes: list[tuple[Any, Box]]) -> list[tuple[Any, Box]]:
    """One (device, box) per distinct box of a tensor: the first device holding it."""
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    out = []
    for d, b in boxes:
        if (b[2], b[3]) not in seen:
            seen.add((b[2], b[3]))
            out.append((d, b))
    return out


def _buffers(boxes: list[tuple[Any, Box]], share: bool) -> list[tuple[Any, Box]]:
    """The boxes that take a slab buffer: each device's, or one per distinct box where its
    copies share one (share: devices that copy from it, not adopt it)."""
    return distinct(boxes) if share else boxes


def room(boxes: list[tuple[Any, Box]], width: int, share: bool) -> int:
    """The slab bytes of a tensor's boxes (_buffers)."""
    return sum(_box_bytes(b, width) for _, b in _buffers(boxes, share))


def pieces(t: Tensor, boxes: list[tuple[Any, Box]], width: int, limit: int,
           share: bool = False) -> list[list[tuple[Any, Box]]]:
    """A tensor's boxes cut into pieces of at most `limit` bytes (at least one distinct box each)
    where that reads no byte twice: the boxes split dimension 0 only, so distinct boxes are
    disjoint byte ranges (a box on several devices stays in one piece, read once). Otherwise,
    or when they fit, one piece of all of them."""
    whole = all(b[2][k] == 0 and b[3][k] == t.shape[k]
                for _, b in boxes for k in range(1, len(t.shape)))
    if not whole or room(boxes, width, share) <= limit:
        return [boxes]
    same: dict[tuple[tuple[int, ...], tuple[int, ...]], list[tuple[Any, Box]]] = {}
    for db in boxes:
        same.setdefault((db[1][2], db[1][3]), []).append(db)
    out: list[list[tuple[Any, Box]]] = []
    size = 0
    for copies in same.values():
        n = room(copies, width, share)
        if not out or size + n > limit:
            out.append([])
            size = 0
        out[-1] += copies
        size += n
    return out


def _rows(buffers: list[tuple[Any, Box]], width: int, limit: int, k: int) -> int:
    """The most units along dimension k (one element of each dimension before it, all of those
    after it) of each buffer's box that fit `limit` together, each buffer padded: from the count
    that leaves room for every padding, up while one more still fits."""
    unit_bytes = [math.prod(b[3][k + 1:]) * width for _, b in buffers]
    unit = sum(unit_bytes)
    if not unit:
        return 0
    n = (limit - ALIGN * len(buffers)) // unit
    while sum(padded((n + 1) * u) for u in unit_bytes) <= limit:
        n += 1
    return n


def band(boxes: list[tuple[Any, Box]], width: int, limit: int,
         share: bool = False) -> list[tuple[Any, Box]] | None:
    """The first rows (dimension 0) of every box, as many as fit `limit` together (room: copies
    of a box in one buffer where they share) and the same number for each (parts of one shape
    share their compiled assembly). Where not even one row of each fits (a row of a 3-D
    tensor's box can be hundreds of MiB: Llama 4's fused experts), the first row's first
    elements along dimension 1, or 2, ...: the shallowest dimension along which one element of
    each fits; the parts are still boxes, taken in row-major order. None where not even that
    fits. A box without bytes is taken whole."""
    buffers = _buffers(boxes, share)
    for k in range(len(boxes[0][1][3])):  # the boxes of a tensor share its dimensions
        n = _rows(buffers, width, limit, k)
        if n >= 1:
            break
    else:
        return None
    out = []
    for dev, (name, d, start, length) in boxes:
        if _box_bytes((name, d, start, length), width):
            length = (1,) * k + (min(n, length[k]),) + length[k + 1:]
        out.append((dev, (name, d, start, length)))
    return out


def _heads(rest: list[tuple[Any, Box]]) -> list[tuple[Any, Box]]:
    """Each device's first box in `rest` (where a band is under way, a device's remainder is
    several boxes, in row-major order)."""
    seen: set[Any] = set()
    out = []
    for dev, b in rest:
        if dev not in seen:
            seen.add(dev)
            out.append((dev, b))
    return out


def _cut(t: Tensor, rest: list[tuple[Any, Box]], width: int, limit: int | None,
         copying: bool) -> list[tuple[Any, Box]]:
    """The boxes (or parts of boxes) of `rest` to load next: all of them, else the first piece,
    else (`copying`: the devices copy, so they can assemble parts) the first band of every box:
    one distinct box over the limit makes every box go in bands, so that the parts of all
    devices share shapes. Once a band is under way, the next band of each device's first box."""
    heads = _heads(rest)
    if len(heads) < len(rest):
        return heads if limit is None else band(heads, width, limit, copying) or heads
    if limit is None:
        return rest
    first = pieces(t, rest, width, limit, copying)[0]
    if not copying or room(first, width, copying) <= limit:
        return first
    return band(rest, width, limit, copying) or first


def _remainder(b: Box, cut: Box) -> list[Box]:
    """What is left of box b once `cut` (b's first elements in row-major order: one element of
    each dimension before some k, the first of dimension k, all of those after it) is loaded:
    the rest of dimension k, then of each dimension before it, innermost first, as boxes."""
    name, d, s, n = b
    c = cut[3]
    diff = [j for j in range(len(n)) if c[j] != n[j]]
    if not diff:
        return []
    k = diff[-1]
    assert cut[2] == s and all(x == 1 for x in c[:k]), (b, cut)
    out = []
    if n[k] > c[k]:
        out.append((name, d, s[:k] + (s[k] + c[k],) + s[k + 1:],
                    c[:k] + (n[k] - c[k],) + n[k + 1:]))
    for j in range(k - 1, -1, -1):
        if n[j] > 1:
            out.append((name, d, s[:j] + (s[j] + 1,) + s[j + 1:],
                        (1,) * j + (n[j] - 1,) + n[j + 1:]))
    return out


def _after(rest: list[tuple[Any, Box]], cut: list[tuple[Any, Box]]) -> list[tuple[Any, Box]]:
    """What is left of `rest` once `cut` is loaded: the boxes of other devices, and what each
    band left of its box (_remainder), in front of that device's other boxes."""
    taken = dict(cut)
    out = []
    for dev, b in rest:
        c = taken.pop(dev, None)
        out += [(dev, b)] if c is None else [(dev, r) for r in _remainder(b, c)]
    return out


def _again(rest: list[tuple[Any, Box]], cut: list[tuple[Any, Box]]) -> bool:
    """Whether a device of `cut` still has rows in `rest` (cut was a band). Its next band must
    go in another group: a plan holds one box of a tensor per device."""
    taken = {dev for dev, _ in cut}
    return any(dev in taken for dev, _ in rest)


def width(t: Tensor, targets: Mapping[str, int]) -> int:
    """The bytes of one element of tensor t as loaded (its target's, else its own)."""
    to = targets.get(t.name, -1)
    return numpy_dtype(NAMES[to] if to >= 0 else t.dtype).itemsize


def groups(items: list[Item], budget: Callable[[], int | None], targets: Mapping[str, int],
           copying: Callable[[], bool] = lambda: False) -> Iterator[Group]:
    """Consecutive tensors (checkpoint order) whose boxes fit the budget together (None: no
    bound; asked afresh for each group), whatever their dtypes and targets (a box plan has a
    target per box, -1 or absent keeping the tensor's dtype: FP8 weights, F32 scales and BF16
    norms alternate in checkpoint order).
    A tensor larger than the budget is cut into pieces of whole boxes where no byte is read twice
    (pieces), else into bands of rows where copying() says the devices copy the buffers (asked
    afresh for each group: then they can assemble parts, and a box's copies share a buffer),
    else a group of its own."""
    group: Group = []
    size, limit = 0, budget()
    for t, all_boxes in items:
        w = width(t, targets)
        rest = all_boxes
        while rest:
            copies = copying()
            boxes = _cut(t, rest, w, limit, copies)
            n = room(boxes, w, copies)
            if group and limit is not None and size + n > limit:
                yield group
                group, size, limit, copies = [], 0, budget(), copying()
                boxes = _cut(t, rest, w, limit, copies)  # the budget may have changed
                n = room(boxes, w, copies)
            rest = _after(rest, boxes)
            group.append((t, boxes))
            size += n
            if _again(rest, boxes):  # a band: the next one goes to the same devices
                yield group
                group, size, limit = [], 0, budget()
    if group:
        yield group
