"""What lowering decides for the renderers (issue 15, item 4): a LaneReduce's loops
(catenc/lower/lanes.py) and a Gemm's call (catenc/lower/gemm.py) are plain data, which the C
and GPU renderers only spell."""

from __future__ import annotations

from conftest import runtime

from catenc.driver import plan_file
from catenc.ir.nodes import Binary, Const, Local
from catenc.lower.flat import flat_extent, unflatten
from catenc.lower.gemm import gemm_call
from catenc.lower.lanes import ITEM, LANE, WIDTH, expand_lanes, lane
from catenc.lower.loops import Assign, Declare, Gemm, LaneReduce, Store, iter_stmts
from catenc.plan import Options
from catenc.symbolic import sym

SOURCE = """
[composite.gemv]
inputs = ["x: f32[1, K]", "w: f32[N, K]"]
outputs = ["y: f32[1, N]"]
body = "y = x @ w.T"

[composite.softmax]
inputs = ["x: f32[N, D]"]
outputs = ["y: f32[N, D]"]
body = '''
e = exp(x - max(x, axis=-1, keepdims=True))
y = e / sum(e, axis=-1, keepdims=True)
'''

[composite.bmm_relu]
inputs = ["a: f32[B, H, M, K]", "b: f32[B, H, K, N]"]
outputs = ["y: f32[B, H, M, N]"]
body = "y = relu(a @ b)"
"""


def plans(tmp_path, opt: str = "2"):
    path = tmp_path / "m.toml"
    path.write_text(SOURCE)
    return {e.name: e for e in plan_file(str(path), Options(runtime(), opt=opt)).entries}


def statements(entry, kind):
    return [(k, s) for k in entry.kernels for s in iter_stmts(k.body) if isinstance(s, kind)]


def test_jammed_rows_expand_to_lane_loops(tmp_path):
    entry = plans(tmp_path)["gemv"]
    buffers = {b.name: b for b in entry.schedule.graph.buffers}
    (_, stmt), *_ = [(k, s) for k, s in statements(entry, LaneReduce) if s.more]
    loops = expand_lanes(stmt, buffers)
    count = len(stmt.reductions)
    assert loops.count == count and loops.lanes == stmt.lanes and loops.lanes & (loops.lanes - 1) == 0
    assert loops.start == Const(stmt.dtype, 0.0)  # a sum's lanes start at its identity
    assert [s.name for s in loops.body] == [lane(k, LANE) for k in range(count)]
    assert [s.name for s in loops.tail] == [acc for acc, _ in stmt.reductions]
    pair = Binary(stmt.dtype, "add", Local(stmt.dtype, lane(0, LANE)), Local(stmt.dtype, lane(0, f"{LANE} + {WIDTH}")))
    assert loops.combine[0] == Assign(lane(0, LANE), pair)
    assert [s.name for s in loops.finish] == [acc for acc, _ in stmt.reductions]
    # 4096 bytes (1024 floats) ahead: one hint per jammed row of w, one for x that all rows share
    assert [b for b, _ in loops.prefetches].count("w") == count
    assert len({(b, flat.to_c()) for b, flat in loops.prefetches}) == len(loops.prefetches) == count + 1
    assert all("catenc_base + 1024" in flat.to_c() for _, flat in loops.prefetches)


def test_a_stored_reduced_value_is_declared_stored_then_reduced(tmp_path):
    entry = plans(tmp_path)["softmax"]
    buffers = {b.name: b for b in entry.schedule.graph.buffers}
    stored = [s for _, s in statements(entry, LaneReduce) if s.store is not None]
    assert stored
    loops = expand_lanes(stored[0], buffers)
    declare, store, update = loops.body
    assert isinstance(declare, Declare) and declare.name == ITEM
    assert isinstance(store, Store) and (store.buffer, store.index) == stored[0].store
    assert store.value == Local(stored[0].dtype, ITEM) and update.value.b == Local(stored[0].dtype, ITEM)
    assert not loops.prefetches  # a single row: nothing to hint


def test_gemm_call_is_decided_in_lowering(tmp_path):
    entry = plans(tmp_path)["bmm_relu"]
    buffers = {b.name: b for b in entry.schedule.graph.buffers}
    ((kernel, stmt),) = statements(entry, Gemm)
    c = stmt.contraction
    for parallel in (False, True):
        call = gemm_call(stmt, kernel, buffers, parallel)
        fields = {f.name: f for f in call.fields}
        assert fields["y"].writable and not fields["a"].writable and stmt.pack not in fields
        assert all(fields[s].dtype is None for s in kernel.symbols)
        assert [(s.side, s.width) for s in call.sides] == [("a", "MR"), ("b", "NR")]
        assert call.epilogue is not None and call.epilogue.value == c.epilogue
        assert call.batch == unflatten(c.batch) and call.count == flat_extent(c.batch)
        assert call.batch_parallel == (parallel and len(c.batch) > 0)
        assert call.slot_align == 16
    # an index from a flattened position: position / divisor % modulus, the last fastest
    assert unflatten((("i", sym("B")), ("j", sym("H")))) == (("i", sym("H"), None), ("j", None, sym("H")))
