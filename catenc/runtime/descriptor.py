"""Runtime descriptors: the documented API a `runtimes/*.py` file uses.

A descriptor file defines `RUNTIME`, an instance of `Runtime` (usually `CRuntime`): its name,
target language, renderer, config keys, supported dtypes and ops, and its toolchain. A runtime
that differs from a bundled one in flags or a few spellings is a short file:

    from catenc.runtime.descriptor import CRuntime, c_config_keys

    RUNTIME = CRuntime(
        name="gcc_avx2",
        compilers=("gcc",),
        extra_flags=("-mavx2", "-mfma"),
        config_keys=c_config_keys(omp="1", march="", lanes="8"),
    )

(`runtimes/examples/gcc_avx2.py`; docs/runtimes.md explains every field.)

`--runtime NAME` finds `NAME.py` among the bundled runtimes, then in each directory of
`CATENC_RUNTIME_PATH`; `--runtime path/to/file.py` loads that file.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from catenc.codegen.c import CRenderer
from catenc.diagnostics import CatencError, Loc, closest
from catenc.dtypes import DTYPES
from catenc.resources import find_runtime
from catenc.toolchain_memo import memoised


@dataclass(frozen=True)
class ConfigKey:
    """One `--config KEY=VALUE` option: its default, allowed values (None: any) and meaning."""

    default: str
    choices: tuple[str, ...] | None = None
    doc: str = ""
    check: Callable[[str], bool] | None = None


@dataclass(frozen=True)
class Runtime:
    """What every runtime declares. Subclass it for a new kind of toolchain."""

    name: str
    language: str = "c"
    source_suffix: str = ".c"
    renderer: type[CRenderer] = CRenderer
    config_keys: Mapping[str, ConfigKey] = field(default_factory=dict)
    dtypes: frozenset[str] = frozenset(DTYPES)
    unsupported_ops: frozenset[str] = frozenset()
    can_run: bool = True
    calling_convention: str = "host"  # "host": plain pointers; "cuda": device pointers + stream
    packed_gemm: bool = True  # contractions through the packed gemm driver (else plain loops)
    target: str = "cpu"  # "gpu": kernels go through the GPU lowering (catenc/lower/gpu.py)
    header: bool = True  # emits a C header of its entries
    binary_kinds: tuple[str, ...] = ("so", "o", "a")  # what build_commands can make
    path: str = ""  # where the descriptor was loaded from, display form
    source_file: str = ""  # the same, on disk

    @property
    def work_groups(self) -> bool:
        """Kernels run as GPU work-groups (catenc/lower/gpu.py), not as loop nests on the host."""
        return self.target == "gpu"

    def parallel(self, config: Mapping[str, str]) -> bool:
        """Whether loops marked parallel are rendered parallel under this config."""
        return False

    def runnable(self, config: Mapping[str, str]) -> bool:
        """Whether what it builds can run on this machine (for --test and test-runtime)."""
        return self.can_run

    def vector_lanes(self, config: Mapping[str, str]) -> int:
        """f32 lanes of the target's vector registers: sizes vector code and gemm micro-tiles
        (never correctness: vector code compiles for any target)."""
        return 4

    def validate_config(self, raw: Mapping[str, str]) -> dict[str, str]:
        """Defaults filled in; an unknown key or a bad value is an error."""
        config = {key: spec.default for key, spec in self.config_keys.items()}
        for key, value in raw.items():
            spec = self.config_keys.get(key)
            if spec is None:
                valid = ", ".join(sorted(self.config_keys)) or "none"
                raise CatencError(
                    f"runtime '{self.name}' has no config key '{key}'{closest(key, list(self.config_keys))}; "
                    f"valid keys: {valid}"
                )
            if spec.choices is not None and value not in spec.choices:
                raise CatencError(f"--config {key}={value}: expected one of {', '.join(spec.choices)}")
            if spec.check is not None and not spec.check(value):
                raise CatencError(f"--config {key}={value}: invalid value ({spec.doc})")
            config[key] = value
        return config

    def toolchain_version(self, config: Mapping[str, str]) -> str:
        return "none"

    def tools(self, config: Mapping[str, str]) -> tuple[str, ...]:
        """Executables (names looked up on PATH) whose choice or version can change what is
        emitted, beside those its build commands run: the compile cache checks each on a hit."""
        return ()

    def host_c_compiler(self, config: Mapping[str, str]) -> tuple[str, list[str]] | None:
        """The C compiler and target flags this runtime builds host code with (catenc profile
        builds the machine-peak probes with them), or None for a runtime that builds no C."""
        return None

    def verify_source(self, path: Path, config: Mapping[str, str]) -> str | None:
        """For a runtime that builds no binary: the toolchain's complaint about the emitted
        source, or None when it builds (or cannot be checked here)."""
        return None

    def unavailable(self, config: Mapping[str, str]) -> tuple[str, str] | None:
        """For a runtime that builds no binary: why what it emits can neither be checked nor run
        here and what to install, or None when nothing is missing (test-runtime's `not run`)."""
        return None

    def build_commands(
        self, source: str, output: str, config: Mapping[str, str], opt: str, kind: str
    ) -> list[list[str]]:
        """Commands (argv lists, run in the output directory) that build `output` from `source`;
        kind is "so", "o" or "a"."""
        raise NotImplementedError


def _safe_flags(value: str) -> bool:
    return all(piece.startswith("-") for piece in value.split())


_LANE_CHOICES = ("auto", "4", "8", "16")
# A -march= value as gcc and clang spell it (armv8.2-a+fp16+dotprod, x86-64-v3, rv64gcv_zba, native):
# nothing a shell or the compiler's command line would read as more than one name.
_MARCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def c_config_keys(omp: str = "1", march: str = "native", lanes: str = "auto") -> dict[str, ConfigKey]:
    """The config keys of a C runtime, with the given defaults."""
    return {
        "CC": ConfigKey(
            "",
            None,
            "the C compiler (empty: $CC from the environment, else the runtime's first of its compilers found)",
            lambda v: v == "" or re.fullmatch(r"[\w.+/-]+", v) is not None,
        ),
        "OMP": ConfigKey(omp, ("0", "1"), "parallelise outer loops and contractions with OpenMP"),
        "MARCH": ConfigKey(
            march,
            None,
            "target CPU for -march= (x86-64-v3, armv8.2-a+dotprod, rv64gcv, native): letters, digits "
            "and . _ + -, a letter or digit first; empty: the compiler's default",
            lambda v: v == "" or _MARCH.fullmatch(v) is not None,
        ),
        "VECTOR_WIDTH": ConfigKey(
            lanes, _LANE_CHOICES, "f32 lanes per vector register (auto: what the compiler targets with MARCH)"
        ),
        "CFLAGS": ConfigKey("", None, "extra compiler flags, space separated", _safe_flags),
    }


@dataclass(frozen=True)
class CRuntime(Runtime):
    """A C99 toolchain: finds a compiler (`--config CC=...`, else `CC` in the environment, else
    `compilers` in order) and builds position-independent code for MARCH (default: this machine),
    with OpenMP when OMP=1 (the default; kernels below a size threshold stay single-threaded).

    std_flags: C99; no errno from math functions; no FMA contraction (results do not depend on
    the target); -fno-trapping-math (clang's default, and what lets gcc if-convert the selects of
    the vector math without AVX-512 masks: catenc never reads the floating-point exception flags,
    and the flag changes no value)."""

    compilers: tuple[str, ...] = ("clang", "gcc", "cc")
    std_flags: tuple[str, ...] = ("-std=c99", "-fno-math-errno", "-ffp-contract=off", "-fno-trapping-math")
    extra_flags: tuple[str, ...] = ()
    config_keys: Mapping[str, ConfigKey] = field(default_factory=c_config_keys)

    def candidates(self, config: Mapping[str, str] | None = None) -> tuple[str, ...]:
        """The compilers `compiler` chooses from, in order."""
        wanted = (config or {}).get("CC") or os.environ.get("CC")
        return (wanted,) if wanted else self.compilers

    def tools(self, config: Mapping[str, str]) -> tuple[str, ...]:
        return tuple(name.split()[0] for name in self.candidates(config) if name.strip())

    def compiler(self, config: Mapping[str, str] | None = None) -> str:
        """The compiler executable; a clear error when there is none."""
        candidates = self.candidates(config)
        for name in candidates:
            found = shutil.which(name.split()[0]) if name else None
            if found:
                return name.split()[0]
        tried = ", ".join(candidates)
        raise CatencError(
            f"runtime '{self.name}': no C compiler found (tried {tried}); install clang "
            "(apt-get install clang) or set CC"
        )

    def toolchain_version(self, config: Mapping[str, str]) -> str:
        try:
            out = subprocess.run([self.compiler(config), "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return "unknown"
        first = out.stdout.splitlines()[0] if out.stdout else "unknown"
        return first.strip()

    def flags(self, config: Mapping[str, str], opt: str) -> list[str]:
        level = {"0": "-O0", "1": "-O1", "2": "-O2", "3": "-O3", "fast": "-O3"}[opt]
        flags = [level, *self.std_flags, *self.extra_flags]
        if opt == "fast":
            flags.append("-ffast-math")
        if opt in ("2", "3", "fast") and self.is_gcc(config):
            # gcc 12's -O2 cost model ("very cheap") vectorises only loops whose trip count is a
            # known multiple of the vector width; clang's -O2 vectorises the rest too. Its partial
            # redundancy elimination, with the vectoriser, miscompiles the remainder loops of
            # integer reductions for AVX2 (gcc 12.2 -O3 -march=x86-64-v3: wrong sums;
            # tests/test_targets.py has the case).
            flags += ["-fvect-cost-model=dynamic", "-fno-tree-pre"] if opt == "2" else ["-fno-tree-pre"]
        if config.get("OMP") == "1":
            flags.append("-fopenmp")
        flags += [f for f in self.target_flags(config) if f not in flags]
        if opt != "0" and self.vector_lanes(config) == 16 and self.probed_lanes(config) == 16:
            flags.append("-mprefer-vector-width=512")  # compilers default to 256-bit vectors on AVX-512
        flags += [f for f in config.get("CFLAGS", "").split() if f not in flags]
        return flags

    def host_c_compiler(self, config: Mapping[str, str]) -> tuple[str, list[str]] | None:
        return self.compiler(config), [*self.target_flags(config), *(["-fopenmp"] if self.parallel(config) else [])]

    def target_flags(self, config: Mapping[str, str]) -> list[str]:
        """The flags that choose the target CPU."""
        flags = [f"-march={config['MARCH']}"] if config.get("MARCH") else []
        chosen = [*self.extra_flags, *config.get("CFLAGS", "").split()]
        return flags + [f for f in chosen if f.startswith("-m")]

    def probed_lanes(self, config: Mapping[str, str]) -> int:
        """f32 lanes of the widest vectors the compiler targets under this config."""
        macros = self._macros(config)
        if "__AVX512F__" in macros:
            return 16
        return 8 if "__AVX__" in macros else 4

    def is_gcc(self, config: Mapping[str, str]) -> bool:
        """Whether the compiler is GCC (clang defines __GNUC__ too)."""
        macros = self._macros(config)
        return "__GNUC__" in macros and "__clang__" not in macros

    def _macros(self, config: Mapping[str, str]) -> frozenset[str]:
        try:
            compiler = self.compiler(config)
        except CatencError:  # no compiler here: emit plain-width code
            return frozenset()
        return _probe_macros(compiler, tuple(self.target_flags(config)))

    def parallel(self, config: Mapping[str, str]) -> bool:
        return config.get("OMP") == "1"

    def validate_config(self, raw: Mapping[str, str]) -> dict[str, str]:
        """As Runtime's; OpenMP by default only where the compiler has it (clang without
        libomp has not), while an explicit OMP=1 without it is an error that says what to install."""
        config = super().validate_config(raw)
        try:
            compiler = self.compiler(config)
        except CatencError:  # no compiler here (emitting source only is still possible)
            return config
        if config.get("OMP") == "1" and not _probe_openmp(compiler):
            if raw.get("OMP") == "1":
                raise CatencError(
                    f"--config OMP=1: '{compiler}' cannot build OpenMP code here; install its "
                    "OpenMP runtime (apt-get install libomp-dev for clang) or use OMP=0"
                )
            config["OMP"] = "0"
        return config

    def vector_lanes(self, config: Mapping[str, str]) -> int:
        wanted = config.get("VECTOR_WIDTH", "auto")
        return self.probed_lanes(config) if wanted == "auto" else int(wanted)

    def build_commands(
        self, source: str, output: str, config: Mapping[str, str], opt: str, kind: str
    ) -> list[list[str]]:
        cc = self.compiler(config)
        flags = self.flags(config, opt)
        if kind == "so" and opt == "fast":
            # Linked with -ffast-math, a shared library brings crtfastmath.o, which turns on
            # flush-to-zero for every thread of the process that loads it: link without it.
            obj = output[: -len(".so")] + ".o"
            link = [f for f in flags if f in ("-fopenmp",) or f.startswith("-fsanitize")]
            return [[cc, *flags, "-fPIC", "-c", "-o", obj, source], [cc, *link, "-shared", "-o", output, obj, "-lm"]]
        if kind == "so":
            return [[cc, *flags, "-fPIC", "-shared", "-o", output, source, "-lm"]]
        obj = output if kind == "o" else output[len("lib") : -len(".a")] + ".o"  # libNAME.a holds NAME.o
        commands = [[cc, *flags, "-fPIC", "-c", "-o", obj, source]]
        if kind == "a":
            commands.append(["ar", "rcs", output, obj])
        return commands


@functools.cache
def _probe_openmp(compiler: str) -> bool:
    """Whether the compiler builds and links an OpenMP shared library (a yes is remembered)."""
    return memoised("links OpenMP", compiler, (), lambda: _links_openmp(compiler), keep=bool, kind=bool)


def _links_openmp(compiler: str) -> bool:
    with tempfile.TemporaryDirectory(prefix="catenc-omp-") as tmp:
        source = Path(tmp) / "probe.c"
        source.write_text("#include <omp.h>\nint catenc_probe(void) { return omp_get_max_threads(); }\n")
        try:
            done = subprocess.run(
                [compiler, "-fopenmp", "-fPIC", "-shared", "-o", str(Path(tmp) / "probe.so"), str(source)],
                capture_output=True,
                timeout=60,
            )
        except (OSError, subprocess.SubprocessError):
            return False
        return done.returncode == 0


@functools.cache
def _probe_macros(compiler: str, target_flags: tuple[str, ...]) -> frozenset[str]:
    """The macros the compiler predefines with these flags (none if it cannot say; a real answer
    is remembered)."""
    names = memoised(
        "predefined macros", compiler, target_flags, lambda: _predefined(compiler, target_flags), keep=bool, kind=list
    )
    return frozenset(names)


def _predefined(compiler: str, target_flags: tuple[str, ...]) -> list[str]:
    try:
        out = subprocess.run(
            [compiler, *target_flags, "-dM", "-E", "-x", "c", os.devnull], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted(set(re.findall(r"#define (\w+)", out)))


def load_runtime(spec: str) -> Runtime:
    path, display = find_runtime(spec)
    module_name = f"catenc_runtime_{path.stem}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise CatencError(f"cannot load runtime descriptor '{display}'")
    module = importlib.util.module_from_spec(loader_spec)
    try:
        loader_spec.loader.exec_module(module)
    except (Exception, SystemExit, KeyboardInterrupt) as err:  # user code: even an exit is an error here
        shown = f"SyntaxError({err.msg!r})" if isinstance(err, SyntaxError) else repr(err)
        raise CatencError(f"runtime descriptor raised {shown} while loading", _raised_at(err, path, display)) from None
    runtime = getattr(module, "RUNTIME", None)
    if not isinstance(runtime, Runtime):
        raise CatencError(f"runtime descriptor '{display}' must define RUNTIME, an instance of catenc.runtime.Runtime")
    return replace(runtime, path=display, source_file=str(path))


def _raised_at(err: BaseException, path: Path, display: str) -> Loc:
    """Where in the descriptor err arose: its syntax error, else its last line in the traceback."""
    if isinstance(err, SyntaxError) and err.filename and Path(err.filename).resolve() == path.resolve():
        return Loc(display, err.lineno or 1, err.offset or 1)
    frames = traceback.extract_tb(err.__traceback__)
    lines = [f.lineno for f in frames if f.lineno and Path(f.filename).resolve() == path.resolve()]
    return Loc(display, lines[-1] if lines else 1, 1)
