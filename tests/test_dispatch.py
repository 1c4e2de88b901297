"""The one dispatch idiom (catenc/dispatch.py), the statements' child protocol, and the
renderer's per-kernel state: lookups follow the class hierarchy, a renderer subclass's
override takes effect, every statement walk sees the GPU lowering's nested statements, and a
renderer keeps nothing of a kernel but its record."""

from __future__ import annotations

import pytest
from conftest import runtime

from catenc.codegen.c import CRenderer, KernelState, buffer_args
from catenc.codegen.gpu import CudaRenderer, OpenCLRenderer
from catenc.dispatch import Table
from catenc.driver import plan_file
from catenc.dtypes import F32, I64
from catenc.ir.nodes import Binary, Const, Gather, Load, Local, SymInt, Value, format_value
from catenc.lower.gpu import Barrier, FirstItem, ThreadLoop
from catenc.lower.loops import Assign, Declare, For, If, Store, iter_stmts, stmt_values
from catenc.plan import Options
from catenc.symbolic import ZERO, sym


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
