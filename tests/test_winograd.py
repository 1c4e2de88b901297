"""Winograd convolutions (catenc/schedule/winograd.py, codegen/winograd.py, templates/winograd.c.j2): a
3x3 stride-1 convolution's gemm computed as F(2x2, 3x3) at -O2 and F(4x4, 3x3) at -O3. The matrices
are checked in exact arithmetic; the convolutions against numpy in float64 at planes that are and
are not multiples of the tile, with and without padding (and with uneven padding), channel and
filter counts off the vector width, a batch, fused epilogues, filters given per call and baked in
the library (transformed at compile time), 1 to 3 threads (bit-identical: a thread's share never
changes a sum's order), and the AVX2 and SSE tiles. What is not a 3x3 stride-1 correlation keeps
the direct gemm, and the counted operations match what the statement executes."""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import pytest
from conftest import assert_close, compile_file, compile_text, randn
from onnx import TensorProto, helper, numpy_helper
from test_onnx_import import make_model, save, tensor
from test_packed_conv_and_threads import np_conv

from catenc.codegen.winograd import combination
from catenc.driver import plan_file
from catenc.lower.count import executed_ops
from catenc.lower.loops import WinogradGemm, iter_stmts
from catenc.plan import Options, WeightsMode
from catenc.schedule.kernels import kernel_cost
from catenc.schedule.winograd import ROUNDING, TRANSFORMS, combination_ops
from catenc.testing.check import entry_env, entry_sizes
from tests.conftest import runtime

CONV = """
[composite.conv]
inputs = ["x: f32[N, C, H, W]", "w: f32[K, C, 3, 3]", "b: f32[K]"]
outputs = ["y: f32[N, K, H, W]"]
body = "y = relu(conv2d(x, w, padding=1) + b[:, None, None])"
"""

# A natural spelling: index form, padding (top 1, left 0) by explicit guards, the output one row taller
UNEVEN = """
[composite.uneven]
inputs = ["x: f32[C, H, W]", "w: f32[K, C, 3, 3]"]
outputs = ["y: f32[K, H, W - 2]"]
body = '''
y[k, h, v] = sum[c, r, s](where((h + r >= 1) & (h + r <= H), x[c, h + r - 1, v + s], 0.0) * w[k, c, r, s])
'''
"""


def _exact(t) -> None:
    """Y = A^T [(G g) . (B^T d)] equals the correlation of d by g, in rationals."""
    for seed in range(3):
        rng = np.random.default_rng(seed)
        d = [Fraction(int(v)) for v in rng.integers(-9, 9, t.alpha)]
        g = [Fraction(int(v)) for v in rng.integers(-9, 9, 3)]
        u = [sum(row[i] * g[i] for i in range(3)) for row in t.g]
        v = [sum(row[i] * d[i] for i in range(t.alpha)) for row in t.bt]
        y = [sum(row[i] * u[i] * v[i] for i in range(t.alpha)) for row in t.at]
        assert y == [sum(g[r] * d[j + r] for r in range(3)) for j in range(t.m)]


@pytest.mark.parametrize("m", sorted(TRANSFORMS))
def test_transforms_compute_the_correlation_exactly(m):
    _exact(TRANSFORMS[m])


