"""The graph IR's invariants, checked after every pass: a malformed graph is caught at the pass
that made it, not later in rendered C.

`verify_graph` returns the problems it finds (each names the compute or buffer at fault); an
empty list means the graph is well formed. It never raises.

Index bounds are proved with `catenc.symbolic` under what the graph itself guarantees: every
compute and reduction index ranges over its extent, and a `where` guard's comparison of index
expressions holds on its chosen side (and fails on the other; a != b where a >= b is known
gives a > b). A take's position is proved in range from its clamp (`max(min(p, size - 1), 0)`)
and the guard that its axis is not empty.
What the entry's `where` constraints guarantee is not in the graph: pass them as `facts`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from catenc.dispatch import Table
from catenc.dtypes import BOOL, F32, I64
from catenc.frontend.constraints import RuntimeCheck, constraint_facts, unequal_facts
from catenc.ir.build import compute_dtype
from catenc.ir.nodes import (
    BINARY_OPS,
    REDUCE_OPS,
    UNARY_OPS,
    Binary,
    Buffer,
    Const,
    Gather,
    Graph,
    Load,
    Local,
    Reduce,
    Role,
    SymInt,
    Unary,
    Value,
    Where,
    format_value,
)
from catenc.symbolic import ONE, ZERO, Call, Expr, Facts, const, maximum, minimum, prove_nonneg, replace_atom, sym

ROLES = tuple(Role)
WRITTEN_BY_CALLER = (Role.INPUT, Role.VIEW)  # a view is a slice of an input
COMPARISONS = frozenset({"lt", "le", "eq", "ne"})
LOGICAL = frozenset({"and", "or", "xor"})
TESTS = frozenset({"isnan", "isinf", "not"})  # unary ops whose result is a bool
HALF_ROUNDING = frozenset({"round_f16", "round_bf16"})  # a float -> f32 rounded to a half's precision
MAX_SHOWN = 60  # characters of a value shown in a problem


def check_facts(checks: Sequence[RuntimeCheck]) -> Facts:
    """What an entry's constraints guarantee (its runtime checks hold whenever a kernel runs)."""
    facts = Facts()
    for check in checks:
        facts = facts.with_nonneg(*constraint_facts(check.lhs, check.op, check.rhs))
    return facts


def verify_graph(graph: Graph, facts: Facts | None = None) -> list[str]:
    """Every problem of a graph: names, roles, dtypes, loads in bounds, writes before reads.
    `facts`: what holds besides the graph's own ranges (e.g. `check_facts` of the entry)."""
    facts = facts or Facts()
    problems = _verify_buffers(graph)
    buffers = {b.name: b for b in graph.buffers}
    written = {b.name for b in graph.buffers if b.role in WRITTEN_BY_CALLER}
    sizes = frozenset(_shape_symbols(buffers))  # once per graph: per compute it grows with computes x buffers
    computed: set[str] = set()
    for compute in graph.computes:
        where = f"compute {compute.name}"
        buf = buffers.get(compute.name)
        if compute.name in computed:
            problems.append(f"{where}: buffer {compute.name} is computed more than once")
        computed.add(compute.name)
        if buf is None:
            problems.append(f"{where}: writes no buffer of the graph")
        elif buf.role in WRITTEN_BY_CALLER:
            problems.append(f"{where}: writes {buf.role} buffer {buf.name}, which only the caller writes")
        else:
            if len(compute.shape) != len(buf.shape) or any(
                not _equal(a, b, facts) for a, b in zip(compute.shape, buf.shape)
            ):
                problems.append(
                    f"{where}: its index ranges [{', '.join(map(str, compute.shape))}] are not the shape "
                    f"[{', '.join(map(str, buf.shape))}] of buffer {buf.name}"
                )
            if compute.body.dtype != compute_dtype(buf.dtype):
                problems.append(
                    f"{where}: body has dtype {compute.body.dtype.name}, buffer {buf.name} ({buf.dtype.name}) "
                    f"computes in {compute_dtype(buf.dtype).name}"
                )
        names = [n for n, _ in compute.indices]
        if len(set(names)) != len(names):
            problems.append(f"{where}: index names repeat ({', '.join(names)})")
        scope = facts
        for name, extent in compute.indices:
            scope = scope.with_range(name, extent)
        problems += [f"{where}: {p}" for p in _verify_value(compute.body, buffers, written, scope, set(names), sizes)]
        written.add(compute.name)
    for buf in graph.buffers:
        if buf.role in (Role.OUTPUT, Role.STATUS) and buf.name not in computed:
            problems.append(f"{buf.role} {buf.name}: no compute writes it")
    return problems


