"""What `catenc compile` leaves in -o, as make and concurrent or killed runs see it (docs/cli.md):
every output newer than its inputs after a successful run, modes under the umask, one run's
whole set of outputs at a time, no staging directory left behind by a killed run.

Each test runs catenc as a subprocess. Runs are stopped at a known point by a fake C compiler
(a shell script given as CC) that records its pid and then sleeps; probes of the compiler go to
the real one.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from catenc.build import BuildRequest, build
from catenc.driver import plan_file
from catenc.outputs import LOCK_FILE
from catenc.plan import Options
from catenc.runtime.descriptor import load_runtime

REPO = Path(__file__).resolve().parent.parent

MODEL = """\
[composite.gemm]
inputs = ["A: f32[M, K]", "B: f32[K, N]"]
outputs = ["C: f32[M, N]"]
body = "C[i, j] = sum[k](A[i, k] * B[k, j])"
"""

OUTPUTS = {"model.c", "model.h", "model.manifest.json", "libmodel.so"}
OLD_NS = 1_000_000_000 * 10**9  # 2001-09-09


def catenc(cwd: Path, *args: str, env: dict | None = None, umask: int = -1) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "catenc", "compile", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        umask=umask,
    )


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result


def real_cc() -> str:
    found = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert found, "the tests need a C compiler"
    return found


def stalling_cc(directory: Path) -> tuple[Path, Path]:
    """A CC that records its pid in `started` and sleeps when it builds the library; it runs the
    real compiler for everything else (catenc's probes). Returns (script, started)."""
    started = directory / "started"
    script = directory / "stall-cc"
    script.write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" libmodel.so "*) ;; *) exec {real_cc()} "$@";; esac\n'
        f"echo $$ > {started}.tmp && mv {started}.tmp {started}\n"
        "exec sleep 600\n"
    )
    script.chmod(0o755)
    return script, started


def start_stalled_compile(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """A compile into tmp_path/out, stopped inside its C compiler run; returns it and the
    compiler's pid."""
    script, started = stalling_cc(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "catenc", "compile", "model.toml", "-o", "out", "--config", "OMP=0"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CC": str(script)},
    )
    deadline = time.monotonic() + 120
    while not started.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the compile never reached its C compiler"
        time.sleep(0.05)
    return proc, int(started.read_text())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def staging_dirs(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob(".catenc-*"))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "model.toml").write_text(MODEL)
    return tmp_path


# --------------------------------------------------------------------------- #
# make: outputs newer than inputs, still atomic
# --------------------------------------------------------------------------- #


def test_unchanged_outputs_become_newer_than_the_input(work: Path) -> None:
    ok(catenc(work, "model.toml", "-o", "out", "-MD"))
    out = work / "out"
    names = OUTPUTS | {"model.d"}
    assert {p.name for p in out.iterdir()} == names
    for path in out.iterdir():
        os.utime(path, ns=(OLD_NS, OLD_NS))
    os.utime(work / "model.toml", ns=(OLD_NS + 10**9, OLD_NS + 10**9))  # edited, same content
    inodes = {p.name: p.stat().st_ino for p in out.iterdir()}
    verbose = ok(catenc(work, "model.toml", "-o", "out", "-MD", "-v"))
    input_time = (work / "model.toml").stat().st_mtime_ns
    for path in out.iterdir():
        assert path.stat().st_mtime_ns > input_time, f"{path.name} is older than its input: make reruns forever"
        assert path.stat().st_ino == inodes[path.name], f"{path.name} was rewritten with the same content"
    assert sorted(verbose.stdout.splitlines()) == sorted(f"catenc: unchanged out/{name}" for name in names)


def test_changed_outputs_are_reported_as_written(work: Path) -> None:
    first = ok(catenc(work, "model.toml", "-o", "out", "-S", "-v"))
    assert sorted(first.stdout.splitlines()) == [
        "catenc: wrote out/model.c", "catenc: wrote out/model.h", "catenc: wrote out/model.manifest.json",
    ]  # fmt: skip
    (work / "model.toml").write_text(MODEL.replace("[composite.gemm]", '[composite.gemm]\ndoc = "A product."'))
    second = ok(catenc(work, "model.toml", "-o", "out", "-S", "-v")).stdout.splitlines()
    assert "catenc: wrote out/model.h" in second, second  # the doc is in the header
    assert "catenc: wrote out/model.manifest.json" in second, second


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_every_output_honours_the_umask(work: Path, umask: int) -> None:
    ok(
        catenc(
            work, "model.toml", "-o", "out", "-MD", "-MF", "deps/model.d", "--emit", "c,h,manifest,so,ir", umask=umask
        )
    )
    modes = {p.name: p.stat().st_mode & 0o777 for p in [*(work / "out").iterdir(), work / "deps" / "model.d"]}
    expected = {name: (0o777 if name.endswith(".so") else 0o666) & ~umask for name in modes}
    assert modes == expected


