"""The numpy interpreter of a typed program: the oracle that `--test` compares against.

It works from the typed AST, not from the IR, so the compiled path and this one share as
little as possible. f16 and bf16 values are held in float32 and rounded where the C code
rounds them: when stored to an output and at an explicit `cast`.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Mapping

import numpy as np

from catenc.dispatch import Table
from catenc.dtypes import DType, bf16_to_f32, f32_to_bf16
from catenc.frontend import typed as T
from catenc.registry import OPS, REDUCTION_OPS
from catenc.symbolic import Expr


def compute_dtype(dtype: DType) -> np.dtype:
    """numpy dtype the reference computes in (f32 for f16 and bf16)."""
    return np.dtype(np.float32) if dtype.is_half else dtype.numpy


def round_to(values: np.ndarray, dtype: DType) -> np.ndarray:
    """Round values to f16/bf16 precision in one rounding (kept as f32); other dtypes unchanged."""
    if dtype.name == "f16":
        return np.asarray(values).astype(np.float16).astype(np.float32)
    if dtype.name == "bf16":
        values = np.asarray(values)
        if values.dtype == np.float64:
            return _round_bits(values, 8, -133, 3.3895313892515355e38)
        return bf16_to_f32(f32_to_bf16(values))
    return values


def _round_bits(x: np.ndarray, bits: int, min_exp: int, max_finite: float) -> np.ndarray:
    """Round float64 values to `bits` significant bits (ties to even), as f32."""
    _, exponent = np.frexp(np.abs(x))
    step = np.maximum(exponent - bits, min_exp)
    q = np.ldexp(np.rint(np.ldexp(np.abs(x), -step)), step)
    q = np.where(q > max_finite, np.inf, q)
    q = np.where(np.isfinite(x) & (x != 0), np.copysign(q, x), x)
    return q.astype(np.float32)


def run_program(
    program: T.Program, inputs: Mapping[str, np.ndarray], symbols: Mapping[str, int]
) -> dict[str, np.ndarray]:
    """Evaluate a typed program: inputs by name (values, not bits), symbols by name."""
    with np.errstate(all="ignore"):
        return _Interpreter(dict(symbols)).program(program, dict(inputs))


class _Interpreter:
    def __init__(self, symbols: dict[str, int]):
        self.symbols = symbols
        self.calls: dict[int, tuple[np.ndarray, ...]] = {}

    def dim(self, e: Expr) -> int:
        return int(e.evaluate(self.symbols))

    def program(self, program: T.Program, inputs: dict[str, np.ndarray], entry: bool = True) -> dict[str, np.ndarray]:
        """Evaluate a program; only an entry's outputs are stored (so rounded to f16/bf16): a
        callee's outputs are intermediates of its caller, kept in f32 like the C code keeps them."""
        env: dict[str, np.ndarray] = {}
        for name, ttype in program.inputs:
            env[name] = np.asarray(inputs[name], dtype=compute_dtype(ttype.dtype))
        outputs = dict(program.outputs)
        for stmt in program.statements:
            if isinstance(stmt, T.Assign):
                value = self.eval(stmt.value, env)
                dtype = stmt.value.type.dtype
            else:
                value = self.index_statement(stmt, env)
                dtype = stmt.type.dtype
            if entry and stmt.target in outputs:
                value = round_to(value, dtype)
            env[stmt.target] = np.asarray(value, dtype=compute_dtype(dtype))
        return {name: env[name] for name, _ in program.outputs}

    # ---- array form ----
    _EVAL: Table[Callable[..., np.ndarray | tuple[np.ndarray, ...]]] = Table("reference")

    def eval(self, node: T.Node, env: dict[str, np.ndarray]) -> np.ndarray:
        return self._EVAL[type(node)](self, node, env)

    @_EVAL.register(T.Ref)
    def eval_Ref(self, node: T.Ref, env) -> np.ndarray:
        return env[node.name]

    @_EVAL.register(T.Lit)
    def eval_Lit(self, node: T.Lit, env) -> np.ndarray:
        return np.asarray(node.value, dtype=compute_dtype(node.type.dtype))

    @_EVAL.register(T.SymVal)
    def eval_SymVal(self, node: T.SymVal, env) -> np.ndarray:
        return np.asarray(node.expr.evaluate(self.symbols), dtype=compute_dtype(node.type.dtype))

    @_EVAL.register(T.IndexVal)
    def eval_IndexVal(self, node: T.IndexVal, env) -> np.ndarray:
        return env[node.name]

    @_EVAL.register(T.Apply)
    def eval_Apply(self, node: T.Apply, env) -> np.ndarray:
        args = [self.eval(a, env) for a in node.args]
        out = apply(
            node.op,
            args,
            node.type.dtype,
            node.args[0].type.dtype if node.args else node.type.dtype,
        )
        return np.asarray(out, dtype=compute_dtype(node.type.dtype))

    @_EVAL.register(T.Reduce)
    def eval_Reduce(self, node: T.Reduce, env) -> np.ndarray:
        x = self.eval(node.arg, env)
        return reduce(node.op, x, node.axes, node.keepdims, node.arg.type.dtype)

    @_EVAL.register(T.ArgReduce)
    def eval_ArgReduce(self, node: T.ArgReduce, env) -> np.ndarray:
        x = self.eval(node.arg, env)
        if x.shape[node.axis] == 0:
            shape = list(x.shape)
            shape[node.axis] = 1
            out = np.zeros(shape, dtype=np.int64)
            return out if node.keepdims else out.squeeze(node.axis)
        fn = np.argmax if node.op == "argmax" else np.argmin
        out = fn(x, axis=node.axis, keepdims=node.keepdims)
        return out.astype(np.int64)

    @_EVAL.register(T.MatMul)
    def eval_MatMul(self, node: T.MatMul, env) -> np.ndarray:
        a, b = self.eval(node.a, env), self.eval(node.b, env)
        if a.dtype == np.bool_:
            a, b = a.astype(np.int64), b.astype(np.int64)
        return np.matmul(a, b).astype(compute_dtype(node.type.dtype))

    @_EVAL.register(T.Reshape)
    def eval_Reshape(self, node: T.Reshape, env) -> np.ndarray:
        return self.eval(node.arg, env).reshape([self.dim(d) for d in node.type.shape])

    @_EVAL.register(T.Permute)
    def eval_Permute(self, node: T.Permute, env) -> np.ndarray:
        return np.transpose(self.eval(node.arg, env), node.perm)

    @_EVAL.register(T.Expand)
    def eval_Expand(self, node: T.Expand, env) -> np.ndarray:
        return np.broadcast_to(self.eval(node.arg, env), [self.dim(d) for d in node.type.shape])

    @_EVAL.register(T.Slice)
    def eval_Slice(self, node: T.Slice, env) -> np.ndarray:
        x = self.eval(node.arg, env)
        shape = [self.dim(d) for d in node.type.shape]
        kept = iter(shape)
        # Walk axes last-first so dropping an axis never renumbers the ones still to come.
        lengths = [next(kept) if axis.keep else None for axis in node.axes]
        for k in reversed(range(len(node.axes))):
            axis = node.axes[k]
            start = self.dim(axis.start)
            if axis.keep:
                x = np.take(x, start + axis.step * np.arange(lengths[k], dtype=np.int64), axis=k)
            else:
                x = np.take(x, start, axis=k)
        return x

    @_EVAL.register(T.Concat)
    def eval_Concat(self, node: T.Concat, env) -> np.ndarray:
        return np.concatenate([self.eval(a, env) for a in node.args], axis=node.axis)

    @_EVAL.register(T.Pad)
    def eval_Pad(self, node: T.Pad, env) -> np.ndarray:
        x = self.eval(node.arg, env)
        value = self.eval(node.value, env)
        widths = [
            (self.dim(lo), self.dim(out) - self.dim(lo) - n)
            for lo, out, n in zip(node.before, node.type.shape, x.shape)
        ]
        return np.pad(x, widths, constant_values=value)

    @_EVAL.register(T.Take)
    def eval_Take(self, node: T.Take, env) -> np.ndarray:
        x = self.eval(node.arg, env)
        arrays = []
        for axis, index_node in zip(node.axes, node.indices):
            indices = self.eval(index_node, env).astype(np.int64)
            size = x.shape[axis]
            wrapped = np.where(indices < 0, indices + size, indices)
            if np.any((wrapped < 0) | (wrapped >= size)):
                raise IndexError(f"take: an index is outside [-{size}, {size})")
            arrays.append(wrapped)
        # gathered axes first: numpy then puts the indices' broadcast shape first, moved to `at` after
        rest = [a for a in range(x.ndim) if a not in node.axes]
        out = np.transpose(x, list(node.axes) + rest)[tuple(arrays)]
        rank = out.ndim - len(rest)
        return np.moveaxis(out, list(range(rank)), list(range(node.at, node.at + rank)))

    @_EVAL.register(T.Arange)
    def eval_Arange(self, node: T.Arange, env) -> np.ndarray:
        return np.arange(self.dim(node.type.shape[0])).astype(compute_dtype(node.type.dtype))

    @_EVAL.register(T.Call)
    def eval_Call(self, node: T.Call, env) -> tuple[np.ndarray, ...]:
        key = id(node)
        if key not in self.calls:
            args = {
                # an argument with fewer batch dims than the call's broadcast batch is broadcast to it
                name: np.broadcast_to(self.eval(a, env), [self.dim(d) for d in ttype.shape])
                for (name, ttype), a in zip(node.program.inputs, node.args)
            }
            results = self.program(node.program, args, entry=False)
            self.calls[key] = tuple(results[name] for name, _ in node.program.outputs)
        return self.calls[key]

    @_EVAL.register(T.CallOut)
    def eval_CallOut(self, node: T.CallOut, env) -> np.ndarray:
        return self.eval_Call(node.call, env)[node.index]

    # ---- index form ----
    def index_statement(self, stmt: T.IndexAssign, env: dict[str, np.ndarray]) -> np.ndarray:
        names = [name for name, _ in stmt.indices]
        extents = [self.dim(e) for _, e in stmt.indices]
        axes = {name: k for k, name in enumerate(names)}
        total = len(names) + _count_reduction_indices(stmt.body)
        grid = _IndexGrid(self, env, axes, total, dict(zip(names, extents)))
        value = grid.eval(stmt.body)
        value = np.broadcast_to(value, tuple(extents) + (1,) * (total - len(names)))
        return np.asarray(value).reshape(extents)


