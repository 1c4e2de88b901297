"""Calls: their arguments, the elementwise and reduction functions, and composite calls.

A composite call instantiates the callee with its symbols, batch dims and dtype variables inferred
from the arguments; what cannot be proved at the call becomes a run-time check (docs/language.md,
section 10).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from catenc.diagnostics import CatencError, closest
from catenc.dtypes import BOOL, DTYPES, I64, DType
from catenc.frontend import typed as T
from catenc.frontend.composites import Composite, Constraint, TensorDecl
from catenc.frontend.constraints import Bindings, coerce_param, decide, shape_params
from catenc.frontend.indexing import IndexScope
from catenc.frontend.operators import is_weak, shape_text
from catenc.frontend.shapes import SHAPE_FUNCS
from catenc.registry import ARITY, ELEMENTWISE, REDUCTIONS
from catenc.symbolic import ONE, ZERO, Expr, floordiv, mod, sym

MAX_CALL_DEPTH = 32


class Calls:
    """Function and composite calls; mixed into `BodyChecker` (check.py), whose state and helpers it uses."""

    def call(self, node: ast.Call, scope: IndexScope | None) -> T.Node:
        func = node.func
        if isinstance(func, ast.Attribute):
            return self.method_call(node, scope)
        called = func.value if isinstance(func, ast.Subscript) else func
        if isinstance(called, ast.Name):
            self.not_a_value(called)
        if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name) and func.value.id in REDUCTIONS:
            if scope is None:
                raise self.error(
                    f"'{func.value.id}[...](...)' binds indices and belongs to index form; in array form "
                    f"write {func.value.id}(x, axis=...)",
                    node,
                )
            return self.index_reduce(node, scope)
        if not isinstance(func, ast.Name):
            raise self.error("only named functions can be called", node)
        return self.function(func.id, node, scope)

    def function(self, name: str, node: ast.Call, scope: IndexScope | None) -> T.Node:
        """A call of the built-in function or composite `name` with node's arguments."""
        func = node.func
        if name in ELEMENTWISE:
            return self.call_elementwise(name, node, scope)
        if name in REDUCTIONS or name in ("argmax", "argmin"):
            if scope is not None:
                raise self.error(f"in index form reduce with {name}[k](...) over bound indices", node)
            return self.reduction(name, node)
        if name in SHAPE_FUNCS:
            if scope is not None:
                raise self.error(f"{name}(...) works on whole tensors; use it in array form", node)
            return self.shape_func(name, node)
        comp = self.ctx.library.find(name)
        if comp is None:
            known = sorted(ELEMENTWISE | SHAPE_FUNCS | set(REDUCTIONS)) + list(self.ctx.library.local)
            raise self.error(f"unknown function or composite '{name}'{closest(name, known)}", func)
        if scope is not None:
            raise self.error(
                f"composite '{name}' cannot be called inside index form; assign it to a name first",
                node,
            )
        return self.composite_call(comp, node)

    def is_value(self, name: str) -> bool:
        """Whether name means a tensor, param or symbol here (and hides a function of that name)."""
        return name in self.values or name in self.bindings.params or name in self.bindings.symbols

    def not_a_value(self, func: ast.Name) -> None:
        """A tensor, param or symbol hides a function of its name in its composite (docs/language.md §4)."""
        name = func.id
        kind = "a param" if name in self.bindings.params else "a symbol" if name in self.bindings.symbols else None
        if name in self.values:
            kind = "a tensor"
        if kind is None:
            return
        message = f"'{name}' is {kind} here, not a function"
        builtin = name in ELEMENTWISE or name in REDUCTIONS or name in SHAPE_FUNCS or name in ("argmax", "argmin")
        if builtin or self.ctx.library.find(name) is not None:
            message += f"; it hides the function '{name}' (rename the {kind[2:]} to call it)"
        raise self.error(message, func)

    def positional(self, node: ast.Call, low: int, high: int, what: str) -> None:
        n = len(node.args)
        if not low <= n <= high:
            expected = str(low) if low == high else f"{low} to {high}"
            raise self.error(f"{what} takes {expected} arguments, got {n}", node)

    def keywords(self, node: ast.Call, allowed: Sequence[str]) -> dict[str, ast.expr]:
        out = {}
        for kw in node.keywords:
            if kw.arg is None or kw.arg not in allowed:
                valid = ", ".join(allowed) if allowed else "none"
                raise self.error(
                    f"unknown keyword '{kw.arg}'{closest(kw.arg or '', allowed)}; valid: {valid}",
                    kw,
                )
            out[kw.arg] = kw.value
        return out

    def dtype_arg(self, node: ast.expr) -> DType:
        if isinstance(node, ast.Name):
            if node.id in DTYPES:
                return DTYPES[node.id]
            if node.id in self.bindings.dtypes:
                return self.bindings.dtypes[node.id]
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in DTYPES:
            return DTYPES[node.value]
        raise self.error(f"expected a dtype ({' '.join(DTYPES)}) or a type variable", node)

    def call_elementwise(self, name: str, node: ast.Call, scope: IndexScope | None) -> T.Node:
        if name == "cast":
            self.positional(node, 2, 2, "cast")
            self.keywords(node, ())
            arg = self.strengthen(self.expr(node.args[0], scope))
            dtype = self.dtype_arg(node.args[1])
            return T.Apply(T.TType(dtype, arg.type.shape), self.loc(node), "cast", (arg,))
        arity = ARITY[name]
        self.positional(node, arity, arity, f"{name}(...)")
        self.keywords(node, ())
        if name == "where" and scope is not None:
            cond = self.expr(node.args[0], scope)
            when_true, when_false = self.guard_facts(cond, scope)
            a = self.expr(node.args[1], scope.guarded(when_true))
            b = self.expr(node.args[2], scope.guarded(when_false))
            return self.elementwise("where", [cond, a, b], node)
        args = [self.expr(a, scope) for a in node.args]
        if name == "clip":
            x, lo, hi = self.unify(args, node)
            return self.elementwise("minimum", [self.elementwise("maximum", [x, lo], node), hi], node)
        return self.elementwise(name, args, node)

    def axes_arg(self, node: ast.expr | None, rank: int, call: ast.AST) -> tuple[int, ...]:
        if node is None or (isinstance(node, ast.Constant) and node.value is None):
            return tuple(range(rank))
        items = node.elts if isinstance(node, (ast.Tuple, ast.List)) else [node]
        axes = []
        for item in items:
            axis = self.int_const(item)
            if not -rank <= axis < rank:
                raise self.error(f"axis {axis} is out of range for a tensor of rank {rank}", item)
            axis %= rank
            if axis in axes:
                raise self.error(f"axis {axis} is repeated", item)
            axes.append(axis)
        return tuple(sorted(axes))

    def int_const(self, node: ast.expr) -> int:
        value = self.index_expr(node, None)
        if not value.is_const:
            raise self.error("expected an integer constant", node)
        return value.value

    def bool_const(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name) and isinstance(self.bindings.params.get(node.id), bool):
            return bool(self.bindings.params[node.id])
        raise self.error("expected True or False", node)

    def reduction(self, name: str, node: ast.Call) -> T.Node:
        self.positional(node, 1, 1, f"{name}(...)")
        kws = self.keywords(node, ("axis", "keepdims"))
        arg = self.strengthen(self.expr(node.args[0], None))
        keepdims = self.bool_const(kws["keepdims"]) if "keepdims" in kws else False
        dtype = arg.type.dtype
        if name in ("argmax", "argmin"):
            if "axis" not in kws:
                raise self.error(f"{name}(...) needs axis=", node)
            (axis,) = self.axes_arg(kws["axis"], arg.type.rank, node) or (None,)
            shape = _reduced(arg.type.shape, (axis,), keepdims)
            return T.ArgReduce(T.TType(I64, shape), self.loc(node), name, arg, axis, keepdims)
        if dtype == BOOL:
            raise self.error(f"{name}(...) of bool values: use cast(x, i64) first", node)
        if name == "mean" and not dtype.is_float:
            raise self.error(f"mean(...) of {dtype.name} values: use cast(x, f32) first", node)
        axes = self.axes_arg(kws.get("axis"), arg.type.rank, node)
        shape = _reduced(arg.type.shape, axes, keepdims)
        return T.Reduce(T.TType(dtype, shape), self.loc(node), name, arg, axes, keepdims)

    # -- composite calls --
    def composite_call(self, comp: Composite, node: ast.Call) -> T.Node:
        if self.depth >= MAX_CALL_DEPTH:
            raise self.error(f"composite calls nest too deeply (recursive call of '{comp.name}'?)", node)
        if comp.constants:
            raise self.error(
                f"'{comp.name}' has constants (a weights file), so it can only be compiled as an entry, not called",
                node,
                [("declared here", comp.loc)],
            )
        if len(node.args) != len(comp.inputs):
            raise self.error(
                f"'{comp.name}' takes {len(comp.inputs)} inputs ({', '.join(d.name for d in comp.inputs)}), "
                f"got {len(node.args)}",
                node,
                [("declared here", comp.loc)],
            )
        args = [self.expr(a, None) for a in node.args]
        params = dict(comp.params)
        for kw in node.keywords:
            if kw.arg is None or kw.arg not in comp.params:
                valid = ", ".join(comp.params) or "none"
                raise self.error(
                    f"'{comp.name}' has no param '{kw.arg}'{closest(kw.arg or '', list(comp.params))}; params: {valid}",
                    kw,
                )
            value = self.expr(kw.value, None)
            if not isinstance(value, T.Lit):
                raise self.error(f"param '{kw.arg}' needs a constant value", kw.value)
            params[kw.arg] = coerce_param(kw.arg, value.value, comp.params[kw.arg], self.loc(kw.value))
        bindings, args = self.bind_call(comp, args, node, params)
        checker = type(self)(comp, bindings, self.ctx, self.depth + 1)
        try:
            program = checker.run()
        except CatencError as err:
            shapes = ", ".join(str(a.type) for a in args)
            note = (f"in '{comp.name}' called here with {shapes}", self.loc(node))
            raise CatencError(err.message, err.loc, tuple(err.notes) + (note,)) from None
        dtype = program.outputs[0][1]
        return T.Call(dtype, self.loc(node), comp.name, tuple(args), program)

    def bind_call(
        self, comp: Composite, args: list[T.Node], node: ast.Call, params: dict[str, bool | int | float]
    ) -> tuple[Bindings, list[T.Node]]:
        """Infer the callee's dtype variables, batch dims and symbols from the arguments."""
        dtypes: dict[str, DType] = {}
        for decl, arg, arg_node in zip(comp.inputs, args, node.args):
            if is_weak(arg):
                continue
            want = decl.dtype
            if want in DTYPES:
                if arg.type.dtype.name != want:
                    raise self.error(
                        f"'{comp.name}' wants {decl.name} as {want}, got {arg.type.dtype.name}; use cast(...)",
                        arg_node,
                        [("declared here", decl.loc)],
                    )
            elif want in dtypes:
                if dtypes[want] != arg.type.dtype:
                    raise self.error(
                        f"type variable {want} of '{comp.name}' is {dtypes[want].name} from an earlier argument "
                        f"but {arg.type.dtype.name} here",
                        arg_node,
                    )
            else:
                if arg.type.dtype.name not in comp.types[want]:
                    raise self.error(
                        f"'{comp.name}' does not support {arg.type.dtype.name} for {decl.name} "
                        f"({want} may be {', '.join(comp.types[want])})",
                        arg_node,
                        [("declared here", decl.loc)],
                    )
                dtypes[want] = arg.type.dtype
        for var, choices in comp.types.items():
            dtypes.setdefault(var, DTYPES[choices[0]])
        fixed_args = []
        for decl, arg in zip(comp.inputs, args):
            dtype = DTYPES.get(decl.dtype) or dtypes[decl.dtype]
            fixed_args.append(self.retype(arg, dtype, node) if is_weak(arg) else arg)
        batches: list[tuple[Expr, ...]] = []
        symbols: dict[str, Expr] = shape_params(params)
        pending: list[tuple[Expr, Expr, ast.AST, TensorDecl]] = []
        for decl, arg, arg_node in zip(comp.inputs, fixed_args, node.args):
            shape = arg.type.shape
            if decl.batch:
                if len(shape) < len(decl.dims):
                    raise self.error(
                        f"'{comp.name}' wants {decl.name} of rank {len(decl.dims)} or more, got {shape_text(shape)}",
                        arg_node,
                    )
                batches.append(shape[: len(shape) - len(decl.dims)])
                shape = shape[len(shape) - len(decl.dims) :]
            elif len(shape) != len(decl.dims):
                raise self.error(
                    f"'{comp.name}' wants {decl} (rank {len(decl.dims)}), got shape {shape_text(shape)}",
                    arg_node,
                    [("declared here", decl.loc)],
                )
            for want, got in zip(decl.dims, shape):
                name = want.as_symbol()
                if name is not None and name not in symbols and name not in comp.derived:
                    symbols[name] = got
                else:
                    pending.append((want, got, arg_node, decl))
        batch = self.broadcast(batches, node) if batches else None
        if comp.is_batched and batch is None:
            batch = ()
        for name, expr in comp.derived.items():
            if name not in symbols:
                symbols[name] = expr.substitute(symbols)
            else:
                pending.append((expr, symbols[name], node, None))
        for want, got, arg_node, decl in pending:
            missing = want.free_symbols() - set(symbols)
            if missing:
                solved = _solve_linear(want, got, missing, symbols)
                if solved is None:
                    raise self.error(
                        f"cannot infer {', '.join(sorted(missing))} of '{comp.name}' from a dim {got} "
                        f"matched against {want}",
                        arg_node,
                    )
                var, value, remainder_check = solved
                symbols[var] = value
                if remainder_check is not None:
                    self.require(remainder_check, "==", ZERO, f"{got} matches {want}", arg_node)
                continue
            expected = want.substitute(symbols)
            self.require(expected, "==", got, f"{want} == {got}", arg_node, decl)
        all_symbols = set()
        for decl in comp.inputs + comp.outputs:
            for dim in decl.dims:
                all_symbols |= dim.free_symbols()
        for name in sorted(all_symbols - set(symbols)):
            raise self.error(f"cannot infer symbol '{name}' of '{comp.name}' from its arguments", node)
        for c in comp.constraints:
            lhs, rhs = c.lhs.substitute(symbols), c.rhs.substitute(symbols)
            self.require(lhs, c.op, rhs, c.text, node, origin=c)
        return Bindings(symbols, dtypes, params, batch), fixed_args

    def require(
        self,
        lhs: Expr,
        op: str,
        rhs: Expr,
        text: str,
        node: ast.AST,
        decl: TensorDecl | None = None,
        origin: Constraint | None = None,
    ) -> None:
        """A fact the call needs: proved now, refuted now (error), or checked at run time."""
        verdict = decide(lhs, op, rhs, self.facts)
        if verdict is True:
            return
        notes = [("declared here", decl.loc)] if decl else []
        if origin is not None:
            notes = [("constraint declared here", origin.loc)]
        if verdict is False:
            raise self.error(f"this call can never satisfy '{text}' ({lhs} {op} {rhs})", node, notes)
        if op == "==" and origin is None:
            raise self.error(f"cannot prove the shapes match: {lhs} vs {rhs}", node, notes)
        self.ctx.add_check(lhs, op, rhs, text, self.loc(node))


def _solve_linear(want: Expr, got: Expr, missing: set[str], known: dict[str, Expr]):
    """Solve want(var) == got for a single unknown appearing as c*var; returns (var, value, remainder)."""
    if len(missing) != 1:
        return None
    (var,) = missing
    coefficient = want.coefficient(var)
    rest = want.substitute({**known, var: ZERO})
    if not coefficient.is_const or coefficient.value <= 0:
        return None
    if (want.substitute({**known, var: sym(var)}) - rest - coefficient * sym(var)).terms:
        return None
    numerator = got - rest
    c = coefficient.value
    return var, floordiv(numerator, c), (mod(numerator, c) if c != 1 else None)


def _reduced(shape: tuple[Expr, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[Expr, ...]:
    if keepdims:
        return tuple(ONE if k in axes else d for k, d in enumerate(shape))
    return tuple(d for k, d in enumerate(shape) if k not in axes)
