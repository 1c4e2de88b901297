"""Name resolution, dtype and shape inference, and index-bounds proofs of one composite body.

`check_entry` types a composite as an entry (its symbols free or fixed by `-D`); composite calls
inside it are instantiated recursively by `instantiate`, with the callee's symbols and dtype
variables inferred from the arguments. The result is a `typed.Program`.
"""

from __future__ import annotations

import ast
import math

from catenc.diagnostics import CatencError, Loc, closest
from catenc.dtypes import BOOL, DTYPES, F32, I64, DType
from catenc.frontend import typed as T
from catenc.frontend.body import BodyText
from catenc.frontend.calls import Calls
from catenc.frontend.composites import MAX_CONSTANT, Composite, TensorDecl
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
from catenc.registry import (
    BINARY_FLOAT,
    ELEMENTWISE,
    FLOAT_PREDICATES,
    REDUCTIONS,
    UNARY_FLOAT,
)
from catenc.symbolic import (
    Expr,
    Facts,
    const,
    sym,
)

# what the driver, the planner and the test harness use
__all__ = ["EntryContext", "RuntimeCheck", "check_entry", "decide"]

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


class BodyChecker(Calls, ShapeFunctions, IndexForm, Operators):
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
