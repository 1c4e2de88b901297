"""The `catenc` command line (docs/cli.md).

Exit codes: 0 success; 1 an error in the user's input or environment; 2 usage; 3 a `--test`
mismatch; 4 an internal compiler error (with a saved reproducer).
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from catenc import __version__, cache
from catenc.diagnostics import CatencError, Loc, closest, format_diagnostic
from catenc.onnx.model import import_notes, with_import_note
from catenc.options import CompileOptions
from catenc.outputs import EMIT_KINDS, BuildRequest, emit_kinds, restore, write_atomic
from catenc.resources import bundled_runtime_names, find_runtime

# The compiler is imported where a command needs it: a compile-cache hit loads none of it.
if TYPE_CHECKING:
    from catenc.plan import FilePlan, Options

EXIT_USER, EXIT_USAGE, EXIT_TEST, EXIT_INTERNAL = 1, 2, 3, 4
EXIT_CODES = (
    ("0", "success"),
    ("1", "an error in the input, the options or the environment (a missing C compiler included)"),
    ("2", "command-line usage"),
    ("3", "a --test mismatch (test-runtime: a regression)"),
    ("4", "an internal compiler error: a bug in catenc; a reproducer is saved"),
)
DEBUG_LEVELS = (
    ("0", "nothing (the default)"),
    ("1", "the kernels and why neighbours were not fused"),
    ("2", "and the graph IR"),
    ("3", "and the schedule and the loop IR"),
    ("4", "and the generated source"),
)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


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


def parse_defines(items: tuple[str, ...]) -> dict[str, object]:
    """-D options; a name given twice must have one value."""
    defines: dict[str, object] = {}
    for item in items:
        name, value = parse_define(item)
        if name in defines and defines[name] != value:
            raise CatencError(f"-D {name}: given twice with different values ({defines[name]} and {value})")
        defines[name] = value
    return defines


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
    if not kinds:
        raise click.BadParameter("empty list", param_hint="--emit")
    for kind in kinds:
        if kind not in EMIT_KINDS:
            raise click.BadParameter(f"unknown kind '{kind}'; choose from {', '.join(EMIT_KINDS)}", param_hint="--emit")
    return kinds


def debug_print(plan: FilePlan, level: int, source_text: str | None) -> None:
    """--debug N: what DEBUG_LEVELS lists."""
    from catenc.build import stage_dumps
    from catenc.schedule.kernels import kernel_cost

    dumps = stage_dumps(plan)
    if level >= 1:
        for note in import_notes(plan.root.source.text):  # an ONNX model's constants (docs/onnx.md)
            click.echo(f"[catenc] {note}", err=True)
        for entry in plan.entries:
            click.echo(f"[catenc] {entry.name}: {len(entry.kernels)} kernel(s)", err=True)
            for kernel, group in zip(entry.kernels, entry.schedule.kernels):
                why = f" (not fused with the previous kernel: {group.reason})" if group.reason else ""
                click.echo(f"[catenc]   {kernel.name}: {', '.join(kernel.fused)}{why}", err=True)
                cost = kernel_cost(entry.schedule.graph, group)
                click.echo(f"[catenc]     cost {cost.describe()}; intensity {cost.intensity()}", err=True)
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
    from catenc.frontend.composites import load_composite_file

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


class Stopped(BaseException):
    """SIGINT or SIGTERM arrived: unwinds through every `finally`, which removes staging files."""


def _stop(signum: int, frame: object) -> None:
    for number in STOP_SIGNALS:  # a second signal must not cut the clean-up short
        signal.signal(number, signal.SIG_IGN)
    raise Stopped(signum)


def guarded(files_of: Callable[[dict], list[str]]):
    """Run a command: user errors print a diagnostic and exit 1; anything unexpected is
    catenc's fault: it says so, saves a reproducer and exits 4. SIGINT and SIGTERM clean up
    and exit 128 + the signal's number."""

    def wrap(command):
        @functools.wraps(command)
        def run(**kw):
            argv = sys.argv[:]
            previous = {number: signal.signal(number, _stop) for number in STOP_SIGNALS}
            try:
                code = command(**kw)
            except Stopped as stop:
                number = stop.args[0]
                click.echo(f"catenc: stopped by {signal.Signals(number).name}; no partial output left", err=True)
                sys.exit(128 + number)
            except CatencError as err:
                click.echo(format_diagnostic(with_import_note(err)), err=True)
                sys.exit(EXIT_USER)
            except (click.ClickException, click.exceptions.Exit):
                raise
            except RecursionError:
                click.echo("catenc: error: the input nests too deeply for catenc; split it up", err=True)
                sys.exit(EXIT_USER)
            except BrokenPipeError:
                # The reader of stdout went away (`catenc ... | head`): stop as a C tool killed by
                # SIGPIPE would, without a traceback when Python flushes stdout at exit.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                sys.exit(128 + signal.SIGPIPE)
            except Exception as err:
                where = save_reproducer(argv, files_of(kw), err)
                click.echo(
                    f"catenc: internal compiler error: {type(err).__name__}: {err}\n"
                    f"catenc: this is a bug in catenc, not in your input; a reproducer was saved in {where}",
                    err=True,
                )
                sys.exit(EXIT_INTERNAL)
            finally:
                for number, handler in previous.items():
                    signal.signal(number, handler)
            sys.exit(code or 0)

        return run

    return wrap