_REDUCTION_INDICES: Table[Callable[[T.Node], int]] = Table("reduction indices")


def _count_reduction_indices(node: T.Node) -> int:
    return _REDUCTION_INDICES[type(node)](node)


@_REDUCTION_INDICES.register(T.Node)
def _none_reduced(node: T.Node) -> int:
    return 0


@_REDUCTION_INDICES.register(T.IndexReduce)
def _reduced_here(node: T.IndexReduce) -> int:
    return len(node.indices) + _count_reduction_indices(node.body)


@_REDUCTION_INDICES.register(T.Apply)
def _reduced_in_args(node: T.Apply) -> int:
    return sum(_count_reduction_indices(a) for a in node.args)


class _IndexGrid:
    """Evaluates index-form scalars over a grid: each index owns one axis of a D-dim array."""

    def __init__(self, interp: _Interpreter, env, axes: dict[str, int], total: int, extents: dict[str, int]):
        self.interp = interp
        self.env = dict(env)
        self.axes = axes
        self.total = total
        self.extents = extents
        for name, axis in axes.items():
            self.env[name] = self.index_array(axis, extents[name])

    def index_array(self, axis: int, extent: int) -> np.ndarray:
        shape = [1] * self.total
        shape[axis] = extent
        return np.arange(extent, dtype=np.int64).reshape(shape)

    _EVAL: Table[Callable[..., np.ndarray]] = Table("reference index form")

    def eval(self, node: T.Node) -> np.ndarray:
        return self._EVAL[type(node)](self, node)

    @_EVAL.register(T.Node)
    def tensor(self, node: T.Node) -> np.ndarray:
        """A whole-tensor expression inside an index expression: evaluated in array form."""
        return self.interp.eval(node, self.env)

    @_EVAL.register(T.Apply)
    def elementwise(self, node: T.Apply) -> np.ndarray:
        args = [self.eval(a) for a in node.args]
        out = apply(node.op, args, node.type.dtype, node.args[0].type.dtype)
        return np.asarray(out, dtype=compute_dtype(node.type.dtype))

    @_EVAL.register(T.IndexVal)
    def index(self, node: T.IndexVal) -> np.ndarray:
        return self.env[node.name]

    @_EVAL.register(T.Access)
    def access(self, node: T.Access) -> np.ndarray:
        tensor = self.env[node.name]
        env = {**self.interp.symbols, **{n: self.env[n] for n in self.axes}}
        index = []
        for expr, size in zip(node.indices, tensor.shape):
            value = np.asarray(expr.evaluate(env), dtype=np.int64)  # indices are numpy arrays here
            # Indices outside the tensor only occur under a false where-guard; clamp to read safely.
            index.append(np.clip(value, 0, max(size - 1, 0)))
        if tensor.size == 0:
            shape = np.broadcast_shapes(*(i.shape for i in index)) if index else ()
            return np.zeros(shape, dtype=tensor.dtype)
        return tensor[tuple(index)] if index else tensor

    @_EVAL.register(T.IndexReduce)
    def reduce(self, node: T.IndexReduce) -> np.ndarray:
        reduced = []
        for name, extent_expr in node.indices:
            axis = len(self.axes)
            self.axes[name] = axis
            extent = self.interp.dim(extent_expr)
            self.extents[name] = extent
            self.env[name] = self.index_array(axis, extent)
            reduced.append(axis)
        out = self.sum_of_products(node, reduced)
        if out is None:
            body = self.eval(node.body)
            shape = list(np.broadcast_shapes(body.shape, (1,) * self.total))
            for axis in reduced:
                shape[axis] = self.extent_of(axis)
            body = np.broadcast_to(body, shape)
            out = reduce(node.op, body, tuple(reduced), True, node.body.type.dtype)
        for name, _ in node.indices:
            del self.axes[name]
        return out

    def sum_of_products(self, node: T.IndexReduce, reduced: list[int]) -> np.ndarray | None:
        """A float `sum` of `a * b` where a or b spans every reduced axis, contracted by np.einsum
        without the product's grid (a gemm at K = 1e5 would be 5 GB); None for any other reduction."""
        body = node.body
        letters = string.ascii_letters  # einsum's subscripts: one letter per axis of the grid
        if not (node.op == "sum" and isinstance(body, T.Apply) and body.op == "mul" and self.total <= len(letters)):
            return None
        if not (body.type.dtype.is_float and all(a.type.dtype == body.type.dtype for a in body.args)):
            return None
        dtype = compute_dtype(body.type.dtype)
        grids = [np.asarray(self.eval(a), dtype=dtype) for a in body.args]
        grids = [g.reshape((1,) * (self.total - g.ndim) + g.shape) for g in grids]
        spanned = [[g.shape[axis] != 1 for g in grids] for axis in range(self.total)]
        if not all(any(spanned[axis]) or self.extent_of(axis) == 1 for axis in reduced):
            return None
        terms = ["".join(letters[k] for k in range(self.total) if g.shape[k] != 1) for g in grids]
        kept = [k for k in range(self.total) if k not in reduced and any(spanned[k])]
        operands = [g.reshape([n for n in g.shape if n != 1]) for g in grids]
        out = np.einsum(f"{terms[0]},{terms[1]}->{''.join(letters[k] for k in kept)}", *operands, optimize=True)
        shape = [
            g_extent if k in kept else 1 for k, g_extent in enumerate(np.broadcast_shapes(*(g.shape for g in grids)))
        ]
        return np.asarray(out, dtype=dtype).reshape(shape)

    def extent_of(self, axis: int) -> int:
        return self.extents[next(n for n, a in self.axes.items() if a == axis)]