def _equal(a: Expr, b: Expr, facts: Facts) -> bool:
    return a == b or (proved_nonneg(a - b, facts) and proved_nonneg(b - a, facts))


def _verify_buffers(graph: Graph) -> list[str]:
    problems = []
    seen: set[str] = set()
    for buf in graph.buffers:
        if buf.name in seen:
            problems.append(f"buffer {buf.name}: declared more than once")
        seen.add(buf.name)
        if buf.role not in ROLES:
            problems.append(f"buffer {buf.name}: unknown role '{buf.role}' (one of {', '.join(ROLES)})")
        if (buf.role == Role.VIEW) != (buf.view_of is not None):
            problems.append(f"buffer {buf.name}: role {buf.role} with view_of {buf.view_of}")
        if buf.view_of is not None:
            base = next((b for b in graph.buffers if b.name == buf.view_of[0]), None)
            if base is None or base.role != Role.INPUT:
                problems.append(f"buffer {buf.name}: a view of {buf.view_of[0]}, which is not an input")
    return problems


@dataclass(frozen=True)
class _Scope:
    facts: Facts
    bound: frozenset[str]  # index names in scope
    sizes: frozenset[str]  # the symbols of buffer shapes


def _verify_value(
    body: Value, buffers: dict[str, Buffer], written: set[str], facts: Facts, bound: set[str], sizes: frozenset[str]
) -> list[str]:
    """Problems of one compute's body (without recursion: bodies nest as deep as programs run)."""
    problems: list[str] = []
    checked: set[tuple[int, int]] = set()  # (id of node, id of scope): shared subtrees are checked once
    scopes = [_Scope(facts, frozenset(bound), sizes)]  # alive, so ids stay unique
    stack: list[tuple[Value, _Scope]] = [(body, scopes[0])]
    while stack:
        node, scope = stack.pop()
        key = (id(node), id(scope))
        if key in checked:
            continue
        checked.add(key)
        problems += _node_problems(node, buffers, written, scope)
        for child, child_scope in _children_in_scope(node, scope):
            if child_scope is not scope:
                scopes.append(child_scope)
            stack.append((child, child_scope))
    return problems


_CHILDREN: Table[Callable[[Value, _Scope], Iterator[tuple[Value, _Scope]]]] = Table("verify_graph children")


def _children_in_scope(node: Value, scope: _Scope) -> Iterator[tuple[Value, _Scope]]:
    return _CHILDREN[type(node)](node, scope)


@_CHILDREN.register(Value)
def _children(node: Value, scope: _Scope) -> Iterator[tuple[Value, _Scope]]:
    for child in node.children():
        yield child, scope


@_CHILDREN.register(Where)
def _guarded_children(node: Where, scope: _Scope) -> Iterator[tuple[Value, _Scope]]:
    """Each branch under what its side of the guard guarantees."""
    yes, no = guard_facts(node.cond, scope.facts)
    yield node.cond, scope
    yield node.a, replace(scope, facts=scope.facts.with_nonneg(*yes))
    yield node.b, replace(scope, facts=scope.facts.with_nonneg(*no))


@_CHILDREN.register(Reduce)
def _reduced_body(node: Reduce, scope: _Scope) -> Iterator[tuple[Value, _Scope]]:
    """The body with the reduction's indices bound over their extents."""
    facts = scope.facts
    for name, extent in node.indices:
        facts = facts.with_range(name, extent)
    yield node.body, replace(scope, facts=facts, bound=scope.bound | {n for n, _ in node.indices})


# The checks of one node: (node, buffers, written, scope) -> problems.
_PROBLEMS: Table[Callable[[Value, dict[str, Buffer], set[str], _Scope], list[str]]] = Table("verify_graph")


def _node_problems(node: Value, buffers: dict[str, Buffer], written: set[str], scope: _Scope) -> list[str]:
    return _PROBLEMS[type(node)](node, buffers, written, scope)