def test_a_combination_is_spelled_with_the_operations_it_counts():
    row = (Fraction(1), Fraction(0), Fraction(-1, 2), Fraction(-1), Fraction(4))
    text = combination(row, ["a", "b", "c", "d", "e"])
    assert text == "a - 0.5f * c - d + 4.0f * e"
    assert combination_ops(row) == text.count("+") + text.count(" - ") + text.count("*") == 5
    assert combination((Fraction(0), Fraction(-1)), ["a", "b"]) == "-b"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The convolution at fixed channels and planes (N symbolic), at -O2 and -O3, and direct."""

    def make(opt, h, w, c, k, **config):
        directory = tmp_path_factory.mktemp(f"wino{opt}")
        return compile_text(
            directory, CONV, name="conv", opt=opt, defines={"C": c, "K": k, "H": h, "W": w}, config=config
        )

    return make


def _reference(x, w, b):
    return np.maximum(np_conv(x, w, 1, 1, 1) + b[None, :, None, None].astype(np.float64), 0.0)


# (H, W, C, K, the tile at -O2, at -O3): tiles that fit the plane exactly and that the plane's edge
# cuts, channels and filters off the 16 lanes and the 64 columns of a panel, more tile rows than a
# block; the filters are inputs (transformed per call), so F(4x4) needs 48 tiles
SHAPES = [(16, 16, 32, 16, 2, 2), (15, 13, 40, 24, 2, 2), (28, 28, 64, 70, 2, 4), (30, 17, 33, 33, 2, 2)]


@pytest.mark.parametrize("opt", ["2", "3"])
@pytest.mark.parametrize("shape", SHAPES)
def test_convolutions_match_numpy(built, opt, shape):
    h, w, c, k, *tiles = shape
    library = built(opt, h, w, c, k)
    source = (library.path.parent / "conv.c").read_text()
    tile = tiles[opt == "3"]
    assert f"catenc_wino{tile}_f32(&catenc_wino" in source
    x, wt, b = randn((2, c, h, w), seed=1), randn((k, c, 3, 3), seed=2) * 0.2, randn(k, seed=3)
    expected = _reference(x, wt, b)
    scale = np.abs(expected).max()
    got = library["conv"](x, wt, b)
    bound = ROUNDING[tile] * 2 * np.finfo(np.float32).eps * np.sqrt(9 * c) * scale
    assert np.abs(got - expected).max() <= bound, (np.abs(got - expected).max(), bound)


@pytest.mark.parametrize("shape", [(30, 17, 33, 33), (14, 14, 128, 512)])
def test_thread_counts_give_the_same_bits(built, shape):
    """Threads apart (a tall plane: units of tile rows each) or sharing each block (a small plane of many
    filters: the products split by filters), 1 to 3 threads: the same bits, and numpy's values."""
    h, w, c, k = shape
    library = built("3", h, w, c, k)
    x, wt, b = randn((1, c, h, w), seed=4), randn((k, c, 3, 3), seed=5) * 0.2, randn(k, seed=6)
    results = []
    for threads in (1, 2, 3, 5):
        library["conv"].set_num_threads(threads)
        results.append(library["conv"](x, wt, b))
    assert all(np.array_equal(results[0], r) for r in results[1:])
    assert_close(results[0], _reference(x, wt, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("march", ["x86-64-v3", "x86-64"])
def test_narrower_vectors(built, march):
    """AVX2 (8 lanes, 16-column panels) and SSE2 (4 lanes) tiles; the same transforms."""
    library = built("2", 15, 13, 40, 24, MARCH=march)
    x, wt, b = randn((1, 40, 15, 13), seed=7), randn((24, 40, 3, 3), seed=8) * 0.2, randn(24, seed=9)
    assert_close(library["conv"](x, wt, b), _reference(x, wt, b), rtol=1e-4, atol=1e-4)


def test_uneven_padding_in_index_form(tmp_path):
    """Padding on one side of one axis, none on the other: the guard's bounds are the plane's rows."""
    library = compile_text(tmp_path, UNEVEN, name="uneven", defines={"C": 32, "K": 16, "H": 16, "W": 18})
    assert "catenc_wino2_f32(&catenc_wino" in (library.path.parent / "uneven.c").read_text()
    x, w = randn((32, 16, 18), seed=10), randn((16, 32, 3, 3), seed=11)
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (0, 0)))
    expected = np.zeros((16, 16, 16))
    for r in range(3):
        for s in range(3):
            expected += np.einsum("chw,kc->khw", xp[:, r : r + 16, s : s + 16], w[:, :, r, s])
    assert_close(library["uneven"](x, w), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("weights", ["baked", "packed"])
def test_constant_filters_are_transformed_once(tmp_path, weights):
    """An ONNX convolution's initializer, baked: its transform is in the library; packed: the pack
    function transforms it into the block. None runs per call."""
    w, b = randn((24, 32, 3, 3), seed=12), randn(24, seed=14)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    model = make_model(
        nodes, [tensor("x", TensorProto.FLOAT, [1, 32, 10, 10])], [tensor("y", TensorProto.FLOAT, None)], inits
    )
    library = compile_file(save(model, tmp_path, "once"), tmp_path / "out", weights=weights)
    source = (tmp_path / "out" / "once.c").read_text()
    once = "then its gemm Winograd filter panels" if weights == "baked" else "its Winograd filter transform */"
    assert once in source and "catenc_b > 0 ?" not in source
    assert re.search(r"catenc_wino_f32 catenc_wino = \{.* w \+ \d+LL, 32LL", source)
    x = randn((1, 32, 10, 10), seed=13)
    expected = np_conv(x, w, 1, 1, 1) + b[None, :, None, None]
    assert_close(next(iter(library.entries.values()))(x), expected, rtol=1e-4, atol=1e-4)


NOT_WINOGRAD = {  # the body and the output's plane
    "strided": ("y = conv2d(x, w, stride=2, padding=1)", 8),
    "dilated": ("y = conv2d(x, w, dilation=2, padding=2)", 16),
    "5x5": ("y = conv2d(x, w, padding=1)", 14),
}


@pytest.mark.parametrize("kind", sorted(NOT_WINOGRAD))
def test_other_convolutions_stay_direct(tmp_path, kind):
    body, side = NOT_WINOGRAD[kind]
    window = 5 if kind == "5x5" else 3
    text = f"""
[composite.other]
inputs = ["x: f32[1, 32, 16, 16]", "w: f32[32, 32, {window}, {window}]"]
outputs = ["y: f32[1, 32, {side}, {side}]"]
body = "{body}"
"""
    library = compile_text(tmp_path, text, name="other")
    assert "catenc_wino" not in (library.path.parent / "other.c").read_text()


def test_counted_operations_match_the_statement(tmp_path):
    path = tmp_path / "conv.toml"
    path.write_text(CONV)
    options = Options(runtime("clang"), opt="3", defines={"C": 64, "K": 32, "H": 14, "W": 14, "N": 2})
    (entry,) = plan_file(str(path), options).entries
    env = entry_env(entry, entry_sizes(entry, {}))
    buffers = {b.name: b for b in entry.schedule.graph.buffers}
    found = 0
    for group, kernel in zip(entry.schedule.kernels, entry.kernels):
        if any(isinstance(s, WinogradGemm) for s in iter_stmts(kernel.body)):
            found += 1
            counted = kernel.flops.evaluate(env)
            assert counted == kernel_cost(entry.schedule.graph, group).flops.evaluate(env)
            assert abs(executed_ops(kernel, env, buffers).ops - counted) <= 0.1 * counted
            assert counted < 2 * 2 * 64 * 32 * 9 * 14 * 14 / 2  # under half the direct product's
    assert found == 1


@pytest.mark.parametrize("weights", ["baked", "packed", "external"])
def test_filters_transformed_per_call_need_enough_tiles(tmp_path, weights):
    """64 -> 64 at 7x7: 16 tiles of F(2x2), worth a Winograd convolution only with the filters' transform
    made once (at compile time, or at load); with external weights it is transformed per call, and stays
    direct."""
    w = randn((64, 64, 3, 3), seed=15)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])]
    model = make_model(
        nodes,
        [tensor("x", TensorProto.FLOAT, [1, 64, 7, 7])],
        [tensor("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")],
    )
    options = Options(runtime("clang"), weights=WeightsMode(weights))
    (entry,) = plan_file(str(save(model, tmp_path, "deep")), options).entries
    tiles = [k.decisions.winograd for k in entry.schedule.kernels if k.contraction is not None]
    assert tiles == ([0] if weights == "external" else [2])
