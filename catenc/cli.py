"""The `catenc` command line (SPEC §3).

Exit codes: 0 success; 1 an error in the user's input or environment; 2 usage; 3 a `--test`
mismatch; 4 an internal compiler error (with a saved reproducer).
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import click

from catenc import __version__
from catenc.build import EMIT_KINDS, BuildRequest, build, default_emit, stage_dumps
from catenc.compiler import FilePlan, Options, plan_file
from catenc.diagnostics import CatencError, format_diagnostic
from catenc.dtypes import DTYPES
from catenc.frontend.composites import load_composite_file
from catenc.runtime import load_runtime

EXIT_USER, EXIT_USAGE, EXIT_TEST, EXIT_INTERNAL = 1, 2, 3, 4


def parse_define(text: str) -> tuple[str, object]:
    name, sep, value = text.partition("=")
    name = name.strip()
    if not name.isidentifier():
        raise CatencError(f"-D {text}: expected NAME=VALUE")
    if not sep:
        return name, 1
    value = value.strip()
    for convert in (int, float):
        try:
            return name, convert(value)
        except ValueError:
            pass
    if value in ("true", "True"):
        return name, True
    if value in ("false", "False"):
        return name, False
    return name, value


def parse_config(items: tuple[str, ...]) -> dict[str, str]:
    config: dict[str, str] = {}
    for item in items:
        for piece in filter(None, (p.strip() for p in item.split(","))):
            key, sep, value = piece.partition("=")
            if not sep or not key.strip():
                raise CatencError(f"--config {piece}: expected KEY=VALUE")
            config[key.strip()] = value.strip()
    return config


def parse_emit(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    kinds = tuple(filter(None, (k.strip() for k in text.split(","))))
    for kind in kinds:
        if kind not in EMIT_KINDS:
            raise click.BadParameter(f"unknown kind '{kind}'; choose from {', '.join(EMIT_KINDS)}", param_hint="--emit")
    return kinds


def debug_print(plan: FilePlan, level: int, source_text: str | None) -> None:
    """--debug N: 1 kernels and fusion decisions, 2 graph IR, 3 schedule and loops, 4 source."""
    dumps = stage_dumps(plan)
    if level >= 1:
        for entry in plan.entries:
            click.echo(f"[catenc] {entry.name}: {len(entry.kernels)} kernel(s)", err=True)
            for kernel, group in zip(entry.kernels, entry.schedule.kernels):
                why = f" (not fused with the previous kernel: {group.reason})" if group.reason else ""
                click.echo(f"[catenc]   {kernel.name}: {', '.join(kernel.fused)}{why}", err=True)
            for note in entry.schedule.notes:
                click.echo(f"[catenc]   {note}", err=True)
    if level >= 2:
        click.echo(dumps["ir"], err=True)
    if level >= 3:
        click.echo(dumps["schedule"], err=True)
        click.echo(dumps["loops"], err=True)
    if level >= 4 and source_text is not None:
        click.echo(source_text, err=True)


def save_reproducer(argv: list[str], files: list[str], error: BaseException) -> str:
    """A directory with the command line, the traceback and the input files (includes too)."""
    directory = Path(tempfile.mkdtemp(prefix="catenc-crash-"))
    (directory / "command.txt").write_text(" ".join(shlex.quote(a) for a in argv) + "\n")
    (directory / "traceback.txt").write_text("".join(traceback.format_exception(error)))
    for name in files + _included_files(files):
        path = Path(name)
        if not path.is_file():
            continue
        # keep an include's place relative to the main file, so the saved command runs there
        relative = Path(os.path.relpath(path, Path(files[0]).parent)) if files else Path(path.name)
        target = directory / (relative if ".." not in relative.parts else path.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            shutil.copy(path, target)
    return str(directory)


def _included_files(files: list[str]) -> list[str]:
    """Best effort: the files the given composite files include (they may not even parse)."""
    found = []
    for name in files:
        try:
            root = load_composite_file(name)
        except Exception:  # the reproducer is saved whatever state the input is in
            continue
        stack = list(root.includes)
        while stack:
            file = stack.pop()
            found.append(file.real_path)
            stack += file.includes
    return found


def guarded(files_of: Callable[[dict], list[str]]):
    """Run a command: user errors print a diagnostic and exit 1; anything unexpected is
    catenc's fault: it says so, saves a reproducer and exits 4."""

    def wrap(command):
        @functools.wraps(command)
        def run(**kw):
            argv = sys.argv[:]
            try:
                code = command(**kw)
            except CatencError as err:
                click.echo(format_diagnostic(err), err=True)
                sys.exit(EXIT_USER)
            except (click.ClickException, click.exceptions.Exit):
                raise
            except RecursionError:
                click.echo("catenc: error: the input nests too deeply for catenc; split it up", err=True)
                sys.exit(EXIT_USER)
            except Exception as err:
                where = save_reproducer(argv, files_of(kw), err)
                click.echo(
                    f"catenc: internal compiler error: {type(err).__name__}: {err}\n"
                    f"catenc: this is a bug in catenc, not in your input; a reproducer was saved in {where}",
                    err=True,
                )
                sys.exit(EXIT_INTERNAL)
            sys.exit(code or 0)

        return run

    return wrap


