"""The cost model (catenc/ir/cost.py): what the manifest, --emit schedule and --debug 1 report,
and that fusion never recomputes a reduction or raises the degree of the program's flops."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import compile_file, runtime
from test_naturals import CASES, NATURAL, Natural

from catenc.driver import plan_file
from catenc.ir.cost import Cost, at_reference, degree, no_more_than
from catenc.ir.nodes import loads
from catenc.plan import Options
from catenc.schedule.kernels import format_schedule, kernel_cost, schedule_cost
from catenc.symbolic import Call, parse_expr

ROOT = Path(__file__).resolve().parent.parent


def plan_costs(path: Path | str, opt: str) -> dict[str, Cost]:
    """Each entry's cost, planned at -O{opt} (no C compiler needed)."""
    plan = plan_file(str(path), Options(runtime("clang"), opt=opt))
    return {entry.name: schedule_cost(entry.schedule) for entry in plan.entries}


def as_expr(value: int | str):
    return parse_expr(str(value))


def test_gemm_manifest_cost(tmp_path: Path):
    compile_file(ROOT / "samples" / "gemm.toml", tmp_path)
    manifest = json.loads((tmp_path / "gemm.manifest.json").read_text())
    gemm = next(e for e in manifest["entries"] if e["name"] == "gemm")
    assert gemm["cost"] == {
        "bytes_read": "4*K*M + 4*K*N",
        "bytes_written": "4*M*N",
        "flops": "2*K*M*N",
        "transcendentals": 0,
    }
    assert gemm["kernels"][0]["flops"] == "2*K*M*N"


def test_entry_cost_is_the_sum_of_its_kernels(tmp_path: Path):
    compile_file(ROOT / "samples" / "attention.toml", tmp_path)
    (entry,) = json.loads((tmp_path / "attention.manifest.json").read_text())["entries"]
    for key in ("flops", "transcendentals", "bytes_read", "bytes_written"):
        total = sum((as_expr(k["cost"][key]) for k in entry["kernels"]), parse_expr("0"))
        assert total == as_expr(entry["cost"][key]), key
    assert degree(as_expr(entry["cost"]["flops"])) == 3  # 2*D*T*T: the two products
    assert degree(as_expr(entry["cost"]["transcendentals"])) == 2  # exp per score


def test_counts_ops_calls_and_reductions(tmp_path: Path):
    source = tmp_path / "m.toml"
    source.write_text(
        '[composite.m]\ninputs = ["x: f32[N, K]"]\noutputs = ["y: f32[N]"]\n'
        'body = "y[i] = sum[k](exp(x[i, k]) * 2.0)"\n'
    )
    cost = plan_costs(source, "2")["m"]
    assert cost.flops == parse_expr("3*K*N")  # exp, mul, and the sum's add per element
    assert cost.transcendentals == parse_expr("K*N")
    assert cost.bytes_read == parse_expr("4*K*N") and cost.bytes_written == parse_expr("4*N")


def test_a_padded_convolution_counts_its_multiply_adds_not_its_bounds_checks():
    """The guard of a padded window (four comparisons and three `&` per tap) is index arithmetic
    the C compiler hoists: 2 flops per multiply-add, as the profile's share of the peak needs."""
    (cost,) = plan_costs(ROOT / "samples" / "conv2d.toml", "2").values()
    assert cost.flops == parse_expr("18*C*H*K*N*W")  # 9 taps, a multiply and an add each


def test_arithmetic_on_data_counts_even_beside_indices(tmp_path: Path):
    source = tmp_path / "m.toml"
    source.write_text(
        '[composite.m]\ninputs = ["x: f32[N]"]\noutputs = ["y: f32[N]"]\n'
        'body = "y[i] = where(i * 2 + 1 < N, x[i] * 2.0, x[i] + x[i] * cast(i, f32))"\n'
    )
    # x*2, x*i (i's cast is free) and the add count; `i * 2 + 1 < N` does not
    assert plan_costs(source, "2")["m"].flops == parse_expr("3*N")


def test_equal_subexpressions_count_once(tmp_path: Path):
    plan = plan_file(str(ROOT / "samples" / "gemm.toml"), Options(runtime("clang"), opt="2"))
    relu = next(e for e in plan.entries if e.name == "gemm_relu")  # where(0 < v, v, 0): v written twice
    (kernel,) = relu.schedule.kernels
    assert kernel_cost(relu.schedule.graph, kernel).flops == parse_expr("2*K*M*N + 2*M*N")


