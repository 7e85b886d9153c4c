"""Deterministic subsets and splits; by label for classification, so class ratios survive."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Callable, Hashable, Optional, Sequence, TypeVar

T = TypeVar("T")
KeyFn = Optional[Callable[[T], Hashable]]


def _allocate(sizes: dict[Hashable, int], total: int) -> dict[Hashable, int]:
    """Split `total` over groups in proportion to their sizes (largest remainder), never above a group's size."""
    n = sum(sizes.values())
    exact = {g: total * s / n for g, s in sizes.items()}
    share = {g: min(sizes[g], int(v)) for g, v in exact.items()}
    for g in sorted(sizes, key=lambda g: (exact[g] - int(exact[g]), sizes[g]), reverse=True):
        if sum(share.values()) >= total:
            break
        if share[g] < sizes[g]:
            share[g] += 1
    return share


def take(items: Sequence[T], n: int, key: KeyFn = None) -> list[T]:
    """The first `n` items; with `key`, the first items of each group in proportion (order kept)."""
    if n >= len(items):
        return list(items)
    if key is None:
        return list(items[:n])
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for i, item in enumerate(items):
        groups[key(item)].append(i)
    share = _allocate({g: len(ix) for g, ix in groups.items()}, n)
    chosen = sorted(i for g, ix in groups.items() for i in ix[: share[g]])
    return [items[i] for i in chosen]


def held_out_count(val_size: float, n: int) -> int:
    """val_size < 1 is a share of the rows, >= 1 a count."""
    return int(round(val_size * n)) if val_size < 1 else int(val_size)


def split(items: Sequence[T], n_eval: int, seed: int, key: KeyFn = None) -> tuple[list[T], list[T]]:
    """(train, eval) with `n_eval` items held out at random (per group when `key` is given), orders kept."""
    rng = random.Random(seed)
    if key is None:
        held = set(rng.sample(range(len(items)), n_eval))
    else:
        groups: dict[Hashable, list[int]] = defaultdict(list)
        for i, item in enumerate(items):
            groups[key(item)].append(i)
        share = _allocate({g: len(ix) for g, ix in groups.items()}, n_eval)
        held = set()
        for g in sorted(groups, key=str):   # sorted: the same groups draw the same numbers every run
            held.update(rng.sample(groups[g], share[g]))
    train = [x for i, x in enumerate(items) if i not in held]
    evaluation = [x for i, x in enumerate(items) if i in held]
    return train, evaluation
