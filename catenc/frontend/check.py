"""Type one composite body: the entry point, the statement and expression walker, and names.

`check_entry` types a composite as an entry (its symbols free or fixed by `-D`); the result is a
`typed.Program`. `BodyChecker` walks the body, resolves names, and hands each construct to the
module that owns it: operators.py (dtypes, broadcasting, elementwise operators), indexing.py
(slices, index form, bounds proofs), shapes.py (matmul, shape functions) and calls.py (function
calls, and composite calls instantiated with symbols and dtype variables inferred from the
arguments) and methods.py (`x.f(args)` as `f(x, args)`). The facts and constraints it checks
against live in constraints.py.
"""

from __future__ import annotations

import ast
import copy
import math
from dataclasses import fields, replace

from catenc.diagnostics import CatencError, Loc, closest
from catenc.dtypes import BOOL, DTYPES, F32, I64, DType
from catenc.frontend import typed as T
from catenc.frontend.body import BodyText
from catenc.frontend.calls import Calls
from catenc.frontend.composites import MAX_CONSTANT, Composite, TensorDecl
from catenc.frontend.constraints import Bindings, EntryContext, RuntimeCheck, coerce_param, decide, shape_params
from catenc.frontend.indexing import IndexForm, IndexScope
from catenc.frontend.methods import METHODS, Methods, at_method
from catenc.frontend.operators import Operators, is_weak, shape_text
from catenc.frontend.shapes import ShapeFunctions
from catenc.symbolic import Expr, Facts, const, sym

# what other modules import from here (RuntimeCheck's home is constraints.py)
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


