"""`catenc profile` (catenc/profile.py): the timed build computes what the plain one does, the
plain source carries no timer, every kernel of the manifest gets a row, the rates are the
manifest's cost at the sizes over the measured time, and bad input is a one-line error. No test
here depends on how fast anything ran."""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import runtime

from catenc import profile
from catenc.build import BuildRequest, build
from catenc.ccall import BoundCall
from catenc.cli import main
from catenc.driver import plan_file
from catenc.emit import render_source
from catenc.loader import load
from catenc.plan import Options
from catenc.runtime.manifest import ShapeExpr
from catenc.testing.check import entry_env, random_inputs

ROOT = Path(__file__).resolve().parents[1]
ATTENTION = str(ROOT / "samples" / "attention.toml")
# Four identical layers: at -O2 the kernels of layers 2-4 call layer 1's functions (`shares`).
STACK = """
[composite.layer]
inputs = ["x: f32[T, 16]", "w: f32[16, 16]", "b: f32[16]"]
outputs = ["y: f32[T, 16]"]
body = '''
h = x @ w.T + b
y = x + tanh(h) / sqrt(mean(h * h, axis=-1, keepdims=True) + 1e-5)
'''

[composite.stack]
inputs = ["x: f32[T, 16]", "w: f32[3, 16, 16]", "b: f32[3, 16]"]
outputs = ["y: f32[T, 16]"]
body = '''
y = layer(layer(layer(x, w[0], b[0]), w[1], b[1]), w[2], b[2])
'''
"""
PEAKS = profile.Peaks(100.0, 10.0, source="given")


@pytest.fixture()
def stack(tmp_path: Path) -> str:
    path = tmp_path / "stack.toml"
    path.write_text(STACK)
    return str(path)


def _options(**kw) -> Options:
    rt = runtime()
    return Options(rt, rt.validate_config({}), **kw)


def _outputs(library, entry, sizes: dict[str, int]) -> list[np.ndarray]:
    inputs = random_inputs(entry, entry.composite, entry_env(entry, sizes), seed=3)
    bound = BoundCall(library, entry.name, inputs, **sizes)
    bound.call()
    return bound.outputs


@pytest.mark.parametrize("source, sizes", [("stack", {"T": 7}), ("attention", {"T": 37, "D": 64})])
def test_the_timed_build_computes_the_plain_builds_bits(tmp_path: Path, stack: str, source: str, sizes) -> None:
    path = stack if source == "stack" else ATTENTION
    options = _options(composites=("stack",) if source == "stack" else ())
    plan = plan_file(path, options)
    plain = load(
        build(plan, options, BuildRequest(path, str(tmp_path / "plain"), ("c", "h", "manifest", "so")))["manifest"]
    )
    timed = profile.profiled_library(plan, options, path, tmp_path / "timed")
    assert "_profile_table" in next((tmp_path / "timed").glob("*.c")).read_text()
    for entry in plan.entries:
        for got, want in zip(_outputs(timed, entry, sizes), _outputs(plain, entry, sizes), strict=True):
            assert got.tobytes() == want.tobytes()


def _is_timed_call(plain: str, timed: str) -> bool:
    """`timed` is the kernel call `plain` wrapped in a timer."""
    found = re.fullmatch(r"( *)CATENC_PROFILE_CALL\(\w+_profile_table, \d+, (.*)\);", timed)
    return found is not None and f"{found.group(1)}{found.group(2)};" == plain


@pytest.mark.parametrize("source", ["stack", "attention"])
def test_the_plain_source_has_no_timer_and_the_timed_one_only_adds_them(stack: str, source: str) -> None:
    path = stack if source == "stack" else ATTENTION
    plan = plan_file(path, _options())
    rt = runtime()
    plain = render_source(plan.entries, "m", "m.toml", rt.renderer()).splitlines()
    timed = render_source(plan.entries, "m", "m.toml", rt.renderer(), profile=True).splitlines()
    assert not any("profile" in line or "clock_gettime" in line for line in plain)
    wrapped = 0
    for op, a0, a1, b0, b1 in difflib.SequenceMatcher(None, plain, timed, autojunk=False).get_opcodes():
        if op in ("replace", "delete"):  # a plain line changes only by being wrapped in a timer
            added = iter(timed[b0:b1])  # beside lines the timers add
            assert all(any(_is_timed_call(p, t) for t in added) for p in plain[a0:a1]), (plain[a0:a1], timed[b0:b1])
            wrapped += a1 - a0
    assert wrapped == sum(len(e.kernels) for e in plan.entries)


