"""The cuda runtime without a GPU: every sample builds with nvcc, the header and manifest say
how to call it (device pointers, a trailing stream, launch geometry per kernel), ptxas keeps
the tiled contraction kernels out of local memory, and test-runtime reports `compiled`.

nvcc is part of this machine's toolchain (CUDA 13); these tests fail, not skip, without it.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ["gemm.toml", "mlp.yaml", "softmax.toml", "layernorm.toml", "attention.toml", "conv2d.toml"]


def catenc(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "catenc", *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every sample compiled by the cuda runtime: stem -> output directory."""
    assert shutil.which("nvcc"), "nvcc (the CUDA toolkit) is part of this machine's toolchain"
    base = tmp_path_factory.mktemp("cuda")
    out = {}
    for sample in SAMPLES:
        stem = sample.rsplit(".", 1)[0]
        done = catenc("compile", str(ROOT / "samples" / sample), "--runtime", "cuda", "-o", str(base / stem), cwd=base)
        assert done.returncode == 0, done.stderr
        out[stem] = base / stem
    return out


@pytest.mark.parametrize("sample", SAMPLES)
def test_every_sample_builds_with_nvcc(built, sample):
    stem = sample.rsplit(".", 1)[0]
    files = sorted(p.name for p in built[stem].iterdir())
    assert files == sorted([f"lib{stem}.so", f"{stem}.cu", f"{stem}.h", f"{stem}.manifest.json"])
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(built[stem] / f"lib{stem}.so")], capture_output=True, text=True
    ).stdout
    manifest = json.loads((built[stem] / f"{stem}.manifest.json").read_text())
    for entry in manifest["entries"]:
        assert re.search(rf" T {entry['symbol']}$", symbols, re.M)
        assert re.search(rf" T {entry['workspace_symbol']}$", symbols, re.M)


