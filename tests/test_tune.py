"""The tuner's search, the tuning file and --tuning (docs/cli.md, "Tuning").

The search is checked against synthetic measurements (a time computed from each kernel's
decisions, no clock): it must find the optimum of the landscape, resume from a file, keep its
best when interrupted, and keep the heuristics where they measured faster. The file is checked
by compiling with it: random and hand-edited decisions change the schedule, never results.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import runtime

from catenc.driver import plan_file
from catenc.plan import Options
from catenc.runtime.machine import host_machine, toolchain_target
from catenc.schedule.kernels import Schedule
from catenc.schedule.tuning_file import (
    FORMAT,
    Tuning,
    TuningEntry,
    decisions_json,
    kernel_signature,
    load_tuning,
    parse_tuning,
)
from catenc.tune import search as search_module
from catenc.tune.search import Search, collect_knobs, entries_of, run_search
from catenc.tune.tuner import heuristic_schedules, tune_file

ROOT = Path(__file__).resolve().parents[1]
ATTENTION = str(ROOT / "samples" / "attention.toml")
BINDINGS = [{"T": 256, "D": 64}]


def options() -> Options:
    rt = runtime()
    return Options(rt, rt.validate_config({}))


def synthetic_seconds(schedule: Schedule) -> list[float]:
    """A landscape with one optimum per kernel: threads from 2**20 operations (above the softmax
    rows' work at T=256: one thread), vector math on, 4 rows jammed; gemm tiles best at kc=256, mr=4."""
    times = []
    for kernel in schedule.kernels:
        d = kernel.decisions
        t = (
            1.0
            + 0.5 * (not d.parallel)
            + 0.3 * (not d.vector_math)
            + 0.1 * abs(d.jam - 4)
            + 0.2 * (d.parallel_work != 1 << 20)
        )
        times.append(t * 1e-3)
    for _, tiles in schedule.tiles:
        penalty = 0.05 * abs(tiles.kc - 256) / 128 + 0.1 * abs(tiles.mr - 4)
        times = [t + penalty * 1e-3 if k.contraction else t for t, k in zip(times, schedule.kernels)]
    return times


class FakeMeasure:
    """Times from synthetic_seconds of the tuned schedules; a clock that one measurement advances."""

    def __init__(self, schedules: list[Schedule], noise: dict[int, float] | None = None) -> None:
        self.schedules = schedules
        self.calls = 0
        self.now = 0.0
        self.noise = noise or {}  # call number -> factor on every time of that call
        self.seen: list[list[Schedule]] = []

    def __call__(self, tune) -> list[dict[str, list[float]]]:
        self.calls += 1
        self.now += 1.0
        tuned = [tune(s) for s in self.schedules]
        self.seen.append(tuned)
        factor = self.noise.get(self.calls, 1.0)
        return [{s.graph.name: [factor * t for t in synthetic_seconds(s)] for s in tuned}]

    def clock(self) -> float:
        return self.now


def searched(budget: float = 200) -> tuple[Search, FakeMeasure]:
    _, schedules = heuristic_schedules(ATTENTION, options())
    knobs = collect_knobs(schedules, BINDINGS, threads=True, lanes=16)
    search = Search(knobs)
    measure = FakeMeasure(schedules)
    run_search(search, measure, budget, clock=measure.clock)
    return search, measure


def test_search_finds_the_optimum_of_each_kernel_and_of_the_tiles() -> None:
    search, _ = searched()
    entries = {e.kernel.split(":")[0]: e for e in entries_of(search, host_machine(), {"runtime": "x"}, BINDINGS)}
    softmax = entries["attention_k1"].decisions
    assert softmax["vector_math"] is True and softmax["jam"] == 4 and softmax["parallel_work"] == 1 << 20
    gemm = entries["attention_k0"].decisions
    assert gemm["parallel_work"] == 1 << 20  # a gemm's searchable decisions: its threads
    tiles = entries["gemm tiles f32"].decisions
    assert tiles["kc"] == 256 and tiles["mr"] == 4
    for entry in entries.values():
        assert entry.seconds["tuned"] <= entry.seconds["heuristic"]


def test_search_measures_only_decisions_that_change_a_kernels_code() -> None:
    search, measure = searched()
    softmax_rows = next(k for k in search.knobs if k.label == "attention_k1")
    # thresholds of 2**12 to 2**18 are all below the rows' work at T=256: one candidate for them
    tried = {json.loads(c)["parallel_work"] for c in softmax_rows.measured if json.loads(c)["parallel"]}
    assert tried == {1 << 16, 1 << 20}
    gemm = next(k for k in search.knobs if k.label == "attention_k0")
    assert set(gemm.space) == {"parallel", "parallel_work"}  # no lanes, jam or vector math in a gemm
    softmax = next(k for k in search.knobs if k.label == "attention_k1")
    assert "interchange" not in softmax.space  # its reductions run along rows
    assert {"vector_math", "jam", "vector_lanes"} <= set(softmax.space)
    # a candidate is measured once: no round repeats one of a knob's candidates
    for knob in search.knobs:
        assert len(knob.queued) == len(set(knob.queued))


def test_the_budget_bounds_the_rounds_and_the_best_is_kept() -> None:
    search, measure = searched(budget=6)
    # the rounds within 85% of the budget, then the confirmation: the best and the heuristics in turns
    assert measure.calls <= 6 + 2 * search_module.CONFIRM_ROUNDS
    for knob in search.knobs:
        if knob.measured:
            assert knob.measured[knob.best()] <= knob.measured[knob.heuristic]


def test_the_heuristics_stay_where_a_candidate_was_fast_only_by_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    _, schedules = heuristic_schedules(ATTENTION, options())

    def run(confirmed: bool) -> list:
        search = Search(collect_knobs(schedules, BINDINGS, threads=True, lanes=16))
        # every time of the second measurement (each knob's first neighbour: one thread, which is
        # slower) reads 10x faster than it is: a spike of the clock
        measure = FakeMeasure(schedules, noise={2: 0.1})
        if not confirmed:
            monkeypatch.setattr(search_module, "confirm", lambda *args, **kw: None)
        run_search(search, measure, 3, clock=measure.clock)
        return [json.loads(k.best())["parallel"] for k in search.knobs if "parallel" in k.space]

    assert run(confirmed=True) == [True, True, True]  # the confirmation rejects the spike
    assert run(confirmed=False) == [False, False, False]  # which the search alone would have kept


def test_tune_file_resumes_and_keeps_other_machines_entries(tmp_path: Path) -> None:
    out = tmp_path / "attention.tuning.json"
    other = TuningEntry("deadbeef", "k", {"arch": "aarch64", "features": [], "cores": 4}, {"runtime": "clang"}, {})
    out.write_text(Tuning((other,)).dumps())
    _, schedules = heuristic_schedules(ATTENTION, options())
    first = FakeMeasure(schedules)
    tune_file(ATTENTION, options(), BINDINGS, 1e9, str(out), lambda plan, bindings: first)
    written = load_tuning(str(out))
    assert any(e.signature == "deadbeef" for e in written.entries)
    assert len(written.entries) == 1 + 4  # three kernels and the f32 tiles
    second = FakeMeasure(schedules)
    tune_file(ATTENTION, options(), BINDINGS, 1e9, str(out), lambda plan, bindings: second)
    assert second.calls < first.calls  # the first run's trials count as measured
    assert load_tuning(str(out)).dumps() == out.read_text()


def test_an_interrupted_search_writes_its_best_so_far(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    _, schedules = heuristic_schedules(ATTENTION, options())
    measure = FakeMeasure(schedules)

    def interrupted(tune):
        if measure.calls == 4:
            raise KeyboardInterrupt
        return measure(tune)

    result = tune_file(ATTENTION, options(), BINDINGS, 1e9, str(out), lambda plan, bindings: interrupted)
    assert result.interrupted and result.rounds == 4
    assert load_tuning(str(out)).entries  # what was measured before the interrupt


def test_free_sizes_must_be_given(tmp_path: Path) -> None:
    from catenc.diagnostics import CatencError

    never = lambda plan, bindings: FakeMeasure([])  # noqa: E731
    with pytest.raises(CatencError, match="attention has free sizes T, D: give them all in one --sizes"):
        tune_file(ATTENTION, options(), [], 1, str(tmp_path / "t.json"), never)
    with pytest.raises(CatencError, match="attention has free sizes T, D"):
        tune_file(ATTENTION, options(), [{"T": 8}], 1, str(tmp_path / "t.json"), never)
    with pytest.raises(CatencError, match="X is not a free size here"):
        tune_file(ATTENTION, options(), [{"T": 8, "D": 4, "X": 1}], 1, str(tmp_path / "t.json"), never)


# --- the file, applied by compile --tuning ------------------------------------------------------


def random_tuning(path: str, seed: int, opts: Options) -> Tuning:
    """Entries for every kernel of the file, for this machine, with random legal decisions."""
    rng = random.Random(seed)
    machine, target = host_machine(), toolchain_target(opts.runtime, opts.config)
    entries = []
    for schedule in heuristic_schedules(path, opts)[1]:
        for kernel in schedule.kernels:
            d = decisions_json(kernel.decisions) | {
                "parallel": rng.random() < 0.5,
                "parallel_work": rng.choice([0, 1, 4096, 1 << 16]),
                "vector_lanes": rng.choice([0, 1, 4, 8, 16]),
                "jam": rng.choice([1, 2, 3, 4]),
                "vector_math": rng.random() < 0.5,
                "interchange": rng.random() < 0.5,
            }
            entries.append(TuningEntry(kernel_signature(schedule.graph, kernel), kernel.name, machine, target, d))
    return Tuning().merged(entries)


def catenc(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "catenc", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(
    "sample,sizes",
    [("attention.toml", "T=37,D=16"), ("layernorm.toml", "N=7,D=33"), ("softmax.toml", "N=5,D=70")],
)
def test_random_tuning_files_never_change_results(tmp_path: Path, sample: str, sizes: str, seed: int) -> None:
    path = str(ROOT / "samples" / sample)
    tuning = tmp_path / "t.json"
    tuning.write_text(random_tuning(path, seed, options()).dumps())
    done = catenc("compile", path, "-o", str(tmp_path), "--tuning", str(tuning), "-v", "--test", sizes)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "from " + str(tuning) in done.stdout  # every kernel took the file's decisions
    assert "without an entry" not in done.stdout


def test_a_hand_edited_file_changes_no_result_and_says_what_it_ignored(tmp_path: Path) -> None:
    opts = options()
    tuning = random_tuning(ATTENTION, 5, opts)
    edited = [
        replace(e, decisions={"jam": 0, "vector_lanes": 3, "parallel": "yes", "warp_size": 32}) for e in tuning.entries
    ]
    path = tmp_path / "t.json"
    path.write_text(Tuning(tuple(edited)).dumps())
    done = catenc("compile", ATTENTION, "-o", str(tmp_path / "a"), "-S", "--tuning", str(path), "-v")
    assert done.returncode == 0, done.stderr
    for what in ("jam must be 1 to 8, not 0", "vector_lanes must be 0 or a power of two", "parallel must be true"):
        assert what in done.stdout
    assert "unknown decision 'warp_size' ignored" in done.stdout
    plain = catenc("compile", ATTENTION, "-o", str(tmp_path / "b"), "-S")
    assert plain.returncode == 0
    # every value was illegal: the heuristics' code, byte for byte
    assert (tmp_path / "a" / "attention.c").read_bytes() == (tmp_path / "b" / "attention.c").read_bytes()


def test_entries_of_another_machine_or_compiler_do_not_apply(tmp_path: Path) -> None:
    opts = options()
    tuning = random_tuning(ATTENTION, 1, opts)
    foreign = [replace(e, machine=e.machine | {"features": ["asimd"]}) for e in tuning.entries]
    foreign += [
        replace(e, target=e.target | {"compiler": "gcc (Debian 12.2.0-14) 12.2.0 (other)"}) for e in tuning.entries
    ]
    path = tmp_path / "t.json"
    path.write_text(Tuning().merged(foreign).dumps())
    done = catenc("compile", ATTENTION, "-o", str(tmp_path / "a"), "-S", "--tuning", str(path), "-v")
    assert done.returncode == 0, done.stderr
    kept = "3 kernel(s) without an entry for this machine and toolchain keep the heuristics: attention_k0, "
    assert kept in done.stdout
    assert catenc("compile", ATTENTION, "-o", str(tmp_path / "b"), "-S").returncode == 0
    assert (tmp_path / "a" / "attention.c").read_bytes() == (tmp_path / "b" / "attention.c").read_bytes()


@pytest.mark.parametrize(
    "text,where,message",
    [
        ('{"format": "catenc.tuning/1",\n "entries": [1,]}', ":2:16:", "not a tuning file"),
        ('{"format": "catenc.tuning/9", "entries": []}', ":1:2:", "not a catenc.tuning/1 file"),
        ('{"format": "catenc.tuning/1", "entries": [\n  {"signature": 3}]}', ":2:4:", 'entry 0: "signature" missing'),
        ("[]", ":1:1:", "not a catenc.tuning/1 file"),
    ],
)
def test_a_file_that_is_not_a_tuning_file_is_an_error_at_its_place(
    tmp_path: Path, text: str, where: str, message: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    done = catenc("compile", ATTENTION, "-o", str(tmp_path), "-S", "--tuning", str(path))
    assert done.returncode == 1
    assert f"{path}{where} error: {message}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not list(tmp_path.glob("attention.*"))


def test_a_missing_tuning_file_is_an_error(tmp_path: Path) -> None:
    done = catenc("compile", ATTENTION, "-o", str(tmp_path), "-S", "--tuning", str(tmp_path / "none.json"))
    assert done.returncode == 1 and "cannot read the tuning file" in done.stderr


def test_signatures_ignore_names_and_see_the_computation(tmp_path: Path) -> None:
    source = Path(ATTENTION).read_text()
    renamed = tmp_path / "renamed.toml"
    renamed.write_text(source.replace("scores", "logits_renamed").replace("probs", "weights_renamed"))
    assert renamed.read_text() != source

    def signatures(path: str) -> list[str]:
        return [kernel_signature(s.graph, k) for s in heuristic_schedules(path, options())[1] for k in s.kernels]

    assert signatures(str(renamed)) == signatures(ATTENTION)
    changed = tmp_path / "changed.toml"
    changed.write_text(source.replace("exp(", "exp(0.5 * "))
    assert signatures(str(changed)) != signatures(ATTENTION)


def test_the_file_is_written_in_one_order_whatever_the_entries_order(tmp_path: Path) -> None:
    tuning = random_tuning(ATTENTION, 9, options())
    shuffled = list(tuning.entries)
    random.Random(1).shuffle(shuffled)
    assert Tuning().merged(shuffled).dumps() == tuning.dumps()
    document = json.loads(tuning.dumps())
    assert document["format"] == FORMAT
    assert parse_tuning(tuning.dumps(), "x").dumps() == tuning.dumps()


def test_plan_with_a_tuning_applies_it() -> None:
    opts = options()
    tuning = random_tuning(ATTENTION, 4, opts)
    plan = plan_file(ATTENTION, replace(opts, tuning=tuning))
    entry = {e.signature: e for e in tuning.entries}
    for kernel in plan.entries[0].schedule.kernels:
        assert kernel.decisions.jam in (1, 2, 3, 4)
    applied = [n for n in plan.entries[0].schedule.notes if n.startswith("tuning:")]
    assert len(applied) == len(plan.entries[0].schedule.kernels) and entry


# --- the command, measuring for real (small sizes and budget: what it finds is not checked) ----


def test_catenc_tune_writes_a_file_that_compile_applies(tmp_path: Path) -> None:
    sample = str(ROOT / "samples" / "softmax.toml")
    out = tmp_path / "softmax.tuning.json"
    done = catenc("tune", sample, "--sizes", "N=64,D=96", "--sizes", "N=3,D=200", "--budget", "4s", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stdout and "softmax_k0" in done.stdout
    tuning = load_tuning(str(out))
    kernels = [e for e in tuning.entries if not e.signature.startswith("gemm-tiles")]
    assert kernels and all(e.sizes == ({"N": 64, "D": 96}, {"N": 3, "D": 200}) for e in kernels)
    assert all(e.seconds["tuned"] <= e.seconds["heuristic"] for e in kernels)
    compiled = catenc("compile", sample, "-o", str(tmp_path / "b"), "--tuning", str(out), "-v", "--test", "N=5,D=77")
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    assert "without an entry" not in compiled.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (["--budget", "soon"], "--budget soon: expected seconds, like 60s or 2m"),
        (["--budget", "-3s"], "--budget -3s: must be a positive time"),
        ([], 'softmax has free sizes N, D: give them all in one --sizes "N=...,D=..."'),
        (["--sizes", "N=4,D=x"], "--sizes: size 'D' must be an integer, got 'x'"),
        (["--sizes", "N=4,D=4,Q=1"], "--sizes N=4,D=4,Q=1: Q is not a free size here"),
        (["--sizes", "N=4,D=4", "--runtime", "opencl"], "cannot be timed here; tune with a host runtime"),
        (["--sizes", "N=4,D=-1"], "--sizes: size 'D' must not be negative"),
        (["--sizes", "N=99999999999,D=99999999"], "'softmax' at N=99999999999, D=99999999 computes 4*D*N = 3999"),
        (["--sizes", "N=100000000,D=100000000"], "needs 71.1 PiB for its inputs, outputs and workspace, more than"),
        (["--sizes", "N=4,D=4", "--sizes", "N=99999999999,D=99999999"], "beyond int64; give smaller sizes"),
        (["-D", "N=100000000", "-D", "D=100000000"], "'softmax' at N=100000000, D=100000000 needs 71.1 PiB"),
    ],
)
def test_catenc_tune_bad_input(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "t.json"
    done = catenc("tune", str(ROOT / "samples" / "softmax.toml"), "-o", str(out), *args)
    assert done.returncode == 1, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert "round" not in done.stderr  # nothing was measured
    assert not out.exists()


def test_catenc_tune_checks_the_constraints_before_measuring(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    done = catenc("tune", str(ROOT / "samples" / "layernorm.toml"), "--sizes", "N=4,D=0", "-o", str(out))
    assert done.returncode == 1, done.stderr
    assert "--sizes sizes {'N': 4, 'D': 0} violate the constraint 'D >= 1' of 'layernorm'" in done.stderr
    assert "round" not in done.stderr and not out.exists()


@pytest.mark.parametrize(
    "output,message",
    [
        ("existing", "-o {}: is a directory; give the path of the tuning file to write"),
        ("a-file/t.json", "-o {}: {} is not a directory"),
        ("/sys/catenc.tuning.json", "-o {}: cannot write in /sys: "),
    ],
)
def test_catenc_tune_checks_its_output_before_measuring(tmp_path: Path, output: str, message: str) -> None:
    (tmp_path / "existing").mkdir()
    (tmp_path / "a-file").write_text("")
    done = catenc("tune", str(ROOT / "samples" / "softmax.toml"), "--sizes", "N=4,D=4", "-o", output, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("catenc: error: " + message.format(output, tmp_path / "a-file")), done.stderr
    assert "round" not in done.stderr  # nothing was measured
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "existing"]
    assert not any((tmp_path / "existing").iterdir())