def test_every_kernel_of_the_manifest_is_timed_once_per_call_shared_ones_too(tmp_path: Path, stack: str) -> None:
    options = _options(composites=("stack",))
    plan = plan_file(stack, options)
    manifest = json.loads(
        Path(build(plan, options, BuildRequest(stack, str(tmp_path), ("c", "h", "manifest")))["manifest"]).read_text()
    )
    kernels = manifest["entries"][0]["kernels"]
    assert any("shares" in k for k in kernels)  # two call sites of one function, one timer each
    (timed,) = profile.time_kernels(stack, options, {"T": 5}, runs=3)
    assert timed.entry == "stack" and timed.seconds > 0
    assert [k.name for k in timed.kernels] == [k["name"] for k in kernels]
    assert all(k.calls == 3 and k.seconds >= 0 for k in timed.kernels)


def test_rates_are_the_manifests_cost_at_the_sizes_over_the_time(tmp_path: Path) -> None:
    options = _options()
    sizes = {"T": 40, "D": 24}
    report = profile.profile_file(ATTENTION, options, sizes, 2, lambda: PEAKS)
    plan = plan_file(ATTENTION, options)
    manifest = json.loads(
        Path(
            build(plan, options, BuildRequest(ATTENTION, str(tmp_path), ("c", "h", "manifest")))["manifest"]
        ).read_text()
    )
    (entry,) = report["entries"]
    assert entry["sizes"] == sizes
    for row, spec in zip(entry["kernels"], manifest["entries"][0]["kernels"], strict=True):
        cost = {key: ShapeExpr(value)(sizes) for key, value in spec["cost"].items()}
        assert row["name"] == spec["name"] and row["ops"] == spec["fused"] and row["computes"] == spec["computes"]
        assert row["flops"] == cost["flops"] and row["bytes_read"] == cost["bytes_read"]
        assert row["bytes_written"] == cost["bytes_written"]
        seconds = row["seconds"]
        moved = cost["bytes_read"] + cost["bytes_written"]
        assert row["gflops"] == pytest.approx(cost["flops"] / seconds / 1e9, rel=1e-12)
        assert row["gbs"] == pytest.approx(moved / seconds / 1e9, rel=1e-12)
        assert row["fma_percent"] == pytest.approx(row["gflops"], rel=1e-12)  # of 100 GFLOP/s
        assert row["bandwidth_percent"] == pytest.approx(10 * row["gbs"], rel=1e-12)  # of 10 GB/s
        assert row["bound"] == ("compute" if cost["flops"] / moved >= 10 else "memory")


def test_the_arithmetic_of_the_rates() -> None:
    memory = profile.rates_of(2_000, 1_000, 1e-6, PEAKS)  # 2 flop/byte, under the ridge of 10
    assert memory["gflops"] == pytest.approx(2.0) and memory["gbs"] == pytest.approx(1.0)
    assert memory["bound"] == "memory" and memory["bandwidth_percent"] == pytest.approx(10.0)
    compute = profile.rates_of(50_000, 1_000, 1e-6, PEAKS)
    assert compute["bound"] == "compute" and compute["fma_percent"] == pytest.approx(50.0)
    assert profile.rates_of(10, 10, 0.0, PEAKS)["gflops"] is None  # too fast for the clock


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["profile", *args])
    return result.exit_code, result.output


