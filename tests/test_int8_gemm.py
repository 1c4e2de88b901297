"""int8 products in the packed gemm (schedule/tiles.py KINDS, templates/gemm.c.j2 `q8_kernel`): a sum of
`cast(u8, i32) * cast(i8, i32)` is taken as a u8s8 or s8u8 gemm, its operands packed as bytes in groups
of 4 depth steps, and computed by each instruction path the target may have (AVX-512 VNNI, 256-bit
VNNI, AVX2's widening multiply, plain loops). Results are exact: they equal numpy's integer product
at sizes off every tile (depth not a multiple of 4, several k-slices), with padding read as a
nonzero value, a batch, a fused epilogue and a requantisation, on 1 and 3 threads."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import randint

from catenc.build import BuildRequest, build
from catenc.driver import plan_file
from catenc.loader import load
from catenc.plan import Options
from catenc.runtime.descriptor import load_runtime
from catenc.runtime.machine import host_machine

PAD = 7  # the value padding reads: an activation's zero point
FORCE_THREADS = "-DCATENC_GEMM_PARALLEL_FLOPS=0 -DCATENC_GEMM_FLOPS_PER_THREAD=1"

SOURCE = f"""
[composite.qmm]
inputs = ["a: u8[B, M, K]", "b: i8[K, N]", "bias: i32[N]"]
outputs = ["y: i32[B, M, N]", "q: u8[B, M, N]"]
body = '''
y[n, i, j] = sum[k](cast(a[n, i, k], i32) * cast(b[k, j], i32)) + bias[j]
acc[n, i, j] = sum[k](cast(a[n, i, k], i32) * cast(b[k, j], i32))
q = cast(clip(round(cast(acc, f32) * 0.001 + 9.0), 0.0, 255.0), u8)
'''

[composite.qconv]
inputs = ["x: u8[C, H, W]", "w: i8[F, C, 3, 3]"]
outputs = ["y: i32[F, H, W]"]
body = '''
y[f, h, v] = sum[c, r, s](cast(where((h + r >= 1) & (h + r <= H) & (v + s >= 1) & (v + s <= W),
                                    x[c, h + r - 1, v + s - 1], cast({PAD}, u8)), i32) * cast(w[f, c, r, s], i32))
'''
"""

# What each instruction path needs of the CPU, the configuration that selects it, and the
# instruction that shows it was taken (None: plain loops, no telltale).
PATHS = {
    "vnni512": ({"avx512_vnni", "avx512bw"}, {}, r"vpdpbusd\s+.*zmm"),
    "vnni256": ({"avx512_vnni", "avx512vl"}, {"CFLAGS": "-mno-avx512bw"}, r"vpdpbusd\s+.*ymm"),
    "avx2": ({"avx2"}, {"MARCH": "x86-64-v3"}, r"vpmaddwd"),
    "loops": (set(), {"MARCH": "x86-64"}, None),
    "native": (set(), {}, None),  # a CPU of another architecture: whatever its build selects
}


def runnable() -> list[str]:
    """The paths this machine runs: every one its CPU has the features of (plain loops run anywhere)."""
    machine = host_machine()
    if machine["arch"] != "x86_64":  # the x86 -march values below mean nothing there: the native build
        return ["native"]
    return [p for p, (needs, _, _) in PATHS.items() if needs <= set(machine["features"])]


def compile_paths(directory: Path, path: str) -> tuple[str, object, Path]:
    rt = load_runtime("clang")
    config = dict(PATHS[path][1])
    config["CFLAGS"] = f"{config.get('CFLAGS', '')} {FORCE_THREADS}".strip()
    options = Options(rt, config=rt.validate_config(config))
    source = directory / "q8.toml"
    source.write_text(SOURCE)
    out = directory / path
    written = build(
        plan_file(str(source), options), options, BuildRequest(str(source), str(out), ("c", "h", "manifest", "so"))
    )
    return Path(written["c"]).read_text(), load(written["manifest"]), Path(written["so"])


@pytest.fixture(scope="module", params=runnable())
def library(request, tmp_path_factory):
    return request.param, *compile_paths(tmp_path_factory.mktemp(f"q8_{request.param}"), request.param)


def test_byte_products_are_int8_gemms_on_the_path_the_target_has(library) -> None:
    path, c_source, _, so = library
    assert re.search(r"catenc_gemm_call_u8s8\(", c_source)  # activations (A) times weights (B)
    assert re.search(r"catenc_gemm_call_s8u8\(", c_source)  # a convolution: weights (A) times patches (B)
    telltale = PATHS[path][2]
    if telltale is not None and shutil.which("objdump"):
        disassembly = subprocess.run(["objdump", "-d", str(so)], capture_output=True, text=True, check=True).stdout
        assert re.search(telltale, disassembly)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize(("batch", "m", "k", "n"), [(1, 37, 67, 45), (3, 9, 2051, 70), (2, 1, 3, 1)])
def test_int8_matmul_equals_the_integer_product(library, threads: int, batch: int, m: int, k: int, n: int) -> None:
    entry = library[2].entries["qmm"]
    entry.set_num_threads(threads)
    a = randint((batch, m, k), 0, 255, np.uint8, seed=1)
    b = randint((k, n), -128, 127, np.int8, seed=2)
    bias = randint((n,), -1000, 1000, np.int32, seed=3)
    y, q = entry(a, b, bias)
    exact = a.astype(np.int64) @ b.astype(np.int64)
    assert np.array_equal(y, exact + bias)
    requantised = np.clip(np.round(exact.astype(np.float32) * np.float32(0.001) + np.float32(9.0)), 0, 255)
    assert np.array_equal(q, requantised.astype(np.uint8))


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize(("c", "h", "w", "f"), [(13, 9, 11, 21), (130, 7, 7, 40), (5, 24, 25, 9)])
def test_int8_convolution_pads_with_its_value(library, threads: int, c: int, h: int, w: int, f: int) -> None:
    entry = library[2].entries["qconv"]
    entry.set_num_threads(threads)
    x = randint((c, h, w), 0, 255, np.uint8, seed=4)
    weight = randint((f, c, 3, 3), -128, 127, np.int8, seed=5)
    assert np.array_equal(entry(x, weight), padded_conv(x, weight))


def padded_conv(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The 3x3 convolution of x padded with PAD by weight, in int64."""
    (_, h, w), padded = x.shape, np.pad(x.astype(np.int64), ((0, 0), (1, 1), (1, 1)), constant_values=PAD)
    taps = weight.astype(np.int64)
    return sum(
        np.einsum("fc,chw->fhw", taps[:, :, r, s], padded[:, r : r + h, s : s + w]) for r in range(3) for s in range(3)
    )


