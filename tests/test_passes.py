"""The pass pipeline (docs/cli.md, "Optimisation levels and passes"): distinct pipelines per -O
level, and the instruments --print-passes, --dump-after, --disable-pass, --time-passes and
--verify-ir, through the CLI as a user types them and through the manager directly."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import runtime

from catenc.driver import plan_file
from catenc.ir.nodes import Graph
from catenc.passes.manager import Instruments, Pass, Pipeline, VerifyError, run_pipeline
from catenc.passes.pipelines import ROW_JAM, ROW_JAM_O3, Target, build_pipeline
from catenc.plan import Options

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = str(ROOT / "samples/softmax.toml")
LEVELS = ("0", "1", "2", "3")


def pipeline(level: str, runtime_name: str = "clang") -> Pipeline:
    rt = runtime(runtime_name)
    return build_pipeline(level, Target.of(rt, rt.validate_config({})))


def names(level: str, runtime_name: str = "clang") -> list[str]:
    return [p.name for p in pipeline(level, runtime_name).passes]


def catenc(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "catenc", *args], capture_output=True, text=True, cwd=cwd)


def plan(level: str, **options):
    rt = runtime()
    return plan_file(SOFTMAX, Options(rt, rt.validate_config({"OMP": "1"}), opt=level, **options))


def test_every_level_has_its_own_pipeline() -> None:
    pipelines = {level: names(level) for level in LEVELS}
    printed = {pipeline(level).format().split("\n", 1)[1] for level in LEVELS}
    assert len(printed) == len(LEVELS)  # -O3 runs -O2's passes with other parameters
    assert "fuse-rows" not in pipelines["0"] and "inline-computes" not in pipelines["0"]
    assert "fuse-rows" in pipelines["1"] and "vector-reductions" not in pipelines["1"]
    assert {"parallelize", "vector-reductions", "vector-math", "take-contractions"} <= set(pipelines["2"])
    assert names("fast") == pipelines["3"]


def test_levels_differ_in_what_they_decide() -> None:
    """-O0 one kernel per value, -O1 fused but plain, -O2 threads, lanes and vector math, -O3 jams deeper."""
    o0, o1, o2, o3 = (plan(level).entries[0] for level in LEVELS)
    assert len(o0.kernels) == 4 and len(o1.kernels) == len(o2.kernels) == 1
    plain = o1.schedule.kernels[0].decisions
    assert not plain.parallel and not plain.vector_lanes and plain.jam == 1 and not plain.vector_math
    fast = o2.schedule.kernels[0].decisions
    assert fast.parallel and fast.vector_lanes >= 4 and fast.jam == ROW_JAM and fast.vector_math
    assert o3.schedule.kernels[0].decisions.jam == ROW_JAM_O3
    assert [k.decisions for k in o2.kernels] == [k.decisions for k in o2.schedule.kernels]


def test_gpu_pipeline_skips_the_cpu_passes_and_lowers_to_work_groups() -> None:
    gpu = names("2", "opencl")
    assert gpu[-1] == "lower-gpu"
    assert not {"parallelize", "vector-reductions", "split-constant-slices", "choose-gemm-tiles"} & set(gpu)


def test_print_passes_lists_the_pipeline_and_marks_disabled(tmp_path: Path) -> None:
    done = catenc("compile", SOFTMAX, "-O1", "--print-passes", "--disable-pass", "fuse-rows", "-S", "-o", "out",
                  cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"pipeline -O1: {len(names('1'))} passes"
    rows = {line.split()[1]: line for line in lines[1:]}
    assert list(rows) == names("1")
    assert "disabled" in rows["fuse-rows"] and "required" in rows["build-ir"] and "optional" in rows["inline-computes"]


def test_dump_after_writes_each_named_pass_beside_the_outputs(tmp_path: Path) -> None:
    done = catenc("compile", SOFTMAX, "--dump-after", "fuse-rows,lower-loops", "-S", "-o", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("*.txt")) == ["softmax.01.fuse-rows.txt", "softmax.02.lower-loops.txt"]
    assert (out / "softmax.01.fuse-rows.txt").read_text().startswith("schedule softmax: 1 kernel(s)")
    assert (out / "softmax.02.lower-loops.txt").read_text().startswith("kernel softmax_k0(")
    manifest = json.loads((out / "softmax.manifest.json").read_text())
    roles = {f["path"]: f["role"] for f in manifest["files"]}
    assert roles["softmax.01.fuse-rows.txt"] == "pass_dump"


def test_dump_after_all_dumps_every_pass_in_order(tmp_path: Path) -> None:
    done = catenc("compile", SOFTMAX, "-O0", "--dump-after", "all", "-S", "-o", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    dumped = sorted(p.name for p in (tmp_path / "out").glob("*.txt"))
    assert dumped == [f"softmax.{n:02}.{name}.txt" for n, name in enumerate(names("0"), 1)]


def test_disabling_a_pass_changes_the_code_not_the_results(tmp_path: Path) -> None:
    done = catenc("compile", SOFTMAX, "--disable-pass", "fuse-rows", "--disable-pass", "vector-math", "--test", "",
                  "-o", "out", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok" in done.stdout and "MISMATCH" not in done.stdout
    entry = plan("2", disabled_passes=("fuse-rows", "vector-math")).entries[0]
    assert len(entry.kernels) > 1 and not any(k.decisions.vector_math for k in entry.kernels)
    assert entry.schedule.kernels[1].reason == "fusion is off (-O0, or fuse-rows disabled)"
    manifest = json.loads((tmp_path / "out/softmax.manifest.json").read_text())
    assert manifest["runtime"]["disabled_passes"] == ["fuse-rows", "vector-math"]


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (
            ("--disable-pass", "lower-loops"),
            "catenc: error: pass 'lower-loops' is required: each kernel to a loop nest",
        ),
        (("--disable-pass", "fuse-rowz"), "catenc: error: no pass 'fuse-rowz' in the -O2 pipeline (build-ir, "),
        (("-O0", "--dump-after", "fuse-rows"), "catenc: error: no pass 'fuse-rows' in the -O0 pipeline (build-ir, "),
    ],
)
def test_bad_pass_names_are_errors(tmp_path: Path, flag: tuple[str, ...], message: str) -> None:
    done = catenc("compile", SOFTMAX, *flag, "-S", "-o", "out", cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.startswith(message), done.stderr
    assert not (tmp_path / "out").exists()


def test_time_passes_prints_every_pass(tmp_path: Path) -> None:
    done = catenc("compile", SOFTMAX, "--time-passes", "-S", "-o", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("pass times (total ")
    assert [line.split()[0] for line in lines[1:]] == names("2")


def _break_dtypes(graph: Graph) -> Graph:
    """A buggy pass: the first compute's buffer gets another dtype than its body."""
    from catenc.dtypes import DTYPES

    first = graph.computes[0].name
    other = DTYPES["f64"] if graph.buffer(first).dtype.name != "f64" else DTYPES["f32"]
    buffers = tuple(replace(b, dtype=other) if b.name == first else b for b in graph.buffers)
    return replace(graph, buffers=buffers)