@_PROBLEMS.register(Value)
def _value_problems(node: Value, buffers: dict[str, Buffer], written: set[str], scope: _Scope) -> list[str]:
    """Whether a node's dtype follows from its operands' (a half dtype never computes)."""
    if node.dtype.is_half:
        return [f"{show(node)}: computes in {node.dtype.name} (halves compute in f32)"]
    return _DTYPE_PROBLEMS[type(node)](node)


@_PROBLEMS.register(Local)
def _local_problems(node: Local, buffers: dict[str, Buffer], written: set[str], scope: _Scope) -> list[str]:
    return [f"local {node.name} in a graph (locals appear only in loop nests)"]


@_PROBLEMS.register(Reduce)
def _reduce_problems(node: Reduce, buffers: dict[str, Buffer], written: set[str], scope: _Scope) -> list[str]:
    names = [n for n, _ in node.indices]
    out = [f"{show(node)}: unknown reduction {node.op}"] if node.op not in REDUCE_OPS else []
    if set(names) & scope.bound or len(set(names)) != len(names):
        out.append(f"{show(node)}: reduction index names repeat or shadow an enclosing index")
    want = I64 if node.op in ("argmax", "argmin") else node.body.dtype
    if node.dtype != want:
        out.append(f"{show(node)}: {node.op} of {node.body.dtype.name} has dtype {node.dtype.name}")
    return out


# The dtype rule of each kind of node (one that computes in a dtype other than a half's).
_DTYPE_PROBLEMS: Table[Callable[[Value], list[str]]] = Table("verify_graph dtypes")


@_DTYPE_PROBLEMS.register(Value)
def _no_dtype_rule(node: Value) -> list[str]:
    return []


@_DTYPE_PROBLEMS.register(Unary)
def _unary_dtype(node: Unary) -> list[str]:
    if node.op not in UNARY_OPS:
        return [f"{show(node)}: unknown unary op {node.op}"]
    want = BOOL if node.op in TESTS and node.op != "not" else node.x.dtype
    if node.op in HALF_ROUNDING:
        want = F32 if node.x.dtype.is_float else None
    if node.op == "not" and node.x.dtype.is_float:  # logical on bool, bitwise on integers
        want = None
    if node.dtype != want:
        return [f"{show(node)}: {node.op} of {node.x.dtype.name} has dtype {node.dtype.name}"]
    return []


@_DTYPE_PROBLEMS.register(Binary)
def _binary_dtype(node: Binary) -> list[str]:
    if node.op not in BINARY_OPS:
        return [f"{show(node)}: unknown binary op {node.op}"]
    if node.a.dtype != node.b.dtype:
        return [f"{show(node)}: operands of {node.op} differ in dtype ({node.a.dtype.name}, {node.b.dtype.name})"]
    want = BOOL if node.op in COMPARISONS else node.a.dtype
    if node.op in LOGICAL and node.a.dtype.is_float:
        return [f"{show(node)}: {node.op} of {node.a.dtype.name}"]
    if node.dtype != want:
        return [f"{show(node)}: {node.op} of {node.a.dtype.name} has dtype {node.dtype.name}"]
    return []


@_DTYPE_PROBLEMS.register(Where)
def _where_dtype(node: Where) -> list[str]:
    if node.cond.dtype != BOOL:
        return [f"{show(node)}: condition has dtype {node.cond.dtype.name}, not bool"]
    if not node.a.dtype == node.b.dtype == node.dtype:
        return [
            f"{show(node)}: branches ({node.a.dtype.name}, {node.b.dtype.name}) differ from its dtype {node.dtype.name}"
        ]
    return []


@_DTYPE_PROBLEMS.register(Const)
def _const_dtype(node: Const) -> list[str]:
    if isinstance(node.value, float) and not node.dtype.is_float:
        return [f"{show(node)}: a float constant of dtype {node.dtype.name}"]
    return []


@_DTYPE_PROBLEMS.register(SymInt)
def _symint_dtype(node: SymInt) -> list[str]:
    if node.dtype == BOOL:
        return [f"{show(node)}: an index expression of dtype bool"]
    return []