BAKED = f"""
[composite.baked]
inputs = ["x: u8[300, H, W]", "a: u8[M, 2100]"]
outputs = ["y: i32[21, H, W]", "z: i32[M, 45]"]
weights = "q8.safetensors"
constants = ["w: i8[21, 300, 3, 3]", "b: i8[2100, 45]"]
body = '''
y[f, h, v] = sum[c, r, s](cast(where((h + r >= 1) & (h + r <= H) & (v + s >= 1) & (v + s <= W),
                                    x[c, h + r - 1, v + s - 1], cast({PAD}, u8)), i32) * cast(w[f, c, r, s], i32))
z[i, j] = sum[k](cast(a[i, k], i32) * cast(b[k, j], i32))
'''
"""
BAKED_SHAPES = {"w": (21, 300, 3, 3), "b": (2100, 45)}  # C*9 = 2700 and K = 2100: several k-slices


def test_int8_weights_baked_are_packed_at_compile_time(tmp_path: Path) -> None:
    """A baked weight is packed once, as the A panels of a convolution and the B panels of a matrix
    product: no packing function reads it, the call passes its panels, the results stay exact."""
    from catenc.dtypes import DTYPES
    from catenc.weights import weights_bytes

    values = {n: randint(shape, -128, 127, np.int8, seed=len(n)) for n, shape in BAKED_SHAPES.items()}
    (tmp_path / "q8.safetensors").write_bytes(weights_bytes({n: (DTYPES["i8"], v) for n, v in values.items()}))
    (tmp_path / "q8.toml").write_text(BAKED)
    rt = load_runtime("clang")
    options = Options(rt, config=rt.validate_config({"CFLAGS": FORCE_THREADS}))
    source = tmp_path / "q8.toml"
    written = build(
        plan_file(str(source), options),
        options,
        BuildRequest(str(source), str(tmp_path / "out"), ("c", "h", "manifest", "so")),
    )
    c_source = Path(written["c"]).read_text()
    assert re.search(r"catenc_gemm_call_s8u8\(.*, 0, \w+_pack_b, .*catenc_shared, w \+ \d+LL\);", c_source)
    assert re.search(r"catenc_gemm_call_u8s8\(.*, b \+ \d+LL, \w+_pack_a, 0, .*catenc_shared, 0\);", c_source)
    assert "as its gemm A panels only" in c_source and "as its gemm B panels only" in c_source
    entry = load(written["manifest"]).entries["baked"]
    x = randint((300, 9, 11), 0, 255, np.uint8, seed=6)
    a = randint((37, 2100), 0, 255, np.uint8, seed=7)
    for threads in (1, 3):
        entry.set_num_threads(threads)
        y, z = entry(x, a)
        padded = np.pad(x.astype(np.int64), ((0, 0), (1, 1), (1, 1)), constant_values=PAD)
        w = values["w"].astype(np.int64)
        want = sum(
            np.einsum("fc,chw->fhw", w[:, :, r, s], padded[:, r : r + 9, s : s + 11])
            for r in range(3)
            for s in range(3)
        )
        assert np.array_equal(y, want)
        assert np.array_equal(z, a.astype(np.int64) @ values["b"].astype(np.int64))
