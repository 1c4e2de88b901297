"""The opencl runtime, run on PoCL here: what it writes, `--test` on every sample, calling
its builds from Python (status codes, scalars, half types), its config and its errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import compile_text

from catenc.loader import CatencStatusError, aligned_buffer

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = {
    "gemm.toml": "M=100,N=64,K=37",
    "mlp.yaml": "B=8,D=48",
    "softmax.toml": "N=33,D=100",
    "layernorm.toml": "N=33,D=100",
    "attention.toml": "T=45,D=64",
    "conv2d.toml": "N=2,C=3,H=13,W=11,K=8",
}


def catenc(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "catenc", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_every_sample_passes_its_test_on_opencl(tmp_path, sample):
    out = tmp_path / "out"
    done = catenc(
        "compile",
        str(ROOT / "samples" / sample),
        "--runtime",
        "opencl",
        "-o",
        str(out),
        "--test",
        SAMPLES[sample],
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert " ok" in done.stdout and "FAIL" not in done.stdout
    stem = sample.rsplit(".", 1)[0]
    assert sorted(p.name for p in out.iterdir()) == [f"{stem}.cl", f"{stem}.manifest.json"]
    manifest = json.loads((out / f"{stem}.manifest.json").read_text())
    assert manifest["runtime"]["language"] == "opencl"
    for entry in manifest["entries"]:
        for kernel in entry["kernels"]:
            assert kernel["launch"]["mapping"] in ("element", "row", "gemm")
            assert kernel["launch"]["block"] in (64, 256)


SOURCE = """
[composite.checked]
inputs = ["x: f32[N, K]"]
outputs = ["y: f32[N]"]
where = ["K % 4 == 0"]
body = "y = sum(x, axis=-1)"

[composite.gather]
inputs = ["table: f32[V, D]", "ids: i64[T]"]
outputs = ["y: f32[T, D]"]
body = "y = take(table, ids, axis=0)"

[composite.scaled]
inputs = ["x: f16[N]", "s: f32"]
outputs = ["y: f16[N]", "total: f32"]
body = '''
y = cast(cast(x, f32) * s, f16)
total = sum(cast(x, f32))
'''

[composite.flags]
inputs = ["x: i64[N]"]
outputs = ["odd: bool[N]", "any_odd: bool"]
body = '''
odd = x % 2 == 1
any_odd = max(cast(odd, i64)) == 1
'''

[composite.through_workspace]
inputs = ["x: f32[N, D]"]
outputs = ["y: f32[N, D]"]
body = '''
h = softmax(x)
y = h @ transpose(h) @ x
'''
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return compile_text(tmp_path_factory.mktemp("ocl"), SOURCE, runtime_name="opencl")


def test_a_failed_constraint_is_e_shape(lib):
    x = np.ones((3, 8), np.float32)
    np.testing.assert_array_equal(lib.checked(x), np.full(3, 8, np.float32))
    with pytest.raises(CatencStatusError) as err:
        lib.checked(np.ones((3, 6), np.float32))
    assert err.value.status == 1


def test_an_index_out_of_range_is_e_index(lib):
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(lib.gather(table, np.array([3, 0, -1])), table[[3, 0, -1]])
    with pytest.raises(CatencStatusError) as err:
        lib.gather(table, np.array([0, 4]))
    assert err.value.status == 3


def test_a_small_workspace_is_e_workspace(lib):
    entry = lib.through_workspace
    x = np.ones((5, 3), np.float32)
    need = entry.workspace_bytes(N=5, D=3)
    assert need > 0
    y = np.empty_like(x)
    assert entry.call_raw(x, y, 5, 3, aligned_buffer(need - 8), need - 8) == 2
    assert entry.call_raw(x, y, 5, 3, aligned_buffer(need), need) == 0
    h = np.exp(x - x.max(-1, keepdims=True))
    h /= h.sum(-1, keepdims=True)
    np.testing.assert_allclose(y, h @ h.T @ x, rtol=1e-5)


def test_scalars_half_types_and_bools(lib):
    x = np.array([1.5, -2.0, 65504.0, 0.25, 3.0], np.float16)
    y, total = lib.scaled(x, np.float32(0.5))
    np.testing.assert_array_equal(y, (x.astype(np.float32) * 0.5).astype(np.float16))
    np.testing.assert_allclose(total, x.astype(np.float32).sum(), rtol=1e-6)
    v = np.array([4, 7, -3, 10], np.int64)
    odd, any_odd = lib.flags(v)
    np.testing.assert_array_equal(odd, v % 2 == 1)
    assert bool(any_odd) is True and not bool(lib.flags(np.array([2, 4]))[1])