@_PROBLEMS.register(Load)
def _load_problems(node: Load, buffers: dict[str, Buffer], written: set[str], scope: _Scope) -> list[str]:
    buf = buffers.get(node.buffer)
    if buf is None:
        return [f"{show(node)}: reads unknown buffer {node.buffer}"]
    out = []
    if node.buffer not in written:
        out.append(f"{show(node)}: reads {node.buffer} before it is computed")
    if node.dtype != compute_dtype(buf.dtype):
        out.append(f"{show(node)}: loads {node.dtype.name} from {buf.dtype.name} buffer {buf.name}")
    if len(node.index) != len(buf.shape):
        return out + [f"{show(node)}: {len(node.index)} indices for {buf.name} of rank {len(buf.shape)}"]
    unbound = set().union(*(e.free_symbols() for e in node.index)) - scope.bound - scope.sizes
    if unbound:
        out.append(f"{show(node)}: index names {', '.join(sorted(unbound))} are not bound")
    if isinstance(node, Gather) and node.position.dtype != I64:
        out.append(f"{show(node)}: position has dtype {node.position.dtype.name}, not i64")
    return out + [f"{show(node)}: {p}" for p in bounds_problems(node.index, buf, scope.facts, node)]


def bounds_problems(index: tuple[Expr, ...], buf: Buffer, facts: Facts, load: Load | None = None) -> list[str]:
    """What cannot be proved of `buf[index]` being in bounds under facts (a gather's computed
    axis: from the range of its position)."""
    out = []
    for axis, (e, dim) in enumerate(zip(index, buf.shape)):
        if isinstance(load, Gather) and axis == load.axis:
            low, high = int_range(load.position)
        else:
            low, high = e, e
        if low is high and _plainly_inside(e, dim, facts):
            continue
        shown = e if low is e else "position"
        if not (low is not None and _proved_at_least_zero(low, facts)):
            out.append(f"cannot prove 0 <= {shown} on axis {axis}")
        if not (high is not None and _proved_below(high, dim, facts)):
            out.append(f"cannot prove {shown} < {dim} on axis {axis} of {buf.name}")
    return out


def _floor_of(e: Expr, facts: Facts) -> tuple[Expr, Expr, Expr] | None:
    """(a, c, r) when e is a // c + r for a constant c > 0 or a size c and r the rest of e (a
    reshape's row of an inlined index, shifted by a concatenation's offset or a window's tap; a
    division by a size 0 gives 0). Then e = (a + c*r) // c wherever c > 0."""
    for monomial, coefficient in e.terms:
        if coefficient != 1 or len(monomial) != 1 or monomial[0][1] != 1:
            continue
        atom = monomial[0][0]
        if not (isinstance(atom, Call) and atom.func == "floordiv"):
            continue
        divisor = atom.args[1]
        if divisor.is_const and divisor.value <= 0 or not proved_nonneg(divisor, facts):
            continue
        return atom.args[0], divisor, e - Expr.from_dict({monomial: 1})
    return None


@lru_cache(maxsize=1 << 16)
def _proved_at_least_zero(e: Expr, facts: Facts) -> bool:
    """0 <= e; for e = a // c + r it is enough that 0 <= a + c*r, with c >= 1 unless 0 <= r (a
    division by a size 0 gives 0, and then e = r). Remembered: the verifier asks it again of every
    access after every pass."""
    if proved_in_bounds(e, facts):
        return True
    floor = _floor_of(e, facts)
    if floor is None:
        return False
    a, c, rest = floor
    positive = proved_in_bounds(rest, facts) or proved_nonneg(c - 1, facts)
    return positive and _proved_at_least_zero(a + c * rest, facts)


def _rounded_down(e: Expr, facts: Facts) -> tuple[Expr, int] | None:
    """(a, c) when e is exactly c*(a // c) for a constant c > 1: a rounded down to a multiple of c
    (a strided slice's element inlined into a loop over twice its length)."""
    if len(e.terms) != 1:
        return None
    ((monomial, coefficient),) = e.terms
    if coefficient <= 1 or len(monomial) != 1 or monomial[0][1] != 1:
        return None
    floor = _floor_of(Expr.from_dict({monomial: 1}), facts)
    if floor is None or floor[1] != const(coefficient):
        return None
    return floor[0], coefficient


