"""Subscripts: array-form slices and index-form statements, with their bounds proofs.

An index-form statement `y[i, j] = ...` binds indices whose ranges are inferred from the positions
where they appear alone. Every access must be proved in bounds from those ranges, the composite's
facts and the guards of the enclosing where(...)s (docs/language.md, section 9).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from catenc.diagnostics import CatencError, Loc
from catenc.dtypes import BOOL
from catenc.frontend import typed as T
from catenc.frontend.constraints import constraint_facts, unequal_facts
from catenc.frontend.operators import is_weak, shape_text
from catenc.registry import REDUCTIONS
from catenc.symbolic import (
    ONE,
    ZERO,
    Expr,
    Facts,
    const,
    floordiv,
    maximum,
    minimum,
    mod,
    prove_less,
    prove_nonneg,
    sym,
)


@dataclass
class IndexScope:
    """Index form: the indices in scope (display name -> internal name, extent) and guards."""

    names: dict[str, tuple[str, Expr]]
    guards: tuple[Expr, ...] = ()

    def bind(self, items: Sequence[tuple[str, str, Expr]]) -> IndexScope:
        names = dict(self.names)
        for display, internal, extent in items:
            names[display] = (internal, extent)
        return IndexScope(names, self.guards)

    def guarded(self, facts: Sequence[Expr]) -> IndexScope:
        return IndexScope(self.names, self.guards + tuple(facts))


class IndexForm:
    """Slices and index form; mixed into `BodyChecker` (check.py), whose state and helpers it uses."""

    # -- slicing (array form) --
    def slice(self, node: ast.Subscript) -> T.Node:
        """An array-form subscript with numpy's meaning: slices, integers, None (a new axis of size 1),
        one '...' and integer tensors (advanced indexing), as docs/language.md describes."""
        arg = self.strengthen(self.expr(node.value, None))
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        kinds = [self._subscript_kind(e) for e in items]
        arrays = {k: self._index_array(e) for k, (e, kind) in enumerate(zip(items, kinds)) if kind == "array"}
        ellipses = [e for e, kind in zip(items, kinds) if kind == "..."]
        if len(ellipses) > 1:
            raise self.error("only one '...' is allowed in a subscript", ellipses[1])
        consuming = [e for e, kind in zip(items, kinds) if kind in ("slice", "int", "array")]
        if len(consuming) > arg.type.rank:
            added = " (None adds an axis and indexes none)" if "None" in kinds else ""
            raise self.error(
                f"too many indices: {len(consuming)} for a tensor of rank {arg.type.rank}{added}",
                consuming[arg.type.rank],
            )
        # Per axis of `arg` (a '...' stands for the full slices needed, trailing axes are full slices):
        # the slice axis read, and the result dim when the axis is kept.
        fill = [ast.Slice(None, None, None)] * (arg.type.rank - len(consuming))
        axes: list[T.SliceAxis] = []
        shape: list[Expr] = []
        tokens: list[str] = []  # the result's axes in order: "dim" (a kept axis), "new" (None), "index" (arrays)
        # numpy: integers count as advanced indices beside arrays; advanced indices all adjacent in
        # the subscript put the arrays' broadcast axes in their place, else first.
        advanced = [k for k, kind in enumerate(kinds) if kind == "array" or (arrays and kind == "int")]
        adjacent = bool(arrays) and advanced[-1] - advanced[0] == len(advanced) - 1
        gathered: list[int] = []
        trailing = [] if ellipses else [(node.slice, "...")]  # the axes left after the last item
        for k, (item, kind) in enumerate(list(zip(items, kinds)) + trailing):
            if kind == "None":
                tokens.append("new")
                continue
            if adjacent and k == advanced[0]:
                tokens.append("index")
            for sub in fill if kind == "..." else [item]:
                dim = arg.type.shape[len(axes)]
                if kind == "int":
                    index = self.from_end(self.index_expr(sub, None), dim, sub)
                    if not (prove_nonneg(index, self.facts) and prove_less(index, dim, self.facts)):
                        raise self.error(f"index {index} may be out of bounds for a dim of size {dim}", sub)
                    axes.append(T.SliceAxis(index, 1, False))
                    continue
                if kind == "array":
                    gathered.append(len(shape))
                    axes.append(T.SliceAxis(ZERO, 1, True))
                    shape.append(dim)
                    continue
                start, step, length = self.slice_axis(dim, sub, node)
                axes.append(T.SliceAxis(start, step, True))
                shape.append(length)
                tokens.append("dim")
        if arrays and not adjacent:
            tokens.insert(0, "index")
        loc = self.loc(node)
        out: T.Node = T.Slice(T.TType(arg.type.dtype, tuple(shape)), loc, arg, tuple(axes))
        if arrays:
            index_nodes = tuple(arrays.values())
            batch = self._broadcast_indices(index_nodes, node)
            kept = [d for a, d in enumerate(shape) if a not in gathered]
            at = [t for t in tokens if t != "new"].index("index")
            final = tuple(kept[:at]) + batch + tuple(kept[at:])
            out = T.Take(T.TType(arg.type.dtype, final), loc, out, index_nodes, tuple(gathered), at)
        if "new" in tokens:
            dims = iter(out.type.shape)
            batch_rank = out.type.rank - (len(shape) - len(gathered))
            result: list[Expr] = []
            for t in tokens:
                result.extend([ONE] if t == "new" else [next(dims) for _ in range(batch_rank if t == "index" else 1)])
            out = T.Reshape(T.TType(arg.type.dtype, tuple(result)), loc, out)
        return out

    def _subscript_kind(self, node: ast.expr) -> str:
        """What one item of an array-form subscript is: "None", "...", "slice", "int" (an integer
        expression of symbols and int params) or "array" (an integer tensor: advanced indexing)."""
        if isinstance(node, ast.Constant) and (node.value is None or node.value is Ellipsis):
            return "None" if node.value is None else "..."
        if isinstance(node, ast.Slice):
            return "slice"
        return "int" if self._is_symbolic(node) else "array"

    def _is_symbolic(self, node: ast.expr) -> bool:
        """Whether `index_expr` reads node as an integer of literals, symbols and int params (no tensor)."""
        if isinstance(node, ast.Constant):
            return isinstance(node.value, int) and not isinstance(node.value, bool)
        if isinstance(node, ast.Name):
            value = self.bindings.params.get(node.id)
            is_int_param = isinstance(value, int) and not isinstance(value, bool)
            return node.id not in self.values and (node.id in self.bindings.symbols or is_int_param)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return self._is_symbolic(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)):
            return self._is_symbolic(node.left) and self._is_symbolic(node.right)
        return False

    def _index_array(self, node: ast.expr) -> T.Node:
        """An integer tensor used as a subscript (numpy advanced indexing)."""
        value = self.strengthen(self.expr(node, None))
        dtype = value.type.dtype
        if dtype == BOOL:
            raise self.error(
                "indexing by a bool mask is not supported (its result's shape depends on the data); "
                "select with where(mask, x, 0), or index by integer tensors",
                node,
            )
        if not dtype.is_int:
            raise self.error(f"an index must be an integer or an integer tensor, not {dtype.name}", node)
        return value

    def _broadcast_indices(self, arrays: tuple[T.Node, ...], node: ast.Subscript) -> tuple[Expr, ...]:
        """The broadcast shape of the index arrays of a subscript (numpy's rule)."""
        shapes = [a.type.shape for a in arrays]
        try:
            return self.broadcast(shapes, node)
        except CatencError:
            shown = ", ".join(shape_text(s) for s in shapes)
            raise self.error(f"the index arrays of shapes {shown} do not broadcast together", node.slice) from None

    def slice_axis(self, dim: Expr, item: ast.Slice, node: ast.AST) -> tuple[Expr, int, Expr]:
        step = self.int_const(item.step) if item.step is not None else 1
        if step == 0:
            raise self.error("slice step cannot be zero", item.step)

        def bound(e: ast.expr | None) -> Expr | None:
            return None if e is None else self.from_end(self.index_expr(e, None), dim, e)

        start, stop = bound(item.lower), bound(item.upper)
        if step > 0:
            # numpy clamps both ends into [0, dim]; a start past the stop gives an empty slice,
            # so the start need not be clamped from above (it is only read when length > 0).
            start = ZERO if start is None else self.at_least(start, ZERO)
            stop = dim if stop is None else self.at_most(self.at_least(stop, ZERO), dim)
            length = self.at_least(floordiv(stop - start + step - 1, step), ZERO)
        else:
            start = dim - 1 if start is None else self.at_most(start, dim - 1)
            stop = const(-1) if stop is None else self.at_least(stop, const(-1))
            length = self.at_least(floordiv(start - stop + (-step) - 1, -step), ZERO)
        return start, step, length

    def from_end(self, value: Expr, dim: Expr, node: ast.AST) -> Expr:
        """numpy's rule for a slice bound or index: a negative value counts from the end."""
        if prove_nonneg(value, self.facts):
            return value
        if prove_nonneg(-value - 1, self.facts):
            return dim + value
        raise self.error(
            f"cannot tell whether {value} is negative (numpy counts negative bounds from the end); "
            "add a 'where' constraint that decides it",
            node,
        )

    def at_least(self, value: Expr, low: Expr) -> Expr:
        """max(value, low), simplified with what the composite's facts prove."""
        return value if prove_nonneg(value - low, self.facts) else maximum(value, low)

    def at_most(self, value: Expr, high: Expr) -> Expr:
        """min(value, high), simplified with what the composite's facts prove."""
        return value if prove_nonneg(high - value, self.facts) else minimum(value, high)

    # -- index form --
    def index_expr(self, node: ast.expr, scope: IndexScope | None) -> Expr:
        """An integer expression of indices, symbols, int params and literals."""
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return const(node.value)
        if isinstance(node, ast.Name):
            if scope is not None and node.id in scope.names:
                return sym(scope.names[node.id][0])
            if node.id in self.bindings.symbols:
                return self.bindings.symbols[node.id]
            value = self.bindings.params.get(node.id)
            if isinstance(value, int) and not isinstance(value, bool):
                return const(value)
            raise self.error(f"'{node.id}' is not an index, symbol or integer param", node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = self.index_expr(node.operand, scope)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp) and type(node.op) in (
            ast.Add,
            ast.Sub,
            ast.Mult,
            ast.FloorDiv,
            ast.Mod,
        ):
            a, b = self.index_expr(node.left, scope), self.index_expr(node.right, scope)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            divides_by_index = scope is not None and b.free_symbols() & {v for v, _ in scope.names.values()}
            if divides_by_index or (b.is_const and b.value < 0):
                raise self.error("an index may only be divided by a positive constant or symbol", node.right)
            return floordiv(a, b) if isinstance(node.op, ast.FloorDiv) else mod(a, b)
        raise self.error("expected an integer expression of indices and symbols (+ - * // %)", node)

    def index_assign(self, target: ast.Subscript, value: ast.expr) -> None:
        name = target.value.id
        items = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
        declared = self.outputs.get(name)
        lhs: list[tuple[str, str, Expr | None, ast.AST]] = []  # display, internal, extent, node
        bounds: dict[str, Expr] = {}  # the extents written on the left, `i < EXTENT`
        batch_dims: tuple[Expr, ...] = ()
        for k, item in enumerate(items):
            if isinstance(item, ast.Constant) and item.value is Ellipsis:
                if k != 0:
                    raise self.error("'...' may only be the first index", item)
                if declared is None or not self._declared_batched(name):
                    batch_dims = self.bindings.batch or ()
                    if declared is None and self.bindings.batch is None:
                        raise self.error("'...' needs a composite declared with '...' dims", item)
                else:
                    batch_dims = self.bindings.batch or ()
                for b, dim in enumerate(batch_dims):
                    lhs.append((f"...{b}", self.fresh(f"b{b}"), dim, item))
                continue
            binding = _index_binding(item)
            if binding is None:
                raise self.error("left-hand indices must be distinct index names, each `i` or `i < EXTENT`", item)
            index, bound_node = binding
            if any(index == d for d, _, _, _ in lhs):
                raise self.error(f"index '{index}' is repeated on the left-hand side", item)
            self._check_index_name(index, item)
            if bound_node is None:
                lhs.append((index, self.fresh(index), None, item))
            else:
                bound = self._given_range(index, bound_node, [b[0] for b in map(_index_binding, items) if b])
                if declared is None:
                    self._nonneg_range(index, bound, bound_node)
                bounds[index] = bound
                lhs.append((index, self.fresh(index), bound, bound_node))
        if declared is not None:
            if len(lhs) != declared.rank:
                raise self.error(
                    f"'{name}' has rank {declared.rank} ({shape_text(declared.shape)}) "
                    f"but {len(lhs)} indices are given",
                    target,
                )
            for k, (d, _, _, n) in enumerate(lhs):
                if d in bounds and not self.equal(bounds[d], declared.shape[k]):
                    raise self.error(
                        f"index '{d}' is bounded by {bounds[d]} but '{name}' is declared with "
                        f"{declared.shape[k]} in axis {k}",
                        n,
                    )
            lhs = [(d, i, declared.shape[k], n) for k, (d, i, _, n) in enumerate(lhs)]
        uses = self.alone_uses(value, {d: "lhs" for d, _, _, _ in lhs if not d.startswith("...")}, {})
        resolved: list[tuple[str, str, Expr]] = []
        for display_name, internal, extent, node in lhs:
            found = uses.get(("lhs", display_name), [])
            hint = f"declare it on the left, as `{_declaring(name, items, display_name)}`"
            extent = self._agree(display_name, extent, node, found, hint)
            resolved.append((display_name, internal, extent))
        self._pending_uses = uses
        scope = IndexScope({}).bind(resolved)
        body = self.expr(value, scope)
        if declared is not None and is_weak(body):
            body = self.retype(body, declared.dtype, value)
        body = self.strengthen(body)
        if body.type.rank:
            raise self.error("the right-hand side of an index-form statement must be a scalar", value)
        shape = tuple(e for _, _, e in resolved)
        dtype = body.type.dtype
        if declared is not None and dtype != declared.dtype:
            raise self.error(
                f"'{name}' is declared {declared.dtype.name} but this value is {dtype.name}; "
                f"use cast(..., {declared.dtype.name})",
                value,
            )
        ttype = T.TType(body.type.dtype, shape)
        self.define(name, ttype, target.value)
        indices = tuple((internal, extent) for _, internal, extent in resolved)
        self.statements.append(T.IndexAssign(name, indices, body, ttype, self.loc(target)))

    def _declared_batched(self, name: str) -> bool:
        return any(d.name == name and d.batch for d in self.comp.outputs)

    def fresh(self, name: str) -> str:
        return f"{name}'{next(self.ctx.serial)}"

    def _given_range(self, name: str, node: ast.expr, indices: Sequence[str]) -> Expr:
        """The range `name < EXTENT` gives: an integer expression of symbols and params, of no index."""
        for part in ast.walk(node):
            if isinstance(part, ast.Name) and part.id in indices:
                raise self.error(
                    f"the range of index '{name}' cannot depend on index '{part.id}': "
                    "give it as an expression of symbols and integer params",
                    part,
                )
        return self.index_expr(node, None)

    def _nonneg_range(self, name: str, extent: Expr, node: ast.AST) -> None:
        if not prove_nonneg(extent, self.facts):
            raise self.error(
                f"the range {extent} of index '{name}' may be negative; "
                f"add the 'where' constraint `{ast.unparse(node)} >= 0`",
                node,
            )

    def _agree(
        self, name: str, extent: Expr | None, node: ast.AST, found: list[tuple[Expr, Loc, str]], hint: str
    ) -> Expr:
        """The one range of an index: the one given (on the left or in a reduction's brackets) or the one
        of every access position holding it alone; `hint` says where a range could be declared."""
        first_loc = self.loc(node)
        for dim, loc, tensor in found:
            if extent is None:
                extent, first_loc = dim, loc
            elif not self.equal(extent, dim):
                raise CatencError(
                    f"index '{name}' ranges over {extent} here but over {dim} in {tensor}",
                    loc,
                    [("first range given here", first_loc)],
                )
        if extent is None:
            raise self.error(
                f"cannot infer the range of index '{name}': {hint}, or use it alone in some position of an access",
                node,
            )
        return extent

    def alone_uses(self, node: ast.AST, bound: dict[str, object], out: dict) -> dict:
        """(binding, index) -> [(dim, loc, tensor)] for every access position holding the index alone."""
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Subscript)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in REDUCTIONS
        ):
            inner = dict(bound)
            for n in _index_names(node.func.slice) or []:
                inner[n] = id(node)
            for arg in node.args:
                self.alone_uses(arg, inner, out)
            return out
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in self.values:
            shape = self.values[node.value.id][0].shape
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            explicit = [e for e in items if not (isinstance(e, ast.Constant) and e.value is Ellipsis)]
            dims = shape[len(shape) - len(explicit) :] if len(explicit) <= len(shape) else ()
            for item, dim in zip(explicit, dims):
                if isinstance(item, ast.Name) and item.id in bound:
                    out.setdefault((bound[item.id], item.id), []).append((dim, self.loc(item), node.value.id))
            return out
        for child in ast.iter_child_nodes(node):
            self.alone_uses(child, bound, out)
        return out

    def index_reduce(self, node: ast.Call, scope: IndexScope) -> T.Node:
        op = node.func.value.id
        self.positional(node, 1, 1, f"{op}[...](...)")
        self.keywords(node, ())
        bindings = _index_bindings(node.func.slice)
        if bindings is None:
            raise self.error(
                f"{op}[...] binds index names, like {op}[k](...), {op}[c, r](...) or {op}[k < K](...)", node.func
            )
        uses = self._pending_uses
        written = node.func.slice.elts if isinstance(node.func.slice, ast.Tuple) else [node.func.slice]
        items = []
        for n, extent_node in bindings:
            self._check_index_name(n, node.func)
            visible = [*scope.names, *(b for b, _ in bindings)]
            given = self._given_range(n, extent_node, visible) if extent_node is not None else None
            if given is not None:
                self._nonneg_range(n, given, extent_node)
            hint = f"declare it in the brackets, as `{_declaring(op, written, n)}(...)`"
            extent = self._agree(n, given, node.func, uses.get((id(node), n), []), hint)
            items.append((n, self.fresh(n), extent))
        inner = scope.bind(items)
        body = self.strengthen(self.expr(node.args[0], inner))
        dtype = body.type.dtype
        if dtype == BOOL:
            raise self.error(f"{op}[...] of bool values: use cast(x, i64) first", node)
        if op == "mean" and not dtype.is_float:
            raise self.error(f"mean[...] of {dtype.name} values: use cast(..., f32) first", node)
        indices = tuple((internal, extent) for _, internal, extent in items)
        return T.IndexReduce(T.TType(dtype, ()), self.loc(node), op, indices, body)

    def access(self, node: ast.Subscript, scope: IndexScope) -> T.Node:
        if not isinstance(node.value, ast.Name) or node.value.id not in self.values:
            if isinstance(node.value, ast.Name):
                return self.name(node.value, scope)  # raises the unknown-name error
            raise self.error("only named tensors can be indexed in index form", node)
        name = node.value.id
        ttype = self.values[name][0]
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if any(isinstance(e, ast.Slice) for e in items):
            raise self.error("slices are array form; in index form use index expressions", node)
        batch_vars = [internal for d, (internal, _) in scope.names.items() if d.startswith("...")]
        indices: list[Expr] = []
        explicit = [e for e in items if not (isinstance(e, ast.Constant) and e.value is Ellipsis)]
        has_batch = len(explicit) != len(items)
        if has_batch:
            nbatch = ttype.rank - len(explicit)
            if nbatch < 0 or nbatch > len(batch_vars):
                raise self.error(
                    f"'{name}' has rank {ttype.rank}; cannot index it with {len(items)} indices",
                    node,
                )
            for k in range(nbatch):
                var = batch_vars[len(batch_vars) - nbatch + k]
                dim = ttype.shape[k]
                indices.append(ZERO if dim == ONE else sym(var))
        elif len(items) != ttype.rank:
            raise self.error(f"'{name}' has rank {ttype.rank} but {len(items)} indices are given", node)
        indices.extend(self.index_expr(e, scope) for e in explicit)
        facts = self.scope_facts(scope)
        positions = [None] * (len(indices) - len(explicit)) + explicit
        for k, (index, dim) in enumerate(zip(indices, ttype.shape)):
            if not (prove_nonneg(index, facts) and prove_less(index, dim, facts)):
                shown = display_text(str(index))
                raise CatencError(
                    f"access to '{name}' may be out of bounds in axis {k}: cannot prove 0 <= {shown} < {dim}; "
                    "guard it with where(condition, ..., ...)",
                    self.loc(positions[k] or node),
                )
        return T.Access(T.TType(ttype.dtype, ()), self.loc(node), name, tuple(indices))

    def guard_facts(self, cond: T.Node, scope: IndexScope) -> tuple[list[Expr], list[Expr]]:
        """Facts (e >= 0) that hold where cond is true, and where it is false."""
        if isinstance(cond, T.Apply):
            if cond.op in ("lt", "le", "gt", "ge", "eq", "ne"):
                a, b = (as_symbolic(x) for x in cond.args)
                if a is None or b is None:
                    return [], []
                equal, unequal = constraint_facts(a, "==", b), self.unequal_facts(a, b, scope)
                return {
                    "lt": (constraint_facts(a, "<", b), constraint_facts(a, ">=", b)),
                    "le": (constraint_facts(a, "<=", b), constraint_facts(a, ">", b)),
                    "gt": (constraint_facts(a, ">", b), constraint_facts(a, "<=", b)),
                    "ge": (constraint_facts(a, ">=", b), constraint_facts(a, "<", b)),
                    "eq": (equal, unequal),
                    "ne": (unequal, equal),
                }[cond.op]
            if cond.op == "and":
                (t1, _), (t2, _) = (self.guard_facts(x, scope) for x in cond.args)
                return t1 + t2, []
            if cond.op == "or":
                (_, f1), (_, f2) = (self.guard_facts(x, scope) for x in cond.args)
                return [], f1 + f2
            if cond.op == "not":
                t, f = self.guard_facts(cond.args[0], scope)
                return f, t
        return [], []

    def unequal_facts(self, a: Expr, b: Expr, scope: IndexScope) -> list[Expr]:
        """a != b as a fact, under what the scope knows."""
        return unequal_facts(a, b, self.scope_facts(scope))

    def scope_facts(self, scope: IndexScope) -> Facts:
        facts = self.facts
        for internal, extent in scope.names.values():
            facts = facts.with_range(internal, extent)
        return facts.with_nonneg(*scope.guards)


