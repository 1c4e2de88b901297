"""The IR verifier: every plan of the samples and of the op library verifies clean at graph,
schedule and loop level, and each invariant, broken by hand in a real plan, yields a problem
that names the culprit."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from catenc.driver import plan_entry, plan_file, search_dirs
from catenc.dtypes import BOOL, DTYPES, F32, F64, I64
from catenc.frontend.composites import Library, load_composite_file
from catenc.ir.nodes import (
    Binary,
    Buffer,
    Cast,
    Compute,
    Const,
    Gather,
    Graph,
    Load,
    Reduce,
    SymInt,
    Value,
    Where,
    loads,
    walk,
)
from catenc.ir.passes import replace_node
from catenc.ir.verify import check_facts, verify_graph
from catenc.lower.loops import Declare, For, Store, iter_stmts
from catenc.lower.verify import verify_loops
from catenc.plan import EntryPlan, Options
from catenc.runtime.descriptor import load_runtime
from catenc.schedule.verify import verify_schedule
from catenc.symbolic import Expr, const, floordiv, maximum, minimum, mod, sym
from catenc.testing.coverage import library_ops, make_cases, op_alias

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(p.name for p in (ROOT / "samples").iterdir() if p.suffix in (".toml", ".yaml"))
FAMILIES = sorted({family for family, _, _ in library_ops((), primitives=False)})
CONFIGS = [("clang", "0"), ("clang", "2"), ("opencl", "0"), ("opencl", "2")]


def options(runtime_name: str, opt: str) -> Options:
    runtime = load_runtime(runtime_name)
    return Options(runtime, runtime.validate_config({}), opt=opt)


def problems_of(entry: EntryPlan) -> list[str]:
    """Every problem of an entry's graph, schedule and loop nests."""
    facts = check_facts(entry.checks)
    found = verify_graph(entry.graph, facts) + verify_schedule(entry.schedule, facts)
    found += verify_loops(entry.kernels, entry.schedule.graph.buffers, facts)
    return [f"{entry.name}: {p}" for p in found]


# ---- every real plan verifies clean -------------------------------------------------------------


@pytest.mark.parametrize("runtime_name, opt", CONFIGS)
@pytest.mark.parametrize("sample", SAMPLES)
def test_samples_verify_clean(sample, runtime_name, opt):
    plan = plan_file(str(ROOT / "samples" / sample), options(runtime_name, opt))
    assert [p for entry in plan.entries for p in problems_of(entry)] == []


@pytest.mark.parametrize("runtime_name, opt", [("clang", "2"), ("opencl", "2")])
def test_gpt2_verifies_clean(runtime_name, opt):
    plan = plan_file(str(ROOT / "samples" / "gpt2" / "gpt2.toml"), options(runtime_name, opt))
    assert len(plan.entries) > 1
    assert [p for entry in plan.entries for p in problems_of(entry)] == []


@pytest.mark.parametrize("runtime_name, opt", CONFIGS)
@pytest.mark.parametrize("family", FAMILIES)
def test_op_library_verifies_clean(tmp_path, family, runtime_name, opt):
    """Each op of the family through the wrappers test-runtime compiles: every dtype it declares
    at clang -O2, its first elsewhere (batched ops at batch rank 2: the most index arithmetic)."""
    ops = [op for op in library_ops((), primitives=False) if op[0] == family]
    cases = make_cases(ops, None, None)
    if (runtime_name, opt) != ("clang", "2"):
        cases = [case for n, case in enumerate(cases) if n == 0 or case.op is not cases[n - 1].op]
    path = tmp_path / "ops.toml"
    path.write_text("\n".join(case.text for case in cases))
    library = Library(load_composite_file(str(path), path.name), search_dirs(()))
    library.aliases.update({op_alias(case.op): case.op for case in cases})
    opts = options(runtime_name, opt)
    entries = [plan_entry(library.local[case.wrappers[-1]], library, opts) for case in cases]
    assert {case.op.name for case in cases} == {op.name for _, op, _ in ops}
    assert [p for entry in entries for p in problems_of(entry)] == []


# ---- each invariant, broken by hand -------------------------------------------------------------

