"""Emitting a compiled file: sources, header, manifest, IR dumps and the toolchain run, in a
staging directory that catenc/outputs.py moves into place (with the depfile) as one transaction;
what a compile read, for the compile cache (catenc/cache.py) to check on a hit."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
from pathlib import Path

from catenc import __version__
from catenc.cache import Inputs
from catenc.codegen.c import buffer_args
from catenc.codegen.gpu import KernelArg, launch_plan, status_offsets, temp_offsets
from catenc.diagnostics import CatencError
from catenc.emit import (
    PACKED_WEIGHTS,
    entry_weights,
    packed_bytes,
    parameters,
    prototype,
    render_header,
    render_source,
    size_exprs,
    weights_layout,
)
from catenc.ir.cost import Cost
from catenc.ir.nodes import Binary, Reduce, Unary, format_graph, walk
from catenc.lower.gpu import format_gpu
from catenc.lower.loops import format_loops
from catenc.outputs import BuildRequest, commit_outputs, output_directory, staging_directory
from catenc.plan import EntryPlan, FilePlan, Options, external_weights
from catenc.schedule.kernels import Kernel, format_schedule, kernel_cost, schedule_cost
from catenc.symbolic import Expr
from catenc.weights import Placed, weights_bytes


class InternalError(Exception):
    """A failure that is catenc's fault (e.g. generated code the C compiler rejects)."""


def stem_of(path: str) -> str:
    """The name of the outputs (model.toml -> model.c, libmodel.so): it reaches C code and
    command lines, so it must be a plain file name."""
    stem = Path(path).name.rsplit(".", 1)[0]
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*", stem):
        raise CatencError(
            f"{path}: outputs are named after the input file, so its name must use letters, digits and "
            "_ . + - only, and not start with - (rename the file)"
        )
    return stem