def _index_binding(item: ast.expr) -> tuple[str, ast.expr | None] | None:
    """An index bound on the left or by a reduction: `k` (range inferred) or `k < EXTENT` (range given)."""
    if isinstance(item, ast.Name):
        return item.id, None
    if (
        isinstance(item, ast.Compare)
        and isinstance(item.left, ast.Name)
        and len(item.ops) == 1
        and isinstance(item.ops[0], ast.Lt)
    ):
        return item.left.id, item.comparators[0]
    return None


def _index_bindings(node: ast.expr) -> list[tuple[str, ast.expr | None]] | None:
    """The indices a reduction binds, each as `_index_binding` reads it."""
    out = [_index_binding(item) for item in (node.elts if isinstance(node, ast.Tuple) else [node])]
    return None if None in out else out


def _declaring(head: str, items: Sequence[ast.expr], name: str) -> str:
    """`head[...]` as written, with the range of index `name` declared: the fix a range error suggests."""
    shown = [f"{name} < EXTENT" if _index_binding(e) == (name, None) else ast.unparse(e) for e in items]
    return f"{head}[{', '.join(shown)}]"


def _index_names(node: ast.expr) -> list[str] | None:
    bindings = _index_bindings(node)
    return None if bindings is None else [name for name, _ in bindings]


