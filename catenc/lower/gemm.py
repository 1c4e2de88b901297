"""A Gemm statement as the pieces of one call of the packed gemm driver (the driver itself is
catenc/codegen/templates/gemm.c.j2).

A call needs a context struct (what its helpers read), two packing functions that evaluate the
operands into panels (none for an operand whose panels were packed at compile time: PackedPanels), an
optional epilogue applied in place to the output, and a loop over the batch. Which fields, which
axes each helper walks and how, and what runs on threads is decided here; the renderer spells it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import reduce

from catenc.dtypes import DType
from catenc.ir.nodes import Binary, Const, Gather, Load, Reduce, SymInt, Value, Where, value_symbols, walk
from catenc.ir.passes import replace_node, substitute
from catenc.ir.verify import as_nonnegative, conjuncts
from catenc.lower.flat import Axes, Divisions, flat_extent, flatten, indices_at, step_along, unflatten
from catenc.lower.lanes import Storage
from catenc.lower.loops import Gemm, LoopKernel
from catenc.schedule.contractions import GEMM_DTYPES, Contraction, narrow
from catenc.schedule.tiles import KINDS, PANEL_ALIGN
from catenc.symbolic import ONE, ZERO, Call, Expr, floordiv, maximum, merge_divmod, minimum, product, sym

AT = "catenc_at"  # the last axis's index where an odometer run starts


@dataclass(frozen=True)
class ContextField:
    """A field of the call's context: a buffer the helpers read (writable: the output an
    epilogue rewrites), or an int64 (dtype None: a symbol or a batch index)."""

    name: str
    dtype: DType | None
    writable: bool = False


@dataclass(frozen=True)
class Window:
    """A guarded value `where(cond, inside, outside)` split along the walk's last index: where
    `keep` holds (None: always) it is `inside` for last index in [max(lows), min(highs)) and
    `outside` (a constant) elsewhere, so the inside runs without a guard (a copy that vectorises:
    the padded rows of a convolution's patches)."""

    inside: Value
    outside: Value
    lows: tuple[Expr, ...]  # free of the last index
    highs: tuple[Expr, ...]
    keep: Value | None  # the conjuncts that do not read the last index
    step: int = 0  # inside's copy_step: 1, a block copy; 2, a copy of every other element; 0, neither


# The most depth-index combinations a MaskedRow keeps a mask for (49: a 7x7 window's).
MASKS = 64


@dataclass(frozen=True)
class MaskedRow:
    """A guarded walk over several axes whose inside reads memory contiguously along their flattened
    position `flat` (a padded convolution's patch row over a row-major plane), packed a panel row
    at a time: per panel, the guard at every position for each combination of the depth indices it
    reads (`guard_axes`: a 3x3 window's 9 (r, s)) is kept as a byte mask, so a depth step's row is
    the inside where its mask is set (a masked vector load) and `value.b` elsewhere. `value` is the
    walk's `where(cond, inside, outside)` with the inside rewritten to read `flat` (the same
    elements). Runs as short as a feature-map row each cost a block copy, two fills and their
    bounds: ResNet-50's 3x3 patches packed 1.8x (56-wide rows) to 3x (14-wide) faster this way."""

    flat: str
    value: Where
    guard_axes: Axes

    @property
    def masks(self) -> int:
        return product([e for _, e in self.guard_axes]).value


@dataclass(frozen=True)
class Odometer:
    """`target = value` at `count` consecutive flattened positions of the axes from `start`.
    One axis (`carried` empty) is indexed directly; over several, the last one (`last`) runs an
    affine inner loop from AT, `begin` gives the other indices and AT at the start, and after
    each run the carried indices (outermost first; the first never wraps) advance by one.
    `window`: the value's guard as a range of the last index (None: evaluate it as it is);
    `masked`: the walk as masked panel rows (MaskedRow), where it is one; `strided`: the value
    reads memory at a constant stride other than 1 along the last index (a stride-2 convolution's
    patches), a loop clang vectorises with gathers that ran 4.5x slower than scalar copies, unless
    `step` says it is copied by the renderer's even-element copy instead."""

    value: Value
    begin: Divisions  # lower.flat.unflatten of the start
    last: tuple[str, Expr]
    carried: Axes
    window: Window | None = None
    masked: MaskedRow | None = None
    strided: bool = False
    step: int = 0  # 2: an unguarded value read at every other element, copied so (copy_step)


@dataclass(frozen=True)
class DepthCase:
    """The walk a packing takes at the depth steps where `cond` holds, a condition of the depth
    indices and symbols alone: one side of a select along the depth (a concatenation that a
    product contracts over, DenseNet's and SqueezeNet's), so each step's row is a plain copy."""

    cond: Value
    fill: Odometer


@dataclass(frozen=True)
class PackSide:
    """How operand `side` is packed: "a" in panels of MR rows (rows x depth), "b" in panels of
    NR columns (depth x cols); each panel's positions walk `fill`, zero past the end. With
    `cases`, a depth step takes the first case whose condition holds, else `fill`."""

    side: str
    width: str  # the tile dimension a panel spans: "MR" or "NR"
    extent: Expr  # positions along the panel's axes
    fill: Odometer
    runs: StridedOperand | None = None  # an int8 operand read in place along the depth: copied a word at a time
    cases: tuple[DepthCase, ...] = ()


@dataclass(frozen=True)
class DirectA:
    """Operand A read in place by the driver (catenc_gemm_direct_a_<T>), not packed: row i, depth k
    (both flattened) at buffer[offset + i*lda + k] (a weight stored rows by depth)."""

    buffer: str
    offset: Expr  # of row 0, depth 0: reads no row or depth index
    lda: int


@dataclass(frozen=True)
class StridedOperand:
    """An operand read in place: element (p, k) of the current batch element, p along the
    flattened rows (A) or columns (B) and k along the flattened depth, is
    buffer[offset + p*outer + k*depth]; one of the strides is 1 (`depth_major`: depth's)."""

    buffer: str
    offset: Expr  # reads batch indices and symbols only
    outer: Expr
    depth: Expr

    @property
    def depth_major(self) -> bool:
        return self.depth == ONE

    @property
    def lead(self) -> Expr:
        """The stride that is not 1 (a tile row's step)."""
        return self.outer if self.depth_major else self.depth


@dataclass(frozen=True)
class ConstantOperand:
    """Operand `side` ("a" or "b") a plain load of its buffer as stored at positions the depth and
    outer indices alone fix (no batch index, no symbol; outer: A's rows, B's columns): (depth k,
    outer j) at buffer[offset + the sums of each axis's coefficient times its index], k and j
    unflattened over the axes (outermost first)."""

    side: str
    buffer: str
    offset: int
    depth: tuple[tuple[int, int], ...]  # (coefficient, extent) of each depth axis
    outer: tuple[tuple[int, int], ...]  # ... of each row (A) or column (B) axis


@dataclass(frozen=True)
class PackedPanels:
    """An operand's panels packed at compile time (catenc/codegen/prepack.py): read as `source`,
    they lie `at` elements past the start of its buffer, a baked constant whose array holds them
    after its values (templates/gemm.c.j2 gives their layout: `bp`, and `ap` for an int8 A)."""

    source: ConstantOperand
    at: int


@dataclass(frozen=True)
class GemmCall:
    """One gemm call: its context fields, its two packing sides, its epilogue (None: none),
    the batch loop, and which of them run on threads."""

    contraction: Contraction
    pack: str  # the workspace buffer of the panels
    fields: tuple[ContextField, ...]
    sides: tuple[PackSide, PackSide]
    epilogue: Odometer | None  # over the columns of one output row
    position: Expr  # the flat output element of the current indices
    rows: Expr
    cols: Expr
    depth: Expr
    count: Expr  # products in the batch
    batch: Divisions  # lower.flat.unflatten of the batch
    row_indices: Divisions  # of an output row (the epilogue)
    depth_indices: Divisions  # of a depth step (packing)
    slot_align: int  # elements: each thread's panels start this aligned
    batch_parallel: bool  # one product per thread
    direct_a: DirectA | None = None
    packed_b: PackedPanels | None = None  # B read from panels packed at compile time: no pack_b
    packed_a: PackedPanels | None = None  # ... A (an int8 weight): no pack_a


def contiguous_walk(
    axes: Axes, value: Value, positions: tuple[Expr, ...], buffers: Mapping[str, Storage]
) -> tuple[Axes, Value, tuple[Expr, ...]]:
    """Several axes as one, when every element `value` reads and every position in `positions`
    steps through memory alike along their flattened position (a convolution's output columns
    (h, w) of a row-major plane): (the flat axis, value and positions rewritten in it), so a
    walk is one run the compiler vectorises rather than runs as short as the last axis (14 for a
    14x14 plane, under one AVX-512 vector). Otherwise, and for a value that selects (DenseNet's
    concatenations packed 30% slower as one run), they come back as they are."""
    if len(axes) < 2 or any(isinstance(v, Where) for v in walk(value)):
        return axes, value, positions  # a select (a concatenation's) is cheaper per short run, measured
    flat = f"catenc_flat_{axes[0][0]}"
    mapping = indices_at(sym(flat), axes)
    moved = substitute(value, mapping)
    addresses = [flatten(list(v.index), list(buffers[v.buffer].shape)) for v in walk(moved) if type(v) is Load]
    addresses += [v.expr for v in walk(moved) if isinstance(v, SymInt)]
    moved_positions = tuple(merge_divmod(p.substitute(mapping)) for p in positions)
    if any(isinstance(v, Gather) for v in walk(moved)) or not all(
        _plain_in(e, flat) for e in addresses + list(moved_positions)
    ):
        return axes, value, positions
    return ((flat, flat_extent(axes)),), moved, moved_positions


def _plain_in(e: Expr, name: str) -> bool:
    """Whether `name` occurs in e only as itself (no division or remainder of it)."""
    return not any(isinstance(atom, Call) and name in atom.free_symbols() for m, _ in e.terms for atom, _ in m)


def odometer(
    axes: Axes, value: Value, buffers: Mapping[str, Storage] | None = None, depth: Axes | None = None
) -> Odometer:
    """The walk of `value` over consecutive flattened positions of the axes; with `buffers`
    (a packing walk), its guard on the last index as a Window when it is one, and with the
    `depth` axes of the packing also as a MaskedRow when it is one."""
    window = None if buffers is None else guard_window(value, axes[-1][0], buffers)
    strided = buffers is not None and _strided(value, axes[-1][0], buffers)
    step = 2 if strided and window is None and copy_step(value, axes[-1][0], buffers) == 2 else 0
    if len(axes) == 1:
        return Odometer(value, (), axes[0], (), window, strided=strided, step=step)
    outer = tuple(axes[:-1]) + ((AT, axes[-1][1]),)
    rows = None if window is None or depth is None else masked_row(axes, value, buffers, depth)
    return Odometer(value, unflatten(outer), axes[-1], tuple(axes[:-1]), window, rows, strided, step)


def _strided(value: Value, last: str, buffers: Mapping[str, Storage]) -> bool:
    """Whether `value` loads at a constant stride of 2 or more along index `last`."""
    return any(step_along(v.index, buffers[v.buffer].shape, last) >= 2 for v in walk(value) if type(v) is Load)


def masked_row(axes: Axes, value: Where, buffers: Mapping[str, Storage], depth: Axes) -> MaskedRow | None:
    """`value`, a guarded walk over several axes, as a MaskedRow: when its inside is a plain load of
    its buffer as stored whose position steps by one along the axes' flattened position, and its
    guard reads at most MASKS combinations of constant-extent depth indices."""
    inside = value.a
    if type(inside) is not Load or buffers[inside.buffer].dtype != inside.dtype:
        return None
    read = value_symbols(value.cond)
    guard_axes = tuple((name, extent) for name, extent in depth if name in read)
    if not all(e.is_const for _, e in guard_axes) or product([e for _, e in guard_axes]).value > MASKS:
        return None
    flat = f"catenc_flat_{axes[0][0]}"
    moved = substitute(inside, indices_at(sym(flat), axes))
    address = flatten(list(moved.index), list(buffers[moved.buffer].shape))
    step = address.coefficient(flat)
    if not (_plain_in(address, flat) and step.is_const and step.value == 1):
        return None
    return MaskedRow(flat, replace(value, a=moved), guard_axes)


def guard_window(value: Value, last: str, buffers: Mapping[str, Storage]) -> Window | None:
    """`value` as a Window along index `last`, when it is `where(cond, inside, constant)` and
    every conjunct of cond that reads `last` compares index expressions linear in `last` with a
    constant coefficient (a padded, strided read); None otherwise."""
    if not (isinstance(value, Where) and isinstance(value.b, Const)):
        return None
    lows: list[Expr] = []
    highs: list[Expr] = []
    keep: list[Value] = []
    index = sym(last)
    for term in conjuncts(value.cond):
        e = as_nonnegative(term)  # the conjunct: e >= 0
        if e is None:
            if last in value_symbols(term):
                return None
            keep.append(term)
            continue
        coefficient = e.coefficient(last)
        rest = e - coefficient * index
        if last in rest.free_symbols():
            return None
        if not coefficient.is_const:
            return None
        step = coefficient.value
        if step == 0:
            keep.append(term)
        elif step > 0:
            lows.append(floordiv(step - 1 - rest, step))  # step*last + rest >= 0: last >= ceil(-rest / step)
        else:
            highs.append(floordiv(rest, -step) + 1)  # rest - |step|*last >= 0: last <= floor(rest / |step|)
    if not lows and not highs:
        return None
    joined = None
    for term in keep:
        joined = term if joined is None else Binary(term.dtype, "and", joined, term)
    return Window(value.a, value.b, tuple(lows), tuple(highs), joined, copy_step(value.a, last, buffers))


def copy_step(value: Value, last: str, buffers: Mapping[str, Storage]) -> int:
    """How a walk copies `value`: 1 when it reads its buffer as stored (no conversion) at consecutive
    elements as `last` steps (a block copy), 2 when at every other element of an f32 buffer (a stride-2
    convolution's patches: two vectors' even elements, where a compiler's vectoriser would gather);
    else 0."""
    if type(value) is not Load or buffers[value.buffer].dtype != value.dtype:
        return 0
    flat = flatten(list(value.index), list(buffers[value.buffer].shape))
    step = flat.coefficient(last)
    if not step.is_const or last in (flat - step * sym(last)).free_symbols():
        return 0
    if step.value == 1 or (step.value == 2 and value.dtype.name == "f32"):  # templates/gemm.c.j2's copies
        return step.value
    return 0


def direct_a(c: Contraction, buffers: Mapping[str, Storage]) -> DirectA | None:
    """A as a DirectA when it is a plain load of its buffer as stored at a position that steps by 1 along
    the flattened depth and by a constant along the flattened rows (all extents constant); else None."""
    a = c.a
    if type(a) is not Load or buffers[a.buffer].dtype != a.dtype or a.dtype.name not in GEMM_DTYPES:
        return None
    if not c.rows or not c.depth or not all(e.is_const for _, e in (*c.rows, *c.depth)):
        return None
    operand = strided_operand(a, c.rows, c.depth, buffers)
    if operand is None or not operand.depth_major or not operand.outer.is_const:
        return None
    return DirectA(a.buffer, operand.offset, operand.outer.value)


def strided_operand(value, outer: Axes, depth: Axes, buffers: Mapping[str, Storage]) -> StridedOperand | None:
    """`value` as a StridedOperand: a plain load whose position is affine in the flattened
    `outer` and `depth` positions, one of the two strides being 1; else None."""
    if type(value) is not Load or not value.index:
        return None
    flat = flatten(list(value.index), list(buffers[value.buffer].shape))
    rest, strides = flat, []
    for axes in (outer, depth):
        stride = flat.coefficient(axes[-1][0])
        step = stride
        for name, extent in reversed(axes):
            if flat.coefficient(name) != step:
                return None
            rest = rest - step * sym(name)
            step = step * extent
        strides.append(stride)
    if rest.free_symbols() & {name for name, _ in (*outer, *depth)}:
        return None
    if ONE not in strides or any(s.free_symbols() & {n for n, _ in (*outer, *depth)} for s in strides):
        return None
    return StridedOperand(value.buffer, rest, strides[0], strides[1])


def constant_operand(c: Contraction, side: str, buffers: Mapping[str, Storage]) -> ConstantOperand | None:
    """Operand `side` as a ConstantOperand when it is a plain load of its buffer as stored (an int8
    operand's bytes under its cast) at a position whose coefficients on the depth and outer indices are
    constants and whose rest is one (all the extents constant); else None. A float A never is one
    (it is read in place: direct_a)."""
    value = narrow(c.a if side == "a" else c.b)
    float_kind = KINDS[c.kind].group == 1
    if side == "a" and float_kind:
        return None
    if type(value) is not Load or buffers[value.buffer].dtype != value.dtype:
        return None
    if float_kind and value.dtype.name not in GEMM_DTYPES:
        return None
    flat = flatten(list(value.index), list(buffers[value.buffer].shape))
    rest, found = flat, []
    for axes in (c.depth, c.rows if side == "a" else c.cols):
        found.append([])
        for name, extent in axes:
            coefficient = flat.coefficient(name)
            if not (coefficient.is_const and extent.is_const):
                return None
            rest = rest - coefficient * sym(name)
            found[-1].append((coefficient.value, extent.value))
    if not rest.is_const:
        return None
    return ConstantOperand(side, value.buffer, rest.value, tuple(found[0]), tuple(found[1]))


def _depth_runs(c: Contraction, operand: Value, outer: Axes, buffers: Mapping[str, Storage]) -> StridedOperand | None:
    """An int8 operand stored with its depth steps consecutive (a weight's rows, an activation
    matrix's rows), as a StridedOperand: its panels are filled a group of steps (one word) at a time."""
    if KINDS[c.kind].group == 1:
        return None
    value = narrow(operand)
    if type(value) is not Load or buffers[value.buffer].dtype != value.dtype or not outer or not c.depth:
        return None
    runs = strided_operand(value, outer, c.depth, buffers)
    return runs if runs is not None and runs.depth_major else None


def output_position(c: Contraction) -> Expr:
    """The flat position of the contraction's output element at the current indices."""
    rows = flatten([sym(n) for n, _ in c.rows], [e for _, e in c.rows])
    cols = flatten([sym(n) for n, _ in c.cols], [e for _, e in c.cols])
    return c.offset + rows * c.row_stride + cols * c.col_stride


def context_fields(
    c: Contraction, pack: str, kernel: LoopKernel, buffers: Mapping[str, Storage]
) -> tuple[ContextField, ...]:
    """What the packing and epilogue functions read: the operands' buffers (the output too,
    with an epilogue), the symbols, the batch indices."""
    fields = []
    for name in kernel.buffers:
        if name == c.output and c.epilogue is not None:
            fields.append(ContextField(name, buffers[name].dtype, writable=True))
        elif name not in (c.output, pack):
            fields.append(ContextField(name, buffers[name].dtype))
    fields += [ContextField(s, None) for s in kernel.symbols]
    fields += [ContextField(n, None) for n, _ in c.batch]
    return tuple(fields)


def _pack_side(
    c: Contraction, side: str, width: str, axes: Axes, value: Value, buffers: Mapping[str, Storage]
) -> PackSide:
    """How lowering packs one operand: split by depth_cases where it selects along the depth (an f32
    one), each case's walk then free of the select."""
    read, runs = narrow(value), _depth_runs(c, value, axes, buffers)
    cases = depth_cases(read, {name for name, _ in axes}) if KINDS[c.kind].group == 1 else [(None, read)]
    if len(cases) == 1:
        fill = odometer(*contiguous_walk(axes, read, (), buffers)[:2], buffers, c.depth)
        return PackSide(side, width, flat_extent(axes), fill, runs)
    walks = [odometer(*contiguous_walk(axes, v, (), buffers)[:2], buffers) for _, v in cases]
    chosen = tuple(DepthCase(cond, w) for (cond, _), w in zip(cases[:-1], walks))
    return PackSide(side, width, flat_extent(axes), walks[-1], runs, chosen)


MAX_DEPTH_CASES = 64  # beyond them a packing keeps its select (each case is a loop of its own in the C)


def depth_cases(value: Value, positions: set[str]) -> list[tuple[Value | None, Value]]:
    """`value` as (condition, value) cases to take in order, the last one's condition None (else):
    a select anywhere in it whose condition reads no position index (`positions`) and no memory is
    taken out of it, each side becoming a case (a concatenation along the depth under the
    per-channel scale and ReLU of a pre-activation, DenseNet's), a nested one's conditions joined
    by `and`; at most MAX_DEPTH_CASES, else the value as it is."""
    if any(isinstance(v, Reduce) for v in walk(value)):  # a select in a reduction may read its indices
        return [(None, value)]
    cases = _split_selects(value, positions)
    return cases if len(cases) <= MAX_DEPTH_CASES else [(None, value)]


def _split_selects(value: Value, positions: set[str]) -> list[tuple[Value | None, Value]]:
    select = next((v for v in walk(value) if _depth_select(v, positions)), None)
    if select is None:
        return [(None, value)]
    taken = _split_selects(replace_node(value, select, select.a), positions)
    if len(taken) > MAX_DEPTH_CASES:
        return taken
    both = [(select.cond if c is None else Binary(c.dtype, "and", select.cond, c), v) for c, v in taken]
    return both + _split_selects(replace_node(value, select, select.b), positions)


def _depth_select(value: Value, positions: set[str]) -> bool:
    return (
        isinstance(value, Where)
        and not value_symbols(value.cond) & positions
        and not any(isinstance(v, Load) for v in walk(value.cond))
    )


WINDOW_LOW = "catenc_lo"  # the first position inside a window, in a run
WINDOW_HIGH = "catenc_hi"  # ... and the first past it


def window_bounds(window: Window, base: str, length: str) -> tuple[Expr, Expr]:
    """WINDOW_LOW and WINDOW_HIGH of a run of `length` positions whose last index starts at
    `base` (variable names): both clamped to [0, length], the high one to at least the low one."""
    start = sym(base)
    lows = [lo - start for lo in window.lows] or [ZERO]
    highs = [hi - start for hi in window.highs] or [sym(length)]
    low = minimum(maximum(reduce(maximum, lows), ZERO), sym(length))
    high = minimum(maximum(reduce(minimum, highs), sym(WINDOW_LOW)), sym(length))
    return low, high


def gemm_call(
    stmt: Gemm,
    kernel: LoopKernel,
    buffers: Mapping[str, Storage],
    parallel: bool,
    panels: Mapping[str, PackedPanels] | None = None,
) -> GemmCall:
    """The call of a Gemm statement in `kernel`; `parallel`: whether threads are on here (a
    batch of products then runs one product per thread, and the epilogue's rows spread);
    `panels`: the buffers whose panels were packed at compile time, read as the PackedPanels say."""
    c = stmt.contraction
    packed = {}
    for side in ("a", "b"):
        source = constant_operand(c, side, buffers) if panels else None
        found = panels.get(source.buffer) if source is not None else None
        packed[side] = found if found is not None and found.source == source else None
    sides = tuple(
        _pack_side(c, side, width, axes, v, buffers)
        for side, width, axes, v in (("a", "MR", c.rows, c.a), ("b", "NR", c.cols, c.b))
    )
    epilogue, position = None, output_position(c)
    if c.epilogue is not None:
        axes, value, (position,) = contiguous_walk(c.cols, c.epilogue, (position,), buffers)
        epilogue = odometer(axes, value)
    return GemmCall(
        c,
        stmt.pack,
        context_fields(c, stmt.pack, kernel, buffers),
        sides,
        epilogue,
        position,
        flat_extent(c.rows),
        flat_extent(c.cols),
        flat_extent(c.depth),
        flat_extent(c.batch),
        unflatten(c.batch),
        unflatten(c.rows),
        unflatten(c.depth),
        PANEL_ALIGN // c.dtype.itemsize,
        parallel and bool(c.batch),
        direct_a=direct_a(c, buffers),
        packed_b=packed["b"],
        packed_a=packed["a"],
    )