SOURCE = """
[composite.chain]
inputs = ["x: f32[N, N]"]
outputs = ["y: f32[N, N]"]
body = '''
a = exp(x)
b = exp(a @ a)
c = exp(b @ b)
d = exp(c @ c)
y = d @ d
'''

[composite.softmax]
inputs = ["x: f32[N, D]"]
outputs = ["y: f32[N, D]"]
body = '''
e = exp(x - max(x, axis=-1, keepdims=True))
y = e / sum(e, axis=-1, keepdims=True)
'''

[composite.shifted]
inputs = ["x: f32[N]", "ids: i32[M]"]
outputs = ["y: f32[N]", "z: f32[M]"]
body = '''
p = pad(x, [[1, 1]], value=0.0)
y[i] = p[i + 1] + p[i + 2]
z = take(x, ids, 0)
'''
"""


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> dict[str, EntryPlan]:
    """Each entry of SOURCE at -O0 (one compute per kernel) and -O2 (fused, gemm kernels)."""
    path = tmp_path_factory.mktemp("verify") / "broken.toml"
    path.write_text(textwrap.dedent(SOURCE))
    out = {}
    for opt in ("0", "2"):
        for entry in plan_file(str(path), options("clang", opt)).entries:
            assert problems_of(entry) == []
            out[f"{entry.name}{opt}"] = entry
    return out


def with_compute(graph: Graph, name: str, **changes) -> Graph:
    computes = tuple(replace(c, **changes) if c.name == name else c for c in graph.computes)
    return replace(graph, computes=computes)


def with_buffer(graph: Graph, name: str, **changes) -> Graph:
    return replace(graph, buffers=tuple(replace(b, **changes) if b.name == name else b for b in graph.buffers))


def compute(graph: Graph, name: str) -> Compute:
    return next(c for c in graph.computes if c.name == name)


def first_load(value: Value, buffer: str) -> Load:
    return next(ld for ld in loads(value) if ld.buffer == buffer)


def assert_names(problems: list[str], *words: str) -> None:
    """Some problem holds every one of `words` (the culprit's name and what is wrong)."""
    assert any(all(w in p for w in words) for p in problems), problems


def test_dtype_of_body_and_buffer_differ(plans):
    graph = with_buffer(plans["softmax0"].graph, "y", dtype=F64)
    assert_names(verify_graph(graph), "compute y", "f32", "f64")


def test_binary_operands_differ_in_dtype(plans):
    graph = plans["softmax0"].graph
    y = compute(graph, "y")
    body = Binary(F32, "add", y.body, Cast(F64, Const(F32, 1.0)))
    assert_names(verify_graph(with_compute(graph, "y", body=body)), "compute y", "operands of add", "f32, f64")


def test_where_branches_differ_in_dtype(plans):
    graph = plans["softmax0"].graph
    y = compute(graph, "y")
    body = Where(F32, Const(BOOL, True), y.body, Const(I64, 0))
    assert_names(verify_graph(with_compute(graph, "y", body=body)), "compute y", "branches (f32, i64)")


def test_a_cast_to_a_half_dtype_is_flagged(plans):
    graph = plans["softmax0"].graph
    y = compute(graph, "y")
    body = Cast(F32, Cast(DTYPES["f16"], y.body))
    assert_names(verify_graph(with_compute(graph, "y", body=body)), "compute y", "computes in f16")


def test_comparison_must_give_bool(plans):
    graph = plans["softmax0"].graph
    y = compute(graph, "y")
    body = Where(F32, Binary(F32, "lt", y.body, y.body), y.body, y.body)
    assert_names(verify_graph(with_compute(graph, "y", body=body)), "compute y", "lt of f32 has dtype f32")


def test_index_past_the_bound(plans):
    graph = plans["softmax0"].graph
    y = compute(graph, "y")
    load = first_load(y.body, "e")
    shifted = replace(load, index=(load.index[0], load.index[1] + 1))
    problems = verify_graph(with_compute(graph, "y", body=replace_node(y.body, load, shifted)))
    assert_names(problems, "compute y", f"cannot prove {load.index[1] + 1} < D", "of e")


def test_negative_index(plans):
    graph = plans["softmax0"].graph
    y = compute(graph, "y")
    load = first_load(y.body, "e")
    shifted = replace(load, index=(load.index[0] - 1, load.index[1]))
    problems = verify_graph(with_compute(graph, "y", body=replace_node(y.body, load, shifted)))
    assert_names(problems, "compute y", f"cannot prove 0 <= {load.index[0] - 1}")


