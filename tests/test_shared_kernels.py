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
