"""Name resolution, dtype and shape inference, and index-bounds proofs of one composite body.

`check_entry` types a composite as an entry (its symbols free or fixed by `-D`); composite calls
inside it are instantiated recursively by `instantiate`, with the callee's symbols and dtype
variables inferred from the arguments. The result is a `typed.Program`.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence

from catenc.diagnostics import CatencError, Loc, closest
from catenc.dtypes import BOOL, DTYPES, F32, I64, DType
from catenc.frontend import typed as T
from catenc.frontend.body import BodyText
from catenc.frontend.composites import MAX_CONSTANT, Composite, Constraint, TensorDecl
from catenc.frontend.constraints import (
    Bindings,
    EntryContext,
    RuntimeCheck,
    coerce_param,
    decide,
    shape_params,
)
from catenc.frontend.indexing import IndexForm, IndexScope, _index_names
from catenc.frontend.operators import Operators, is_weak, shape_text
from catenc.frontend.shapes import SHAPE_FUNCS, ShapeFunctions
from catenc.symbolic import (
    ONE,
    ZERO,
    Expr,
    Facts,
    const,
    floordiv,
    mod,
    sym,
)

# what the driver, the planner and the test harness use
__all__ = ["EntryContext", "RuntimeCheck", "check_entry", "decide"]

UNARY_FLOAT = frozenset(
    "exp exp2 log log2 log1p expm1 sqrt rsqrt reciprocal sin cos tan tanh sinh cosh asin acos "
    "atan erf floor ceil round trunc sigmoid silu gelu gelu_tanh softplus".split()
)
UNARY_NUMERIC = frozenset("abs neg sign relu".split())
FLOAT_PREDICATES = frozenset("isnan isinf isfinite".split())
BINARY_NUMERIC = frozenset("maximum minimum".split())
BINARY_FLOAT = frozenset("atan2".split())
ELEMENTWISE = (
    UNARY_FLOAT
    | UNARY_NUMERIC
    | FLOAT_PREDICATES
    | BINARY_NUMERIC
    | BINARY_FLOAT
    | {
        "pow",
        "clip",
        "where",
        "cast",
    }
)
REDUCTIONS = ("sum", "mean", "max", "min", "prod")
CONSTANTS = {"inf": math.inf, "nan": math.nan, "pi": math.pi, "True": True, "False": False}
BIN_OPS = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "div",
    ast.FloorDiv: "floordiv",
    ast.Mod: "mod",
    ast.Pow: "pow",
    ast.BitAnd: "and",
    ast.BitOr: "or",
    ast.BitXor: "xor",
}
CMP_OPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
MAX_CALL_DEPTH = 32


# ---- entry points ------------------------------------------------------------------------------


def check_entry(comp: Composite, ctx: EntryContext, fixed: dict[str, object]) -> tuple[T.Program, Bindings]:
    """Type a composite as a compiled entry; `fixed` holds -D values (symbols, params, dtypes)."""
    params = dict(comp.params)
    for name, value in fixed.items():
        if name in params:
            params[name] = coerce_param(name, value, params[name], comp.loc)
    symbols: dict[str, Expr] = shape_params(params)
    for name in comp.symbols():
        value = fixed.get(name)
        if name in comp.derived:
            continue
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_CONSTANT:
                raise CatencError(f"-D {name}: a symbol needs an integer in [0, 2^62], got {value!r}", comp.loc)
            symbols[name] = const(value)
        else:
            symbols[name] = sym(name)
    for name, expr in comp.derived.items():
        symbols[name] = expr.substitute(symbols)
    dtypes: dict[str, DType] = {}
    for var, choices in comp.types.items():
        chosen = fixed.get(var, choices[0])
        if chosen not in choices:
            raise CatencError(f"-D {var}={chosen}: '{comp.name}' allows {var} in {', '.join(choices)}", comp.loc)
        dtypes[var] = DTYPES[str(chosen)]
    for c in comp.constraints:
        lhs, rhs = c.lhs.substitute(symbols), c.rhs.substitute(symbols)
        verdict = decide(lhs, c.op, rhs, ctx.facts)
        if verdict is False:
            raise CatencError(f"constraint '{c.text}' can never hold here", c.loc)
        if verdict is None:
            ctx.add_check(lhs, c.op, rhs, c.text, c.loc)
    bindings = Bindings(symbols, dtypes, params)
    return BodyChecker(comp, bindings, ctx, depth=0).run(), bindings


# ---- the checker -------------------------------------------------------------------------------


class BodyChecker(ShapeFunctions, IndexForm, Operators):
    def __init__(self, comp: Composite, bindings: Bindings, ctx: EntryContext, depth: int):
        self.comp = comp
        self.bindings = bindings
        self.ctx = ctx
        self.depth = depth
        self.text = BodyText.of(comp)
        self.values: dict[str, tuple[T.TType, Loc]] = {}
        self.outputs: dict[str, T.TType] = {}
        self.statements: list[T.Statement] = []

    # -- helpers --
    def loc(self, node: ast.AST) -> Loc:
        return self.text.node_loc(node)

    def error(self, message: str, node: ast.AST, notes=()) -> CatencError:
        return CatencError(message, self.loc(node), notes)

    def decl_type(self, decl: TensorDecl) -> T.TType:
        dtype = DTYPES.get(decl.dtype) or self.bindings.dtypes[decl.dtype]
        dims = tuple(d.substitute(self.bindings.symbols) for d in decl.dims)
        if decl.batch:
            dims = (self.bindings.batch or ()) + dims
        known = [d.value for d in dims if d.is_const]
        elements = math.prod(known)
        if elements * dtype.itemsize > 2**63 - 1:  # the emitted code counts elements and bytes in int64_t
            held = "" if len(known) == len(dims) else "its constant dims alone hold "
            raise CatencError(
                f"'{decl.name}' is too large: {held}{elements} elements of {dtype.itemsize} bytes, "
                "more than 2^63 - 1 bytes",
                decl.loc,
            )
        return T.TType(dtype, dims)

    @property
    def facts(self) -> Facts:
        return self.ctx.facts

    # -- program --
    def run(self) -> T.Program:
        comp = self.comp
        inputs = tuple((d.name, self.decl_type(d)) for d in comp.inputs)
        for (name, ttype), decl in zip(inputs, comp.inputs):
            self.values[name] = (ttype, decl.loc)
        for decl in comp.outputs:
            self.outputs[decl.name] = self.decl_type(decl)
        for stmt in self.text.parse():
            self.statement(stmt)
        for decl in comp.outputs:
            if decl.name not in self.values:
                raise CatencError(f"output '{decl.name}' is never assigned in the body of '{comp.name}'", decl.loc)
        outputs = tuple((d.name, self.outputs[d.name]) for d in comp.outputs)
        params = tuple(sorted(self.bindings.params.items()))
        return T.Program(comp.name, inputs, outputs, tuple(self.statements), params)

    def define(self, name: str, ttype: T.TType, node: ast.AST) -> None:
        if name in self.values:
            raise self.error(
                f"'{name}' is already defined; every name is assigned once",
                node,
                [("defined here", self.values[name][1])],
            )
        if name in self.bindings.symbols or name in self.bindings.params or name in CONSTANTS:
            raise self.error(f"'{name}' is a symbol, param or constant and cannot be assigned", node)
        self.values[name] = (ttype, self.loc(node))

    def statement(self, stmt: ast.stmt) -> None:
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            if isinstance(stmt, ast.Expr):
                raise self.error(
                    "a statement must assign its value: 'name = expr' or 'name[i, ...] = expr'",
                    stmt,
                )
            raise self.error(
                "only assignments 'name = expr' and 'name[i, ...] = expr' are allowed in a body",
                stmt,
            )
        target = stmt.targets[0]
        if isinstance(target, ast.Name):
            value = self.finish_value(self.expr(stmt.value, None), target.id, stmt.value)
            self.define(target.id, value.type, target)
            self.statements.append(T.Assign(target.id, value, self.loc(target)))
        elif isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts):
            self.tuple_assign(target, stmt.value)
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            self.index_assign(target, stmt.value)
        else:
            raise self.error("cannot assign to this; expected a name, names 'a, b' or 'name[i, j]'", target)

    def finish_value(self, value: T.Node, name: str, node: ast.AST) -> T.Node:
        """Resolve weak literals and check an output's declared type."""
        declared = self.outputs.get(name)
        if declared is None:
            return self.strengthen(value)
        if is_weak(value):
            value = self.retype(value, declared.dtype, node)
        if value.type.dtype != declared.dtype:
            raise self.error(
                f"'{name}' is declared {declared.dtype.name} but this value is {value.type.dtype.name}; "
                f"use cast(..., {declared.dtype.name})",
                node,
            )
        if not self.same_shape(value.type.shape, declared.shape):
            raise self.error(
                f"'{name}' is declared with shape {shape_text(declared.shape)} but this value has shape "
                f"{shape_text(value.type.shape)}",
                node,
            )
        return value

    def same_shape(self, a: tuple[Expr, ...], b: tuple[Expr, ...]) -> bool:
        return len(a) == len(b) and all(self.equal(x, y) for x, y in zip(a, b))

    def equal(self, a: Expr, b: Expr) -> bool:
        return a == b or decide(a, "==", b, self.facts) is True

    def tuple_assign(self, target: ast.Tuple, value_node: ast.expr) -> None:
        value = self.expr(value_node, None, allow_tuple=True)
        if not isinstance(value, T.Call):
            raise self.error(
                "only a composite call with several outputs can be assigned to several names",
                value_node,
            )
        names = [e.id for e in target.elts]
        outs = value.program.outputs
        if len(names) != len(outs):
            raise self.error(
                f"'{value.callee}' returns {len(outs)} outputs but {len(names)} names are assigned",
                target,
            )
        for k, (elt, name) in enumerate(zip(target.elts, names)):
            node = self.finish_value(T.CallOut(outs[k][1], self.loc(value_node), value, k), name, value_node)
            self.define(name, node.type, elt)
            self.statements.append(T.Assign(name, node, self.loc(elt)))

    # -- array-form expressions ---
    def expr(self, node: ast.expr, scope: IndexScope | None, allow_tuple: bool = False) -> T.Node:
        result = self._expr(node, scope)
        if isinstance(result, T.Call):
            if allow_tuple:
                return result
            if len(result.program.outputs) != 1:
                raise self.error(
                    f"'{result.callee}' returns several outputs; assign them with 'a, b = ...'",
                    node,
                )
            return T.CallOut(result.program.outputs[0][1], result.loc, result, 0)
        return result

    def _expr(self, node: ast.expr, scope: IndexScope | None) -> T.Node:
        loc = self.loc(node)
        if isinstance(node, ast.Constant):
            return self.constant(node)
        if isinstance(node, ast.Name):
            return self.name(node, scope)
        if isinstance(node, ast.UnaryOp):
            arg = self.expr(node.operand, scope)
            if isinstance(node.op, ast.UAdd):
                return arg
            if isinstance(node.op, ast.USub):
                if isinstance(arg, T.Lit) and arg.weak:
                    return T.Lit(arg.type, loc, -arg.value, True)
                return self.elementwise("neg", [arg], node)
            if isinstance(node.op, ast.Invert):
                return self.elementwise("not", [arg], node)
            raise self.error("'not' is not supported; use '~' on bool values", node)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.MatMult):
                return self.matmul(self.expr(node.left, scope), self.expr(node.right, scope), node, scope)
            op = BIN_OPS.get(type(node.op))
            if op is None:
                raise self.error("unsupported operator", node)
            return self.elementwise(op, [self.expr(node.left, scope), self.expr(node.right, scope)], node)
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                raise self.error("chained comparisons are not supported; combine with '&'", node)
            op = CMP_OPS.get(type(node.ops[0]))
            if op is None:
                raise self.error("unsupported comparison; use < <= > >= == !=", node)
            return self.elementwise(op, [self.expr(node.left, scope), self.expr(node.comparators[0], scope)], node)
        if isinstance(node, ast.BoolOp):
            raise self.error("'and'/'or' are not supported; use '&' and '|' on bool values", node)
        if isinstance(node, ast.Call):
            return self.call(node, scope)
        if isinstance(node, ast.Subscript):
            if scope is not None:
                return self.access(node, scope)
            return self.slice(node)
        if isinstance(node, ast.Attribute):
            if node.attr == "T" and scope is None:
                arg = self.expr(node.value, scope)
                perm = tuple(reversed(range(arg.type.rank)))
                return T.Permute(T.TType(arg.type.dtype, tuple(arg.type.shape[p] for p in perm)), loc, arg, perm)
            raise self.error(f"unknown attribute '.{node.attr}' (only '.T' is supported)", node)
        raise self.error("this expression is not part of the body language", node)

    def constant(self, node: ast.Constant) -> T.Node:
        value = node.value
        loc = self.loc(node)
        if isinstance(value, bool):
            return T.Lit(T.TType(BOOL, ()), loc, value, True)
        if isinstance(value, int):
            return T.Lit(T.TType(I64, ()), loc, value, True)
        if isinstance(value, float):
            return T.Lit(T.TType(F32, ()), loc, value, True)
        raise self.error("strings and other constants are not values in the body language", node)

    def name(self, node: ast.Name, scope: IndexScope | None) -> T.Node:
        name, loc = node.id, self.loc(node)
        if scope is not None and name in scope.names:
            return T.IndexVal(T.TType(I64, ()), loc, scope.names[name][0])
        if name in self.values:
            ttype = self.values[name][0]
            if scope is not None and ttype.rank:
                raise self.error(
                    f"'{name}' is a tensor of rank {ttype.rank}; index it in index form: {name}[...]",
                    node,
                )
            return T.Ref(ttype, loc, name)
        if name in self.bindings.params:
            value = self.bindings.params[name]
            dtype = BOOL if isinstance(value, bool) else I64 if isinstance(value, int) else F32
            return T.Lit(T.TType(dtype, ()), loc, value, True)
        if name in self.bindings.symbols:
            return T.SymVal(T.TType(I64, ()), loc, self.bindings.symbols[name])
        if name in CONSTANTS:
            value = CONSTANTS[name]
            return T.Lit(T.TType(BOOL if isinstance(value, bool) else F32, ()), loc, value, True)
        known = list(self.values) + list(self.bindings.params) + list(self.bindings.symbols)
        if scope is not None:
            known += list(scope.names)
        raise self.error(f"unknown name '{name}'{closest(name, known)}", node)

    def elementwise(self, op: str, args: list[T.Node], node: ast.AST) -> T.Node:
        loc = self.loc(node)
        if op == "where":
            cond, a, b = args
            if cond.type.dtype != BOOL:
                raise self.error(f"the condition of where(...) must be bool, not {cond.type.dtype.name}", node)
            a, b = self.unify([a, b], node)
            shape = self.broadcast([cond.type.shape, a.type.shape, b.type.shape], node)
            return T.Apply(T.TType(a.type.dtype, shape), loc, "where", (cond, a, b))
        args = self.unify(args, node)
        dtype = args[0].type.dtype
        shape = self.broadcast([a.type.shape for a in args], node)
        weak = all(is_weak(a) for a in args)
        name = _OP_SPELLING.get(op, op)
        result = dtype
        if op in ("lt", "le", "gt", "ge", "eq", "ne"):
            result = BOOL
            if dtype == BOOL and op not in ("eq", "ne"):
                raise self.error(f"cannot order bool values with '{name}'", node)
        elif op in ("and", "or", "xor", "not"):
            if dtype.is_float:
                raise self.error(f"'{name}' needs bool or integer operands, not {dtype.name}", node)
        elif op in FLOAT_PREDICATES:
            if not dtype.is_float:
                raise self.error(f"{op}(...) needs a float operand, not {dtype.name}", node)
            result = BOOL
        elif op in UNARY_FLOAT or op in BINARY_FLOAT or op == "div":
            if dtype.is_int and not weak:
                hint = "use '//' or cast(...)" if op == "div" else "use cast(x, f32)"
                raise self.error(f"'{name}' needs float operands, not {dtype.name}; {hint}", node)
            if dtype == BOOL:
                raise self.error(f"'{name}' needs float operands, not bool", node)
            if weak and not dtype.is_float:
                args = [self._reweak(a, F32) for a in args]
                result = F32
        elif dtype == BOOL:
            raise self.error(f"'{name}' needs numeric operands, not bool; use cast(...)", node)
        return T.Apply(T.TType(result, shape), loc, op, tuple(args))

    # -- calls --
    def call(self, node: ast.Call, scope: IndexScope | None) -> T.Node:
        func = node.func
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
        name = func.id
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
        arity = {"where": 3, "clip": 3, "pow": 2, "maximum": 2, "minimum": 2, "atan2": 2}.get(name, 1)
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

    def _check_index_name(self, name: str, node: ast.AST) -> None:
        if name in self.values or name in self.bindings.symbols or name in self.bindings.params or name in CONSTANTS:
            raise self.error(f"index '{name}' shadows a tensor, symbol or param of the same name", node)

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

    # -- composite calls --
    def composite_call(self, comp: Composite, node: ast.Call) -> T.Node:
        if self.depth >= MAX_CALL_DEPTH:
            raise self.error(f"composite calls nest too deeply (recursive call of '{comp.name}'?)", node)
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
        checker = BodyChecker(comp, bindings, self.ctx, self.depth + 1)
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


_OP_SPELLING = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "floordiv": "//",
    "mod": "%",
    "pow": "**",
    "and": "&",
    "or": "|",
    "xor": "^",
    "not": "~",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "ne": "!=",
}