sys.setrecursionlimit(max(sys.getrecursionlimit(), 8000))  # programs nest as deep as users write them


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="catenc")
def main() -> None:
    """catenc: compile tensor-program composites (TOML/YAML) to standalone C libraries."""


@main.command("compile")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "out_dir", default=".", show_default=True, help="Output directory (created if needed).")
@click.option(
    "--runtime",
    "runtime_spec",
    default="clang",
    show_default=True,
    help="Runtime name or descriptor file.",
)
@click.option(
    "-D",
    "defines",
    multiple=True,
    metavar="NAME=VALUE",
    help="Fix a symbol, a param or a dtype variable.",
)
@click.option("-I", "include_dirs", multiple=True, metavar="DIR", help="Add a composite search directory.")
@click.option("--config", "config_items", multiple=True, metavar="K=V[,K=V]", help="Runtime options.")
@click.option(
    "-O",
    "opt",
    default="2",
    type=click.Choice(["0", "1", "2", "3", "fast"]),
    help="Optimisation level.",
)
@click.option(
    "--composite",
    "composites",
    multiple=True,
    metavar="NAME",
    help="Compile only these composites.",
)
@click.option("--prefix", default="", help="Prefix of every emitted C symbol.")
@click.option("-S", "sources_only", is_flag=True, help="Emit sources, header and manifest only.")
@click.option("-c", "object_only", is_flag=True, help="Stop at an object file.")
@click.option("--emit", "emit_text", default=None, metavar="LIST", help=f"Any of {','.join(EMIT_KINDS)}.")
@click.option(
    "--test",
    "test_sizes",
    default=None,
    metavar="SIZES",
    help='Check against the reference: "M=100,N=64".',
)
@click.option(
    "--debug",
    "debug_level",
    default=0,
    type=click.IntRange(0, 4),
    help="Print stages to stderr (0-4).",
)
@click.option("-MD", "make_deps", is_flag=True, help="Write a Make depfile.")
@click.option("-MF", "depfile", default=None, metavar="FILE", help="Depfile path.")
@click.option("-MT", "dep_target", default=None, metavar="TARGET", help="Depfile target.")
@click.option("-MP", "dep_phony", is_flag=True, help="Add phony targets for dependencies.")
@click.option("-v", "verbose", is_flag=True, help="Say what is written.")
@click.option("-q", "quiet", is_flag=True, help="Print only errors.")
@guarded(lambda kw: [kw["file"]] + ([kw["runtime_spec"]] if kw["runtime_spec"].endswith(".py") else []))
def compile_command(**kw) -> int:
    """Compile FILE (.toml, .yaml) into C sources, a header, a manifest and a shared library."""
    return _compile(**kw)


