"""A schedule decision changes speed, never results: random legal schedules over the op library
and the samples compute what the reference computes.

The schedule is data (catenc/schedule/kernels.py: `Decisions` per kernel, gemm tiles per dtype);
`Options.tune` replaces the heuristics' choices before storage is planned, the seam a tuner uses.
Each kernel here gets decisions drawn from a generator seeded by the case and the kernel's name,
so a failure reproduces: the test id and the printed schedule say which choices broke it.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import runtime

from catenc.build import BuildRequest, build
from catenc.driver import plan_file
from catenc.loader import load
from catenc.plan import Options
from catenc.schedule.kernels import Decisions, Schedule, format_schedule
from catenc.schedule.tiles import CTYPES, GemmTiles
from catenc.testing.check import check_entries
from catenc.testing.coverage import run_coverage

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted(str(p.relative_to(ROOT)) for p in [*ROOT.glob("samples/*.toml"), *ROOT.glob("samples/*.yaml")]) + [
    "samples/gpt2/gpt2.toml"
]


def random_decisions(rng: random.Random) -> Decisions:
    return Decisions(
        parallel=rng.random() < 0.5,
        parallel_work=rng.choice([0, 1, 4096, 1 << 16]),
        vector_lanes=rng.choice([0, 1, 4, 8, 16]),
        jam=rng.choice([1, 2, 3, 4]),
        vector_math=rng.random() < 0.5,
        interchange=rng.random() < 0.5,
    )


def random_tiles(rng: random.Random, dtype: str) -> GemmTiles:
    """Legal tiles (GemmTiles.check): nr a multiple of the lanes, mc of mr, nc of nr."""
    vector_bytes = rng.choice([16, 32, 64])
    lanes = vector_bytes // CTYPES[dtype][1]
    mr, nr = rng.randint(1, 8), lanes * rng.randint(1, 4)
    tiles = GemmTiles(mr, nr, rng.choice([1, 5, 64, 256]), mr * rng.randint(1, 8), nr * rng.randint(1, 8), vector_bytes)
    tiles.check(dtype)
    return tiles


def random_tune(seed: int):
    """A tuner that draws every decision at random (deterministic in the seed and kernel names)."""

    def tune(schedule: Schedule) -> Schedule:
        def rng(name: str) -> random.Random:
            return random.Random(seed * 1_000_003 + zlib.crc32(name.encode()))

        kernels = tuple(replace(k, decisions=random_decisions(rng(k.name))) for k in schedule.kernels)
        # one gemm support per dtype serves a whole file: the tiles depend on the dtype alone
        tiles = tuple((dtype, random_tiles(rng(dtype), dtype)) for dtype, _ in schedule.tiles)
        return replace(schedule, kernels=kernels, tiles=tiles)

    return tune


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("sample", SAMPLES)
def test_samples_under_random_schedules(tmp_path: Path, sample: str, seed: int) -> None:
    rt = runtime()
    # gpt2's whole networks stack their blocks: under the default schedule their logits already sit
    # at 84% of the tolerance --test derives for one block's sums, so any reordering of those sums
    # crosses it; each block is held to its own tolerance instead.
    blocks = ("gpt2_block", "gpt2_step_block") if "gpt2" in sample else ()
    options = Options(rt, rt.validate_config({}), opt="2", tune=random_tune(seed), composites=blocks)
    plan = plan_file(str(ROOT / sample), options)
    written = build(plan, options, BuildRequest(str(ROOT / sample), str(tmp_path), ("c", "h", "manifest", "so")))
    sizes = {"T": 5, "S": 3} if "gpt2" in sample else {}  # gpt2 leaves its lengths to the caller
    checks, lines = check_entries(plan, load(written["manifest"]), sizes, seed=seed)
    schedules = "\n".join(format_schedule(e.schedule) for e in plan.entries)
    assert checks and all(c.ok for c in checks), "\n".join(lines) + "\n" + schedules


def test_random_tune_changes_the_schedule() -> None:
    """The seam is real: the tuned schedule differs from the heuristics' and lowering reads it."""
    rt = runtime()
    config = rt.validate_config({})
    path = str(ROOT / "samples/gemm.toml")
    default = plan_file(path, Options(rt, config, opt="2"))
    tuned = plan_file(path, Options(rt, config, opt="2", tune=random_tune(3)))
    for a, b in zip(default.entries, tuned.entries):
        assert [k.decisions for k in a.schedule.kernels] != [k.decisions for k in b.schedule.kernels]
        assert [k.decisions for k in b.kernels] == [k.decisions for k in b.schedule.kernels]
        assert a.schedule.tiles != b.schedule.tiles


def test_op_library_under_random_schedules() -> None:
    """Every op of the library in f32, f16 and i32 (f64 takes f32's code paths at half the lanes),
    every kernel under random decisions."""
    rt = runtime()
    coverage = run_coverage(rt, rt.validate_config({}), dtypes={"f32", "f16", "i32"}, tune=random_tune(7))
    bad = [
        f"{row.name} {dtype}: {cell.status} {cell.reason}"
        for row in coverage.rows
        for dtype, cell in row.cells.items()
        if cell.status in ("fail", "error", "xpass")
    ]
    counts = coverage.counts()
    assert counts["pass"] > 100 and not bad, "\n".join(bad)
