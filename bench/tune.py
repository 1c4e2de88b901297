#!/usr/bin/env python3
"""`make bench-tune`: tune every composite of the benchmark on this machine (`catenc tune`) at the
sizes its rows run, writing bench/tuning/<composite>.tuning.json; `make bench` then times each
composite with its file as well (the `tuned` rows) as without it (the heuristics).

    .venv/bin/python bench/tune.py [--only NAME[,NAME]] [--budget 40s]

A composite file is tuned for the entries its rows call (`--composite`), at the free sizes its
rows' inputs give them (one `--sizes` per row). Entries of other machines already in a file are kept.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import zlib

import numpy as np
from cases import cases
from run import fixed_environment
from suite import BUILD, ROOT, TUNING, _select, compile_composite, tuning_file

from catenc.ccall import BoundCall


def bindings(selected) -> dict[tuple[str, str], tuple[list[str], list[str]]]:
    """(composite, file) -> the entries its rows call, and one "NAME=VALUE,..." per row: the
    free sizes its inputs give."""
    out: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    built = {}
    for case in selected:
        key = (case.composite, case.toml)
        if key not in built:
            built[key] = compile_composite(case.composite, ROOT / case.toml, "-O2", "")
        build = built[key]
        if build.library is None:
            raise SystemExit(f"bench/tune.py: {case.composite} does not build:\n{build.error}")
        inputs = case.inputs(np.random.default_rng(zlib.crc32(case.name.encode())))
        bound = BoundCall(build.library, case.entry, inputs)
        sizes = ",".join(f"{dim}={bound.symbols[dim]}" for dim in bound.entry.dims)
        entries, sizes_list = out.setdefault(key, ([], []))
        if case.entry not in entries:
            entries.append(case.entry)
        if sizes not in sizes_list:
            sizes_list.append(sizes)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/tune.py", description="catenc tune every bench composite.")
    parser.add_argument("--only", metavar="NAME[,NAME]", help="only these workloads (name or composite)")
    parser.add_argument("--budget", default="40s", help="catenc tune --budget per composite (default 40s)")
    args = parser.parse_args(argv)
    TUNING.mkdir(exist_ok=True)
    BUILD.mkdir(parents=True, exist_ok=True)
    env = fixed_environment()  # the thread pools' settings make bench runs under
    failed = []
    for (composite, toml), (entries, sizes) in bindings(_select(cases(False), args.only)).items():
        command = [sys.executable, "-m", "catenc", "tune", toml, "-o", str(tuning_file(composite).relative_to(ROOT))]
        command += ["--budget", args.budget] + [f"--sizes={s}" for s in sizes if s]
        command += [f"--composite={entry}" for entry in entries]
        print("==> " + " ".join(command[2:]), flush=True)
        if subprocess.run(command, cwd=ROOT, env=env).returncode:
            failed.append(composite)
    if failed:
        print(f"bench/tune.py: tuning failed for {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
