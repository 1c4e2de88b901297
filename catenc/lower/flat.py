"""Flattened positions: a multi-index as one row-major position (last index fastest) and back."""

from __future__ import annotations

from collections.abc import Sequence

from catenc.symbolic import Expr, merge_divmod, product, row_major

Axes = Sequence[tuple[str, Expr]]  # (index name, extent), outermost first
Divisions = tuple[tuple[str, Expr | None, Expr | None], ...]  # (index name, divisor, modulus)


def flatten(index: Sequence[Expr], shape: Sequence[Expr]) -> Expr:
    """The row-major position of an index in a shape (last index fastest)."""
    return merge_divmod(row_major(index, shape))


def step_along(index: Sequence[Expr], shape: Sequence[Expr], name: str) -> int:
    """How many elements the row-major position of `index` in `shape` moves per step of index
    `name`, in absolute value (0: not by a constant)."""
    step = flatten(index, shape).coefficient(name)
    return abs(step.value) if step.is_const else 0


def flat_extent(axes: Axes) -> Expr:
    """How many positions the axes span."""
    return product([extent for _, extent in axes])


def unflatten(axes: Axes) -> Divisions:
    """Each axis index from a flattened position: (name, divisor, modulus), the index being
    position / divisor % modulus (None: that step is left out; last index fastest)."""
    last = len(axes) - 1
    return tuple(
        (name, None if k == last else product([e for _, e in axes[k + 1 :]]), extent if k > 0 else None)
        for k, (name, extent) in enumerate(axes)
    )


def indices_at(position: Expr, axes: Axes) -> dict[str, Expr]:
    """Each axis's index at a flattened position of the axes (unflatten's divisions, as expressions)."""
    out = {}
    for name, divisor, modulus in unflatten(axes):
        index = position if divisor is None else position // divisor
        out[name] = index if modulus is None else index % modulus
    return out
