"""The boxes of consecutive tensors cut into groups that fit the staging budget: one C load
each. A tensor larger than a group is cut into pieces of whole boxes where that reads no byte
twice."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .._dtypes import NAMES, numpy_dtype, target_value
from ..checkpoint import Tensor
from ._shardings import Box, Item

ALIGN = 64  # bytes: XLA's CPU client adopts a host buffer this aligned instead of copying it
Group = list[Item]


def padded(nbytes: int) -> int:
    """A box's room in a slab: boxes start 64-byte aligned."""
    return -(-nbytes // ALIGN) * ALIGN


def _box_bytes(box: Box, itemsize: int) -> int:
    """A box's bytes, as room in a slab."""
    return padded(int(np.prod(box[3], dtype=np.int64)) * itemsize)


def pieces(t: Tensor, boxes: list[tuple[Any, Box]], width: int,
           limit: int) -> list[list[tuple[Any, Box]]]:
    """A tensor's boxes cut into pieces of at most `limit` bytes (at least one distinct box each)
    where that reads no byte twice: the boxes split dimension 0 only, so distinct boxes are
    disjoint byte ranges (a box on several devices stays in one piece, read once). Otherwise,
    or when they fit, one piece of all of them."""
    whole = all(b[2][k] == 0 and b[3][k] == t.shape[k]
                for _, b in boxes for k in range(1, len(t.shape)))
    if not whole or sum(_box_bytes(b, width) for _, b in boxes) <= limit:
        return [boxes]
    same: dict[tuple[tuple[int, ...], tuple[int, ...]], list[tuple[Any, Box]]] = {}
    for db in boxes:
        same.setdefault((db[1][2], db[1][3]), []).append(db)
    out: list[list[tuple[Any, Box]]] = []
    size = 0
    for copies in same.values():
        n = _box_bytes(copies[0][1], width) * len(copies)
        if not out or size + n > limit:
            out.append([])
            size = 0
        out[-1] += copies
        size += n
    return out


def _piece(t: Tensor, boxes: list[tuple[Any, Box]], width: int,
           limit: int | None) -> list[tuple[Any, Box]]:
    return boxes if limit is None else pieces(t, boxes, width, limit)[0]


def groups(items: list[Item], budget: Callable[[], int | None],
           target: Any) -> Iterator[Group]:
    """Consecutive tensors (checkpoint order) whose boxes fit the budget together (None: no
    bound; asked afresh for each group), whatever their dtypes (a box plan without a target
    keeps each tensor's: FP8 weights, F32 scales and BF16 norms alternate in checkpoint order).
    A tensor larger than the budget is cut into pieces of whole boxes where no byte is read twice
    (pieces), else a group of its own."""
    group: Group = []
    size, limit = 0, budget()
    to = NAMES[target_value(target)] if target is not None else None
    for t, all_boxes in items:
        width = numpy_dtype(to or t.dtype).itemsize  # packed types: an upper bound
        rest = all_boxes
        while rest:
            boxes = _piece(t, rest, width, limit)
            n = sum(_box_bytes(b, width) for _, b in boxes)
            if group and limit is not None and size + n > limit:
                yield group
                group, size, limit = [], 0, budget()
                boxes = _piece(t, rest, width, limit)  # cut afresh: the budget may have changed
                n = sum(_box_bytes(b, width) for _, b in boxes)
            taken = {dev for dev, _ in boxes}  # a tensor has one box per device at most
            rest = [db for db in rest if db[0] not in taken]
            group.append((t, boxes))
            size += n
    if group:
        yield group
