"""Identical layers share their kernels: a layer's slice of stacked weights is a view (a
pointer the entry computes), and kernels equal up to names call one function."""

from __future__ import annotations

import json

import numpy as np
from conftest import compile_text, randn, runtime

from catenc.driver import plan_file
from catenc.plan import Options

SOURCE = """
[composite.layer]
inputs = ["x: f32[T, 16]", "w: f32[16, 16]", "b: f32[16]", "g: f32[16]"]
outputs = ["y: f32[T, 16]"]
body = '''
h = x @ w.T + b
y = x + tanh(h) * g / sqrt(mean(h * h, axis=-1, keepdims=True) + 1e-5)
'''

[composite.stack3]
inputs = ["x: f32[T, 16]", "w: f32[4, 16, 16]", "b: f32[4, 16]", "g: f32[4, 16]"]
outputs = ["y: f32[T, 16]"]
body = '''
x1 = layer(x, w[0], b[0], g[0])
x2 = layer(x1, w[1], b[1], g[1])
x3 = layer(x2, w[2], b[2], g[2])
y = layer(x3, w[3], b[3], g[3])
'''
"""


def reference(x, w, b, g):
    x = x.astype(np.float64)
    for layer in range(4):
        h = x @ w[layer].T.astype(np.float64) + b[layer]
        x = x + np.tanh(h) * g[layer] / np.sqrt((h * h).mean(axis=-1, keepdims=True) + 1e-5)
    return x


def test_layers_share_kernels_and_read_views(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SOURCE)
    (entry,) = [e for e in plan_file(str(path), Options(runtime(), opt="2")).entries if e.name == "stack3"]
    views = [b for b in entry.schedule.graph.buffers if b.role == "view"]
    assert sorted(b.name for b in views) == [f"{n}_at{k}" for n in "bgw" for k in range(4)]
    shared = [k for k in entry.kernels if k.shares]
    distinct = [k for k in entry.kernels if not k.shares]
    assert len(shared) >= 2 * len(entry.kernels) // 4 and len(distinct) < len(entry.kernels)
    assert all(k.shares in {d.name for d in distinct} for k in shared)
    # at -O0 nothing is shared (kernels stay one per compute)
    (plain,) = [e for e in plan_file(str(path), Options(runtime(), opt="0")).entries if e.name == "stack3"]
    assert not any(k.shares for k in plain.kernels)


def test_shared_kernels_compute_each_layer(tmp_path):
    lib = compile_text(tmp_path, SOURCE, name="s")
    manifest = json.loads(next(tmp_path.glob("out_s_O2/*.manifest.json")).read_text())
    kernels = next(e for e in manifest["entries"] if e["name"] == "stack3")["kernels"]
    assert any("shares" in k for k in kernels)
    w, b, g = randn((4, 16, 16), seed=1) * 0.3, randn((4, 16), seed=2), randn((4, 16), seed=3)
    for t in (1, 7, 130):
        x = randn((t, 16), seed=t)
        np.testing.assert_allclose(lib.stack3(x, w, b, g), reference(x, w, b, g), rtol=2e-4, atol=2e-4)


CACHED = """
[composite.cached_layer]
inputs = ["x: f32[16]", "past: f32[S, 16]", "w: f32[16, 16]"]
outputs = ["y: f32[16]"]
body = '''
score[j] = sum[d](x[d] * past[j, d]) * 0.25
y[d] = x[d] + tanh(sum[j](score[j] * past[j, d]) + sum[e](w[d, e] * x[e]))
'''

[composite.cached3]
inputs = ["x: f32[16]", "cache: f32[S, 3, 16]", "w: f32[3, 16, 16]"]
outputs = ["y: f32[16]"]
body = '''
x1 = cached_layer(x, cache[:, 0], w[0])
x2 = cached_layer(x1, cache[:, 1], w[1])
y = cached_layer(x2, cache[:, 2], w[2])
'''
"""


def cached_reference(x, cache, w):
    x = x.astype(np.float64)
    for layer in range(3):
        past = cache[:, layer].astype(np.float64)
        score = past @ x * 0.25
        x = x + np.tanh(score @ past + w[layer].astype(np.float64) @ x)
    return x


def test_a_cache_stacked_second_is_sliced_into_views_and_its_layers_share_kernels(tmp_path):
    """A constant index along a later axis (a decoding step's cache [S, layer, ...]) is a view too:
    each layer's kernels then differ only in names, and the C has one function per kernel of
    one layer instead of one per layer."""
    path = tmp_path / "c.toml"
    path.write_text(CACHED)
    (entry,) = [e for e in plan_file(str(path), Options(runtime(), opt="2")).entries if e.name == "cached3"]
    views = sorted(b.name for b in entry.schedule.graph.buffers if b.role == "view")
    assert views == [f"cache_at{k}_axis1" for k in range(3)] + [f"w_at{k}" for k in range(3)]
    # the first layer reads the input x, the second and third a temp: the third runs the second's code
    shared = [k for k in entry.kernels if k.shares]
    assert len(entry.kernels) % 3 == 0 and len(shared) == len(entry.kernels) // 3
    lib = compile_text(tmp_path, CACHED, name="c")
    w = randn((3, 16, 16), seed=1) * 0.2
    for s in (1, 5, 33):
        x, cache = randn((16,), seed=s), randn((s, 3, 16), seed=s + 1) * 0.3
        np.testing.assert_allclose(lib.cached3(x, cache, w), cached_reference(x, cache, w), rtol=2e-4, atol=2e-4)