sys.setrecursionlimit(max(sys.getrecursionlimit(), 8000))  # programs nest as deep as users write them


class Command(click.Command):
    """A command whose line in `catenc --help` is its whole first sentence, never cut short."""

    def get_short_help_str(self, limit: int = 45) -> str:
        return self.short_help or click.utils.make_default_short_help(self.help or "", max_length=1000)


class Group(click.Group):
    command_class = Command


class CompileCommand(Command):
    """`compile --help` ends with the runtimes, the config keys of the runtime chosen (a
    `--runtime` before `--help` chooses it), the --debug levels and the exit codes."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["catenc.args"] = list(args)  # --help is eager: it prints before --runtime is parsed
        return super().parse_args(ctx, args)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        default = next(p.default for p in self.params if p.name == "runtime_spec")
        spec = _option_value(ctx.meta.get("catenc.args", []), "--runtime") or default
        with formatter.section("Runtimes (--runtime NAME|PATH)"):
            formatter.write_text(
                f"Bundled: {', '.join(bundled_runtime_names())} (default: {default}). A path to a "
                "descriptor file (.py) works too, as does NAME for a NAME.py in a directory of "
                "CATENC_RUNTIME_PATH."
            )
        with formatter.section(f"Config keys of runtime '{spec}' (--config KEY=VALUE)"):
            formatter.write_dl(_config_rows(spec))
            formatter.write_paragraph()
            formatter.write_text("`catenc compile --runtime NAME --help` shows those of runtime NAME.")
        with formatter.section("Debug levels (--debug N, printed to stderr)"):
            formatter.write_dl(DEBUG_LEVELS)
        with formatter.section("Exit codes"):
            formatter.write_dl(EXIT_CODES)


def _option_value(args: list[str], option: str) -> str | None:
    """The last value given to `option` in raw arguments (`--opt V` or `--opt=V`)."""
    value = None
    for n, arg in enumerate(args):
        if arg == option and n + 1 < len(args):
            value = args[n + 1]
        elif arg.startswith(option + "="):
            value = arg[len(option) + 1 :]
    return value


def _config_rows(spec: str) -> list[tuple[str, str]]:
    from catenc.runtime.descriptor import load_runtime

    try:
        runtime = load_runtime(spec)
    except CatencError as err:
        return [("(none shown)", str(err))]
    rows = []
    for key, config_key in runtime.config_keys.items():
        choices = f" (one of {', '.join(config_key.choices)})" if config_key.choices else ""
        rows.append((f"{key}={config_key.default}", config_key.doc + choices))
    return rows or [("(none)", f"runtime '{runtime.name}' takes no --config keys")]


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="catenc")
def main() -> None:
    """catenc: compile tensor-program composites (TOML/YAML) to standalone C libraries."""


@main.command("compile", cls=CompileCommand)
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "out_dir", default=".", show_default=True, help="Output directory (created if needed).")
@click.option(
    "--runtime",
    "runtime_spec",
    default="clang",
    show_default=True,
    help="Runtime name or descriptor file (see Runtimes below).",
)
@click.option(
    "-D",
    "defines",
    multiple=True,
    metavar="NAME=VALUE",
    help="Fix a free symbol (it leaves the signature), a param or a dtype variable (repeatable).",
)
@click.option("-I", "include_dirs", multiple=True, metavar="DIR", help="Add a composite search directory.")
@click.option(
    "--config", "config_items", multiple=True, metavar="K=V[,K=V]", help="Runtime options (see Config keys below)."
)
@click.option(
    "-O",
    "opt",
    default="2",
    show_default=True,
    type=click.Choice(["0", "1", "2", "3", "fast"]),
    help="Optimisation level: 0 plain loops; 1 fusion; 2 also threads, vectors, packed gemms; 3 more fusion and "
    "unrolling; fast is 3 with -ffast-math (NaN and Inf handling not kept). --print-passes lists the passes.",
)
@click.option(
    "--composite",
    "composites",
    multiple=True,
    metavar="NAME",
    help="Compile only these composites.",
)
@click.option("--prefix", default="", help="Prefix of every emitted C symbol.")
@click.option(
    "--weights",
    "weights",
    default="baked",
    show_default=True,
    type=click.Choice(["baked", "external", "packed"]),  # catenc.plan.WeightsMode
    help="Constants: baked into the library, or read from DIR/<stem>.safetensors as it is (external) or as "
    "NAME_pack_weights packs it once (packed).",
)
@click.option("-S", "sources_only", is_flag=True, help="Emit sources, header and manifest only.")
@click.option("-c", "object_only", is_flag=True, help="Stop at an object file.")
@click.option(
    "--emit",
    "emit_text",
    default=None,
    metavar="LIST",
    help=f"Any of {','.join(EMIT_KINDS)}. The dumps (ir, schedule, loops) are written beside the default "
    "outputs; naming any of c,h,manifest,so,o,a writes exactly those outputs instead of the defaults.",
)
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
    help="Print the stages to stderr (see Debug levels below).",
)
@click.option("--print-passes", is_flag=True, help="Print the pass pipeline of the -O level and runtime.")
@click.option(
    "--dump-after",
    "dump_after",
    multiple=True,
    metavar="PASS|all",
    help="Write the structure after PASS (or every pass) beside the outputs (repeatable).",
)
@click.option("--disable-pass", "disabled_passes", multiple=True, metavar="PASS", help="Skip an optional pass.")
@click.option("--time-passes", is_flag=True, help="Print the time each pass took to stderr.")
@click.option("--verify-ir", is_flag=True, help="Check the IR's invariants after every pass (also CATENC_VERIFY_IR=1).")
@click.option(
    "--tuning",
    "tuning_path",
    default=None,
    metavar="FILE",
    help="Apply a tuning file written by `catenc tune` (its entries for this machine and toolchain).",
)
@click.option("-MD", "make_deps", is_flag=True, help="Write a Make depfile.")
@click.option("-MF", "depfile", default=None, metavar="FILE", help="Depfile path.")
@click.option("-MT", "dep_target", default=None, metavar="TARGET", help="Depfile target.")
@click.option("-MP", "dep_phony", is_flag=True, help="Add phony targets for dependencies.")
@click.option("-v", "verbose", is_flag=True, help="Name each output: wrote (changed) or unchanged.")
@click.option("-q", "quiet", is_flag=True, help="Print only errors.")
@click.option("--no-cache", is_flag=True, help="Neither use nor fill the compile cache (also CATENC_NO_CACHE=1).")
@guarded(lambda kw: [kw["file"]] + ([kw["runtime_spec"]] if kw["runtime_spec"].endswith(".py") else []))
def compile_command(**kw) -> int:
    """Compile FILE (.toml, .yaml) into C sources, a header, a manifest and a shared library."""
    return _compile(CompileOptions(**kw))


@main.command("test-runtime")
@click.option(
    "--suite",
    type=click.Choice(["ops", "onnx"]),
    default="ops",
    show_default=True,
    help="ops: the op library (the op-coverage report); onnx: the ONNX backend node tests.",
)
@click.option("--runtime", "runtime_spec", default="clang", show_default=True, help="Runtime name or descriptor file.")
@click.option("-o", "report", default="Reports.md", show_default=True, help="Markdown report to write.")
@click.option("--json", "json_path", default=None, metavar="FILE", help="Also write the report as JSON.")
@click.option("--ops", "ops_dirs", multiple=True, metavar="DIR", help="More op directories.")
@click.option("--dtypes", default=None, metavar="LIST", help="Only these dtypes (comma separated).")
@click.option("-k", "pattern", default=None, metavar="PATTERN", help="Only ops whose name matches.")
@click.option("--config", "config_items", multiple=True, metavar="K=V[,K=V]", help="Runtime options.")
@click.option("--no-primitives", is_flag=True, help="Skip the rows of the language's own functions.")
@click.option("--compile-only", is_flag=True, help="Build every op but run none (cells say `compiled`).")
@click.option("--node-dir", default=None, metavar="DIR", help="--suite onnx: node test folders to run instead.")
@click.option(
    "--freeze-shape-inputs",
    is_flag=True,
    help="--suite onnx: make an input the importer needs at compile time a constant of the test's model.",
)
@guarded(lambda kw: [kw["runtime_spec"]] if kw["runtime_spec"].endswith(".py") else [])
def test_runtime_command(
    suite,
    runtime_spec,
    report,
    json_path,
    ops_dirs,
    dtypes,
    pattern,
    config_items,
    no_primitives,
    compile_only,
    node_dir,
    freeze_shape_inputs,
):
    """Run the op library (or the ONNX node tests) through a runtime and write the coverage report.

    Exits 3 on a fail, error or xpass cell, and 1 when cells could not even be built here (`not
    run`: e.g. opencl without pyopencl or an OpenCL driver; the message says what to install)."""
    from catenc.dtypes import DTYPES
    from catenc.runtime.descriptor import load_runtime

    if suite == "onnx":
        ops_only = {"--ops": ops_dirs, "--dtypes": dtypes, "--no-primitives": no_primitives}
        for option in [name for name, value in {**ops_only, "--compile-only": compile_only}.items() if value]:
            raise CatencError(f"{option} applies to --suite ops only")
        runtime = load_runtime(runtime_spec)
        return _test_onnx_nodes(runtime, config_items, report, json_path, pattern, node_dir, freeze_shape_inputs)
    for option, value in {"--node-dir": node_dir, "--freeze-shape-inputs": freeze_shape_inputs}.items():
        if value:
            raise CatencError(f"{option} applies to --suite onnx only")
    from catenc.testing.coverage import (
        not_run_note,
        progress_printer,
        render_json,
        render_markdown,
        run_coverage,
        summary_line,
    )

    runtime = load_runtime(runtime_spec)
    config = runtime.validate_config(parse_config(config_items))
    wanted = set(filter(None, (d.strip() for d in dtypes.split(",")))) if dtypes else None
    for dtype in wanted or ():
        if dtype not in DTYPES:
            raise CatencError(f"--dtypes: unknown dtype '{dtype}'")
    for directory in ops_dirs:
        if not Path(directory).is_dir():
            raise CatencError(f"--ops {directory}: no such directory")
        if not any(p.suffix in (".toml", ".yaml", ".yml") for p in Path(directory).iterdir()):
            raise CatencError(f"--ops {directory}: no op file (.toml, .yaml) in it")
    coverage = run_coverage(
        runtime, config, tuple(ops_dirs), wanted, pattern, progress_printer(), not no_primitives, compile_only
    )
    if sys.stdout.isatty():
        click.echo()
    write_text_atomic(Path(report), render_markdown(coverage))
    if json_path:
        write_text_atomic(Path(json_path), render_json(coverage))
    click.echo(summary_line(coverage))
    click.echo(f"catenc: wrote {report}" + (f" and {json_path}" if json_path else ""))
    counts = coverage.counts()
    if counts["not_run"]:
        cells = sum(counts.values())
        click.echo(f"catenc: error: {counts['not_run']} of {cells} cells not run: {not_run_note(coverage)}", err=True)
    return EXIT_TEST if coverage.regressed else EXIT_USER if counts["not_run"] else 0


def _test_onnx_nodes(runtime, config_items, report, json_path, pattern, node_dir, freeze: bool) -> int:
    """test-runtime --suite onnx: exits 3 when a test fails or errs (unsupported ones do not)."""
    from catenc.testing import onnx_nodes
    from catenc.testing.coverage import progress_printer

    config = runtime.validate_config(parse_config(config_items))
    results = onnx_nodes.run_node_tests(runtime, config, node_dir, pattern, progress_printer(), freeze=freeze)
    if sys.stdout.isatty():
        click.echo()
    write_text_atomic(Path(report), onnx_nodes.render_markdown(results))
    if json_path:
        write_text_atomic(Path(json_path), onnx_nodes.render_json(results))
    click.echo(onnx_nodes.summary_line(results))
    click.echo(f"catenc: wrote {report}" + (f" and {json_path}" if json_path else ""))
    return EXIT_TEST if results.regressed else 0


def write_text_atomic(path: Path, text: str) -> None:
    write_atomic(path, text)


def _compile(given: CompileOptions) -> int:
    if given.sources_only and given.object_only:
        raise click.UsageError("-S and -c exclude each other")
    if not Path(given.file).is_file():
        raise CatencError(f"{given.file}: no such file")
    prefix = given.prefix
    if prefix and not prefix.replace("_", "a").isalnum() or (prefix and prefix[0].isdigit()):
        raise CatencError(f"--prefix {prefix}: must be a C identifier prefix")
    emit = emit_kinds(parse_emit(given.emit_text) or (), given.sources_only, given.object_only)
    if given.test_sizes is not None and "so" not in emit:
        if given.sources_only or given.object_only:
            raise click.UsageError("--test needs the shared library; drop -S/-c")
        emit = emit + ("so", "manifest")
    if given.test_sizes is not None and "manifest" not in emit:
        emit = emit + ("manifest",)
    depfile = given.depfile
    if given.make_deps and depfile is None:
        depfile = str(Path(given.out_dir) / (Path(given.file).name.rsplit(".", 1)[0] + ".d"))
    verbose = given.verbose and not given.quiet
    request = BuildRequest(given.file, given.out_dir, emit, depfile, given.dep_target, given.dep_phony)
    slot = _cache_slot(given, emit)
    hit = slot.find() if slot else None
    if hit is not None and given.test_sizes is None:
        _report(restore(hit, request), request, hit.notes, verbose, cached=True)
        return 0

    from catenc.build import build
    from catenc.driver import plan_file, print_pipeline

    options = _plan_options(given)
    if given.print_passes:
        click.echo(print_pipeline(options))
    if given.test_sizes is not None and not options.runtime.runnable(options.config):
        raise CatencError(f"--test: runtime '{options.runtime.name}' cannot run on this machine")
    plan = plan_file(given.file, options)
    if not plan.entries:
        raise CatencError(f"{given.file}: no composite to compile (rank-polymorphic ones have no entry)")
    if given.time_passes:
        click.echo(plan.pass_times, err=True)
    if given.test_sizes is not None:
        _check_test_sizes(plan, given.test_sizes)
    if given.debug_level:
        debug_print(plan, given.debug_level, None)
    notes = tuple(note for entry in plan.entries for note in entry.schedule.notes if note.startswith("tuning: "))
    request = replace(request, cache=replace(slot, notes=notes) if slot else None)
    written = restore(hit, request) if hit else build(plan, options, request)
    if given.debug_level >= 4 and "c" in written:
        click.echo(Path(written["c"]).read_text(), err=True)
    _report(written, request, notes, verbose, cached=hit is not None)
    if given.test_sizes is None:
        return 0
    return _run_test(plan, written, given.test_sizes, given.quiet)


def _plan_options(given: CompileOptions) -> Options:
    """What the compiler runs under: the runtime loaded, its config checked, the tuning file read."""
    from catenc.plan import Options, WeightsMode
    from catenc.runtime.descriptor import load_runtime
    from catenc.schedule.tuning_file import load_tuning

    runtime = load_runtime(given.runtime_spec)
    return Options(
        runtime=runtime,
        config=runtime.validate_config(parse_config(given.config_items)),
        opt=given.opt,
        prefix=given.prefix,
        defines=parse_defines(given.defines),
        include_dirs=tuple(given.include_dirs),
        composites=tuple(given.composites),
        disabled_passes=_pass_names(given.disabled_passes),
        dump_after=_pass_names(given.dump_after),
        verify_ir=given.verify_ir,
        time_passes=given.time_passes,
        tuning=load_tuning(given.tuning_path) if given.tuning_path else None,
        weights=WeightsMode(given.weights),
    )


def _cache_slot(given: CompileOptions, emit: tuple[str, ...]) -> cache.Slot | None:
    """The compile cache's slot for these options (docs/cli.md, "Compile cache"): the key holds
    each option its field declares keyed, the bytes of the files keyed fields name and of the
    runtime descriptor. None when the cache is off or an uncached option is set."""
    if given.uncached() or not cache.enabled() or os.environ.get("CATENC_VERIFY_IR") == "1":
        return None
    descriptor, display = find_runtime(given.runtime_spec)
    files = [str(descriptor), *given.keyed_files()]
    return cache.slot({**given.cache_key(), "emit": emit, "runtime": display}, files)


def _report(written: dict[str, str], request: BuildRequest, notes: tuple[str, ...], verbose: bool, cached: bool):
    """-v: each output, wrote or unchanged, and the tuning notes."""
    if not verbose:
        return
    if cached:
        click.echo(f"catenc: outputs from the compile cache ({cache.cache_root()})")
    for path in written.values():
        click.echo(f"catenc: {'wrote' if path in request.written else 'unchanged'} {path}")
    for note in notes:
        click.echo(f"catenc: note: {note}")


def _pass_names(values: tuple[str, ...]) -> tuple[str, ...]:
    """Pass names given repeatedly or comma-separated, in order, once each."""
    return tuple(dict.fromkeys(name.strip() for value in values for name in value.split(",") if name.strip()))


def _check_test_sizes(plan: FilePlan, sizes_text: str) -> None:
    """Each --test size names a symbol of a tested composite, and one that `where` derives or -D
    fixes only with the value it has there."""
    from catenc.symbolic import const
    from catenc.testing.check import entry_sizes, parse_sizes  # numpy: only when testing

    given = parse_sizes(sizes_text)
    free = list(dict.fromkeys(dim for entry in plan.entries for dim in entry.dims))
    for name, value in given.items():
        holders = [entry for entry in plan.entries if name in entry.composite.symbols()]
        if not holders:
            raise CatencError(
                f"--test {name}={value}: no composite tested here has a symbol '{name}'{closest(name, free)}; "
                f"the sizes to give are {', '.join(free) or 'none'}"
            )
        for entry in holders:
            fixed = entry.specialized.get(name)
            if fixed is not None and fixed != value:
                raise CatencError(f"--test {name}={value}: '{name}' is fixed to {fixed} by -D")
            if name in entry.derived:
                sizes = {k: const(v) for k, v in entry_sizes(entry, given).items()}
                derived = entry.derived[name].substitute(sizes)
                if derived != const(value):
                    comp = entry.composite
                    raise CatencError(
                        f"--test {name}={value}: '{name}' is derived by 'where' ({name} = {comp.derived[name]}), "
                        f"which gives {derived} at these sizes",
                        comp.derived_locs[name],
                    )


def _run_test(plan: FilePlan, written: dict[str, str], sizes_text: str, quiet: bool) -> int:
    from catenc.loader import load
    from catenc.testing.check import check_entries, parse_sizes

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


@main.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option(
    "-o", "output", default=None, metavar="FILE.toml", help="Composite file to write (default: FILE with .toml)."
)
@click.option("--composite", "name", default=None, metavar="NAME", help="Name of the entry (default: the graph's).")
@guarded(lambda kw: [kw["file"]])
def import_command(file, output, name) -> int:
    """Import an ONNX model as a readable composite file (docs/onnx.md).

    Writes FILE.toml, and beside it FILE.safetensors holding the model's weights when it has any;
    compiling the written file gives the library `catenc compile FILE` gives."""
    from catenc.build import stem_of
    from catenc.frontend.composites import check_name
    from catenc.onnx.importer import import_model

    if not Path(file).is_file():
        raise CatencError(f"{file}: no such file")
    target = Path(output) if output else Path(file).with_suffix(".toml")
    if target.suffix != ".toml":
        raise CatencError(f"-o {target}: catenc import writes a .toml composite file")
    stem_of(str(target))  # a file `catenc compile` would refuse is refused before anything is written
    if name is not None:
        check_name(name, "composite", Loc("--composite", 0, 0))
    weights = target.with_suffix(".safetensors")
    imported = import_model(file, file, name, weights.name)
    if imported.constants:
        write_atomic(weights, imported.weights_bytes())
    write_atomic(target, imported.text)
    click.echo(f"catenc: wrote {target}" + (f" and {weights}" if imported.constants else ""))
    return 0


@main.command("tune")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "output", default=None, metavar="FILE", help="Tuning file to write (default: FILE.tuning.json).")
@click.option("--runtime", "runtime_spec", default="clang", show_default=True, help="Runtime name or descriptor file.")
@click.option("-D", "defines", multiple=True, metavar="NAME=VALUE", help="Fix a symbol, as compile does.")
@click.option(
    "--sizes", "sizes", multiple=True, metavar="SIZES", help='Free sizes to measure at: "T=256,D=64" (repeatable).'
)
@click.option("-I", "include_dirs", multiple=True, metavar="DIR", help="Add a composite search directory.")
@click.option("--config", "config_items", multiple=True, metavar="K=V[,K=V]", help="Runtime options.")
@click.option("-O", "opt", default="2", show_default=True, type=click.Choice(["1", "2", "3", "fast"]))
@click.option("--composite", "composites", multiple=True, metavar="NAME", help="Tune only these composites.")
@click.option("--budget", default="60s", show_default=True, help="Time to spend measuring (60s, 2m).")
@click.option("--runs", default=5, show_default=True, type=click.IntRange(1, 1000), help="Timed calls per build.")
@guarded(lambda kw: [kw["file"]])
def tune_command(file, output, runtime_spec, defines, sizes, include_dirs, config_items, opt, composites, budget, runs):
    """Search each kernel's schedule on this machine and write a tuning file for --tuning.

    Interrupt it (Ctrl-C) to keep the best found so far; run it again with the same -o to resume."""
    from catenc.plan import Options
    from catenc.runtime.descriptor import load_runtime
    from catenc.testing.check import parse_sizes
    from catenc.tune.tuner import parse_budget, profile_measure, summary, tune_file

    if not Path(file).is_file():
        raise CatencError(f"{file}: no such file")
    runtime = load_runtime(runtime_spec)
    config = runtime.validate_config(parse_config(config_items))
    if not runtime.runnable(config) or runtime.work_groups:
        raise CatencError(f"catenc tune: runtime '{runtime.name}' cannot be timed here; tune with a host runtime")
    options = Options(
        runtime, config, opt, defines=parse_defines(defines), include_dirs=tuple(include_dirs), composites=composites
    )
    output = output or str(Path(file).with_suffix(".tuning.json"))
    bindings = [parse_sizes(text, "--sizes") for text in sizes]
    seconds = parse_budget(budget)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C ends the search, keeping its best
    try:
        result = tune_file(file, options, bindings, seconds, output, profile_measure(file, options, runs), _bar)
    except KeyboardInterrupt:  # before the search began: nothing to keep
        raise Stopped(signal.SIGINT) from None
    click.echo(file=sys.stderr)
    for line in summary(result):
        click.echo(line)
    if result.interrupted:
        click.echo(f"catenc: interrupted after {result.rounds} round(s); wrote {output}; run again to resume", err=True)
        return 128 + signal.SIGINT
    click.echo(f"catenc: {result.rounds} round(s); wrote {output}")
    return 0


@main.command("profile")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--runtime", "runtime_spec", default="clang", show_default=True, help="Runtime name or descriptor file.")
@click.option("-D", "defines", multiple=True, metavar="NAME=VALUE", help="Fix a symbol, as compile does.")
@click.option("--sizes", "sizes", default="", metavar="SIZES", help='Free sizes to run at: "T=256,D=64".')
@click.option("-I", "include_dirs", multiple=True, metavar="DIR", help="Add a composite search directory.")
@click.option("--config", "config_items", multiple=True, metavar="K=V[,K=V]", help="Runtime options.")
@click.option("-O", "opt", default="2", show_default=True, type=click.Choice(["0", "1", "2", "3", "fast"]))
@click.option("--composite", "composites", multiple=True, metavar="NAME", help="Profile only these composites.")
@click.option("--tuning", "tuning_path", default=None, metavar="FILE", help="Apply a tuning file, as compile does.")
@click.option("--runs", default=10, show_default=True, type=click.IntRange(1, 100000), help="Timed calls per entry.")
@click.option(
    "--peaks",
    "peaks_text",
    default=None,
    metavar="GFLOPS,GBS|measure",
    help="This machine's fp32 FMA peak and bandwidth (default: measured once, then kept in the user cache); "
    "'measure' measures them again.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the profile as JSON.")
@guarded(lambda kw: [kw["file"]])
def profile_command(
    file,
    runtime_spec,
    defines,
    sizes,
    include_dirs,
    config_items,
    opt,
    composites,
    tuning_path,
    runs,
    peaks_text,
    as_json,
):
    """Time every kernel of each entry on this machine against its FMA peak and memory bandwidth."""
    from catenc.plan import Options
    from catenc.profile import (
        Peaks,
        check_host_runtime,
        dumps,
        format_report,
        machine_peaks,
        parse_peaks,
        profile_file,
    )
    from catenc.runtime.descriptor import load_runtime
    from catenc.schedule.tuning_file import load_tuning
    from catenc.testing.check import parse_sizes

    if not Path(file).is_file():
        raise CatencError(f"{file}: no such file")
    runtime = load_runtime(runtime_spec)
    config = runtime.validate_config(parse_config(config_items))
    check_host_runtime(runtime, config)
    options = Options(
        runtime,
        config,
        opt,
        defines=parse_defines(defines),
        include_dirs=tuple(include_dirs),
        composites=composites,
        tuning=load_tuning(tuning_path) if tuning_path else None,
    )
    given = parse_sizes(sizes, "--sizes")
    given_peaks = None if peaks_text in (None, "measure") else parse_peaks(peaks_text)

    def peaks() -> Peaks:  # measured once the sizes are checked
        return given_peaks or machine_peaks(runtime, config, remeasure=peaks_text == "measure")

    report = profile_file(file, options, given, runs, peaks)
    click.echo(dumps(report) if as_json else format_report(report), nl=not as_json)
    return 0


def _bar(done: float, text: str) -> None:
    """The tuner's progress: a bar and the best improvement so far, on one line at a terminal."""
    width = 24
    filled = int(done * width)
    line = f"[{'#' * filled}{'.' * (width - filled)}] {100 * done:3.0f}%  {text}"
    click.echo(f"\r{line}" if sys.stderr.isatty() else line, err=True, nl=not sys.stderr.isatty())


@main.group("cache", cls=Group)
def cache_group() -> None:
    """Show or empty the compile cache."""


@cache_group.command("stats")
@guarded(lambda kw: [])
def cache_stats_command() -> int:
    """Print where the compile cache is, its entries and size, and the hits and misses counted."""
    info = cache.stats()
    off = "" if info["enabled"] else f" (off: {cache.OFF_ENV} is set)"
    click.echo(f"location: {info['location']}{off}")
    click.echo(f"entries:  {info['entries']}")
    click.echo(f"size:     {_size(info['bytes'])} of {_size(info['limit'])} ({cache.SIZE_ENV})")
    click.echo(f"hits:     {info['hits']}")
    click.echo(f"misses:   {info['misses']}")
    return 0


@cache_group.command("clear")
@guarded(lambda kw: [])
def cache_clear_command() -> int:
    """Remove every entry of the compile cache and reset its counts."""
    count = cache.clear()
    click.echo(f"catenc: removed {count} entr{'y' if count == 1 else 'ies'} from {cache.cache_root()}")
    return 0


def _size(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return ""