def test_bad_config_and_binary_kinds_are_user_errors(tmp_path):
    model = tmp_path / "m.toml"
    model.write_text('[composite.f]\ninputs = ["x: f32[N]"]\noutputs = ["y: f32[N]"]\nbody = "y = x + 1"\n')
    bad = catenc("compile", str(model), "--runtime", "opencl", "--config", "BLOCK=100", cwd=tmp_path)
    assert bad.returncode == 1 and "BLOCK=100: expected one of 64, 128, 256, 512, 1024" in bad.stderr
    obj = catenc("compile", str(model), "--runtime", "opencl", "-c", "-o", "out", cwd=tmp_path)
    assert obj.returncode == 1 and "builds no o file" in obj.stderr and "Traceback" not in obj.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_test_runtime_runs_ops_on_opencl(tmp_path):
    report = tmp_path / "r.md"
    done = catenc("test-runtime", "--runtime", "opencl", "-k", "softmax", "-o", str(report), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    text = report.read_text()
    assert "runtime: `opencl`" in text and "PoCL" in text
    assert "0 failed" in text and "| softmax |" in text and "pass" in text


def test_build_options_reach_the_driver_from_the_config_and_the_manifest(tmp_path):
    from catenc.loader import load
    from catenc.runtime.manifest import ManifestError

    model = tmp_path / "m.toml"
    model.write_text('[composite.f]\ninputs = ["x: f32[N]"]\noutputs = ["y: f32[N]"]\nbody = "y = x * 3 + 1"\n')
    flags = "-cl-opt-disable -cl-mad-enable"
    good = catenc("compile", str(model), "--runtime", "opencl", "--config", f"CLFLAGS={flags}", "-o", "out",
                  "--test", "N=37", cwd=tmp_path)  # fmt: skip
    assert good.returncode == 0 and " ok" in good.stdout, good.stdout + good.stderr
    manifest_path = tmp_path / "out" / "m.manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert manifest["runtime"]["config"]["CLFLAGS"] == flags
    x = np.arange(37, dtype=np.float32)
    np.testing.assert_array_equal(load(manifest_path).f(x), x * 3 + 1)
    # the loader builds with the manifest's options: a driver-rejected one fails the load
    manifest["runtime"]["config"]["CLFLAGS"] = "-cl-no-such-option"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="cannot build the kernels"):
        load(manifest_path)
    # ... and the compile, as the user's error (exit 1), writing nothing
    bad = catenc("compile", str(model), "--runtime", "opencl", "--config", "CLFLAGS=-cl-no-such-option",
                 "-o", "bad", cwd=tmp_path)  # fmt: skip
    assert bad.returncode == 1, bad.stderr
    assert "do not build with your --config CLFLAGS=-cl-no-such-option" in bad.stderr
    assert "Traceback" not in bad.stderr and "internal" not in bad.stderr
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").iterdir())
    word = catenc("compile", str(model), "--runtime", "opencl", "--config", "CLFLAGS=O2", cwd=tmp_path)
    assert word.returncode == 1 and "CLFLAGS=O2" in word.stderr, word.stderr


def test_contractions_of_every_layout_store_their_half_precision_results(tmp_path):
    """The layouts CUDA puts on tensor cores, through the shared SIMT tiles here (PoCL): each
    product is stored by its tile, converted to f16 (no pass after it), at sizes off the tile."""
    from test_cuda_runtime import LAYOUTS

    lib = compile_text(tmp_path, LAYOUTS.replace("{t}", "f16"), runtime_name="opencl")
    rng = np.random.default_rng(7)
    m, n, k, g = 67, 130, 45, 3

    def half(*shape):
        return rng.standard_normal(shape).astype(np.float16)

    a, at, b, bt, x, y = half(m, k), half(k, m), half(k, n), half(n, k), half(g, m, k), half(g, k, n)
    bias = rng.standard_normal(n).astype(np.float32)
    got = lib.layouts_f16(a, at, b, bt, bias, x, y)
    f64 = [v.astype(np.float64) for v in (a, at, b, bt, x, y)]
    a64, at64, b64, bt64, x64, y64 = f64
    want = [a64 @ b64, at64.T @ b64, a64 @ bt64.T, np.maximum(at64.T @ bt64.T + bias, 0), x64 @ y64, (a64 * 2) @ b64]
    for name, out, ref in zip(("nn", "tn", "nt", "tt", "batched", "scaled"), got, want):
        assert out.dtype == (np.float32 if name == "tt" else np.float16), name
        error = np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref)
        assert error < 2e-3, (name, error)
    manifest = json.loads(next((tmp_path).glob("out_*/*.manifest.json")).read_text())
    assert [k["launch"]["mapping"] for k in manifest["entries"][0]["kernels"]] == ["gemm"] * 6