def test_a_guard_proves_a_padded_read_and_dropping_it_does_not(plans):
    graph = plans["shifted0"].graph
    p = compute(graph, "p")  # p[i] = where(0 <= i - 1 < N, x[i - 1], 0)
    assert isinstance(p.body, Where) and verify_graph(graph) == []
    unguarded = with_compute(graph, "p", body=p.body.a)
    assert_names(verify_graph(unguarded), "compute p", "cannot prove 0 <= i0 - 1")
    assert_names(verify_graph(unguarded), "compute p", "cannot prove i0 - 1 < N on axis 0 of x")


def test_a_gather_position_must_be_clamped(plans):
    graph = plans["shifted0"].graph
    z = compute(graph, "z")
    gather = next(v for v in walk(z.body) if isinstance(v, Gather))
    assert isinstance(gather.position, Binary) and gather.position.op == "max"
    unclamped = replace(gather, position=gather.position.a)  # min(position, N - 1), no lower bound
    problems = verify_graph(with_compute(graph, "z", body=replace_node(z.body, gather, unclamped)))
    assert_names(problems, "compute z", "cannot prove 0 <= position on axis 0")


def test_load_of_unknown_buffer_or_wrong_rank(plans):
    graph = plans["softmax0"].graph
    y = compute(graph, "y")
    load = first_load(y.body, "e")
    unknown = replace_node(y.body, load, replace(load, buffer="nowhere"))
    assert_names(verify_graph(with_compute(graph, "y", body=unknown)), "compute y", "unknown buffer nowhere")
    short = replace_node(y.body, load, replace(load, index=load.index[:1]))
    assert_names(verify_graph(with_compute(graph, "y", body=short)), "compute y", "1 indices for e of rank 2")


def test_read_before_compute(plans):
    graph = plans["softmax0"].graph
    computes = list(graph.computes)
    computes.reverse()  # y first: it reads e (and the row sums) before they exist
    assert_names(verify_graph(replace(graph, computes=tuple(computes))), "compute y", "reads e before it is computed")


def test_output_written_twice_or_never(plans):
    graph = plans["softmax0"].graph
    y = compute(graph, "y")
    twice = replace(graph, computes=graph.computes + (y,))
    assert_names(verify_graph(twice), "compute y", "computed more than once")
    never = replace(graph, computes=tuple(c for c in graph.computes if c.name != "y"))
    assert_names(verify_graph(never), "output y", "no compute writes it")


def test_status_never_written(plans):
    graph = plans["shifted0"].graph
    (status,) = [b for b in graph.buffers if b.role == "status"]
    dropped = replace(graph, computes=tuple(c for c in graph.computes if c.name != status.name))
    assert_names(verify_graph(dropped), f"status {status.name}", "no compute writes it")


def test_compute_writes_an_input(plans):
    graph = plans["softmax0"].graph
    graph = replace(graph, computes=graph.computes + (replace(compute(graph, "y"), name="x"),))
    assert_names(verify_graph(graph), "compute x", "writes input buffer x")


def test_roles_and_names(plans):
    graph = plans["softmax0"].graph
    assert_names(verify_graph(with_buffer(graph, "e", role="scratch")), "buffer e", "unknown role 'scratch'")
    doubled = replace(graph, buffers=graph.buffers + (Buffer("e", F32, (), "temp"),))
    assert_names(verify_graph(doubled), "buffer e", "declared more than once")
    view = with_buffer(graph, "e", role="view", view_of=("y", 0))
    assert_names(verify_graph(view), "buffer e", "a view of y, which is not an input")


def test_compute_shape_must_be_its_buffer_shape(plans):
    graph = plans["softmax0"].graph
    shape = compute(graph, "e").shape
    graph = with_buffer(graph, "e", shape=(shape[0], shape[1] + 1))
    assert_names(verify_graph(graph), "compute e", "not the shape")


# ---- schedules ----------------------------------------------------------------------------------


def test_a_compute_dropped_from_the_schedule(plans):
    schedule = plans["softmax0"].schedule
    kernels = tuple(k for k in schedule.kernels if k.members[0].name != "e")
    assert_names(verify_schedule(replace(schedule, kernels=kernels)), "compute e", "in no kernel")