class BodyChecker(Calls, Methods, ShapeFunctions, IndexForm, Operators):
    """Types one composite body; a composite call inside it gets a checker of its own."""

    def __init__(self, comp: Composite, bindings: Bindings, ctx: EntryContext, depth: int):
        self.comp = comp
        self.bindings = bindings
        self.ctx = ctx
        self.depth = depth
        self.text = BodyText.of(comp)
        self.values: dict[str, tuple[T.TType, Loc]] = {}  # by the user's name: its latest value
        self.outputs: dict[str, T.TType] = {}
        self.statements: list[T.Statement] = []
        # Reassignment (docs/language.md, section 4): the typed program names every value once.
        self.renamed: dict[str, str] = {}  # user's name -> its latest value's name where they differ
        self.last_assignment: dict[str, int] = {}  # user's name -> the statement that assigns it last
        self.taken: set[str] = set()  # every name of the composite, which no generated name may be
        self.statement_index = -1

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
        inputs = tuple((d.name, self.decl_type(d)) for d in comp.arguments)  # constants last
        for (name, ttype), decl in zip(inputs, comp.arguments):
            self.values[name] = (ttype, decl.loc)
        for decl in comp.outputs:
            self.outputs[decl.name] = self.decl_type(decl)
        statements = [_as_assign(s) if isinstance(s, ast.AugAssign) else s for s in self.text.parse()]
        self.plan_names(statements)
        for k, stmt in enumerate(statements):
            self.statement_index = k
            first = len(self.statements)
            self.statement(stmt)
            self.single_assignment(first)
        for decl in comp.outputs:
            if decl.name not in self.values:
                raise CatencError(f"output '{decl.name}' is never assigned in the body of '{comp.name}'", decl.loc)
        outputs = tuple((d.name, self.outputs[d.name]) for d in comp.outputs)
        params = tuple(sorted(self.bindings.params.items()))
        return T.Program(comp.name, inputs, outputs, tuple(self.statements), params)

    # -- names: reassignment as single assignment --
    def plan_names(self, statements: list[ast.stmt]) -> None:
        """Note the statement that assigns each name last, and every name the composite uses."""
        comp = self.comp
        self.taken = {d.name for d in comp.arguments + comp.outputs} | set(comp.params) | set(comp.types)
        self.taken |= set(self.bindings.symbols) | set(self.bindings.params)
        for k, stmt in enumerate(statements):
            self.taken |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
            targets = stmt.targets if isinstance(stmt, ast.Assign) else []
            for target in targets:
                elts = target.elts if isinstance(target, ast.Tuple) else [target]
                for elt in elts:
                    name = elt.value if isinstance(elt, ast.Subscript) else elt
                    if isinstance(name, ast.Name):
                        self.last_assignment[name.id] = k

    def is_final(self, name: str) -> bool:
        """Whether the statement being checked assigns name for the last time (an output's value)."""
        return self.last_assignment.get(name) == self.statement_index

    def single_assignment(self, first: int) -> None:
        """Name the values of the statements appended from `first` on: their references go to the
        values their names held before the statement, and each target gets a name of its own, the
        user's for the last assignment of a name that is not an input, else a fresh `name_k`."""
        if self.renamed:
            memo: dict[int, T.Node] = {}
            for k in range(first, len(self.statements)):
                stmt = self.statements[k]
                if isinstance(stmt, T.Assign):
                    self.statements[k] = replace(stmt, value=_rename(stmt.value, self.renamed, memo))
                else:
                    self.statements[k] = replace(stmt, body=_rename(stmt.body, self.renamed, memo))
        inputs = {d.name for d in self.comp.arguments}
        for k in range(first, len(self.statements)):
            name = self.statements[k].target
            if self.is_final(name) and name not in inputs:
                self.renamed.pop(name, None)
                continue
            n = 1
            while f"{name}_{n}" in self.taken:
                n += 1
            self.taken.add(f"{name}_{n}")
            self.renamed[name] = f"{name}_{n}"
            self.statements[k] = replace(self.statements[k], target=f"{name}_{n}")

    def define(self, name: str, ttype: T.TType, node: ast.AST) -> None:
        if name in self.bindings.symbols or name in self.bindings.params:
            raise self.error(f"'{name}' is a symbol or param and cannot be assigned", node)
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
        """Resolve weak literals and check an output's declared type (at its last assignment)."""
        declared = self.outputs.get(name) if self.is_final(name) else None
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
        for k, elt in enumerate(target.elts):
            if elt.id in names[:k]:
                raise self.error(f"'{elt.id}' is assigned twice in this statement", elt)
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
            if node.attr in METHODS:
                raise self.error(f"'.{node.attr}' is a method: call it, as in x.{node.attr}(...)", at_method(node))
            raise self.error(f"unknown attribute '.{node.attr}' (only '.T' and methods are supported)", at_method(node))
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

    def _check_index_name(self, name: str, node: ast.AST) -> None:
        if name in self.values or name in self.bindings.symbols or name in self.bindings.params or name in CONSTANTS:
            raise self.error(f"index '{name}' shadows a tensor, symbol or param of the same name", node)


def _as_assign(stmt: ast.AugAssign) -> ast.Assign:
    """`y += v` as `y = y + v`, and `y[i] += v` as `y[i] = y[i] + v` (any operator), as in Python."""
    read = copy.copy(stmt.target)
    read.ctx = ast.Load()
    value = ast.copy_location(ast.BinOp(read, stmt.op, stmt.value), stmt)
    return ast.copy_location(ast.Assign([stmt.target], value), stmt)


def _rename(node: T.Node, names: dict[str, str], memo: dict[int, T.Node]) -> T.Node:
    """node with its references (`Ref`, `Access`) to names renamed; what holds none is kept as it
    is, and a subtree shared by several parents (a call's outputs) is rebuilt once."""
    if id(node) in memo:
        return memo[id(node)]
    changes: dict[str, object] = {}
    for f in fields(node):
        value = getattr(node, f.name)
        if f.name == "name" and isinstance(node, (T.Ref, T.Access)):
            new = names.get(value, value)
        elif isinstance(value, T.Node):
            new = _rename(value, names, memo)
        elif isinstance(value, tuple) and any(isinstance(v, T.Node) for v in value):
            new = tuple(_rename(v, names, memo) if isinstance(v, T.Node) else v for v in value)
            new = value if all(a is b for a, b in zip(new, value)) else new
        else:
            continue
        if new is not value:
            changes[f.name] = new
    memo[id(node)] = replace(node, **changes) if changes else node
    return memo[id(node)]
