#!/usr/bin/env python3
"""`make gpu-check`: catenc's CUDA runtime on this machine's NVIDIA GPU, in one script.

    python3 bench/gpu.py [--skip coverage,samples,gpt2,bench] [--results FILE] [--coverage FILE]

1. every sample compiled for CUDA with `--test` (run on the GPU against the numpy reference);
2. the op library through `catenc test-runtime --runtime cuda`, every cell run (the report goes to
   docs/coverage/cuda.md), in the background while the rest builds;
3. GPT-2 small (samples/gpt2) on the GPU: the same greedy tokens as the C build and as PyTorch;
4. the GPU bench: catenc's CUDA entries called on PyTorch's device tensors and stream, timed
   with CUDA events against PyTorch on the same device in the same process (the median of
   repeated runs after a warm-up), each result checked against PyTorch.

It writes bench/gpu_results.md: the device, driver, CUDA and date, then each part's outcome. It
needs python3 with numpy, click, jinja2, PyYAML and PyTorch (CUDA), and nvcc on PATH; it installs
nothing, so it runs on a bare GPU machine that has those. Exit status 1 when a part fails.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import statistics
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "gpu"
SAMPLE_SIZES = {  # the sizes `make demo` tests each sample at (Makefile SIZES_*)
    "gemm": "M=100,N=64,K=37",
    "mlp": "B=8,D=48",
    "softmax": "N=33,D=100",
    "layernorm": "N=33,D=100",
    "attention": "T=45,D=64",
    "conv2d": "N=2,C=3,H=13,W=11,K=8",
}
PARTS = ("samples", "coverage", "gpt2", "bench")
GPT2_PROMPT = (15496, 11, 616, 1438, 318, 1757, 290, 314)
GPT2_NEW_TOKENS = 8


def catenc(*args: str) -> list[str]:
    return [sys.executable, "-m", "catenc", *args]


def run(command: list[str], timeout: float = 900) -> tuple[int, str]:
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


# ---- calling a CUDA build on PyTorch tensors ---------------------------------------------------

CTYPES = {"i64": ctypes.c_int64, "i32": ctypes.c_int32, "f32": ctypes.c_float, "f64": ctypes.c_double}


class Entry:
    """One entry of a catenc CUDA build, called with PyTorch device tensors on PyTorch's
    current stream (the C ABI of docs/abi.md, read off the build's manifest)."""

    def __init__(self, directory: Path, name: str) -> None:
        (manifest_path,) = directory.glob("*.manifest.json")
        manifest = json.loads(manifest_path.read_text())
        library_file = next(f["path"] for f in manifest["files"] if f["role"] == "shared_library")
        self.library = ctypes.CDLL(str(directory / library_file))
        self.spec = next(e for e in manifest["entries"] if e["name"] == name)
        self.function = self.library[self.spec["symbol"]]
        self.function.restype = ctypes.c_int
        self.dims = [a["name"] for a in self.spec["args"] if a["role"] == "dim"]
        sizer = self.library[self.spec["workspace_symbol"]]
        sizer.restype, sizer.argtypes = ctypes.c_size_t, [ctypes.c_int64] * len(self.dims)
        self.sizer = sizer
        self.workspace = None

    def bind(self, **values) -> list:
        """The argument list for these tensors, scalars and sizes (made once, then reused)."""
        import torch

        dims = [int(values[name]) for name in self.dims]
        need = self.sizer(*dims)
        if self.workspace is None or self.workspace.numel() < need:
            self.workspace = torch.empty(max(need, 1), dtype=torch.uint8, device="cuda")
        stream = torch.cuda.current_stream().cuda_stream
        args: list = []
        for arg in self.spec["args"]:
            role, name = arg["role"], arg["name"]
            if role in ("input", "output") and arg.get("shape"):
                tensor = values[name]
                assert tensor.is_cuda and tensor.is_contiguous(), name
                args.append(ctypes.c_void_p(tensor.data_ptr()))
            elif role == "input":
                args.append(CTYPES[arg["dtype"]](values[name]))
            elif role == "dim":
                args.append(ctypes.c_int64(int(values[name])))
            elif role == "workspace":
                args.append(ctypes.c_void_p(self.workspace.data_ptr()))
            elif role == "workspace_bytes":
                args.append(ctypes.c_size_t(need))
            elif role == "stream":
                args.append(ctypes.c_void_p(stream))
            else:
                raise ValueError(f"{self.spec['name']}: argument role {role!r}")
        return args

    def __call__(self, args: list) -> None:
        status = self.function(*args)
        if status != 0:
            raise RuntimeError(f"{self.spec['name']} returned {status}")


def compile_cuda(source: str, out: str, *extra: str) -> Path:
    directory = BUILD / out
    code, log = run(catenc("compile", source, "--runtime", "cuda", "-o", str(directory), *extra))
    if code != 0:
        raise RuntimeError(f"catenc compile {source} --runtime cuda failed:\n{log}")
    return directory


# ---- timing ------------------------------------------------------------------------------------


def median_ms(work, warmup: int = 3, repeats: int = 20) -> float:
    """The median time of `work()` in milliseconds, measured with CUDA events on the current stream."""
    import torch

    for _ in range(warmup):
        work()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def relative_error(got, want) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / max(float(want.norm()), 1e-30))


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read plus bytes written), 2 GiB moved."""
    import torch

    a = torch.randn(256 * 1024 * 1024, device="cuda")
    b = torch.empty_like(a)
    ms = median_ms(lambda: b.copy_(a), repeats=10)
    return 2 * a.numel() * 4 / ms / 1e6


@dataclass
class Row:
    workload: str
    catenc_ms: float
    torch_ms: float
    work: str  # what the throughput counts
    catenc_rate: float
    torch_rate: float
    target: str
    met: bool
    error: float  # relative to PyTorch's (or a float64) result
    tolerance: float

    @property
    def correct(self) -> bool:
        return self.error <= self.tolerance  # False for NaN too


def gemm_row(directory: Path, name: str, dtype: str, tolerance: float) -> Row:
    """A 4096 matrix product against torch.matmul (its default precision: no TF32 for f32)."""
    import torch

    n, dtype = 4096, getattr(torch, dtype)
    a, b = torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(n, n, device="cuda", dtype=dtype)
    c = torch.full((n, n), float("nan"), device="cuda", dtype=dtype)
    entry = Entry(directory, name)
    args = entry.bind(a=a, b=b, c=c, M=n, N=n, K=n)
    ours, theirs = median_ms(lambda: entry(args)), median_ms(lambda: torch.matmul(a, b))
    error = relative_error(c, a.double() @ b.double())
    tflop = 2 * n**3 / 1e9
    rate, peer = tflop / ours, tflop / theirs
    return Row(
        f"{name} {n}", ours, theirs, "TFLOP/s", rate, peer, ">= 70% of torch", rate >= 0.7 * peer, error, tolerance
    )


def rows_row(directory: Path, name: str, bandwidth: float) -> Row:
    """Softmax or layernorm over 8192 rows of 8192 against PyTorch, as bandwidth (one read, one write)."""
    import torch
    import torch.nn.functional as F

    n = d = 8192
    x = torch.randn(n, d, device="cuda")
    y = torch.full_like(x, float("nan"))
    gamma, beta = torch.randn(d, device="cuda"), torch.randn(d, device="cuda")
    if name == "softmax":
        extra, reference = {}, lambda: torch.softmax(x, -1)
    else:
        extra, reference = {"gamma": gamma, "beta": beta}, lambda: F.layer_norm(x, (d,), gamma, beta, 1e-5)
    entry = Entry(directory, name)
    args = entry.bind(x=x, y=y, N=n, D=d, **extra)
    ours, theirs = median_ms(lambda: entry(args)), median_ms(reference)
    error = relative_error(y, reference())
    gigabytes = 2 * x.numel() * 4 / 1e9
    rate, peer = gigabytes / ours * 1e3, gigabytes / theirs * 1e3
    target = f">= 80% of {bandwidth:.0f} GB/s"
    return Row(f"{name} {n}x{d}", ours, theirs, "GB/s", rate, peer, target, rate >= 0.8 * bandwidth, error, 1e-5)


def attention_row(directory: Path) -> Row:
    """Causal attention in f16 against scaled_dot_product_attention."""
    import torch
    import torch.nn.functional as F

    batch, heads, t, hd = 4, 16, 2048, 64
    q, k, v = (torch.randn(batch, heads, t, hd, device="cuda", dtype=torch.float16) for _ in range(3))
    out = torch.full_like(q, float("nan"))
    entry = Entry(directory, "attention")
    args = entry.bind(q=q, k=k, v=v, y=out, B=batch, H=heads, T=t, D=hd)

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    ours, theirs = median_ms(lambda: entry(args), repeats=10), median_ms(sdpa)
    error = relative_error(out, sdpa())
    tflop = 4 * batch * heads * t * t * hd / 2 / 1e9  # the causal half of QK^T and PV
    workload = f"causal attention B={batch} H={heads} T={t} D={hd} f16"
    met = ours <= 1.5 * theirs
    return Row(workload, ours, theirs, "TFLOP/s", tflop / ours, tflop / theirs, "<= 1.5x sdpa time", met, error, 1e-2)


def layout_checks(directory: Path) -> list[str]:
    """The tensor-core tiles' operand layouts, batch and epilogue against PyTorch in float64 at
    sizes off the tile (edges; a depth that is no multiple of 8 takes the element-wise copies)."""
    import torch

    def rand(*shape, dtype=torch.float16):
        return torch.randn(*shape, device="cuda").to(dtype)

    cases = {
        "hgemm": lambda m, n, k: ({"a": rand(m, k), "b": rand(k, n)}, lambda t: t["a"] @ t["b"], torch.float16),
        "hgemm_tn": lambda m, n, k: ({"a": rand(k, m), "b": rand(k, n)}, lambda t: t["a"].T @ t["b"], torch.float16),
        "hgemm_nt": lambda m, n, k: ({"a": rand(m, k), "b": rand(n, k)}, lambda t: t["a"] @ t["b"].T, torch.float16),
        "bgemm_tt_relu": lambda m, n, k: (
            {
                "a": rand(k, m, dtype=torch.bfloat16),
                "b": rand(n, k, dtype=torch.bfloat16),
                "bias": rand(n, dtype=torch.float32),
            },
            lambda t: torch.relu(t["a"].T @ t["b"].T + t["bias"]),
            torch.float32,
        ),
        "hbmm": lambda m, n, k: ({"a": rand(3, m, k), "b": rand(3, k, n)}, lambda t: t["a"] @ t["b"], torch.float16),
    }
    lines, worst = [], {}
    for m, n, k in ((257, 131, 72), (128, 256, 64), (61, 45, 77), (1000, 520, 136)):
        for name, case in cases.items():
            tensors, reference, dtype = case(m, n, k)
            want = reference({key: value.double() for key, value in tensors.items()})
            got = torch.full(want.shape, float("nan"), device="cuda", dtype=dtype)
            entry = Entry(directory, name)
            entry(entry.bind(c=got, M=m, N=n, K=k, G=3, **tensors))
            torch.cuda.synchronize()
            worst[name] = max(worst.get(name, 0.0), relative_error(got, want))
    for name, error in worst.items():
        lines.append(f"- {name}: largest relative error {error:.1e} ({'ok' if error <= 1e-2 else 'WRONG'})")
    return lines


def bench_rows(directory: Path, bandwidth: float, failed: list[str]) -> list[Row]:
    """Every GPU bench workload, catenc against PyTorch on the same inputs; a workload that
    breaks is reported and the rest still run."""
    import torch

    torch.manual_seed(0)
    workloads = {
        "sgemm": lambda: gemm_row(directory, "sgemm", "float32", 1e-4),
        "hgemm": lambda: gemm_row(directory, "hgemm", "float16", 5e-3),
        "bgemm": lambda: gemm_row(directory, "bgemm", "bfloat16", 2e-2),
        "softmax": lambda: rows_row(directory, "softmax", bandwidth),
        "layernorm": lambda: rows_row(directory, "layernorm", bandwidth),
        "attention": lambda: attention_row(directory),
    }
    rows = []
    for name, workload in workloads.items():
        try:
            rows.append(workload())
        except Exception:  # noqa: BLE001  (the report says what broke; the other workloads still run)
            traceback.print_exc()
            failed.append(f"bench {name}: {traceback.format_exc().splitlines()[-1]}")
    return rows


# ---- GPT-2 -------------------------------------------------------------------------------------


def gpt2_part(cuda_dir: Path, c_dir: Path) -> tuple[list[str], list[Row], bool]:
    """GPT-2 small with random weights: catenc's CUDA build, its C build and PyTorch (on the GPU)
    generate greedily from the same prompt; then prefill (T=1024) and one decoding step timed
    against PyTorch eager on the GPU."""
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "samples" / "gpt2"))
    import reference
    import weights

    from catenc.loader import load

    tensors = weights.random_weights()
    torch_model = reference.Gpt2(tensors)
    torch_model.w = {name: w.cuda() for name, w in torch_model.w.items()}
    on_device = {name: torch.from_numpy(np.ascontiguousarray(w)).cuda() for name, w in tensors.items()}
    prefill, step = Entry(cuda_dir, "gpt2"), Entry(cuda_dir, "gpt2_step")

    def cuda_prefill(tokens):
        t = len(tokens)
        ids = torch.tensor(tokens, dtype=torch.int64, device="cuda")
        logits = torch.empty(t, 50257, device="cuda")
        k_cache, v_cache = (torch.empty(t, 12, 12, 64, device="cuda") for _ in range(2))
        args = prefill.bind(tokens=ids, logits=logits, k_cache=k_cache, v_cache=v_cache, T=t, **on_device)
        return args, logits, k_cache, v_cache

    def cuda_step(token, past_k, past_v):
        logits = torch.empty(50257, device="cuda")
        k_new, v_new = (torch.empty(12, 12, 64, device="cuda") for _ in range(2))
        args = step.bind(
            token=token, past_k=past_k, past_v=past_v, logits=logits, k_new=k_new, v_new=v_new,
            S=past_k.shape[0], **on_device,
        )  # fmt: skip
        return args, logits, k_new, v_new

    def cuda_generate(prompt, steps):
        args, logits, k, v = cuda_prefill(list(prompt))
        prefill(args)
        out = [int(logits[-1].argmax())]
        for _ in range(steps - 1):
            args, logits, k_new, v_new = cuda_step(out[-1], k, v)
            step(args)
            k, v = torch.cat([k, k_new[None]], 0), torch.cat([v, v_new[None]], 0)
            out.append(int(logits.argmax()))
        return out

    def c_generate(prompt, steps):
        library = load(str(c_dir))
        logits, k, v = library.gpt2(np.asarray(prompt, dtype=np.int64), *[tensors[n] for n in weights.NAMES])
        out = [int(logits[-1].argmax())]
        for _ in range(steps - 1):
            logits, k_new, v_new = library.gpt2_step(out[-1], k, v, *[tensors[n] for n in weights.NAMES])
            k, v = np.concatenate([k, k_new[None]]), np.concatenate([v, v_new[None]])
            out.append(int(logits.argmax()))
        return out

    lines = []
    tokens = {
        "catenc cuda": cuda_generate(GPT2_PROMPT, GPT2_NEW_TOKENS),
        "catenc c (clang)": c_generate(GPT2_PROMPT, GPT2_NEW_TOKENS),
        "pytorch (gpu, f32)": torch_model.generate(np.asarray(GPT2_PROMPT), GPT2_NEW_TOKENS),
    }
    for who, ids in tokens.items():
        lines.append(f"- {who}: `{' '.join(map(str, ids))}`")
    same = len({tuple(ids) for ids in tokens.values()}) == 1
    lines.append(f"- the same tokens: **{'yes' if same else 'NO'}**")

    prompt = [int(i) for i in np.random.default_rng(1).integers(0, 50257, 1024)]
    args, logits, k, v = cuda_prefill(prompt)
    ours = median_ms(lambda: prefill(args), warmup=2, repeats=5)
    theirs = median_ms(lambda: torch_model.prefill(np.asarray(prompt)), warmup=2, repeats=5)
    want = torch_model.prefill(np.asarray(prompt))[0]
    rows = [Row("GPT-2 prefill T=1024", ours, theirs, "tokens/s", 1024e3 / ours, 1024e3 / theirs,
                "<= 1.0x torch eager", ours <= theirs, relative_error(logits, want), 1e-3)]  # fmt: skip
    past = 512
    k, v = k[:past].contiguous(), v[:past].contiguous()
    args, logits, _, _ = cuda_step(prompt[past], k, v)
    ours = median_ms(lambda: step(args), repeats=20)
    theirs = median_ms(lambda: torch_model.step(prompt[past], k, v), repeats=20)
    want = torch_model.step(prompt[past], k, v)[0]
    rows.append(Row(f"GPT-2 decode step (S={past})", ours, theirs, "tokens/s", 1e3 / ours, 1e3 / theirs,
                    "<= 1.0x torch eager", ours <= theirs, relative_error(logits, want), 1e-3))  # fmt: skip
    return lines, rows, same


# ---- the report --------------------------------------------------------------------------------


def facts() -> list[str]:
    import torch

    code, smi = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    code_v, nvcc = run(["nvcc", "--version"])
    release = next((line.strip() for line in nvcc.splitlines() if "release" in line), "unknown")
    return [
        f"- device: {torch.cuda.get_device_name()} ({smi.strip() if code == 0 else 'nvidia-smi failed'})",
        f"- CUDA: nvcc {release}; PyTorch {torch.__version__} (CUDA {torch.version.cuda})",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
    ]


def table(rows: list[Row]) -> list[str]:
    lines = [
        "| workload | catenc ms | PyTorch ms | time ratio | catenc | PyTorch | target | met | rel. error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.workload} | {r.catenc_ms:.3f} | {r.torch_ms:.3f} | {r.catenc_ms / r.torch_ms:.2f}x "
            f"| {r.catenc_rate:.1f} {r.work} | {r.torch_rate:.1f} {r.work} | {r.target} | "
            f"{'yes' if r.met else 'no'} | {r.error:.1e} {'ok' if r.correct else 'WRONG'} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip", default="", help="parts to leave out: " + ",".join(PARTS))
    parser.add_argument("--results", default=str(ROOT / "bench" / "gpu_results.md"))
    parser.add_argument("--coverage", default=str(ROOT / "docs" / "coverage" / "cuda.md"))
    options = parser.parse_args()
    skip = set(filter(None, options.skip.split(",")))
    import torch

    if not torch.cuda.is_available():
        print("error: bench/gpu.py needs an NVIDIA GPU visible to PyTorch", file=sys.stderr)
        return 1
    BUILD.mkdir(parents=True, exist_ok=True)
    began, failed = time.time(), []
    report = ["# catenc on the GPU (`make gpu-check`)", "", *facts(), ""]
    coverage = None
    if "coverage" not in skip:
        coverage = subprocess.Popen(
            catenc("test-runtime", "--runtime", "cuda", "-o", options.coverage, "--json", str(BUILD / "cuda.json")),
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    with ThreadPoolExecutor(max_workers=4) as pool:
        samples = {}
        if "samples" not in skip:
            for name, sizes in SAMPLE_SIZES.items():
                source = next(p for p in (ROOT / "samples").glob(f"{name}.*") if p.suffix in (".toml", ".yaml"))
                command = catenc("compile", str(source), "--runtime", "cuda", "-o", str(BUILD / name), "--test", sizes)
                samples[name] = pool.submit(run, command)
        gpt2_builds = []
        if "gpt2" not in skip:
            gpt2 = str(ROOT / "samples" / "gpt2" / "gpt2.toml")
            gpt2_builds = [
                pool.submit(compile_cuda, gpt2, "gpt2_cuda"),
                pool.submit(run, catenc("compile", gpt2, "-o", str(BUILD / "gpt2_c"))),
            ]
        bench_build = (
            pool.submit(compile_cuda, str(ROOT / "bench" / "gpu.toml"), "bench") if "bench" not in skip else None
        )
        if samples:
            report += ["## Samples with --test on the GPU", ""]
            for name, future in samples.items():
                code, log = future.result()
                report.append(f"- {name} ({SAMPLE_SIZES[name]}): {'ok' if code == 0 else 'FAILED'}")
                if code != 0:
                    failed.append(f"sample {name}")
                    print(log, file=sys.stderr)
            report.append("")
        for future in [*gpt2_builds, *([bench_build] if bench_build else [])]:
            future.exception()  # every build finished (failures are reported below)
    if coverage is not None:  # the timings below want the GPU to themselves
        log, _ = coverage.communicate()
        summary = [line for line in log.splitlines() if "passed" in line][-1:]
        report += ["## Op library (`catenc test-runtime --runtime cuda`)", ""]
        report += [f"- {Path(options.coverage).relative_to(ROOT)}: {' '.join(summary) or 'no summary'}", ""]
        if coverage.returncode != 0:
            failed.append("test-runtime")
            print(log[-4000:], file=sys.stderr)
    rows: list[Row] = []
    if gpt2_builds:
        report += ["## GPT-2 small on the GPU (random weights, greedy)", ""]
        try:
            code, log = gpt2_builds[1].result()
            if code != 0:
                raise RuntimeError("catenc compile gpt2 (clang) failed:\n" + log)
            lines, gpt2_rows, same = gpt2_part(gpt2_builds[0].result(), BUILD / "gpt2_c")
            report += lines
            rows += gpt2_rows
            if not same:
                failed.append("gpt2 tokens differ")
        except Exception as error:  # noqa: BLE001  (reported; the bench still runs)
            traceback.print_exc()
            report.append(f"- FAILED: {error}")
            failed.append("gpt2")
        report.append("")
    if bench_build is not None and bench_build.exception() is not None:
        failed.append(f"bench build: {bench_build.exception()}")
    elif bench_build is not None:
        bench_dir = bench_build.result()
        report += ["## Tensor-core tiles: layouts, batch, epilogue, edges (against float64)", ""]
        try:
            checks = layout_checks(bench_dir)
            report += checks + [""]
            failed += [line for line in checks if line.endswith("(WRONG)")]
        except Exception:  # noqa: BLE001  (reported; the bench still runs)
            traceback.print_exc()
            failed.append(f"layout checks: {traceback.format_exc().splitlines()[-1]}")
        bandwidth = copy_bandwidth()
        report += [
            "## Bench against PyTorch (same device, same process, CUDA events, median)",
            "",
            f"Device-to-device copy: {bandwidth:.0f} GB/s (bytes read + written).",
            "",
        ]
        rows = bench_rows(bench_dir, bandwidth, failed) + rows
    if rows:
        report += table(rows) + [""]
        failed += [f"{r.workload} (relative error {r.error:.1e})" for r in rows if not r.correct]
    report.append(f"Whole check: {time.time() - began:.0f} s.")
    Path(options.results).write_text("\n".join(report) + "\n")
    print("\n".join(report))
    if failed:
        print("gpu-check failed: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