def test_kernels_out_of_graph_order_or_doubled(plans):
    schedule = plans["softmax0"].schedule
    kernels = schedule.kernels
    swapped = replace(schedule, kernels=(kernels[1], kernels[0]) + kernels[2:])
    assert_names(verify_schedule(swapped), "out of graph order")
    doubled = replace(schedule, kernels=kernels + (replace(kernels[0], name="again"),))
    assert_names(verify_schedule(doubled), "kernel again", f"compute {kernels[0].members[0].name} is also in")


def test_scalars_are_temps_of_their_kernel(plans):
    schedule = plans["softmax2"].schedule
    (kernel,) = schedule.kernels
    assert kernel.scalars
    bad = replace(kernel, scalars=kernel.scalars | {"y"})
    problems = verify_schedule(replace(schedule, kernels=(bad,)))
    assert_names(problems, f"kernel {kernel.name}", "scalar y is not a temp")
    stranger = replace(kernel, scalars=kernel.scalars | {"x"})
    assert_names(verify_schedule(replace(schedule, kernels=(stranger,))), "scalar x is not one of its members")


def test_overlapping_slots(plans):
    schedule = plans["chain2"].schedule
    assert len(schedule.slots) >= 2
    first, second = schedule.slots[:2]
    overlapped = (first, replace(second, offset=first.offset)) + schedule.slots[2:]
    assert_names(verify_schedule(replace(schedule, slots=overlapped)), "slot 1", "may overlap the previous slot")


def test_slot_smaller_than_its_buffer_or_misaligned(plans):
    schedule = plans["chain2"].schedule
    slot = schedule.slots[0]
    small = replace(slot, size=slot.size - 64)
    assert_names(verify_schedule(replace(schedule, slots=(small,) + schedule.slots[1:])), "slot 0", "may be less")
    askew = tuple(replace(s, offset=s.offset + 8) for s in schedule.slots)
    assert_names(verify_schedule(replace(schedule, slots=askew)), "slot 0", "not a multiple of 64")


def test_values_sharing_a_slot_while_both_live(plans):
    schedule = plans["chain2"].schedule
    by_buffers = {s.buffers: s for s in schedule.slots}
    assert ("a", "c") in by_buffers and ("b", "d") in by_buffers
    swapped = {("a", "c"): ("a", "b"), ("b", "d"): ("c", "d")}
    slots = tuple(replace(s, buffers=swapped.get(s.buffers, s.buffers)) for s in schedule.slots)
    assert_names(verify_schedule(replace(schedule, slots=slots)), "a (kernels", "b (kernels", "live at once")


def test_a_temp_without_a_slot(plans):
    schedule = plans["chain2"].schedule
    slots = tuple(s for s in schedule.slots if "c" not in s.buffers)
    assert_names(verify_schedule(replace(schedule, slots=slots)), "buffer c", "has no workspace slot")


def test_a_gemm_kernel_has_one_member(plans):
    schedule = plans["chain2"].schedule
    k = next(n for n, kernel in enumerate(schedule.kernels) if kernel.contraction is not None)
    gemm, following = schedule.kernels[k], schedule.kernels[k + 1]
    merged = replace(gemm, members=gemm.members + following.members)
    kernels = schedule.kernels[:k] + (merged,) + schedule.kernels[k + 2 :]
    assert_names(verify_schedule(replace(schedule, kernels=kernels)), f"kernel {gemm.name}", "2 members")


def test_schedule_reports_its_graph_problems(plans):
    schedule = plans["softmax2"].schedule
    graph = with_buffer(schedule.graph, "y", dtype=F64)
    assert_names(verify_schedule(replace(schedule, graph=graph)), "compute y", "f64")


# ---- loop nests ---------------------------------------------------------------------------------


def _rewrite(body: tuple, old, new) -> tuple:
    """The body with statement `old` (found by identity, at any depth) replaced by `new` (a
    tuple of statements: none drops it)."""
    out = []
    for stmt in body:
        if stmt is old:
            out.extend(new)
            continue
        inner = getattr(stmt, "body", None)
        out.append(replace(stmt, body=_rewrite(inner, old, new)) if isinstance(inner, tuple) else stmt)
    return tuple(out)


def _loops(entry: EntryPlan, kernel, body) -> list[str]:
    kernels = tuple(replace(k, body=body) if k is kernel else k for k in entry.kernels)
    return verify_loops(kernels, entry.schedule.graph.buffers)


