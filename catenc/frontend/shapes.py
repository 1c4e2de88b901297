"""Array-form tensor functions: matmul and the shape functions (reshape, transpose, concat, pad,
einsum, take, ...), each result dim proved non-negative (docs/language.md, section 8).
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from catenc.diagnostics import Loc
from catenc.dispatch import Table
from catenc.dtypes import BOOL, F32, I64
from catenc.frontend import typed as T
from catenc.frontend.composites import MAX_CONSTANT
from catenc.frontend.indexing import IndexScope
from catenc.frontend.operators import is_weak, shape_text
from catenc.symbolic import ONE, ZERO, Expr, const, divisibility, floordiv, product, prove_nonneg

_SHAPES: Table[Callable[..., T.Node]] = Table("shape function")  # name -> its checker method


class ShapeFunctions:
    """Matmul and the shape functions; mixed into `BodyChecker` (check.py), whose state and helpers it uses."""

    def matmul(self, a: T.Node, b: T.Node, node: ast.AST, scope: IndexScope | None) -> T.Node:
        if scope is not None:
            raise self.error("'@' works on whole tensors; in index form write sum[k](a[i, k] * b[k, j])", node)
        a, b = self.unify([a, b], node)
        if a.type.rank == 0 or b.type.rank == 0:
            raise self.error("'@' needs operands of rank 1 or more", node)
        if a.type.dtype == BOOL:
            raise self.error("'@' of bool values: use cast(...) first", node)
        loc = self.loc(node)
        a2 = a if a.type.rank >= 2 else T.Reshape(T.TType(a.type.dtype, (ONE,) + a.type.shape), loc, a)
        b2 = b if b.type.rank >= 2 else T.Reshape(T.TType(b.type.dtype, b.type.shape + (ONE,)), loc, b)
        k1, k2 = a2.type.shape[-1], b2.type.shape[-2]
        if not self.equal(k1, k2):
            raise self.error(
                f"matmul shapes {shape_text(a.type.shape)} @ {shape_text(b.type.shape)}: "
                f"inner dims {k1} and {k2} differ",
                node,
            )
        batch = self.broadcast([a2.type.shape[:-2], b2.type.shape[:-2]], node)
        shape = batch + (a2.type.shape[-2], b2.type.shape[-1])
        out: T.Node = T.MatMul(T.TType(a.type.dtype, shape), loc, a2, b2)
        final = (
            batch
            + ((a.type.shape[-2],) if a.type.rank >= 2 else ())
            + ((b.type.shape[-1],) if b.type.rank >= 2 else ())
        )
        if final != shape:
            out = T.Reshape(T.TType(a.type.dtype, final), loc, out)
        return out

    def shape_list(self, node: ast.expr) -> list[tuple[Expr, ast.expr]]:
        if not isinstance(node, (ast.List, ast.Tuple)):
            raise self.error("expected a list of dims like [M, 2*N]", node)
        return [(self.index_expr(e, None), e) for e in node.elts]

    def shape_func(self, name: str, node: ast.Call) -> T.Node:
        loc = self.loc(node)
        result = _SHAPES[name](self, node, loc)
        for dim in result.type.shape:
            if not prove_nonneg(dim, self.facts):
                raise self.error(f"the dim {dim} of this {name}(...) may be negative", node)
            if any(abs(c) > MAX_CONSTANT for _, c in dim.terms):
                raise self.error(f"the dim {dim} of this {name}(...) is beyond 2^62", node)
        return result

    @_SHAPES.register("reshape")
    def fn_reshape(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 2, 2, "reshape")
        self.keywords(node, ())
        arg = self.strengthen(self.expr(node.args[0], None))
        dims = self.shape_list(node.args[1])
        total = product(arg.type.shape)
        unknown = [i for i, (d, _) in enumerate(dims) if d.is_const and d.value == -1]
        if len(unknown) > 1:
            raise self.error("reshape allows only one -1", node.args[1])
        known = product(d for i, (d, _) in enumerate(dims) if i not in unknown)
        shape = [d for d, _ in dims]
        if unknown:
            inferred = _cancel(
                arg.type.shape, [d for i, (d, _) in enumerate(dims) if i not in unknown], divisibility(self.facts)
            )
            if inferred is None:
                inferred = floordiv(total, known)
            if inferred * known != total and not self.equal(inferred * known, total):
                raise self.error(
                    f"reshape cannot infer -1: {total} elements are not a multiple of {known}",
                    dims[unknown[0]][1],
                )
            shape[unknown[0]] = inferred
        elif not self.equal(product(shape), total):
            raise self.error(
                f"reshape from {shape_text(arg.type.shape)} to {shape_text(tuple(shape))} "
                "changes the number of elements",
                node,
            )
        return T.Reshape(T.TType(arg.type.dtype, tuple(shape)), loc, arg)

    @_SHAPES.register("transpose")
    def fn_transpose(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 1, 2, "transpose")
        self.keywords(node, ())
        arg = self.strengthen(self.expr(node.args[0], None))
        rank = arg.type.rank
        if len(node.args) == 1:
            perm = tuple(reversed(range(rank)))
        else:
            if not isinstance(node.args[1], (ast.List, ast.Tuple)):
                raise self.error("transpose needs a permutation list like [1, 0]", node.args[1])
            perm = tuple(self.int_const(e) % max(rank, 1) for e in node.args[1].elts)
            if sorted(perm) != list(range(rank)):
                raise self.error(f"{list(perm)} is not a permutation of the {rank} axes", node.args[1])
        return T.Permute(T.TType(arg.type.dtype, tuple(arg.type.shape[p] for p in perm)), loc, arg, perm)

    @_SHAPES.register("expand")
    def fn_expand(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 2, 2, "expand")
        self.keywords(node, ())
        arg = self.strengthen(self.expr(node.args[0], None))
        shape = tuple(d for d, _ in self.shape_list(node.args[1]))
        if len(shape) < arg.type.rank or self.broadcast([arg.type.shape, shape], node) != shape:
            raise self.error(f"cannot expand {shape_text(arg.type.shape)} to {shape_text(shape)}", node)
        return T.Expand(T.TType(arg.type.dtype, shape), loc, arg)

    def _axis(self, node: ast.expr, rank: int) -> int:
        axis = self.int_const(node)
        if not -rank <= axis < rank:
            raise self.error(f"axis {axis} is out of range for rank {rank}", node)
        return axis % rank

    @_SHAPES.register("squeeze")
    def fn_squeeze(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 2, 2, "squeeze")
        arg = self.strengthen(self.expr(node.args[0], None))
        axis = self._axis(node.args[1], arg.type.rank)
        if arg.type.shape[axis] != ONE:
            raise self.error(f"squeeze: axis {axis} has size {arg.type.shape[axis]}, not 1", node.args[1])
        shape = arg.type.shape[:axis] + arg.type.shape[axis + 1 :]
        return T.Reshape(T.TType(arg.type.dtype, shape), loc, arg)

    @_SHAPES.register("unsqueeze")
    def fn_unsqueeze(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 2, 2, "unsqueeze")
        arg = self.strengthen(self.expr(node.args[0], None))
        axis = self._axis(node.args[1], arg.type.rank + 1)
        shape = arg.type.shape[:axis] + (ONE,) + arg.type.shape[axis:]
        return T.Reshape(T.TType(arg.type.dtype, shape), loc, arg)

    @_SHAPES.register("flatten")
    def fn_flatten(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 1, 3, "flatten")
        kws = self.keywords(node, ("start", "end"))
        arg = self.strengthen(self.expr(node.args[0], None))
        rank = max(arg.type.rank, 1)
        start_node = node.args[1] if len(node.args) > 1 else kws.get("start")
        end_node = node.args[2] if len(node.args) > 2 else kws.get("end")
        start = self._axis(start_node, rank) if start_node is not None else 0
        end = self._axis(end_node, rank) if end_node is not None else rank - 1
        if arg.type.rank == 0:
            return T.Reshape(T.TType(arg.type.dtype, (ONE,)), loc, arg)
        if start > end:
            raise self.error("flatten: start must not be after end", node)
        shape = arg.type.shape[:start] + (product(arg.type.shape[start : end + 1]),) + arg.type.shape[end + 1 :]
        return T.Reshape(T.TType(arg.type.dtype, shape), loc, arg)

    @_SHAPES.register("concat")
    def fn_concat(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 1, 2, "concat")
        kws = self.keywords(node, ("axis",))
        if not isinstance(node.args[0], (ast.List, ast.Tuple)) or not node.args[0].elts:
            raise self.error("concat needs a non-empty list of tensors: concat([a, b], axis)", node.args[0])
        args = self.unify([self.expr(e, None) for e in node.args[0].elts], node)
        args = [self.strengthen(a) for a in args]
        rank = args[0].type.rank
        if rank == 0:
            raise self.error("concat of rank-0 values; use stack", node)
        axis_node = node.args[1] if len(node.args) > 1 else kws.get("axis")
        axis = self._axis(axis_node, rank) if axis_node is not None else 0
        for a, e in zip(args, node.args[0].elts):
            if a.type.rank != rank or not all(
                self.equal(x, y) for k, (x, y) in enumerate(zip(a.type.shape, args[0].type.shape)) if k != axis
            ):
                raise self.error(
                    f"concat: shape {shape_text(a.type.shape)} does not match {shape_text(args[0].type.shape)} "
                    f"outside axis {axis}",
                    e,
                )
        shape = list(args[0].type.shape)
        shape[axis] = sum((a.type.shape[axis] for a in args[1:]), args[0].type.shape[axis])
        return T.Concat(T.TType(args[0].type.dtype, tuple(shape)), loc, tuple(args), axis)

    @_SHAPES.register("stack")
    def fn_stack(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 1, 2, "stack")
        kws = self.keywords(node, ("axis",))
        if not isinstance(node.args[0], (ast.List, ast.Tuple)) or not node.args[0].elts:
            raise self.error("stack needs a non-empty list of tensors: stack([a, b], axis)", node.args[0])
        args = [self.strengthen(a) for a in self.unify([self.expr(e, None) for e in node.args[0].elts], node)]
        rank = args[0].type.rank
        axis_node = node.args[1] if len(node.args) > 1 else kws.get("axis")
        axis = self._axis(axis_node, rank + 1) if axis_node is not None else 0
        for a, e in zip(args, node.args[0].elts):
            if not self.same_shape(a.type.shape, args[0].type.shape):
                raise self.error(
                    f"stack: shape {shape_text(a.type.shape)} differs from {shape_text(args[0].type.shape)}",
                    e,
                )
        parts = [
            T.Reshape(T.TType(a.type.dtype, a.type.shape[:axis] + (ONE,) + a.type.shape[axis:]), loc, a) for a in args
        ]
        shape = list(parts[0].type.shape)
        shape[axis] = const(len(parts))
        return T.Concat(T.TType(args[0].type.dtype, tuple(shape)), loc, tuple(parts), axis)

    @_SHAPES.register("pad")
    def fn_pad(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 2, 3, "pad")
        kws = self.keywords(node, ("value",))
        arg = self.strengthen(self.expr(node.args[0], None))
        widths = node.args[1]
        if not isinstance(widths, (ast.List, ast.Tuple)) or len(widths.elts) != arg.type.rank:
            raise self.error(f"pad needs one [lo, hi] pair per axis ({arg.type.rank})", widths)
        before, shape = [], []
        for dim, pair in zip(arg.type.shape, widths.elts):
            if not isinstance(pair, (ast.List, ast.Tuple)) or len(pair.elts) != 2:
                raise self.error("each pad entry is [lo, hi]", pair)
            lo, hi = (self.index_expr(e, None) for e in pair.elts)
            for value, e in ((lo, pair.elts[0]), (hi, pair.elts[1])):
                if not prove_nonneg(value, self.facts):
                    raise self.error("pad widths must be non-negative", e)
            before.append(lo)
            shape.append(dim + lo + hi)
        value_node = node.args[2] if len(node.args) > 2 else kws.get("value")
        value = self.expr(value_node, None) if value_node is not None else T.Lit(T.TType(I64, ()), loc, 0, True)
        if value.type.rank:
            raise self.error("pad value must be a scalar", value_node)
        (value,) = [self.retype(value, arg.type.dtype, node) if is_weak(value) else value]
        if value.type.dtype != arg.type.dtype:
            raise self.error("pad value dtype differs from the tensor's; use cast(...)", value_node)
        return T.Pad(T.TType(arg.type.dtype, tuple(shape)), loc, arg, tuple(before), value)

    def _triangle(self, node: ast.Call, loc: Loc, lower: bool) -> T.Node:
        name = "tril" if lower else "triu"
        self.positional(node, 1, 2, name)
        kws = self.keywords(node, ("k",))
        arg = self.strengthen(self.expr(node.args[0], None))
        if arg.type.rank < 2:
            raise self.error(f"{name} needs a tensor of rank 2 or more, got {shape_text(arg.type.shape)}", node.args[0])
        k_node = node.args[1] if len(node.args) > 1 else kws.get("k")
        k = self.index_expr(k_node, None) if k_node is not None else ZERO
        rows, cols = arg.type.shape[-2], arg.type.shape[-1]
        row = T.Reshape(T.TType(I64, (rows, ONE)), loc, T.Arange(T.TType(I64, (rows,)), loc))
        col = T.Reshape(T.TType(I64, (ONE, cols)), loc, T.Arange(T.TType(I64, (cols,)), loc))
        shifted = T.Apply(T.TType(I64, (rows, ONE)), loc, "add", (row, T.SymVal(T.TType(I64, ()), loc, k, False)))
        keep = T.Apply(T.TType(BOOL, (rows, cols)), loc, "le" if lower else "ge", (col, shifted))
        if arg.type.dtype == BOOL:
            zero = T.Lit(T.TType(BOOL, ()), loc, False, False)
        else:
            zero = self.retype(T.Lit(T.TType(I64, ()), loc, 0, True), arg.type.dtype, node)
        return T.Apply(arg.type, loc, "where", (keep, arg, zero))

    @_SHAPES.register("tril")
    def fn_tril(self, node: ast.Call, loc: Loc) -> T.Node:
        return self._triangle(node, loc, lower=True)

    @_SHAPES.register("triu")
    def fn_triu(self, node: ast.Call, loc: Loc) -> T.Node:
        return self._triangle(node, loc, lower=False)

    @_SHAPES.register("einsum")
    def fn_einsum(self, node: ast.Call, loc: Loc) -> T.Node:
        """einsum("ij,jk->ik", a, b): operands laid out over all letters, multiplied, summed."""
        self.keywords(node, ())
        if not node.args or not (isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            raise self.error('einsum needs a subscripts string first: einsum("ij,jk->ik", a, b)', node)
        spec = node.args[0].value.replace(" ", "")
        operands = [self.strengthen(a) for a in self.unify([self.expr(a, None) for a in node.args[1:]], node)]
        inputs_text, arrow, output = spec.partition("->")
        terms = inputs_text.split(",")
        if len(terms) != len(operands) or not operands:
            raise self.error(f"einsum: '{spec}' names {len(terms)} operands but {len(operands)} are given", node)
        dims: dict[str, Expr] = {}
        for term, operand, arg_node in zip(terms, operands, node.args[1:]):
            if not term.isalpha() or len(set(term)) != len(term) or len(term) != operand.type.rank:
                raise self.error(
                    f"einsum: '{term}' must name each of the {operand.type.rank} axes of this operand with a "
                    "distinct letter (repeated letters in one operand are not supported)",
                    arg_node,
                )
            for letter, dim in zip(term, operand.type.shape):
                if letter in dims and not self.equal(dims[letter], dim):
                    raise self.error(
                        f"einsum: axis '{letter}' is {dims[letter]} in one operand and {dim} here", arg_node
                    )
                dims.setdefault(letter, dim)
        counts = {c: inputs_text.count(c) for c in dims}
        output = output if arrow else "".join(sorted(c for c in dims if counts[c] == 1))
        if any(c not in dims for c in output) or len(set(output)) != len(output):
            raise self.error(f"einsum: output '{output}' must use distinct letters of the inputs", node.args[0])
        summed = [c for c in dims if c not in output]
        letters = list(output) + summed
        full = tuple(dims[c] for c in letters)
        dtype = operands[0].type.dtype
        if dtype == BOOL:
            raise self.error("einsum of bool values: use cast(...) first", node)
        product_node: T.Node | None = None
        for term, operand in zip(terms, operands):
            order = sorted(range(len(term)), key=lambda k: letters.index(term[k]))
            shape = tuple(operand.type.shape[k] for k in order)
            permuted = T.Permute(T.TType(dtype, shape), loc, operand, tuple(order))
            present = "".join(term[k] for k in order)
            spread = tuple(dims[c] if c in present else ONE for c in letters)
            laid_out = T.Reshape(T.TType(dtype, spread), loc, permuted)
            product_node = (
                laid_out
                if product_node is None
                else T.Apply(T.TType(dtype, full), loc, "mul", (product_node, laid_out))
            )
        if product_node.type.shape != full:
            product_node = T.Expand(T.TType(dtype, full), loc, product_node)
        if not summed:
            return product_node
        axes = tuple(range(len(output), len(letters)))
        return T.Reduce(T.TType(dtype, full[: len(output)]), loc, "sum", product_node, axes, False)

    @_SHAPES.register("take")
    def fn_take(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 2, 3, "take")
        kws = self.keywords(node, ("axis",))
        arg = self.strengthen(self.expr(node.args[0], None))
        indices = self.strengthen(self.expr(node.args[1], None))
        if not indices.type.dtype.is_int:
            raise self.error(f"take needs integer indices, not {indices.type.dtype.name}", node.args[1])
        if arg.type.rank == 0:
            raise self.error("take needs a tensor of rank 1 or more to gather from", node.args[0])
        axis_node = node.args[2] if len(node.args) > 2 else kws.get("axis")
        axis = self._axis(axis_node, arg.type.rank) if axis_node is not None else 0
        shape = arg.type.shape[:axis] + indices.type.shape + arg.type.shape[axis + 1 :]
        return T.Take(T.TType(arg.type.dtype, shape), loc, arg, (indices,), (axis,), axis)

    @_SHAPES.register("arange")
    def fn_arange(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 1, 1, "arange")
        kws = self.keywords(node, ("dtype",))
        n = self.index_expr(node.args[0], None)
        dtype = self.dtype_arg(kws["dtype"]) if "dtype" in kws else I64
        if dtype == BOOL:
            raise self.error("arange cannot make bool values", node)
        return T.Arange(T.TType(dtype, (n,)), loc)

    def _filled(
        self,
        node: ast.Call,
        loc: Loc,
        value: T.Node,
        shape_node: ast.expr,
        dtype_node: ast.expr | None,
    ) -> T.Node:
        shape = tuple(d for d, _ in self.shape_list(shape_node))
        dtype = self.dtype_arg(dtype_node) if dtype_node is not None else F32
        value = self.strengthen(value)
        if value.type.rank:
            raise self.error("the fill value must be a scalar", node)
        if is_weak(value) or value.type.dtype != dtype:
            if isinstance(value, T.Lit) and dtype == BOOL:
                value = T.Lit(T.TType(BOOL, ()), value.loc, bool(value.value), False)
            elif isinstance(value, T.Lit):
                value = self.retype(T.Lit(value.type, value.loc, value.value, True), dtype, node)
            else:
                value = T.Apply(T.TType(dtype, ()), loc, "cast", (value,))
        return T.Expand(T.TType(dtype, shape), loc, value)

    @_SHAPES.register("zeros")
    def fn_zeros(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 1, 2, "zeros")
        kws = self.keywords(node, ("dtype",))
        dtype_node = node.args[1] if len(node.args) > 1 else kws.get("dtype")
        return self._filled(node, loc, T.Lit(T.TType(I64, ()), loc, 0, True), node.args[0], dtype_node)

    @_SHAPES.register("ones")
    def fn_ones(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 1, 2, "ones")
        kws = self.keywords(node, ("dtype",))
        dtype_node = node.args[1] if len(node.args) > 1 else kws.get("dtype")
        return self._filled(node, loc, T.Lit(T.TType(I64, ()), loc, 1, True), node.args[0], dtype_node)

    @_SHAPES.register("full")
    def fn_full(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 2, 3, "full")
        kws = self.keywords(node, ("dtype",))
        dtype_node = node.args[2] if len(node.args) > 2 else kws.get("dtype")
        value = self.expr(node.args[1], None)
        return self._filled(node, loc, value, node.args[0], dtype_node)


SHAPE_FUNCS = frozenset(_SHAPES)


def _cancel(dims: tuple[Expr, ...], divisors: list[Expr], divisible: list[tuple[str, int]]) -> Expr | None:
    """product(dims) / product(divisors) when every divisor is one of the dims or a constant that
    divides one of the remaining dims (by the value of a constant dim, or by a `where` fact such as
    `C % 8 == 0`): reshape(x, [C - 1, -1]) of a [C - 1, A, B] tensor is A*B, and reshape(x, [N, 8,
    -1]) of [N, C, H, W] is (C // 8)*H*W, with no division left of the whole size; else None."""
    remaining = list(dims)
    factor = 1
    for d in divisors:
        if d in remaining:
            remaining.remove(d)
        elif d.is_const and d.value > 0:
            factor *= d.value
        else:
            return None
    if factor == 1:
        return product(remaining)
    for k, d in enumerate(remaining):
        name = d.as_symbol()
        if (d.is_const and d.value % factor == 0) or any(name == s and c % factor == 0 for s, c in divisible):
            return product([*remaining[:k], floordiv(d, factor), *remaining[k + 1 :]])
    return None
