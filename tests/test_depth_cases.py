"""A product over a concatenation along its depth (catenc/lower/gemm.py depth_cases): the packing of
that operand takes one side of the select per depth step (`if (catenc_case0) ... else ...` in the
pack function), so each step's row is a plain copy, also under a per-channel scale and ReLU (a
pre-activation, DenseNet's) and for three parts; a select that reads a position index (a concat
along the product's columns) keeps its select. Results against numpy, on 1 and 2 threads."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import compile_text, randn

SOURCE = """
[composite.two]
inputs = ["a: f32[M, P]", "b: f32[M, Q]", "w: f32[P + Q, N]"]
outputs = ["y: f32[M, N]"]
body = "y = concat([a, b], axis=1) @ w"

[composite.preactivation]
inputs = ["a: f32[P, H]", "b: f32[Q, H]", "c: f32[R, H]", "s: f32[P + Q + R]", "t: f32[P + Q + R]",
          "w: f32[N, P + Q + R]"]
outputs = ["y: f32[N, H]"]
body = "y = w @ relu(concat([a, b, c], axis=0) * s[:, None] + t[:, None])"

[composite.columns]
inputs = ["x: f32[M, K]", "u: f32[K, P]", "v: f32[K, Q]"]
outputs = ["y: f32[M, P + Q]"]
body = "y = x @ concat([u, v], axis=1)"
"""

SIZES = {"M": 37, "N": 45, "P": 70, "Q": 33, "R": 21, "H": 90, "K": 64}


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return compile_text(tmp_path_factory.mktemp("depth_cases"), SOURCE, name="cases", defines=SIZES)


def pack_functions(library, entry: str) -> list[str]:
    source = (library.path.parent / "cases.c").read_text()
    return re.findall(rf"static void {entry}_k\d+_g\d+_pack_[ab]\(.*?\n}}\n", source, re.S)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_concatenation_along_the_depth_packs_each_part_as_a_copy(library, threads):
    m, n, p, q = (SIZES[k] for k in "MNPQ")
    a, b, w = randn((m, p), seed=1), randn((m, q), seed=2), randn((p + q, n), seed=3)
    (packed,) = [f for f in pack_functions(library, "two") if "catenc_case" in f]
    assert "if (catenc_case0)" in packed and "catenc_case1" not in packed and "? a[" not in packed
    library["two"].set_num_threads(threads)
    want = np.concatenate([a, b], axis=1).astype(np.float64) @ w
    np.testing.assert_allclose(library["two"](a, b, w), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_three_parts_under_a_scale_and_relu(library, threads):
    n, p, q, r, h = (SIZES[k] for k in "NPQRH")
    a, b, c = randn((p, h), seed=4), randn((q, h), seed=5), randn((r, h), seed=6)
    s, t, w = randn(p + q + r, seed=7), randn(p + q + r, seed=8), randn((n, p + q + r), seed=9)
    (packed,) = [f for f in pack_functions(library, "preactivation") if "catenc_case" in f]
    assert "} else if (catenc_case1) {" in packed and "catenc_case2" not in packed
    library["preactivation"].set_num_threads(threads)
    joined = np.concatenate([a, b, c]).astype(np.float64)
    want = w.astype(np.float64) @ np.maximum(joined * s[:, None] + t[:, None], 0)
    np.testing.assert_allclose(library["preactivation"](a, b, c, s, t, w), want, rtol=1e-4, atol=1e-4)


def test_a_concatenation_along_the_columns_keeps_its_select(library):
    m, k, p, q = (SIZES[n] for n in "MKPQ")
    x, u, v = randn((m, k), seed=10), randn((k, p), seed=11), randn((k, q), seed=12)
    functions = pack_functions(library, "columns")
    assert not any("catenc_case" in f for f in functions) and any("? u[" in f for f in functions)
    want = x.astype(np.float64) @ np.concatenate([u, v], axis=1)
    np.testing.assert_allclose(library["columns"](x, u, v), want, rtol=1e-4, atol=1e-4)