def test_local_used_before_declared(plans):
    entry = plans["softmax2"]
    (kernel,) = entry.kernels
    declare = next(s for s in iter_stmts(kernel.body) if isinstance(s, Declare))
    problems = _loops(entry, kernel, _rewrite(kernel.body, declare, ()))
    assert_names(problems, f"kernel {kernel.name}", f"local {declare.name}", "before it is declared")


def test_local_read_with_another_dtype(plans):
    entry = plans["softmax2"]
    (kernel,) = entry.kernels
    declare = next(s for s in iter_stmts(kernel.body) if isinstance(s, Declare))
    retyped = replace(declare, dtype=F64, value=Cast(F64, declare.value))
    assert_names(_loops(entry, kernel, _rewrite(kernel.body, declare, (retyped,))), f"local {declare.name} is f64")


def test_loop_variable_unbound(plans):
    entry = plans["softmax0"]
    kernel = entry.kernels[0]
    loop = next(s for s in iter_stmts(kernel.body) if isinstance(s, For))
    renamed = replace(loop, index="elsewhere")
    problems = _loops(entry, kernel, _rewrite(kernel.body, loop, (renamed,)))
    assert_names(problems, f"kernel {kernel.name}", loop.index, "bound by no loop or parameter")


def test_store_to_an_input(plans):
    entry = plans["softmax0"]
    kernel = entry.kernels[-1]
    store = next(s for s in iter_stmts(kernel.body) if isinstance(s, Store))
    problems = _loops(entry, kernel, _rewrite(kernel.body, store, (replace(store, buffer="x"),)))
    assert_names(problems, f"kernel {kernel.name}", "stores to input buffer x")


def test_store_or_load_past_the_bound_in_a_loop_nest(plans):
    entry = plans["softmax0"]
    kernel = entry.kernels[-1]
    store = next(s for s in iter_stmts(kernel.body) if isinstance(s, Store))
    shifted = replace(store, index=(store.index[0], store.index[1] + 1))
    problems = _loops(entry, kernel, _rewrite(kernel.body, store, (shifted,)))
    assert_names(problems, f"kernel {kernel.name}", "store to y", f"cannot prove {store.index[1] + 1} < D")
    load = first_load(store.value, "e")
    reread = replace(
        store, value=replace_node(store.value, load, replace(load, index=(load.index[0] - 1, load.index[1])))
    )
    problems = _loops(entry, kernel, _rewrite(kernel.body, store, (reread,)))
    assert_names(problems, f"kernel {kernel.name}", f"cannot prove 0 <= {load.index[0] - 1}")


def test_buffer_missing_from_the_kernel_list(plans):
    entry = plans["softmax0"]
    kernel = entry.kernels[-1]
    store = next(s for s in iter_stmts(kernel.body) if isinstance(s, Store))
    read = next(loads(store.value)).buffer
    dropped = replace(kernel, buffers=tuple(b for b in kernel.buffers if b != read))
    kernels = tuple(dropped if k is kernel else k for k in entry.kernels)
    assert_names(verify_loops(kernels, entry.schedule.graph.buffers), f"kernel {kernel.name}", f"uses buffer {read}")


def test_a_reduction_left_in_a_loop_nest(plans):
    entry = plans["softmax0"]
    graph_reduce = next(v for c in entry.graph.computes for v in walk(c.body) if isinstance(v, Reduce))
    kernel = entry.kernels[-1]
    store = next(s for s in iter_stmts(kernel.body) if isinstance(s, Store))
    bad = replace(store, value=Binary(F32, "add", store.value, Cast(F32, graph_reduce)))
    assert_names(_loops(entry, kernel, _rewrite(kernel.body, store, (bad,))), "a reduction left in a loop nest")


# ---- valid graphs whose bounds take case splits verify clean, and an off-by-one of each does not ----

N = sym("N")
I0 = sym("i0")


def one_compute(extent: Expr, body: Value) -> Graph:
    """y[i0] = body for i0 < extent, over an input x: f32[N]."""
    buffers = (Buffer("x", F32, (N,), "input"), Buffer("y", F32, (extent,), "output"))
    return Graph("g", buffers, (Compute("y", (("i0", extent),), body),))


def x_at(index: Expr) -> Load:
    return Load(F32, "x", (index,))