def display_text(text: str) -> str:
    """Drop the internal serial numbers of index names (i'3 -> i)."""
    out, skip = [], False
    for ch in text:
        if ch == "'":
            skip = True
            continue
        if skip and ch.isdigit():
            continue
        skip = False
        out.append(ch)
    return "".join(out)


def as_symbolic(node: T.Node) -> Expr | None:
    """An integer-valued typed expression of indices and symbols as a symbolic Expr."""
    if isinstance(node, T.IndexVal):
        return sym(node.name)
    if isinstance(node, T.SymVal) and not node.type.dtype.is_float:
        return node.expr
    if isinstance(node, T.Lit) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return const(node.value)
    if isinstance(node, T.Apply) and node.type.dtype.is_int:
        parts = [as_symbolic(a) for a in node.args]
        if any(p is None for p in parts):
            return None
        if node.op == "add":
            return parts[0] + parts[1]
        if node.op == "sub":
            return parts[0] - parts[1]
        if node.op == "mul":
            return parts[0] * parts[1]
        if node.op == "neg":
            return -parts[0]
        if node.op == "floordiv":  # floor division and modulo by 0 give 0, as in the C code
            return floordiv(parts[0], parts[1])
        if node.op == "mod":
            return mod(parts[0], parts[1])
    return None
