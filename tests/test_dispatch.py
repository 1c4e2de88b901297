"""The one dispatch idiom (catenc/dispatch.py), the statements' child protocol, and the
renderer's per-kernel state: lookups follow the class hierarchy, a renderer subclass's
override takes effect, every statement walk sees the GPU lowering's nested statements, and a
renderer keeps nothing of a kernel but its record."""

from __future__ import annotations

import pytest
from conftest import runtime

from catenc.codegen.c import BufferArg, CRenderer, KernelState, buffer_args
from catenc.codegen.gpu import CudaRenderer, OpenCLRenderer
from catenc.dispatch import Table
from catenc.driver import plan_file
from catenc.dtypes import BOOL, DTYPES, F32, I64
from catenc.ir.nodes import (
    Binary,
    Buffer,
    Cast,
    Compute,
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
from catenc.ir.passes import fold_value
from catenc.ir.verify import as_expr, verify_graph
from catenc.lower.gpu import Barrier, BlockReduce, FirstItem, GridMapping, ThreadLoop, _share_row
from catenc.lower.loops import Assign, Declare, For, If, Store, iter_stmts, stmt_values
from catenc.plan import Options
from catenc.symbolic import ZERO, sym

F16 = DTYPES["f16"]


class Base:
    pass


class Child(Base):
    pass


class Grandchild(Child):
    pass


def test_a_class_without_an_entry_takes_its_nearest_bases() -> None:
    table: Table = Table("test walk")
    table.register(Base)(lambda x: "base")
    table.register(Child)(lambda x: "child")
    assert table[Base](None) == "base"
    assert table[Child](None) == "child"
    assert table[Grandchild](None) == "child"


def test_a_missing_entry_names_the_walk_and_the_class() -> None:
    table: Table = Table("test walk")
    table.register(Child)(lambda x: "child")
    with pytest.raises(TypeError, match="test walk: no entry for Base"):
        table[Base]
    with pytest.raises(TypeError, match="test walk: no entry for 'cube'"):
        table["cube"]


def test_a_table_with_a_base_keeps_the_base_unchanged() -> None:
    base: Table = Table("base walk")
    base.register(Base)(lambda x: "base")
    more: Table = Table("more walk", base=base)
    more.register(Child)(lambda x: "more")
    assert more[Grandchild](None) == "more"
    assert base[Grandchild](None) == "base"


def test_the_gather_prints_its_position_and_the_load_does_not() -> None:
    gather = Gather(F32, "x", (sym("i"), ZERO), 1, Local(I64, "p"))
    assert format_value(gather) == "x[i, p]"
    assert format_value(Load(F32, "x", (sym("i"), ZERO))) == "x[i, 0]"


class _Overriding(CRenderer):
    """A runtime's renderer that spells constants its own way."""

    def const(self, v: Const) -> str:
        return f"K({v.value})"


def test_a_renderer_subclass_override_takes_effect_through_the_table() -> None:
    renderer = _Overriding()
    renderer.start_kernel(None, {})
    assert renderer.value(Binary(F32, "add", Local(F32, "a"), Const(F32, 2.0))) == "(a + K(2.0))"
    plain = CRenderer()
    plain.start_kernel(None, {})
    assert plain.value(Const(F32, 2.0)) == "2.0f"


def test_every_gpu_renderer_renders_the_loop_statements_too() -> None:
    for cls in (CudaRenderer, OpenCLRenderer):
        assert cls.STATEMENTS[For] is cls.loop
        assert cls.STATEMENTS[ThreadLoop] is cls.thread_loop
    with pytest.raises(TypeError, match="CRenderer.statement: no entry for ThreadLoop"):
        CRenderer.STATEMENTS[ThreadLoop]


def test_statements_have_the_child_protocol_of_values() -> None:
    store = Store("y", (sym("i"),), Local(F32, "a"))
    declare = Declare("a", F32, Const(F32, 1.0))
    loop = For("i", sym("n"), (declare, store))
    assert loop.children() == (declare, store)
    assert store.children() == () and store.with_children(()) is store
    assert loop.with_children((store,)) == For("i", sym("n"), (store,))
    cond = SymInt(I64, sym("i"))
    assert If(cond, (store,)).with_children(()) == If(cond, ())


def test_iter_stmts_walks_into_the_gpu_lowerings_statements() -> None:
    store = Store("y", (sym("i"),), Const(F32, 0.0))
    assign = Assign("acc", Local(F32, "x"))
    body = (ThreadLoop("i", sym("n"), (assign,)), Barrier(), FirstItem((store,)))
    assert list(iter_stmts(body)) == [body[0], assign, body[1], body[2], store]
    assert [stmt_values(s) for s in iter_stmts(body)] == [[], [Local(F32, "x")], [], [], [Const(F32, 0.0)]]


SOURCE = """
[composite.rows]
inputs = ["x: f32[M, N]"]
outputs = ["y: f32[M, N]"]
body = "y = exp(x - max(x, axis=-1, keepdims=True))"
"""


def test_a_renderer_keeps_only_its_kernel_record(tmp_path) -> None:
    path = tmp_path / "rows.toml"
    path.write_text(SOURCE)
    plan = plan_file(str(path), Options(runtime("clang")))
    (entry,) = plan.entries
    renderer = CRenderer()
    buffers = buffer_args(entry.schedule.graph.buffers)
    texts = [renderer.kernel(k, buffers) for k in entry.kernels]
    assert set(vars(renderer)) == {"state"}
    assert isinstance(renderer.state, KernelState) and renderer.state.kernel is entry.kernels[-1]
    assert [renderer.kernel(k, buffers) for k in entry.kernels] == texts  # nothing carried over
    assert all(isinstance(v, Value) for k in entry.kernels for s in iter_stmts(k.body) for v in stmt_values(s))


class _Shouting(CRenderer):
    """A runtime's renderer that marks the stores of straight-line code."""

    def straight_store(self, stmt: Store, pad: str) -> list[str]:
        return [f"{pad}STORE({stmt.buffer});"]


def test_straight_code_renders_each_statement_by_its_entry() -> None:
    """The lane loops' straight-line code: a const declaration, an assignment, a plain store;
    a subclass's override of one entry takes effect; a loop has no entry."""
    body = (
        Declare("a", F32, Const(F32, 1.0)),
        Assign("acc", Binary(F32, "add", Local(F32, "acc"), Local(F32, "a"))),
        Store("y", (sym("i"),), Local(F32, "acc")),
    )
    buffers = {"y": BufferArg("y", F32, (sym("n"),), False)}
    renderer = CRenderer()
    renderer.start_kernel(None, buffers)
    assert renderer.straight(body, "  ") == ["  const float a = 1.0f;", "  acc = (acc + a);", "  y[i] = acc;"]
    shouting = _Shouting()
    shouting.start_kernel(None, buffers)
    assert shouting.straight(body, "")[-1] == "STORE(y);"
    with pytest.raises(TypeError, match="CRenderer.straight: no entry for For"):
        renderer.straight((For("i", sym("n"), body),), "")


def test_a_shared_row_maps_each_statement_by_its_kind() -> None:
    """A reducing loop becomes a thread loop and a group reduction, a loop that stores waits at a
    barrier, a store is the first item's (then a barrier), an `if` shares its body, a declaration
    stays as it is."""
    acc = Local(F32, "acc")
    declare = Declare("acc", F32, Const(F32, 0.0))
    reduce = For("j", sym("n"), (Assign("acc", Binary(F32, "add", acc, Load(F32, "x", (sym("j"),)))),))
    write = For("j", sym("n"), (Store("t", (sym("j"),), acc),))
    store = Store("y", (), acc)
    cond = SymInt(I64, sym("n"))
    shared = _share_row((declare, reduce, write, If(cond, (store,)), store))
    assert shared == (
        declare,
        ThreadLoop("j", sym("n"), reduce.body),
        BlockReduce("acc", "add", F32),
        ThreadLoop("j", sym("n"), write.body),
        Barrier(),
        If(cond, (FirstItem((store,)), Barrier())),
        FirstItem((store,)),
        Barrier(),
    )


def test_folding_takes_each_node_by_its_kind() -> None:
    two, x = Const(I64, 2), Local(I64, "x")
    assert fold_value(Unary(I64, "neg", two)) == Const(I64, -2)
    assert fold_value(Binary(I64, "add", two, Const(I64, 3))) == Const(I64, 5)
    assert fold_value(Where(I64, Const(BOOL, True), x, two)) == x
    assert fold_value(Cast(I64, Unary(I64, "neg", two))) == Const(I64, -2)  # an integer cast of an integer
    assert fold_value(Cast(DTYPES["u8"], Const(I64, 300))) == Const(DTYPES["u8"], 44)  # wraps, as a C cast does
    assert fold_value(Cast(F32, Unary(I64, "neg", two))) == Cast(F32, Const(I64, -2))  # a float cast stays
    assert fold_value(x) is x


def test_index_values_are_read_as_expressions_by_kind() -> None:
    assert as_expr(Binary(I64, "mul", SymInt(I64, sym("i")), Const(I64, 4))) == sym("i") * 4
    assert as_expr(Const(I64, True)) is None and as_expr(Const(F32, 1.5)) is None
    assert as_expr(Load(I64, "x", ())) is None


def test_the_graph_checks_each_node_by_its_kind() -> None:
    """A load, a local, a reduction and the dtype rules of the other nodes, each reported; a
    cast (no dtype rule) is only checked for computing in a half dtype."""
    n, i = sym("n"), sym("i")
    x = Load(F32, "x", (i,))
    bodies = {
        "a": Load(F32, "nowhere", (i,)),
        "b": Binary(F32, "add", x, Local(F32, "l")),
        "c": Binary(F32, "add", x, Reduce(I64, "sum", (("j", n),), Load(F32, "x", (sym("j"),)))),
        "d": Binary(F32, "add", x, Cast(F16, x)),
        "e": Where(F32, Const(F32, 1.0), x, x),
        "f": Unary(I64, "exp", x),
    }
    buffers = (Buffer("x", F32, (n,), Role.INPUT),) + tuple(Buffer(k, F32, (n,), Role.OUTPUT) for k in bodies)
    graph = Graph("g", buffers, tuple(Compute(k, (("i", n),), v) for k, v in bodies.items()))
    assert verify_graph(graph) == [
        "compute a: nowhere[i]: reads unknown buffer nowhere",
        "compute b: local l in a graph (locals appear only in loop nests)",
        "compute c: add(x[i], sum[j < n](x[j])): operands of add differ in dtype (f32, i64)",
        "compute c: sum[j < n](x[j]): sum of f32 has dtype i64",
        "compute d: add(x[i], cast(x[i], f16)): operands of add differ in dtype (f32, f16)",
        "compute d: cast(x[i], f16): computes in f16 (halves compute in f32)",
        "compute e: where(1.0:f32, x[i], x[i]): condition has dtype f32, not bool",
        "compute f: body has dtype i64, buffer f (f32) computes in f32",
        "compute f: exp(x[i]): exp of f32 has dtype i64",
    ]


@pytest.mark.parametrize("name", ["clang", "cuda"])
def test_closed_sets_hold_their_members_through_the_pipeline(name) -> None:
    """Buffer roles (the gemm's packed panels included) and GPU mappings are enum members, not
    the strings that compare equal to them."""
    plan = plan_file("samples/gemm.toml", Options(runtime(name)))
    buffers = [b for entry in plan.entries for b in entry.schedule.graph.buffers]
    kernels = [k for entry in plan.entries for k in entry.gpu]
    assert any(b.name.startswith("catenc_pack") for b in buffers) == (name == "clang")
    assert bool(kernels) == (name == "cuda")
    assert all(type(b.role) is Role for b in buffers)
    assert all(type(k.mapping) is GridMapping for k in kernels)