def test_a_concat_of_two_slices_verifies():
    """concat([x[1:], x[:1]]): i0 < max(0, N - 1) + min(1, N), that is N, takes both splits at once."""
    head = maximum(0, N - 1)

    def roll(shift: int, extra: int = 1) -> Graph:
        cond = Binary(BOOL, "lt", SymInt(I64, I0), SymInt(I64, head))
        picked = Where(F32, cond, x_at(I0 + shift), x_at(I0 - head))
        return one_compute(head + minimum(extra, N), Binary(F32, "mul", picked, x_at(I0)))

    assert verify_graph(roll(1)) == []
    assert_names(verify_graph(roll(2)), "compute y", "cannot prove i0 + 2 < N")
    assert_names(verify_graph(roll(1, extra=2)), "compute y", "cannot prove i0 < N on axis 0 of x")


def test_a_slice_to_a_floor_division_verifies():
    """x[:(N + 1) // 2]: i0 < (N + 1) // 2 gives i0 < N for every N >= 0, and (N + 2) // 2 does not."""
    assert verify_graph(one_compute((N + 1) // 2, x_at(I0))) == []
    assert_names(verify_graph(one_compute((N + 2) // 2, x_at(I0))), "compute y", "cannot prove i0 < N")


@pytest.mark.parametrize("op", ["eq", "ne"])
def test_an_index_unequal_to_its_lower_bound_is_above_it(op):
    """Where i0 != 0 (i0 == 0 false, i0 != 0 true) and i0 >= 0, i0 >= 1; where i0 != 1, not."""

    def shifted(value: int) -> Graph:
        cond = Binary(BOOL, op, SymInt(I64, I0), Const(I64, value))
        zero = Const(F32, 0.0)
        body = Where(F32, cond, zero, x_at(I0 - 1)) if op == "eq" else Where(F32, cond, x_at(I0 - 1), zero)
        return one_compute(N, body)

    assert verify_graph(shifted(0)) == []
    assert_names(verify_graph(shifted(1)), "compute y", "cannot prove 0 <= i0 - 1")


def test_a_row_of_a_reshaped_matrix_verifies():
    """reshape(m, [-1])[i0] inlined: m[i0 // 3, i0 % 3] for i0 < 3*N is in bounds (a // 3 < N from
    a < 3*N); for i0 < 3*N + 1 it is not (the fuzzer's f0_4: a pad of such a reshape)."""

    def rows(extent: Expr) -> Graph:
        buffers = (Buffer("m", F32, (N, const(3)), "input"), Buffer("y", F32, (extent,), "output"))
        body = Load(F32, "m", (floordiv(I0, 3), mod(I0, 3)))
        return Graph("g", buffers, (Compute("y", (("i0", extent),), body),))

    assert verify_graph(rows(3 * N)) == []
    assert_names(verify_graph(rows(3 * N + 1)), "compute y", "cannot prove (i0 // 3) < N on axis 0 of m")


def test_a_shifted_row_of_a_reshaped_tensor_verifies():
    """ShuffleNet's concat of two branches, each reshaped per group: the second branch's element
    is x[(i0 // 4) - 3] where i0 >= 12, which is (i0 - 12) // 4: in bounds of x[3] for i0 < 24
    (the where's condition is a fact), not for i0 >= 11, and not under a division by a size K
    that may be 0 (then the read is at -3)."""

    def concat(split: int, divisor: Expr | int = 4) -> Graph:
        buffers = (
            Buffer("head", F32, (const(12),), "input"),
            Buffer("x", F32, (const(3), const(4)), "input"),
            Buffer("y", F32, (const(24),), "output"),
        )
        cond = Binary(BOOL, "lt", SymInt(I64, I0), Const(I64, split))
        tail = Load(F32, "x", (floordiv(I0, divisor) - 3, mod(I0, 4)))
        body = Where(F32, cond, Load(F32, "head", (minimum(I0, const(11)),)), tail)
        return Graph("g", buffers, (Compute("y", (("i0", const(24)),), body),))

    assert verify_graph(concat(12)) == []
    assert_names(verify_graph(concat(11)), "compute y", "cannot prove 0 <= (i0 // 4) - 3 on axis 0")
    assert_names(verify_graph(concat(12, sym("K"))), "compute y", "cannot prove 0 <= (i0 // K) - 3 on axis 0")