def sha256_file(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _shape(expr: Expr) -> int | str:
    return expr.value if expr.is_const else str(expr)


def file_names(stem: str, suffix: str) -> dict[str, str]:
    return {
        "c": f"{stem}{suffix}",
        "h": f"{stem}.h",
        "manifest": f"{stem}.manifest.json",
        "so": f"lib{stem}.so",
        "o": f"{stem}.o",
        "a": f"lib{stem}.a",
        "ir": f"{stem}.ir.txt",
        "schedule": f"{stem}.schedule.txt",
        "loops": f"{stem}.loops.txt",
        "weights": f"{stem}.safetensors",
    }


ROLES = {
    "c": "source",
    "h": "header",
    "so": "shared_library",
    "o": "object",
    "a": "static_library",
    "ir": "ir_dump",
    "schedule": "schedule_dump",
    "loops": "loops_dump",
    "weights": "weights",
}


def stage_dumps(plan: FilePlan) -> dict[str, str]:
    return {
        "ir": "\n\n".join(format_graph(e.graph) for e in plan.entries) + "\n",
        "schedule": "\n\n".join(format_schedule(e.schedule) for e in plan.entries) + "\n",
        "loops": "\n\n".join(format_gpu(e.gpu) if e.gpu else format_loops(e.kernels) for e in plan.entries) + "\n",
    }


def build(plan: FilePlan, options: Options, request: BuildRequest) -> dict[str, str]:
    """Write the requested outputs; returns kind -> final path ("depfile" too, when asked for)
    and adds the paths it rewrote to request.written."""
    runtime = options.runtime
    stem = stem_of(request.path)
    names = file_names(stem, runtime.source_suffix)
    out_dir = output_directory(request.out_dir)
    origin = Path(request.path).name  # no directory of the build machine in the outputs
    source = render_source(plan.entries, stem, origin, runtime.renderer(), runtime.source_suffix, request.profile)
    emit = _emitted(request.emit, runtime)
    with staging_directory(out_dir) as staging:
        (staging / names["c"]).write_text(source)
        if runtime.header:  # the source includes it, whether or not it is emitted
            (staging / names["h"]).write_text(render_header(plan.entries, stem, origin, options.prefix))
        commands: list[list[str]] = []
        if "so" in request.emit and "so" not in emit:
            problem = runtime.verify_source(staging / names["c"], options.config)
            flags = _user_flags(options)
            if problem and flags:
                raise CatencError(f"{runtime.name}: the kernels do not build with your --config {flags}:\n{problem}")
            if problem:
                raise InternalError(f"{runtime.name}: the generated {names['c']} does not build:\n{problem}")
        for kind in ("so", "o", "a"):
            if kind in emit:
                steps = runtime.build_commands(names["c"], names[kind], options.config, options.opt, kind)
                for argv in steps:
                    if argv not in commands:  # an archive's object is the object asked for: compiled once
                        _run_toolchain(argv, staging, user_flags=_user_flags(options))
                        commands.append(argv)
        dumps = stage_dumps(plan)
        for kind, text in dumps.items():
            if kind in emit:
                (staging / names[kind]).write_text(text)
        produced = [k for k in ("c", "h", "so", "o", "a", "ir", "schedule", "loops") if k in emit]
        weights = external_weights(plan.entries)
        if weights:
            (staging / names["weights"]).write_bytes(weights_bytes(weights))
            produced.append("weights")
        for n, (pass_name, text) in enumerate(plan.dumps, 1):  # --dump-after
            kind = f"after {pass_name}"
            names[kind] = f"{stem}.{n:02}.{pass_name}.txt"
            (staging / names[kind]).write_text(text)
            produced.append(kind)
        if "manifest" in emit:
            manifest = build_manifest(plan, options, staging, names, produced, commands)
            (staging / names["manifest"]).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
            produced.append("manifest")
        outputs = {kind: names[kind] for kind in produced}
        deps = [real for _, real in input_files(plan, options)]
        if request.cache is not None:
            request.cache.store(staging, outputs, deps, cache_inputs(plan, options, commands))
        return commit_outputs(out_dir, staging, outputs, request, deps)


def _emitted(requested: tuple[str, ...], runtime) -> tuple[str, ...]:
    """The requested kinds the runtime writes: no header where it has no C entry, and no shared
    library where the driver compiles the source when it is loaded (the source is checked
    instead). An object or archive it cannot make stays requested: building it says why."""
    missing = {"h"} if not runtime.header else set()
    if "so" not in runtime.binary_kinds:
        missing.add("so")
    return tuple(k for k in requested if k not in missing)


FLAG_KEYS = ("CFLAGS", "CLFLAGS", "MARCH", "NVCCFLAGS")  # config keys that pass the user's flags to a toolchain


def _user_flags(options: Options) -> str:
    """Toolchain flags the user chose through --config (empty when none)."""
    keys = options.runtime.config_keys
    chosen = {k: v for k, v in options.config.items() if k not in keys or v != keys[k].default}
    return " ".join(f"{k}={v}" for k, v in sorted(chosen.items()) if k in FLAG_KEYS and v)


def _run_toolchain(argv: list[str], cwd: Path, user_flags: str = "") -> None:
    try:
        result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    except OSError as err:
        raise CatencError(f"cannot run '{argv[0]}': {err}") from None
    if result.returncode < 0:  # killed: out of memory, a time limit, the user
        killer = signal.Signals(-result.returncode).name
        raise CatencError(
            f"the C toolchain was killed by {killer} (out of memory or a time limit?); nothing was written: "
            f"{' '.join(argv)}"
        )
    if result.returncode != 0 and user_flags:
        # With flags of the user's own, a rejection is most likely theirs: say so, exit 1.
        raise CatencError(
            f"the C toolchain failed with your --config {user_flags}: {' '.join(argv)}\n{result.stderr.strip()[:4000]}"
        )
    if result.returncode != 0:
        raise InternalError(
            f"the C toolchain rejected the generated code: {' '.join(argv)}\n{result.stderr.strip()[:4000]}"
        )


def _weights_arg(entry: EntryPlan, placed: dict[str, Placed], file: str) -> dict:
    """The manifest's record of an entry's `weights` argument: the file, its data section's size
    and, per constant, the tensor it reads and where."""
    tensors = [
        {"name": p.name, "dtype": p.dtype.name, "shape": list(p.shape), "offset": p.offset}
        for _, _, p in entry_weights(entry, placed)
    ]
    size = sum(p.nbytes for p in placed.values())
    record = {"name": "weights", "role": "weights", "file": file, "bytes": size, "tensors": tensors}
    if entry.packs_weights:  # the entry reads the block its pack function fills from that data
        block = {"pack_symbol": entry.pack_symbol, "packed_bytes_symbol": entry.packed_bytes_symbol}
        record = {
            **record,
            **block,
            "name": PACKED_WEIGHTS,
            "role": "packed_weights",
            "packed_bytes": packed_bytes(entry, placed),
        }
    return record


def _entry_manifest(entry: EntryPlan, placed: dict[str, Placed], weights_file: str) -> dict:
    args = []
    for p in parameters(entry):
        if p.role in ("input", "output"):
            args.append(
                {
                    "name": p.name,
                    "role": p.role,
                    "dtype": p.ttype.dtype.name,
                    "shape": [_shape(d) for d in p.ttype.shape],
                }
            )
        elif p.role in ("weights", "packed_weights"):
            args.append(_weights_arg(entry, placed, weights_file))
        elif p.role == "dim":
            args.append({"name": p.name, "role": "dim", "ctype": "int64_t"})
        else:
            args.append({"name": p.name, "role": p.role})
    kernels = []
    launches = {}
    if entry.gpu:
        buffers, temps = buffer_args(entry.schedule.graph.buffers), temp_offsets(entry.schedule)
        gpu = {k.name: k for k in entry.gpu}
        launches = {launch.kernel: launch for launch in launch_plan(entry, buffers, temps)}
    for kernel, member_group in zip(entry.kernels, entry.schedule.kernels):
        cost = kernel_cost(entry.schedule.graph, member_group)
        record = {
            "name": kernel.name,
            "fused": fused_ops(member_group),
            "computes": list(kernel.fused),
            "flops": _shape(cost.flops),
        }
        record["cost"] = _cost(cost)
        if kernel.shares:
            record["shares"] = kernel.shares  # runs the code of that kernel, on its own buffers
        if kernel.name in launches:
            launch = launches[kernel.name]
            record["launch"] = {
                "mapping": gpu[kernel.name].mapping,
                "groups": _shape(launch.groups),
                "block": launch.block,
                "args": [_kernel_arg(a) for a in launch.args],
            }
        kernels.append(record)
    host = {}
    if entry.gpu:
        host["host"] = {
            "checks": [f"{c.lhs} {c.op} {c.rhs}" for c in entry.checks],
            "statuses": [_shape(offset) for offset in status_offsets(entry.schedule)],
            "sizes": [_shape(size) for size in size_exprs(entry)],  # each must fit in int64_t
        }
    return {
        **host,
        "name": entry.name,
        "symbol": entry.symbol,
        "workspace_symbol": entry.workspace_symbol,
        **({"threads_symbol": entry.threads_symbol} if entry.threads_symbol else {}),
        "prototype": prototype(entry),
        "args": args,
        "constraints": [c.render() for c in entry.checks],
        "derived": {k: _shape(v) for k, v in entry.derived.items()},
        "specialized": dict(entry.specialized),
        "workspace_bytes": _shape(entry.schedule.workspace_bytes),
        "cost": _cost(schedule_cost(entry.schedule)),
        "kernels": kernels,
        "doc": entry.composite.doc,
    }


def fused_ops(kernel: Kernel) -> list[str]:
    """The primitive ops a kernel's members compute, in order of first use (the manifest's `fused`)."""
    ops: list[str] = []
    for member in kernel.members:
        for node in walk(member.body):
            if isinstance(node, (Unary, Binary, Reduce)) and node.op not in ops:
                ops.append(node.op)
    return ops


def _cost(cost: Cost) -> dict[str, int | str]:
    return {key: _shape(value) for key, value in cost.fields().items()}


def _kernel_arg(arg: KernelArg) -> dict:
    record = {"name": arg.name, "kind": arg.kind}
    if arg.dtype is not None:
        record["dtype"] = arg.dtype.name
    return record


def input_files(plan: FilePlan, options: Options) -> list[tuple[str, str]]:
    """(display path, path on disk) of every file the build read, the runtime descriptor last."""
    files = list(plan.files_read.items())
    if options.runtime.source_file:
        files.append((options.runtime.path, options.runtime.source_file))
    return files


def build_manifest(plan: FilePlan, options: Options, staging: Path, names: dict, produced: list[str], commands) -> dict:
    runtime = options.runtime
    placed = weights_layout(plan.entries)
    return {
        "schema": "catenc.manifest/1",
        "catenc_version": __version__,
        "runtime": {
            "name": runtime.name,
            "language": runtime.language,
            "config": dict(sorted(options.config.items())),
            "calling_convention": runtime.calling_convention,
            "opt_level": options.opt,
            **({"disabled_passes": sorted(options.disabled_passes)} if options.disabled_passes else {}),
        },
        "inputs": [{"path": display, "sha256": sha256_file(real)} for display, real in input_files(plan, options)],
        "files": [
            {"path": names[k], "role": ROLES.get(k, "pass_dump"), "sha256": sha256_file(staging / names[k])}
            for k in produced
        ],
        "build": {"commands": commands},
        "entries": [_entry_manifest(e, placed, names["weights"]) for e in plan.entries],
    }


def cache_inputs(plan: FilePlan, options: Options, commands: list[list[str]]) -> Inputs:
    """What the compile read beyond its cache key: every file, the search directories whose listing
    decided where a name was found, and the tools (the compiler chosen, those the build ran)."""
    files = [real for _, real in input_files(plan, options)]
    files += [path for parsed in plan.library.dirs_read.values() for path in parsed]
    tools = [*options.runtime.tools(options.config), *(argv[0] for argv in commands)]
    return Inputs(tuple(dict.fromkeys(files)), tuple(plan.library.dirs_read), tuple(dict.fromkeys(tools)))