def test_verifier_names_the_pass_that_broke_the_ir() -> None:
    rt = runtime()
    pipeline = build_pipeline("1", Target.of(rt, rt.validate_config({})), "softmax")
    graph_kind = pipeline.passes[1].takes
    bad = Pass("break-dtypes", "a deliberately wrong pass", graph_kind, graph_kind, _break_dtypes)
    broken = Pipeline("1", pipeline.passes[:2] + (bad,) + pipeline.passes[2:])
    program = plan("1").entries[0].program
    assert run_pipeline(pipeline, program, Instruments(verify=True))  # the real pipeline is clean
    with pytest.raises(VerifyError, match=r"the graph after pass 'break-dtypes' is malformed:\n  "):
        run_pipeline(broken, program, Instruments(verify=True))
    # without --verify-ir the same bug goes on to later passes
    run_pipeline(broken, program, Instruments(verify=False))


def test_a_pipeline_whose_passes_do_not_chain_is_refused() -> None:
    rt = runtime()
    passes = build_pipeline("2", Target.of(rt, rt.validate_config({}))).passes
    with pytest.raises(ValueError, match="build-ir gives a graph, lower-loops takes a schedule"):
        Pipeline("2", (passes[0], next(p for p in passes if p.name == "lower-loops")))


class _Record:
    """An instrument that logs every hook call and skips the passes it is told to."""

    def __init__(self, tag: str, log: list[tuple[str, str, str]], skip: frozenset[str] = frozenset()) -> None:
        self.tag, self.log, self.skip = tag, log, skip

    def before(self, p: Pass, structure: object) -> bool:
        self.log.append((self.tag, "before", p.name))
        return p.name not in self.skip

    def after(self, p: Pass, structure: object) -> None:
        assert isinstance(structure, p.gives.kind)
        self.log.append((self.tag, "after", p.name))


def test_instruments_are_hooks_before_and_after_each_pass() -> None:
    """Every `before` sees every pass, one False skips it; the `after`s of a pass that ran come in reverse order."""
    log: list[tuple[str, str, str]] = []
    pipe = pipeline("1")
    program = plan("1").entries[0].program
    trace = run_pipeline(pipe, program, [_Record("outer", log), _Record("inner", log, frozenset({"fuse-rows"}))])
    ran = [p.name for p in pipe.passes if p.name != "fuse-rows"]
    assert len(trace) == len(ran)
    schedule = trace[ran.index("plan-storage")]
    assert [k.members[0].name for k in schedule.kernels] == ["t", "t_1", "y"]  # inlined, not fused
    expected = []
    for p in pipe.passes:
        expected += [("outer", "before", p.name), ("inner", "before", p.name)]
        if p.name != "fuse-rows":
            expected += [("inner", "after", p.name), ("outer", "after", p.name)]
    assert log == expected


def test_remarks_travel_in_the_graph_and_a_pipeline_runs_the_same_twice() -> None:
    """inline-computes' remarks are part of the graph it gives (and of its dump), then of the schedule."""
    pipe = pipeline("1")
    passes = [p.name for p in pipe.passes]
    program = plan("1").entries[0].program
    first, second = (run_pipeline(pipe, program, Instruments()) for _ in range(2))
    graph = first[passes.index("inline-computes")]
    assert graph.notes == (
        "t: materialised (would recompute t per element of t_1 (D*N evaluations of a reduction with N elements))",
        "t_1: materialised (would recompute t_1 per element of y (D*N evaluations of a reduction with N elements))",
    )
    assert (
        pipe.passes[passes.index("inline-computes")]
        .gives.format(graph)
        .endswith("}\nnote: " + "\nnote: ".join(graph.notes))
    )
    assert first[passes.index("fold-constants")].notes == ()
    form = passes.index("form-kernels")
    assert first[form].notes == second[form].notes == graph.notes
    assert first[form].graph.notes == ()  # the notes moved to the schedule