# ---- elementwise semantics ----


def _cast(x: np.ndarray, to: DType) -> np.ndarray:
    if to.name == "bool":
        return x != 0
    if to.is_half:
        return round_to(x if x.dtype == np.float64 else x.astype(np.float32), to)
    if to.is_float:
        return x.astype(compute_dtype(to))
    if np.issubdtype(x.dtype, np.floating):
        # Truncate toward zero and saturate at the integer range; NaN gives 0.
        info = np.iinfo(to.numpy)
        t = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0))
        inside = (t > float(info.min)) & (t < float(info.max))
        safe = np.where(inside, t, 0).astype(to.numpy)
        return np.where(t >= float(info.max), info.max, np.where(t <= float(info.min), info.min, safe)).astype(to.numpy)
    return x.astype(to.numpy)


def apply(op: str, args: list[np.ndarray], dtype: DType, arg_dtype: DType) -> np.ndarray:
    """An elementwise op's numpy meaning from the registry (its integer one on integer operands)."""
    if op == "cast":
        return _cast(args[0], dtype)
    entry = OPS[op]
    if entry.numpy_int is not None and not arg_dtype.is_float:
        return entry.numpy_int(*args)
    return entry.numpy(*args)


def reduction_identity(op: str, dtype: DType) -> float | int:
    if op == "sum":
        return 0
    if op == "prod":
        return 1
    if dtype.is_float:
        return -math.inf if op == "max" else math.inf
    info = np.iinfo(dtype.numpy)
    return int(info.min) if op == "max" else int(info.max)


def reduce(op: str, x: np.ndarray, axes: tuple[int, ...], keepdims: bool, dtype: DType) -> np.ndarray:
    if op == "mean":
        return np.mean(x, axis=axes, keepdims=keepdims, dtype=x.dtype)
    fn = REDUCTION_OPS[op].numpy
    initial = reduction_identity(op, dtype)
    return fn(x, axis=axes, keepdims=keepdims, initial=initial).astype(x.dtype)