def test_degree_and_comparison_rule():
    assert [degree(parse_expr(t)) for t in ("7", "2*K*M*N + 4*M", "(N + 1)//2 * M", "N*N*N + 5*N")] == [0, 3, 2, 3]
    assert no_more_than(parse_expr("1000*N*N"), parse_expr("N*N*N"))  # the higher degree loses
    assert not no_more_than(parse_expr("N*N*N"), parse_expr("1000*N*N"))
    assert no_more_than(parse_expr("3*N*K"), parse_expr("4*N*K"))
    assert at_reference(parse_expr("N + 1")) == (1 << 20) + 1


@pytest.mark.parametrize("case", CASES, ids=[case.composite for case in CASES])
def test_fused_flops_keep_the_degree_as_written(case: Natural):
    """-O0 runs the program as written (one kernel per value); -O2 fuses: the degree of the flop
    and transcendental polynomials stays, and no reduction is recomputed per element (the fused
    counts are at most twice the written ones, at any size)."""
    written = plan_costs(NATURAL / case.file, "0")[case.composite]
    fused = plan_costs(NATURAL / case.file, "2")[case.composite]
    assert degree(written.flops) == case.degree
    assert degree(fused.flops) == case.degree
    assert at_reference(fused.flops) <= 2 * at_reference(written.flops)
    assert at_reference(fused.transcendentals) <= 2 * at_reference(written.transcendentals)


def test_why_not_fused_names_the_recomputation():
    plan = plan_file(str(NATURAL / "groupnorm_natural.toml"), Options(runtime("clang"), opt="2"))
    notes = "\n".join(plan.entries[0].schedule.notes)
    assert "var: materialised (would recompute var per element of y" in notes
    assert "mu: materialised (would recompute mu per element of var" in notes


def test_reshaped_group_norm_has_no_division_in_its_loops(tmp_path: Path):
    """The reshape round trip leaves no division of compound index arithmetic in the loads after
    simplify-indices and coalesce-reductions: only plain names divided (the channel's group
    `c // (C // 32)`, a coalesced pixel `hw // W`, `hw % W`, which the flat address undoes)."""
    plan = plan_file(str(NATURAL / "groupnorm_natural.toml"), Options(runtime("clang"), opt="2"))
    graph = plan.entries[0].schedule.graph
    divided = [
        atom.args[0]
        for c in graph.computes
        for ld in loads(c.body)
        for e in ld.index
        for monomial, _ in e.terms
        for atom, _ in monomial
        if isinstance(atom, Call)
    ]
    assert divided and all(e.as_symbol() is not None for e in divided), divided
    assert len(plan.entries[0].schedule.kernels) == 1  # statistics and normalisation: one pass over rows


GROUPED = """
[composite.gn]
inputs = ["x: f32[N, C, H, W]", "gamma: f32[C]", "beta: f32[C]"]
outputs = ["y: f32[N, C, H, W]"]
where = ["C % 8 == 0"]
body = \"\"\"
g = x.reshape(N, 8, SPELLING)
mu = g.mean(axis=2, keepdims=True)
var = ((g - mu) ** 2).mean(axis=2, keepdims=True)
z = ((g - mu) / sqrt(var + 1e-5)).reshape(N, C, H, W)
y = z * gamma[:, None, None] + beta[:, None, None]
\"\"\"
"""


def test_reshape_with_minus_one_is_the_reshape_written_out(tmp_path: Path):
    """reshape(x, [N, 8, -1]) under `C % 8 == 0` infers (C // 8)*H*W (the batch cancels, 8 divides
    C exactly) and schedules exactly as that size written out; it was C*H*N*W // (8*N), a division
    of the whole size on every access of a group."""
    schedules = []
    for spelling in ("-1", "(C // 8) * H * W"):
        path = tmp_path / f"gn{len(schedules)}.toml"
        path.write_text(GROUPED.replace("SPELLING", spelling))
        (entry,) = plan_file(str(path), Options(runtime("clang"), opt="2")).entries
        schedules.append(format_schedule(entry.schedule))
    assert schedules[0] == schedules[1]
    assert "H*W*(C // 8)" in schedules[0] and "8*(C // 8)" not in schedules[0] and "// (8*N)" not in schedules[0]


def test_emit_schedule_and_debug_print_the_cost(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "catenc", "compile", str(ROOT / "samples" / "gemm.toml"), "-o", str(tmp_path),
         "--emit", "schedule", "--debug", "1", "-D", "M=64", "-D", "N=32", "-D", "K=16"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    schedule = (tmp_path / "gemm.schedule.txt").read_text()
    assert "    cost: 65536 flops, 0 transcendental, 6144 bytes read, 8192 written" in schedule
    assert "intensity 4.57 flops/byte" in result.stderr  # 65536 / (6144 + 8192)