def test_header_takes_device_pointers_and_a_stream(built, tmp_path):
    header = (built["gemm"] / "gemm.h").read_text()
    assert re.findall(r"#include <(\w+\.h)>", header) == ["stddef.h", "stdint.h"]
    expected = (
        "int gemm(const float* A, const float* B, float* C, int64_t M, int64_t K, int64_t N, "
        "void* workspace, size_t workspace_bytes, struct CUstream_st* stream);"
    )
    assert expected in header
    # the header is plain C: a C program can declare the entries without CUDA's headers
    (tmp_path / "use.c").write_text(
        '#include "gemm.h"\nint (*f)(const float*, const float*, float*, int64_t, int64_t, int64_t, void*, size_t,\n'
        "         struct CUstream_st*) = gemm;\n"
    )
    done = subprocess.run(
        [
            "gcc",
            "-std=c99",
            "-Wall",
            "-Werror",
            "-c",
            "-I",
            str(built["gemm"]),
            "-o",
            str(tmp_path / "use.o"),
            str(tmp_path / "use.c"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_manifest_records_the_launch_of_every_kernel(built):
    manifest = json.loads((built["attention"] / "attention.manifest.json").read_text())
    assert manifest["runtime"]["calling_convention"] == "cuda"
    assert manifest["runtime"]["config"] == {"ARCH": "sm_90", "BLOCK": "256", "NVCCFLAGS": ""}
    (entry,) = manifest["entries"]
    assert entry["args"][-1] == {"name": "stream", "role": "stream"}
    mappings = [k["launch"]["mapping"] for k in entry["kernels"]]
    assert mappings == ["gemm", "row", "gemm"]
    assert entry["kernels"][0]["launch"]["groups"] == "((T + 127) // 128)*((T + 127) // 128)"
    assert [k["launch"]["block"] for k in entry["kernels"]] == [256, 256, 256]
    command = manifest["build"]["commands"][0]
    assert command[0] == "nvcc" and "-gencode=arch=compute_90,code=[sm_90,compute_90]" in command


def ptxas_report(source: Path, arch: str = "sm_90") -> dict[str, tuple[int, int]]:
    """kernel -> (registers, spill store bytes), from ptxas."""
    done = subprocess.run(
        ["nvcc", "-std=c++17", f"-arch={arch}", "--resource-usage", "-cubin", "-o", os.devnull, str(source)],
        capture_output=True,
        text=True,
        cwd=source.parent,
    )
    assert done.returncode == 0, done.stderr
    report, kernel, spills = {}, None, 0
    for line in (done.stdout + done.stderr).splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            kernel = m.group(1)
        elif m := re.search(r"(\d+) bytes spill stores", line):
            spills = int(m.group(1))
        elif (m := re.search(r"Used (\d+) registers", line)) and kernel:
            report[kernel] = (int(m.group(1)), spills)
    return report


@pytest.mark.parametrize("sample", ["gemm", "attention", "conv2d", "mlp"])
def test_contraction_kernels_do_not_spill(built, sample):
    manifest = json.loads((built[sample] / f"{sample}.manifest.json").read_text())
    gemm_kernels = [k["name"] for e in manifest["entries"] for k in e["kernels"] if k["launch"]["mapping"] == "gemm"]
    assert gemm_kernels
    report = ptxas_report(built[sample] / f"{sample}.cu")
    for name in gemm_kernels:
        registers, spills = report[name]
        assert spills == 0 and registers <= 255, (name, registers, spills)


def test_f64_tiles_do_not_spill(tmp_path):
    (tmp_path / "d.toml").write_text(
        '[composite.dmm]\ninputs = ["a: f64[B, M, K]", "b: f64[B, K, N]"]\n'
        'outputs = ["c: f64[B, M, N]"]\nbody = "c = a @ b"\n'
    )
    done = catenc("compile", "d.toml", "--runtime", "cuda", "-S", "-o", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    ((registers, spills),) = ptxas_report(tmp_path / "out" / "d.cu").values()
    assert spills == 0, registers


def test_arch_config(tmp_path):
    (tmp_path / "m.toml").write_text(
        '[composite.f]\ninputs = ["x: f32[N]"]\noutputs = ["y: f32[N]"]\nbody = "y = x * 3"\n'
    )
    ok = catenc("compile", "m.toml", "--runtime", "cuda", "--config", "ARCH=sm_80", "-o", "o80", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    command = json.loads((tmp_path / "o80" / "m.manifest.json").read_text())["build"]["commands"][0]
    assert "-gencode=arch=compute_80,code=[sm_80,compute_80]" in command
    bad = catenc("compile", "m.toml", "--runtime", "cuda", "--config", "ARCH=volta", cwd=tmp_path)
    assert bad.returncode == 1 and "--config ARCH=volta: invalid value" in bad.stderr
    # a flag nvcc refuses is the user's error (exit 1, nvcc's message), not an internal one
    flag = catenc("compile", "m.toml", "--runtime", "cuda", "--config", "NVCCFLAGS=--no-such-flag", "-o", "of",
                  cwd=tmp_path)  # fmt: skip
    assert flag.returncode == 1, flag.stderr
    assert "failed with your --config NVCCFLAGS=--no-such-flag" in flag.stderr and "--no-such-flag" in flag.stderr
    assert not (tmp_path / "of").exists() or not any((tmp_path / "of").iterdir())


def test_without_nvcc_sources_still_emit_and_builds_say_what_is_missing(tmp_path):
    (tmp_path / "m.toml").write_text(
        '[composite.f]\ninputs = ["x: f32[N]"]\noutputs = ["y: f32[N]"]\nbody = "y = x * 3"\n'
    )
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    source_only = catenc("compile", "m.toml", "--runtime", "cuda", "-S", "-o", "src", cwd=tmp_path, env=env)
    assert source_only.returncode == 0, source_only.stderr
    assert sorted(p.name for p in (tmp_path / "src").iterdir()) == ["m.cu", "m.h", "m.manifest.json"]
    build = catenc("compile", "m.toml", "--runtime", "cuda", "-o", "lib", cwd=tmp_path, env=env)
    assert build.returncode == 1 and "nvcc not found" in build.stderr and "Traceback" not in build.stderr


def test_test_runtime_reports_compiled_cells(tmp_path):
    report = tmp_path / "cuda.md"
    done = catenc("test-runtime", "--runtime", "cuda", "-k", "layernorm", "-o", str(report), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    text = report.read_text()
    assert "runtime: `cuda`" in text and "Cuda compilation tools" in text
    assert "0 passed, 0 failed, 0 error" in text and "| layernorm |" in text
    assert re.search(r"\| layernorm \|( compiled \|)+", text)


LIBRARY_CONTRACTIONS = """
[composite.contractions_{t}]
inputs = ["a: {t}[M, K]", "b: {t}[K, N]", "w: {t}[N, K]", "bias: {t}[N]", "c: {t}[M, N]",
          "q: {t}[H, T, D]", "k: {t}[H, T, D]", "v: {t}[H, T, D]", "x: {t}[B, C, S, S]", "f: {t}[F, C, 3, 3]"]
outputs = ["mm: {t}[M, N]", "nt: {t}[M, N]", "lin: {t}[M, N]", "att: {t}[H, T, D]", "conv: {t}[B, F, S, S]"]
body = '''
mm = matmul(a, b)
nt = gemm_nt(a, w, c)
lin = linear(a, w, bias)
att = attention(q, k, v)
conv = conv2d(x, f, padding=1)
'''
"""


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_op_library_contractions_do_not_spill(tmp_path, dtype):
    """The library's contractions (matmul, gemm_nt, linear, attention, conv2d) as tiled kernels,
    each within its registers at the default tile."""
    (tmp_path / "c.toml").write_text(LIBRARY_CONTRACTIONS.replace("{t}", dtype))
    done = catenc("compile", "c.toml", "--runtime", "cuda", "-S", "-o", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "out" / "c.manifest.json").read_text())
    tiled = [k["name"] for k in manifest["entries"][0]["kernels"] if k["launch"]["mapping"] == "gemm"]
    assert len(tiled) >= 6
    report = ptxas_report(tmp_path / "out" / "c.cu")
    assert all(report[name][1] == 0 for name in tiled), {name: report[name] for name in tiled}


def test_host_entry_checks_sizes_and_workspace_before_launching(built):
    """The nvcc-built host entry runs on the CPU: its size and workspace checks return their
    codes before touching the device; a launch without a GPU is CATENC_E_DEVICE."""
    from catenc.runtime.device_host import cuda_available

    lib = ctypes.CDLL(str(built["attention"] / "libattention.so"))
    entry, size = lib.attention, lib.attention_workspace_bytes
    entry.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 2 + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    size.argtypes, size.restype = [ctypes.c_int64] * 2, ctypes.c_size_t
    need = size(45, 64)
    assert need == 128 * ((4 * 45 * 45 + 63) // 64)
    buffers = [ctypes.c_void_p(64)] * 4  # never dereferenced on the host
    assert entry(*buffers, -1, 64, None, 0, None) == 1
    assert entry(*buffers, 45, 64, None, 0, None) == 2
    assert entry(*buffers, 45, 64, ctypes.c_void_p(64), need - 1, None) == 2
    assert entry(*buffers, 45, 64, ctypes.c_void_p(96), need, None) == 2  # not 64-byte aligned
    if not cuda_available():
        assert entry(*buffers, 45, 64, ctypes.c_void_p(64), need, None) == 4


# ---- tensor-core tiles (f16 and bf16 operands, f32 accumulators) ------------------------------

LAYOUTS = """
[composite.layouts_{t}]
inputs = ["a: {t}[M, K]", "at: {t}[K, M]", "b: {t}[K, N]", "bt: {t}[N, K]", "bias: f32[N]",
          "x: {t}[G, M, K]", "y: {t}[G, K, N]"]
outputs = ["nn: {t}[M, N]", "tn: {t}[M, N]", "nt: {t}[M, N]", "tt: f32[M, N]", "batched: {t}[G, M, N]",
           "scaled: {t}[M, N]"]
body = '''
nn = a @ b
tn = at.T @ b
nt = a @ bt.T
tt = relu(at.T.astype(f32) @ bt.T.astype(f32) + bias)
batched = x @ y
scaled = (a * 2) @ b
'''
"""


def tensor_core_calls(source: str) -> list[str]:
    """The template arguments of every catenc_mma::gemm call, in order."""
    return re.findall(r"catenc_mma::gemm<([^>]*)>", source)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_precision_contractions_take_tensor_cores_in_every_layout(tmp_path, dtype):
    """Each operand layout is read in place (depth-major or not, per operand); an operand that
    is an expression keeps the SIMT tiles; the f16/bf16 result is stored by the tile itself."""
    (tmp_path / "l.toml").write_text(LAYOUTS.replace("{t}", dtype))
    done = catenc("compile", "l.toml", "--runtime", "cuda", "-S", "-o", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    source = (tmp_path / "out" / "l.cu").read_text()
    bf16 = str(dtype == "bf16").lower()
    # sm_90 (the default ARCH): 128 x 128 tiles, one 64 x 64 part per warp for a single product
    # whose A is depth-major, 64 x 32 parts otherwise
    wide, narrow = "128, 128, 64, 3", "128, 128, 32, 3"
    assert tensor_core_calls(source) == [
        f"{wide}, {bf16}, true, false",  # a @ b: a's rows hold its depth, b's columns are contiguous
        f"{narrow}, {bf16}, false, false",
        f"{wide}, {bf16}, true, true",
        f"{narrow}, {bf16}, false, true",
        f"{narrow}, {bf16}, true, false",  # batched
    ]
    assert source.count("catenc_tile_a[") >= 1  # `(a * 2) @ b` is staged element by element
    manifest = json.loads((tmp_path / "out" / "l.manifest.json").read_text())
    kernels = manifest["entries"][0]["kernels"]
    assert sum(k["launch"]["mapping"] == "gemm" for k in kernels) == 6
    assert len(kernels) == 6, [k["name"] for k in kernels]  # no conversion pass after any product


def test_tensor_core_tiles_follow_the_architecture(tmp_path):
    (tmp_path / "l.toml").write_text(LAYOUTS.replace("{t}", "f16"))
    tiles = {}
    for arch in ("sm_75", "sm_80", "sm_90"):
        done = catenc(
            "compile", "l.toml", "--runtime", "cuda", "--config", f"ARCH={arch}", "-S", "-o", arch, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        calls = tensor_core_calls((tmp_path / arch / "l.cu").read_text())
        tiles[arch] = {call.rsplit(", ", 3)[0] for call in calls}
    assert tiles == {"sm_75": set(), "sm_80": {"128, 128, 32, 3"}, "sm_90": {"128, 128, 64, 3", "128, 128, 32, 3"}}
    manifest = json.loads((tmp_path / "sm_80" / "l.manifest.json").read_text())
    blocks = {k["launch"]["block"] for k in manifest["entries"][0]["kernels"] if k["launch"]["mapping"] == "gemm"}
    assert blocks == {256}


@pytest.mark.parametrize(("dtype", "arch"), [("f16", "sm_80"), ("f16", "sm_90"), ("bf16", "sm_90")])
def test_tensor_core_tiles_do_not_spill(tmp_path, dtype, arch):
    """The tiles of every layout and of the op library's contractions stay in registers (both
    tiles on sm_90, the one of sm_80; bf16 differs from f16 only in the instruction's name)."""
    (tmp_path / "l.toml").write_text(LAYOUTS.replace("{t}", dtype) + LIBRARY_CONTRACTIONS.replace("{t}", dtype))
    done = catenc("compile", "l.toml", "--runtime", "cuda", "--config", f"ARCH={arch}", "-S", "-o", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    source = tmp_path / "out" / "l.cu"
    assert len(tensor_core_calls(source.read_text())) >= 8
    manifest = json.loads((tmp_path / "out" / "l.manifest.json").read_text())
    tiled = [k["name"] for e in manifest["entries"] for k in e["kernels"] if k["launch"]["mapping"] == "gemm"]
    report = ptxas_report(source, arch)
    assert all(report[name][1] == 0 for name in tiled), {name: report[name] for name in tiled}


def test_deeper_pipelines_ask_for_their_shared_memory(tmp_path):
    """A tile whose stages need over 48 KiB raises the kernel's dynamic shared memory limit
    before launching it (a runtime of one's own with a 4-stage 128 x 256 tile)."""
    (tmp_path / "deep.py").write_text(
        "from catenc.lower.gpu import GemmTile, TensorTiles\nfrom catenc.runtime.gpu_runtime import CudaRuntime\n"
        "deep = GemmTile(128, 256, 32, 256, 4)\n"
        "RUNTIME = CudaRuntime(name='deep', tensor_tiles=((80, TensorTiles(deep, deep)),))\n"
    )
    (tmp_path / "h.toml").write_text(
        '[composite.h]\ninputs = ["a: f16[M, K]", "b: f16[K, N]"]\noutputs = ["c: f16[M, N]"]\nbody = "c = a @ b"\n'
    )
    done = catenc("compile", "h.toml", "--runtime", "deep.py", "-o", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    source = (tmp_path / "out" / "h.cu").read_text()
    shared = 4 * (128 + 256) * 32 * 2
    assert f"cudaFuncSetAttribute(h_k0, cudaFuncAttributeMaxDynamicSharedMemorySize, {shared})" in source
    assert f"h_k0<<<(unsigned)groups, 256, {shared}, stream>>>" in source
    assert "__launch_bounds__(256, 1) h_k0(" in source  # all of a multiprocessor's registers if need be