@lru_cache(maxsize=1 << 16)
def _proved_below(e: Expr, dim: Expr, facts: Facts) -> bool:
    """e < dim; for e = a // c + r (c > 0) it is enough that a < c*(dim - r) (which a >= 0 makes
    c > 0), and for e = c*(a // c) that a < c*ceil(dim / c) (the two are equivalent). Remembered
    like _proved_at_least_zero."""
    if proved_in_bounds(dim - e - 1, facts):
        return True
    floor = _floor_of(e, facts)
    if floor is not None:
        a, c, rest = floor
        return _proved_below(a, c * (dim - rest), facts)
    rounded = _rounded_down(e, facts)
    if rounded is not None:
        a, c = rounded
        return _proved_below(a, const(c) * ((dim + c - 1) // c), facts)
    return False


def _plainly_inside(index: Expr, dim: Expr, facts: Facts) -> bool:
    """The common cases, without a proof: an index that ranges over exactly the dim, or 0 on a
    dim of size 1."""
    if dim == ONE:
        return index == ZERO
    name = index.as_symbol()
    return name is not None and any(n == name and extent == dim for n, extent in facts.ranges)


@lru_cache(maxsize=1 << 16)
def proved_nonneg(e: Expr, facts: Facts) -> bool:
    """prove_nonneg, remembered: the verifier runs after every pass over mostly unchanged computes."""
    return prove_nonneg(e, facts)


MAX_SPLITS = 3  # max/min atoms of the facts split on, nested, before a bound is given up


@lru_cache(maxsize=1 << 16)
def proved_in_bounds(e: Expr, facts: Facts) -> bool:
    """e >= 0 for an index bound. The frontend proves a slice or concat in bounds from its lengths;
    here they are index extents and guards, facts holding max/min and //, where prove_nonneg
    splits no case (it splits only on e's own atoms): so try those splits too."""
    return proved_nonneg(e, facts) or _proved_by_splitting(e, facts, MAX_SPLITS)


def _proved_by_splitting(e: Expr, facts: Facts, splits: int) -> bool:
    """e >= 0 where a fact cancelling e's indices leaves a rest that prove_nonneg proves (splitting
    on the rest's atoms), or in both cases of a max/min of e or the facts, put in e and every fact."""
    if any(prove_nonneg(rest, facts) for rest in _index_free_rests(e, facts)):
        return True
    choice = next((a for f in (e, *facts.nonneg) for a in _choice_atoms(f)), None)
    if choice is None or splits == 0:
        return False
    p, q = choice.args
    cases = [(p, p - q), (q, q - p)] if choice.func == "max" else [(p, q - p), (q, p - q)]
    for value, assumption in cases:
        case = Facts(
            tuple(replace_atom(f, choice, value) for f in facts.nonneg) + (assumption,),
            tuple((name, replace_atom(extent, choice, value)) for name, extent in facts.ranges),
        )
        e_case = replace_atom(e, choice, value)
        if not (proved_nonneg(e_case, case) or _proved_by_splitting(e_case, case, splits - 1)):
            return False
    return True


def _index_free_rests(e: Expr, facts: Facts) -> list[Expr]:
    """e - k*f (k > 0) for each fact f (or index i < extent) with which that cancels every index of
    e: e >= 0 when it is."""
    indices = e.free_symbols() & {name for name, _ in facts.ranges}
    out = []
    for f in facts.nonneg + tuple(extent - 1 - sym(name) for name, extent in facts.ranges):
        k = _cancelling_scale(e, f, indices)
        if k is not None:
            out.append(e - f * k)
    return out


def _cancelling_scale(e: Expr, f: Expr, indices: set[str]) -> int | None:
    """The k > 0 with which e - k*f holds none of `indices`, when one exists (linear indices only)."""
    k = None
    for name in sorted(indices):
        a, b = e.coefficient(name), f.coefficient(name)
        if not (a.is_const and b.is_const and b.value) or a.value % b.value or a.value // b.value <= 0:
            return None
        if k not in (None, a.value // b.value):
            return None
        k = a.value // b.value
    if k is None or (e - f * k).free_symbols() & indices:
        return None
    return k


def _choice_atoms(e: Expr) -> Iterator[Call]:
    return (a for m, _ in e.terms for a, _ in m if isinstance(a, Call) and a.func in ("max", "min"))


def _shape_symbols(buffers: dict[str, Buffer]) -> set[str]:
    return {name for b in buffers.values() for dim in b.shape for name in dim.free_symbols()}


def as_expr(value: Value) -> Expr | None:
    """An integer value as an index expression, when it is one (constants, index expressions
    and their sums and products)."""
    return _AS_EXPR[type(value)](value)


def conjuncts(cond: Value) -> list[Value]:
    """The terms of an `and` tree, left to right."""
    if isinstance(cond, Binary) and cond.op == "and":
        return conjuncts(cond.a) + conjuncts(cond.b)
    return [cond]


_NONNEGATIVE = {  # a comparison as (x, y, c): it holds when y - x - c >= 0
    "le": lambda a, b: (a, b, 0),
    "lt": lambda a, b: (a, b, 1),
    "ge": lambda a, b: (b, a, 0),
    "gt": lambda a, b: (b, a, 1),
}


def as_nonnegative(term: Value) -> Expr | None:
    """A comparison of index expressions as the expression e it makes non-negative (the comparison
    holds exactly where e >= 0: `h + r >= 1` is `h + r - 1`), when it is one."""
    compare = _NONNEGATIVE.get(term.op) if isinstance(term, Binary) else None
    if compare is None:
        return None
    x, y = as_expr(term.a), as_expr(term.b)
    if x is None or y is None:
        return None
    x, y, c = compare(x, y)
    return y - x - c


_AS_EXPR: Table[Callable[[Value], Expr | None]] = Table("as_expr")


@_AS_EXPR.register(Value)
def _no_expr(value: Value) -> None:
    return None


@_AS_EXPR.register(Const)
def _const_expr(value: Const) -> Expr | None:
    if isinstance(value.value, int) and not isinstance(value.value, bool):
        return const(value.value)
    return None


@_AS_EXPR.register(SymInt)
def _symint_expr(value: SymInt) -> Expr | None:
    return None if value.dtype.is_float else value.expr


@_AS_EXPR.register(Binary)
def _binary_expr(value: Binary) -> Expr | None:
    if value.op not in _EXPR_OPS or value.dtype.is_float:
        return None
    a, b = as_expr(value.a), as_expr(value.b)
    if a is None or b is None:
        return None
    return _EXPR_OPS[value.op](a, b)


_EXPR_OPS = {  # integer ops of values that are ops of index expressions (both divide by flooring)
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b,
    "mod": lambda a, b: a % b,
}


def int_range(value: Value) -> tuple[Expr | None, Expr | None]:
    """Bounds (low, high) of an integer value, None where unknown: what a clamp guarantees."""
    exact = as_expr(value)
    if exact is not None:
        return exact, exact
    if isinstance(value, Binary) and value.op in ("max", "min"):
        (la, ha), (lb, hb) = int_range(value.a), int_range(value.b)
        if value.op == "max":
            low = maximum(la, lb) if la is not None and lb is not None else la if la is not None else lb
            return low, maximum(ha, hb) if ha is not None and hb is not None else None
        high = minimum(ha, hb) if ha is not None and hb is not None else ha if ha is not None else hb
        return minimum(la, lb) if la is not None and lb is not None else None, high
    return None, None


def guard_facts(cond: Value, facts: Facts) -> tuple[list[Expr], list[Expr]]:
    """Facts (e >= 0) that hold where cond is true, and where it is false: comparisons of index
    expressions, through and, or and not. `facts`: what holds where cond is tested (a != b is
    a fact only where one side is known to be at least the other)."""
    if isinstance(cond, Binary) and cond.op in COMPARISONS:
        a, b = as_expr(cond.a), as_expr(cond.b)
        if a is None or b is None:
            return [], []
        if cond.op in ("eq", "ne"):
            equal, unequal = constraint_facts(a, "==", b), unequal_facts(a, b, facts)
            return (equal, unequal) if cond.op == "eq" else (unequal, equal)
        if cond.op == "lt":
            return constraint_facts(a, "<", b), constraint_facts(a, ">=", b)
        return constraint_facts(a, "<=", b), constraint_facts(a, ">", b)
    if isinstance(cond, Binary) and cond.op in ("and", "or"):
        (t1, f1), (t2, f2) = guard_facts(cond.a, facts), guard_facts(cond.b, facts)
        return (t1 + t2, []) if cond.op == "and" else ([], f1 + f2)
    if isinstance(cond, Unary) and cond.op == "not":
        yes, no = guard_facts(cond.x, facts)
        return no, yes
    return [], []


def show(value: Value) -> str:
    """A value as a problem shows it: its text, cut short."""
    text = format_value(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."