def test_the_sample_makefile_does_nothing_the_second_time(tmp_path: Path) -> None:
    """samples/c/Makefile has no `touch` workaround: after catenc reruns on an input whose
    content did not change, make sees every output up to date."""
    shutil.copytree(REPO / "samples" / "c", tmp_path / "samples" / "c", ignore=shutil.ignore_patterns("build"))
    shutil.copy(REPO / "samples" / "gemm.toml", tmp_path / "samples")
    assert "touch" not in (tmp_path / "samples" / "c" / "Makefile").read_text()
    command = ["make", "-C", str(tmp_path / "samples" / "c"), f"CATENC={sys.executable} -m catenc", "build/gemm_demo"]
    first = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    for path in (tmp_path / "samples" / "c" / "build").iterdir():
        os.utime(path, ns=(OLD_NS, OLD_NS))
    os.utime(tmp_path / "samples" / "gemm.toml", ns=(OLD_NS + 10**9, OLD_NS + 10**9))
    second = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "catenc compile" in second.stdout, "the input is newer: catenc must run again"
    up_to_date = subprocess.run([*command[:-1], "-q", "build/gemm_demo"], capture_output=True, text=True)
    assert up_to_date.returncode == 0, "make still sees work to do after catenc ran:\n" + up_to_date.stdout


# --------------------------------------------------------------------------- #
# concurrent compiles into one -o
# --------------------------------------------------------------------------- #


def consistent(out: Path) -> None:
    """The manifest describes exactly the files beside it."""
    data = json.loads((out / "model.manifest.json").read_text())
    for record in data["files"]:
        digest = hashlib.sha256((out / record["path"]).read_bytes()).hexdigest()
        assert digest == record["sha256"], f"{record['path']} is not the one the manifest describes"


@pytest.mark.parametrize("kinds", ["c,h,manifest", "c,h,manifest,so"], ids=["sources", "library"])
def test_concurrent_compiles_with_different_defines_leave_one_consistent_set(work: Path, kinds: str) -> None:
    for round_ in range(3):
        command = [sys.executable, "-m", "catenc", "compile", "model.toml", "-o", "out", "--emit", kinds]
        procs = [
            subprocess.Popen([*command, "-D", f"N={8 * (n + 1) + round_}"], cwd=work, stderr=subprocess.PIPE, text=True)
            for n in range(4)
        ]
        errors = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
        for p in procs:
            p.stderr.close()
        assert all(code == 0 for code, _ in errors), errors
        consistent(work / "out")
        assert staging_dirs(work / "out") == []


def test_a_compile_waits_for_the_output_directory_lock(work: Path) -> None:
    """Outputs move into place only under the lock of the output directory: while another
    process holds it, the compile waits (seen in /proc/locks) and writes nothing."""
    out = work / "out"
    out.mkdir()
    holder = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "catenc", "compile", "model.toml", "-o", "out", "-S"],
            cwd=work,
            stderr=subprocess.PIPE,
            text=True,
        )
        inode = f":{out.stat().st_ino} "
        deadline = time.monotonic() + 120
        while not any("->" in line and inode in line for line in Path("/proc/locks").read_text().splitlines()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the compile never waited for the lock"
            time.sleep(0.05)
        assert [p.name for p in out.iterdir() if not p.name.startswith(".")] == []
    finally:
        os.close(holder)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    proc.stderr.close()
    assert {p.name for p in out.iterdir()} == {"model.c", "model.h", "model.manifest.json"}


def test_a_file_system_that_cannot_lock_directories_gets_a_lock_file(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where flock refuses a directory (NFS: EBADF), a lock file in it serves; it is no output."""
    real_flock = fcntl.flock

    def flock(fd: int, operation: int) -> None:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EBADF, "Bad file descriptor")
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock)
    source = str(work / "model.toml")
    options = Options(load_runtime("clang"))
    written = build(
        plan_file(source, options), options, BuildRequest(source, str(work / "out"), ("c", "h", "manifest"))
    )
    assert {p.name for p in (work / "out").iterdir()} == {"model.c", "model.h", "model.manifest.json", LOCK_FILE}
    listed = [record["path"] for record in json.loads(Path(written["manifest"]).read_text())["files"]]
    assert listed == ["model.c", "model.h"], listed


# --------------------------------------------------------------------------- #
# killed compiles
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_compile_cleans_up_and_says_so(work: Path, signum: int) -> None:
    proc, cc_pid = start_stalled_compile(work)
    assert staging_dirs(work / "out"), "the compile stages its outputs in -o"
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, (proc.returncode, stderr)
    assert f"stopped by {signal.Signals(signum).name}" in stderr, stderr
    assert "Traceback" not in stderr and "internal compiler error" not in stderr, stderr
    assert list((work / "out").iterdir()) == [], "a stopped compile leaves nothing in -o"
    assert not alive(cc_pid), "the C compiler it started must not outlive it"


def test_a_killed_compile_leaves_staging_that_the_next_run_removes(work: Path) -> None:
    proc, cc_pid = start_stalled_compile(work)
    proc.kill()
    proc.communicate(timeout=120)
    os.kill(cc_pid, signal.SIGKILL)
    left = staging_dirs(work / "out")
    assert len(left) == 1, left
    ok(catenc(work, "model.toml", "-o", "out", "-S"))
    assert staging_dirs(work / "out") == [], "a later run removes the staging directory of a killed one"


def test_the_staging_directory_of_a_running_compile_is_kept(work: Path) -> None:
    proc, cc_pid = start_stalled_compile(work)
    try:
        running = staging_dirs(work / "out")
        ok(catenc(work, "model.toml", "-o", "out", "-S"))
        assert staging_dirs(work / "out") == running, "another run's live staging directory was removed"
    finally:
        proc.terminate()
        proc.communicate(timeout=120)
    assert not alive(cc_pid)
