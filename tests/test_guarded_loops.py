"""Loops split where padding guards change (catenc/lower/guards.py): depthwise convolutions and
pools of the mobile networks read without guards in their interior, with the reference's values
and the unsplit loops' bits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from catenc.build import BuildRequest, build
from catenc.driver import plan_file
from catenc.ir.nodes import Binary, walk
from catenc.loader import load
from catenc.lower.guards import PEEL
from catenc.lower.loops import For, If, LoopKernel, PaddedPlane, iter_stmts, stmt_values
from catenc.plan import Options
from tests.conftest import runtime
from tests.test_onnx_import import make_model, save, tensor

F = TensorProto.FLOAT
RNG = np.random.default_rng(26)
C, H = 6, 16


def _weights(name: str, *shape: int):
    values = np.random.default_rng(sum(map(ord, name))).standard_normal(shape)
    return numpy_helper.from_array(values.astype(np.float32), name)


def mobile_model():
    """MobileNetV2's depthwise 3x3 with ReLU6, EfficientNet's stride-2 5x5 with SiLU, ShuffleNet's
    stride-2 average pool and ResNet's max pool."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w3", "b"], ["dw3"], group=C, pads=[1, 1, 1, 1]),
        n("Clip", ["dw3", "lo", "hi"], ["relu6"]),
        n("Conv", ["x", "w5", "b"], ["dw5"], group=C, pads=[2, 2, 2, 2], strides=[2, 2]),
        n("Sigmoid", ["dw5"], ["sig"]),
        n("Mul", ["dw5", "sig"], ["silu"]),
        n("AveragePool", ["x"], ["avg"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
        n("MaxPool", ["x"], ["max"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    ]
    lo, hi = (numpy_helper.from_array(np.array(v, np.float32), name) for name, v in (("lo", 0.0), ("hi", 6.0)))
    inits = [_weights("w3", C, 1, 3, 3), _weights("w5", C, 1, 5, 5), _weights("b", C), lo, hi]
    outs = [tensor(o, F, None) for o in ("relu6", "silu", "avg", "max")]
    return make_model(nodes, [tensor("x", F, [1, C, H, H])], outs, inits)


def built_mobile(tmp_path: Path, disabled: tuple[str, ...] = ()):
    path = save(mobile_model(), tmp_path, "mobile")
    options = Options(runtime("clang"), opt="2", disabled_passes=disabled)
    plan = plan_file(str(path), options)
    out = tmp_path / ("out" + "".join(f"_{d}" for d in disabled))
    written = build(plan, options, BuildRequest(str(path), str(out), ("c", "h", "manifest", "so")))
    return plan, next(iter(load(written["manifest"]).entries.values()))


def _vector_loops(kernel: LoopKernel) -> list[For]:
    """The innermost loops of more than PEEL iterations: the ones a C compiler vectorises."""
    loops = [s for s in iter_stmts(kernel.body) if isinstance(s, For)]
    inner = [loop for loop in loops if not any(isinstance(s, For) for s in iter_stmts(loop.body))]
    return [loop for loop in inner if not (loop.extent.is_const and loop.extent.value <= PEEL)]


def _guards(loop: For) -> int:
    """Comparisons the loop evaluates."""
    values = [v for s in iter_stmts(loop.body) for v in stmt_values(s)]
    return sum(isinstance(n, Binary) and n.op in ("le", "lt") for v in values for n in walk(v))


def test_depthwise_and_pool_interiors_have_no_guards(tmp_path: Path):
    # without pad-windows, which reads these windows from padded copies instead (test_pad_windows.py)
    plan, entry = built_mobile(tmp_path, ("pad-windows",))
    _, unsplit = built_mobile(tmp_path, ("pad-windows", "split-guarded-loops"))
    windows = plan.entries[0].kernels  # relu6(conv3x3), silu(conv5x5/2), avg, max
    assert all(_vector_loops(k) for k in windows)  # the pools' taps unrolled: the loop over width is innermost
    assert [sum(map(_guards, _vector_loops(k))) for k in windows] == [0, 0, 0, 0]
    x = RNG.standard_normal((1, C, H, H)).astype(np.float32)
    got = entry(x)
    want = ReferenceEvaluator(mobile_model()).run(None, {"x": x})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    for g, u in zip(got, unsplit(x), strict=True):
        np.testing.assert_array_equal(g, u)  # the same operations in the same order


def concat_pool_model():
    """SqueezeNet's fire-module join: the two expands concatenated, then a 3x3/2 max pool, big
    enough to run on threads."""
    n = helper.make_node
    nodes = [n("Concat", ["a", "b"], ["ab"], axis=1), n("MaxPool", ["ab"], ["y"], kernel_shape=[3, 3], strides=[2, 2])]
    inputs = [tensor("a", F, [1, 64, 55, 55]), tensor("b", F, [1, 48, 55, 55])]
    return make_model(nodes, inputs, [tensor("y", F, None)], [])


@pytest.mark.parametrize("omp", ["1", "0"])
def test_a_pool_over_a_concatenation_runs_a_body_per_side(tmp_path: Path, omp: str):
    """On threads, the loop over channels keeps its iterations and each runs the version of its
    body for its side; serial, it splits into a loop per side. Either way no tap compares the
    channel, and each side's plane is copied to phases (lower/pad.py) as a pool over one tensor's is."""
    path = save(concat_pool_model(), tmp_path, "fire")
    options = Options(runtime("clang"), runtime("clang").validate_config({"OMP": omp}), opt="2")
    plan = plan_file(str(path), options)
    (kernel,) = plan.entries[0].kernels
    loops = [s for s in kernel.body if isinstance(s, For)]
    if omp == "1":
        assert [(loop.parallel, loop.extent.value) for loop in loops] == [(True, 112)]
        assert [type(s) for s in loops[0].body] == [If, If]
    else:
        assert [(loop.parallel, loop.extent.value) for loop in loops] == [(False, 64), (False, 48)]
    assert sum(isinstance(s, PaddedPlane) for s in iter_stmts(kernel.body)) == 2
    assert _vector_loops(kernel) and sum(map(_guards, _vector_loops(kernel))) == 0
    written = build(plan, options, BuildRequest(str(path), str(tmp_path / "out"), ("c", "h", "manifest", "so")))
    a, b = (RNG.standard_normal((1, c, 55, 55)).astype(np.float32) for c in (64, 48))
    got = next(iter(load(written["manifest"]).entries.values()))(a, b)
    (want,) = ReferenceEvaluator(concat_pool_model()).run(None, {"a": a, "b": b})
    np.testing.assert_array_equal(got, want)