def test_json_has_every_key_in_a_fixed_order() -> None:
    code, out = _cli(ATTENTION, "--sizes", "T=16,D=8", "--runs", "2", "--peaks", "100,10", "--json")
    assert code == 0, out
    report = json.loads(out)
    assert list(report) == ["schema", "file", "runtime", "compiler", "opt", "runs", "statistic", "peaks", "entries"]
    assert report["schema"] == "catenc.profile/1" and report["runs"] == 2 and report["statistic"] == "min"
    (entry,) = report["entries"]
    assert list(entry) == [
        "entry",
        "symbol",
        "sizes",
        "seconds",
        "kernels_seconds",
        "kernels_fastest_seconds",
        "kernels",
    ]
    row_keys = ["name", "calls", "seconds", "flops", "bytes_read", "bytes_written", "gflops", "gbs", "intensity"]
    row_keys += ["bound", "fma_percent", "bandwidth_percent", "computes", "ops"]
    assert [list(k) for k in entry["kernels"]] == [row_keys] * len(entry["kernels"])
    assert [k["calls"] for k in entry["kernels"]] == [2] * len(entry["kernels"])


def test_the_table_names_every_kernel_and_what_it_fuses() -> None:
    code, out = _cli(ATTENTION, "-D", "D=8", "--sizes", "T=16", "--runs", "1", "--peaks", "100,10")
    assert code == 0, out
    assert "attention (T=16, D=8)" in out and "given with --peaks" in out
    for n in range(3):
        assert re.search(rf"^attention_k{n} +1 ", out, re.M), out
    assert "t, t_1, t_2_operand: max sum exp sub div" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--composite", "atention", "--sizes", "T=4,D=4"], "--composite atention: no composite of that name"),
        (["--sizes", "T=4"], "'attention' has the free size(s) D: give each with --sizes"),
        (["--sizes", "T=4,D=4,Q=2"], "--sizes Q=2: 'Q' is no free symbol"),
        (["-D", "D=4", "--sizes", "T=4,D=4"], "--sizes D=4: 'D' is fixed by -D"),
        (["--sizes", "T=4,D=4", "--runtime", "opencl"], "profile needs a host runtime"),
        (["--sizes", "T=4,D=4", "--runtime", "cuda"], "profile needs a host runtime"),
        (["--sizes", "T=4,D=4", "--peaks", "fast"], "--peaks fast: expected GFLOPS,GBS"),
        (["--sizes", "T=4,D=x"], "--sizes: size 'D' must be an integer"),
        (["--sizes", "T=4,D=-4"], "--sizes: size 'D' must not be negative"),
        (["--sizes", "T=99999999999,D=99999999"], "'attention' at T=99999999999, D=99999999 computes "),
        (["--sizes", "T=1000000,D=1000000"], "for its inputs, outputs and workspace, more than this machine's"),
        (["-D", "T=1000000", "-D", "D=1000000"], "'attention' at T=1000000, D=1000000 needs "),
    ],
)
def test_bad_input_is_an_error_without_a_traceback(args: list[str], message: str) -> None:
    code, out = _cli(ATTENTION, "--peaks", "100,10", *args) if "--peaks" not in args else _cli(ATTENTION, *args)
    assert code == 1, out
    assert "error:" in out and message in out, out
    assert "Traceback" not in out


def test_bad_sizes_are_an_error_before_the_peaks_are_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CATENC_CACHE_DIR", str(tmp_path))
    layernorm = str(ROOT / "samples" / "layernorm.toml")
    code, out = _cli(layernorm, "--sizes", "N=4,D=0")
    assert code == 1 and "violate the constraint 'D >= 1' of 'layernorm'" in out, out
    code, out = _cli(ATTENTION, "--sizes", "T=99999999999,D=99999999")
    assert code == 1 and "beyond int64" in out, out
    assert not (tmp_path / "peaks").exists()


def test_peaks_are_measured_once_per_machine_and_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CATENC_CACHE_DIR", str(tmp_path))
    rt = runtime()
    config = rt.validate_config({})
    first = profile.machine_peaks(rt, config)
    assert first.fma_gflops > 0 and first.triad_gbs > 0 and first.threads >= 1
    assert first.vector_bits in (128, 256, 512) and "measured now" in first.source
    (kept,) = (tmp_path / "peaks").glob("*.json")
    second = profile.machine_peaks(rt, config)
    assert (second.fma_gflops, second.triad_gbs, second.vector_bits) == (
        first.fma_gflops,
        first.triad_gbs,
        first.vector_bits,
    )
    assert str(kept) in second.source and "measured now" not in second.source
