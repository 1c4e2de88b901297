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
from catenc.symbolic import (
    ONE,
    ZERO,
    Expr,
    Facts,
    const,
    floordiv,
    mod,
    product,
    prove_nonneg,
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
SHAPE_FUNCS = frozenset(
    "reshape transpose expand squeeze unsqueeze flatten concat arange zeros ones full stack pad tril triu einsum "
    "take".split()
)
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


class BodyChecker(IndexForm, Operators):
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

    # -- shape functions --
    def shape_list(self, node: ast.expr) -> list[tuple[Expr, ast.expr]]:
        if not isinstance(node, (ast.List, ast.Tuple)):
            raise self.error("expected a list of dims like [M, 2*N]", node)
        return [(self.index_expr(e, None), e) for e in node.elts]

    def shape_func(self, name: str, node: ast.Call) -> T.Node:
        loc = self.loc(node)
        handler = getattr(self, f"fn_{name}")
        result = handler(node, loc)
        for dim in result.type.shape:
            if not prove_nonneg(dim, self.facts):
                raise self.error(f"the dim {dim} of this {name}(...) may be negative", node)
            if any(abs(c) > MAX_CONSTANT for _, c in dim.terms):
                raise self.error(f"the dim {dim} of this {name}(...) is beyond 2^62", node)
        return result

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
            inferred = _cancel(arg.type.shape, [d for i, (d, _) in enumerate(dims) if i not in unknown])
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

    def fn_squeeze(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 2, 2, "squeeze")
        arg = self.strengthen(self.expr(node.args[0], None))
        axis = self._axis(node.args[1], arg.type.rank)
        if arg.type.shape[axis] != ONE:
            raise self.error(f"squeeze: axis {axis} has size {arg.type.shape[axis]}, not 1", node.args[1])
        shape = arg.type.shape[:axis] + arg.type.shape[axis + 1 :]
        return T.Reshape(T.TType(arg.type.dtype, shape), loc, arg)

    def fn_unsqueeze(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 2, 2, "unsqueeze")
        arg = self.strengthen(self.expr(node.args[0], None))
        axis = self._axis(node.args[1], arg.type.rank + 1)
        shape = arg.type.shape[:axis] + (ONE,) + arg.type.shape[axis:]
        return T.Reshape(T.TType(arg.type.dtype, shape), loc, arg)

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
        zero = self.retype(T.Lit(T.TType(I64, ()), loc, 0, True), arg.type.dtype, node)
        if arg.type.dtype == BOOL:
            zero = T.Lit(T.TType(BOOL, ()), loc, False, False)
        return T.Apply(arg.type, loc, "where", (keep, arg, zero))

    def fn_tril(self, node: ast.Call, loc: Loc) -> T.Node:
        return self._triangle(node, loc, lower=True)

    def fn_triu(self, node: ast.Call, loc: Loc) -> T.Node:
        return self._triangle(node, loc, lower=False)

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
        return T.Take(T.TType(arg.type.dtype, shape), loc, arg, indices, axis)

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

    def fn_zeros(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 1, 2, "zeros")
        kws = self.keywords(node, ("dtype",))
        dtype_node = node.args[1] if len(node.args) > 1 else kws.get("dtype")
        return self._filled(node, loc, T.Lit(T.TType(I64, ()), loc, 0, True), node.args[0], dtype_node)

    def fn_ones(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 1, 2, "ones")
        kws = self.keywords(node, ("dtype",))
        dtype_node = node.args[1] if len(node.args) > 1 else kws.get("dtype")
        return self._filled(node, loc, T.Lit(T.TType(I64, ()), loc, 1, True), node.args[0], dtype_node)

    def fn_full(self, node: ast.Call, loc: Loc) -> T.Node:
        self.positional(node, 2, 3, "full")
        kws = self.keywords(node, ("dtype",))
        dtype_node = node.args[2] if len(node.args) > 2 else kws.get("dtype")
        value = self.expr(node.args[1], None)
        return self._filled(node, loc, value, node.args[0], dtype_node)

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


def _cancel(dims: tuple[Expr, ...], divisors: list[Expr]) -> Expr | None:
    """product(dims) / product(divisors) when every divisor is one of the dims (as in
    reshape(x, [C - 1, -1]) of a [C - 1, A, B] tensor), else None."""
    remaining = list(dims)
    for d in divisors:
        if d == ONE:
            continue
        if d not in remaining:
            return None
        remaining.remove(d)
    return product(remaining)


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
