"""Reductions down a strided axis, run with the reduction outside the innermost loop.

`pooled[b, d] = sum[t](x[b, t, d])` as written reduces down a column: each step is D elements
away from the last, so vector lanes over t touch a cache line each. Run as
`for t: for d: pooled[b, d] += x[b, t, d]`, the innermost loop reads and writes contiguously
and vectorises, the stored value being the accumulator. Each element is still combined in the
order of t, so the results are those of the plain loop.
"""

from __future__ import annotations

from dataclasses import replace

from catenc.dtypes import DType
from catenc.ir.nodes import Compute, Gather, Reduce, Where, contains, loads, walk
from catenc.schedule.kernels import Schedule
from catenc.symbolic import ONE, sym

COMBINE = {"sum": "add", "prod": "mul", "max": "max", "min": "min"}  # a reduction's combining op


def strided_reduction(compute: Compute, storage: DType) -> Reduce | None:
    """The reduction of compute's body that can run outside the compute's last loop, or None.

    It must be the body's only reduction (none nested in it, none under a `where`), of the
    storage dtype (the buffer is the accumulator), read nothing of the compute's own buffer,
    and its loads must take the compute's last index as their last axis (contiguous) and the
    reduction's indices only in other axes (strided: where lanes over them would be slow)."""
    if not compute.indices or compute.indices[-1][1] == ONE:
        return None
    last = sym(compute.indices[-1][0])
    reduces = [node for node in walk(compute.body) if isinstance(node, Reduce)]
    if len(reduces) != 1:
        return None
    (reduce,) = reduces
    if reduce.op not in COMBINE or reduce.dtype != storage or reduce.dtype.name == "bool":
        return None
    if reduce.body.summary.has_reduce or any(isinstance(n, Where) and contains(n, reduce) for n in walk(compute.body)):
        return None
    if any(load.buffer == compute.name for load in loads(compute.body)):
        return None
    bound = {name for name, _ in reduce.indices}
    contiguous = False
    for load in loads(reduce.body):
        if isinstance(load, Gather):
            return None
        if not load.index:
            continue
        if not load.index[-1].free_symbols().isdisjoint(bound):
            return None  # contiguous in the reduction: its vector lanes serve it
        contiguous = contiguous or load.index[-1] == last
    return reduce if contiguous else None


def interchange_reductions(schedule: Schedule) -> Schedule:
    """Each kernel of one stored compute whose reduction runs down a strided axis gets the
    `interchange` decision, its last row index becoming the loop inside the reduction's."""
    kernels = []
    for kernel in schedule.kernels:
        member = kernel.members[0]
        storage = schedule.graph.buffer(member.name).dtype
        if (
            kernel.contraction is None
            and len(kernel.members) == 1
            and member.name not in kernel.scalars
            and strided_reduction(member, storage) is not None
        ):
            outer = kernel.outer[:-1] if len(kernel.outer) == len(member.indices) else kernel.outer
            kernel = replace(kernel, outer=outer, decisions=replace(kernel.decisions, interchange=True))
        kernels.append(kernel)
    return replace(schedule, kernels=tuple(kernels))