@main.command("test-runtime")
@click.option("--runtime", "runtime_spec", default="clang", show_default=True, help="Runtime name or descriptor file.")
@click.option("-o", "report", default="Reports.md", show_default=True, help="Markdown report to write.")
@click.option("--json", "json_path", default=None, metavar="FILE", help="Also write the report as JSON.")
@click.option("--ops", "ops_dirs", multiple=True, metavar="DIR", help="More op directories.")
@click.option("--dtypes", default=None, metavar="LIST", help="Only these dtypes (comma separated).")
@click.option("-k", "pattern", default=None, metavar="PATTERN", help="Only ops whose name matches.")
@click.option("--config", "config_items", multiple=True, metavar="K=V[,K=V]", help="Runtime options.")
@click.option("--no-primitives", is_flag=True, help="Skip the rows of the language's own functions.")
@guarded(lambda kw: [kw["runtime_spec"]] if kw["runtime_spec"].endswith(".py") else [])
def test_runtime_command(runtime_spec, report, json_path, ops_dirs, dtypes, pattern, config_items, no_primitives):
    """Run the op library through a runtime and write the op-coverage report."""
    from catenc.coverage import progress_printer, render_json, render_markdown, run_coverage, summary_line

    runtime = load_runtime(runtime_spec)
    config = runtime.validate_config(parse_config(config_items))
    wanted = set(filter(None, (d.strip() for d in dtypes.split(",")))) if dtypes else None
    for dtype in wanted or ():
        if dtype not in DTYPES:
            raise CatencError(f"--dtypes: unknown dtype '{dtype}'")
    for directory in ops_dirs:
        if not Path(directory).is_dir():
            raise CatencError(f"--ops {directory}: no such directory")
    coverage = run_coverage(runtime, config, tuple(ops_dirs), wanted, pattern, progress_printer(), not no_primitives)
    if sys.stdout.isatty():
        click.echo()
    write_text_atomic(Path(report), render_markdown(coverage))
    if json_path:
        write_text_atomic(Path(json_path), render_json(coverage))
    click.echo(summary_line(coverage))
    click.echo(f"catenc: wrote {report}" + (f" and {json_path}" if json_path else ""))
    return EXIT_TEST if coverage.regressed else 0


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".catenc-", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def _compile(
    file,
    out_dir,
    runtime_spec,
    defines,
    include_dirs,
    config_items,
    opt,
    composites,
    prefix,
    sources_only,
    object_only,
    emit_text,
    test_sizes,
    debug_level,
    make_deps,
    depfile,
    dep_target,
    dep_phony,
    verbose,
    quiet,
) -> int:
    if sources_only and object_only:
        raise click.UsageError("-S and -c exclude each other")
    if not Path(file).is_file():
        raise CatencError(f"{file}: no such file")
    if prefix and not prefix.replace("_", "a").isalnum() or (prefix and prefix[0].isdigit()):
        raise CatencError(f"--prefix {prefix}: must be a C identifier prefix")
    runtime = load_runtime(runtime_spec)
    config = runtime.validate_config(parse_config(config_items))
    options = Options(
        runtime=runtime,
        config=config,
        opt=opt,
        prefix=prefix,
        defines=dict(parse_define(d) for d in defines),
        include_dirs=tuple(include_dirs),
        composites=tuple(composites),
    )
    emit = parse_emit(emit_text) or default_emit(sources_only, object_only)
    if test_sizes is not None and "so" not in emit:
        if sources_only or object_only:
            raise click.UsageError("--test needs the shared library; drop -S/-c")
        emit = emit + ("so", "manifest")
    if test_sizes is not None and not runtime.runnable(config):
        raise CatencError(f"--test: runtime '{runtime.name}' cannot run on this machine")
    if test_sizes is not None and "manifest" not in emit:
        emit = emit + ("manifest",)
    plan = plan_file(file, options)
    if not plan.entries:
        raise CatencError(f"{file}: no composite to compile (rank-polymorphic ones have no entry)")
    _check_defines(plan, options)
    if debug_level:
        debug_print(plan, debug_level, None)
    if make_deps and depfile is None:
        depfile = str(Path(out_dir) / (Path(file).name.rsplit(".", 1)[0] + ".d"))
    request = BuildRequest(file, out_dir, emit, depfile, dep_target, dep_phony)
    written = build(plan, options, request)
    if debug_level >= 4 and "c" in written:
        click.echo(Path(written["c"]).read_text(), err=True)
    if verbose and not quiet:
        for kind, path in written.items():
            click.echo(f"catenc: wrote {path} ({kind})")
    if test_sizes is None:
        return 0
    return _run_test(plan, written, test_sizes, quiet)


def _check_defines(plan: FilePlan, options: Options) -> None:
    known = set()
    for entry in plan.entries:
        comp = entry.composite
        known |= set(comp.symbols()) | set(comp.params) | set(comp.types)
    for name in options.defines:
        if name not in known:
            raise CatencError(f"-D {name}: no composite compiled here has a symbol, param or type variable '{name}'")


def _run_test(plan: FilePlan, written: dict[str, str], sizes_text: str, quiet: bool) -> int:
    from catenc.loader import load
    from catenc.testing import check_entries, parse_sizes

    library = load(written["manifest"])
    checks, lines = check_entries(plan, library, parse_sizes(sizes_text))
    for line in lines:
        if not quiet or "MISMATCH" in line:
            click.echo(line)
    failed = [c for c in checks if not c.ok]
    if failed:
        click.echo(f"catenc: --test: {len(failed)} output(s) differ from the reference", err=True)
        return EXIT_TEST
    return 0
