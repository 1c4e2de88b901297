"""Branch-free float transcendentals (catenc/codegen/templates/vecmath.c.j2) against float64.

The template is rendered on its own and compiled into a small shared library together with
the two bit helpers the generated prelude defines (defined identically here) and exported loops
``apply_<name>(const float* x, float* y, int64_t n)``. Every function is measured in units in
the last place of the float result against numpy / math in float64, over dense samples of the
whole float range (uniform bit patterns: log-uniform magnitudes, both signs), of the range
where the function is not saturated, the special values, and the edges: overflow and underflow
thresholds, subnormals, the largest finite float, and the edges of each range reduction. The
maximum error must stay within the bound stated in the template's comment above the function,
in every build, with clang and with gcc: -O0 (no FMA); catenc's own flags at -O2 for each
x86-64 level this CPU runs (x86-64-v3: AVX2, 8 lanes; x86-64-v4: AVX-512, 16 lanes; vectorised,
no FMA contraction); -march=native with contraction (clang's default within a statement, gcc
-O3 -ffp-contract=fast across statements). Builds with -ffast-math (catenc's opt "fast") must
stay within a few ulp on ordinary inputs, and a loop over each function must vectorise under
catenc's flags for both levels, whatever this CPU runs (clang's -Rpass=loop-vectorize remarks,
gcc's -fopt-info-vec) with no call left in it.
"""

from __future__ import annotations

import ctypes
import math
import re
import subprocess
import warnings
from pathlib import Path

import jinja2
import numpy as np
import pytest
from toolchains import COMPILERS, MARCHES, require, runnable_marches, runtime_flags

FUNCTIONS = ("exp", "exp_le0", "expm1", "log", "log1p", "tanh", "erf", "sigmoid")
F32_MAX = float(np.finfo(np.float32).max)
TINY = 2.0**-149  # smallest subnormal float
FAST_MATH_BOUND = 4.0  # ulp, -ffast-math build on ordinary inputs (no guarantee is stated there)

HARNESS = """\
#include <stdint.h>
#include <string.h>
#include <math.h>
#if defined(__GNUC__)
#define CATENC_INLINE static inline __attribute__((unused))
#else
#define CATENC_INLINE static inline
#endif
typedef union { float f; uint32_t u; } catenc_bits32;
CATENC_INLINE float catenc_f32_from_bits(uint32_t u) { catenc_bits32 b; b.u = u; return b.f; }
CATENC_INLINE uint32_t catenc_bits_from_f32(float f) { catenc_bits32 b; b.f = f; return b.u; }

%(vecmath)s
%(applies)s"""
APPLY = """\
void apply_%(name)s(const float* restrict x, float* restrict y, int64_t n);
void apply_%(name)s(const float* restrict x, float* restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = %(body)s;
}
"""
LOOPS = {name: f"catenc_v{name}_f32(x[i])" for name in FUNCTIONS}
LOOPS["gelu"] = "0.5f * x[i] * (1 + catenc_verf_f32(x[i] * 0.70710678f))"

STD = ["-std=c99", "-fno-math-errno"]
WARN = ["-Wall", "-Wextra", "-pedantic", "-Werror"]
# name -> (compiler, flags)
BUILDS = {
    **{f"{cc}-O0": (cc, ["-O0", *STD, *WARN]) for cc in COMPILERS},
    **{f"{cc}-O2-{m}": (cc, [*runtime_flags(cc, m), *WARN]) for cc in COMPILERS for m in runnable_marches()},
    "clang-O2-native-contract": ("clang", ["-O2", "-march=native", *STD, *WARN]),
    "gcc-O3-native-contract": ("gcc", ["-O3", "-march=native", "-ffp-contract=fast", *STD]),
}


def render_template() -> str:
    env = jinja2.Environment(loader=jinja2.PackageLoader("catenc.codegen", "templates"))
    return env.get_template("vecmath.c.j2").render()


def harness_source() -> str:
    applies = "".join(APPLY % {"name": name, "body": body} for name, body in LOOPS.items())
    return HARNESS % {"vecmath": render_template(), "applies": applies}


def stated_bounds(text: str) -> dict[str, float]:
    """The 'max error N ulp' of the comment that opens each function's definition."""
    bounds = {}
    for name in FUNCTIONS:
        match = re.search(rf"/\* {name}\(x\)[^,]*, max error ([0-9.]+) ulp", text)
        assert match, f"no stated bound for {name}"
        bounds[name] = float(match.group(1))
    return bounds


def compile_library(directory: Path, name: str, compiler: str, flags: list[str]) -> ctypes.CDLL:
    """Compile the harness to an object and link it separately (a -ffast-math link would pull in
    crtfastmath.o, which sets flush-to-zero for the whole test process when loaded)."""
    cc = require(compiler)
    source = directory / f"{name}.c"
    source.write_text(harness_source())
    obj, lib = directory / f"{name}.o", directory / f"lib{name}.so"
    subprocess.run([cc, *flags, "-fPIC", "-c", "-o", str(obj), str(source)], check=True, capture_output=True, text=True)
    subprocess.run([cc, "-shared", "-o", str(lib), str(obj)], check=True, capture_output=True, text=True)
    handle = ctypes.CDLL(str(lib))
    for fn in LOOPS:
        getattr(handle, f"apply_{fn}").argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
    return handle


def call(lib: ctypes.CDLL, name: str, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.empty_like(x)
    getattr(lib, f"apply_{name}")(x.ctypes.data, y.ctypes.data, x.size)
    return y


# ------------------------------------------------------------------ references and ulp errors


def _erf64(x: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


REFERENCE = {
    "exp": np.exp,
    "exp_le0": lambda x: np.exp(np.minimum(x, 0.0)),
    "expm1": np.expm1,
    "log": np.log,
    "log1p": np.log1p,
    "tanh": np.tanh,
    "erf": _erf64,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
}


def reference(name: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return REFERENCE[name](x.astype(np.float64))


def ulp_errors(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|y - ref| in ulps of the float binade of ref (subnormal ulp below 2^-126); where ref is
    NaN or rounds to an infinity, 0 if y is NaN / that same infinity, else inf."""
    with np.errstate(all="ignore"):
        y64 = y.astype(np.float64)
        want = ref.astype(np.float32).astype(np.float64)
        err = np.full(ref.shape, np.inf)
        nan = np.isnan(ref)
        err[nan & np.isnan(y64)] = 0.0
        inf = ~nan & np.isinf(want)
        err[inf & (y64 == want)] = 0.0
        rest = ~nan & ~inf
        exponent = np.frexp(ref[rest])[1] - 1
        exponent = np.where(ref[rest] == 0, -126, np.maximum(exponent, -126))
        e = np.abs(y64[rest] - ref[rest]) / np.ldexp(1.0, exponent - 23)
        err[rest] = np.where(np.isnan(e), np.inf, e)
    return err


# ------------------------------------------------------------------------------------ samples


def f32(values) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(values, dtype=np.float64).astype(np.float32)


def _ordered(x: np.ndarray) -> np.ndarray:
    """float32 -> int64 that orders like the floats (adjacent floats differ by 1)."""
    bits = x.view(np.uint32).astype(np.int64)
    return np.where(bits >= 2**31, -(bits - 2**31), bits)


def _from_ordered(k: np.ndarray) -> np.ndarray:
    bits = np.where(k < 0, 2**31 - k, k).astype(np.uint32)
    return bits.view(np.float32)


def float_range(lo: float, hi: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """n floats drawn uniformly over the float values (not the reals) in [lo, hi]."""
    a, b = _ordered(f32([lo, hi]))
    return _from_ordered(rng.integers(a, b + 1, n))


def around(values, k: int = 8) -> np.ndarray:
    """Each value and its 2k nearest floats (no crossing into NaN)."""
    base = _ordered(f32(values))
    near = (base[:, None] + np.arange(-k, k + 1)[None, :]).ravel()
    limit = int(_ordered(f32([np.inf]))[0])
    return _from_ordered(np.clip(near, -limit, limit))


LN2 = math.log(2.0)
COMMON = [0.0, TINY, 2.0**-126, 0.5, 1.0, 2.0, F32_MAX, np.inf]


def edges(name: str) -> np.ndarray:
    common = [s * v for v in COMMON for s in (1.0, -1.0)]
    ks = np.arange(-151, 130)
    if name in ("exp", "exp_le0", "expm1", "sigmoid"):
        # overflow, smallest normal, smallest subnormal and underflow-to-zero results; the edges
        # of round(x/ln2); the clamps (89, -104 and expm1's -30)
        special = [math.log(F32_MAX), math.log(2.0**-126), math.log(TINY), math.log(2.0**-150), 89, -104, -30, -87]
        special += list((ks + 0.5) * LN2) + [2.0**-25, -(2.0**-25), 24 * LN2, 25 * LN2]
        special += [-s for s in special] if name == "sigmoid" else []
    elif name == "log":
        # powers of two and the reduction edges 2^k*sqrt(1/2), normal and subnormal
        special = list(2.0 ** ks.astype(float)) + list(2.0 ** ks.astype(float) * math.sqrt(0.5))
    elif name == "log1p":
        # -1, 0, the reduction edges 1 + x = 2^k*3/4 and the 2^64 switch to log(x)
        special = [-1.0, 2.0**64, 2.0**24, 2.0**25]
        special += [2.0**k * 0.75 - 1.0 for k in range(-24, 130)] + [2.0**k for k in range(-149, 128)]
    elif name == "tanh":
        special = [0.625, 10.0, 9.01, 2.0**-12, 0.55]
    elif name == "erf":
        special = [0.875, 1.0, 4.0, 3.92, 2.0**-12]
    special = [s * sign for s in special for sign in (1.0, -1.0)] if name in ("tanh", "erf") else special
    return around([v for v in common + special if math.isfinite(v) and abs(v) <= F32_MAX] + [np.inf, -np.inf])


# where the function is not saturated (sampled over its floats, then uniformly)
ACTIVE = {
    "exp": (-104.0, 89.0),
    "exp_le0": (-104.0, 0.0),
    "expm1": (-30.0, 89.0),
    "log": (0.0, F32_MAX),
    "log1p": (-1.0, F32_MAX),
    "tanh": (-10.0, 10.0),
    "erf": (-4.0, 4.0),
    "sigmoid": (-105.0, 20.0),
}
UNIFORM = {
    "exp": (-10.0, 10.0),
    "exp_le0": (-10.0, 1.0),
    "expm1": (-2.0, 2.0),
    "log": (0.0, 4.0),
    "log1p": (-1.0, 3.0),
    "tanh": (-3.0, 3.0),
    "erf": (-3.0, 3.0),
    "sigmoid": (-12.0, 12.0),
}
NANS = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FFFFFFF], dtype=np.uint32).view(np.float32)


def samples(name: str) -> np.ndarray:
    rng = np.random.default_rng(sum(map(ord, name)))
    everywhere = rng.integers(0, 2**32, 1 << 19, dtype=np.uint64).astype(np.uint32).view(np.float32)
    lo, hi = ACTIVE[name]
    active = float_range(lo, hi, 1 << 19, rng)
    ulo, uhi = UNIFORM[name]
    uniform = f32(rng.uniform(ulo, uhi, 1 << 17))
    return np.concatenate([everywhere, active, uniform, edges(name), NANS])


# ------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def bounds() -> dict[str, float]:
    return stated_bounds(render_template())


@pytest.fixture(scope="module")
def cases() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """name -> (inputs, float64 reference)."""
    out = {}
    for name in FUNCTIONS:
        x = samples(name)
        out[name] = (x, reference(name, x))
    return out


@pytest.fixture(scope="module")
def libraries(tmp_path_factory) -> dict[str, ctypes.CDLL]:
    directory = tmp_path_factory.mktemp("vecmath")
    libs = {}
    for build, (compiler, flags) in BUILDS.items():
        libs[build] = compile_library(directory, build, compiler, flags)
    return libs


# ---------------------------------------------------------------------------------------- tests


def test_template_renders_alone_under_catenc_settings():
    strict = jinja2.Environment(
        loader=jinja2.PackageLoader("catenc.codegen", "templates"),
        keep_trailing_newline=True,
        trim_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    text = strict.get_template("vecmath.c.j2").render()
    assert text.strip() == render_template().strip()
    for name in FUNCTIONS:
        assert f"CATENC_VMATH float catenc_v{name}_f32(float x)" in text
    # no libm call: the only math.h names are the NAN / INFINITY macros
    code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    assert not re.search(r"\b(expf?|logf?|fabsf?|floorf?|rintf?|ldexpf?|frexpf?|copysignf?|erff?|tanhf?)\s*\(", code)


def test_stated_bounds_meet_the_requirements(bounds):
    for name in ("exp", "exp_le0", "expm1", "log", "log1p"):
        assert bounds[name] <= 2.0
    for name in ("tanh", "erf", "sigmoid"):
        assert bounds[name] <= 3.0


@pytest.mark.parametrize("build", list(BUILDS))
@pytest.mark.parametrize("name", FUNCTIONS)
def test_max_ulp_error(libraries, cases, bounds, build, name):
    lib = libraries[build]
    x, ref = cases[name]
    err = ulp_errors(call(lib, name, x), ref)
    worst = int(np.argmax(err))
    assert err[worst] <= bounds[name], (
        f"{name}({float(x[worst])!r} = {float(x[worst]).hex()}): {err[worst]:.3f} ulp > {bounds[name]} "
        f"(got {float(call(lib, name, x[worst : worst + 1])[0])!r}, want {ref[worst]!r})"
    )


@pytest.mark.parametrize("build", [b for b in BUILDS if b != "clang-O0"])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_builds_agree(libraries, cases, bounds, build, name):
    """Every build differs from clang -O0 by no more than the bound."""
    x, ref = cases[name]
    a = call(libraries["clang-O0"], name, x)
    b = call(libraries[build], name, x)
    both_nan = np.isnan(a) & np.isnan(b)
    ulp = ulp_errors(b[~both_nan], a[~both_nan].astype(np.float64))
    assert ulp.max() <= bounds[name]


# input:exact expected result; signed zeros are compared with their sign
SPECIAL = {
    "exp": "nan:nan inf:inf -inf:0 0:1 -0:1 89:inf max:inf -104:0 -max:0 -103:tiny",
    "exp_le0": "nan:nan inf:1 -inf:0 0:1 -0:1 89:1 max:1 tiny:1 -104:0 -max:0 -103:tiny",
    "expm1": "nan:nan inf:inf -inf:-1 0:0 -0:-0 -30:-1 -max:-1 89:inf max:inf tiny:tiny -tiny:-tiny min:min",
    "log": "nan:nan inf:inf -inf:nan 0:-inf -0:-inf -1:nan -tiny:nan 1:0 2:ln2",
    "log1p": "nan:nan inf:inf -inf:nan -1:-inf -2:nan -1.0000001:nan 0:0 -0:-0 tiny:tiny -tiny:-tiny",
    "tanh": "nan:nan inf:1 -inf:-1 0:0 -0:-0 10:1 -10:-1 max:1 tiny:tiny -tiny:-tiny",
    "erf": "nan:nan inf:1 -inf:-1 0:0 -0:-0 4:1 -4:-1 max:1 -max:-1",
    "sigmoid": "nan:nan inf:1 -inf:0 0:0.5 -0:0.5 max:1 -max:0 20:1 -104:0 -103:tiny",
}
NAMED = {"nan": math.nan, "inf": math.inf, "max": F32_MAX, "tiny": TINY, "min": 2.0**-126, "ln2": math.log(2.0)}


def _value(token: str) -> float:
    sign = -1.0 if token.startswith("-") else 1.0
    return sign * NAMED[token.lstrip("-")] if token.lstrip("-") in NAMED else float(token)


@pytest.mark.parametrize("build", list(BUILDS))
@pytest.mark.parametrize("name", FUNCTIONS)
def test_special_values(libraries, build, name):
    pairs = [pair.split(":") for pair in SPECIAL[name].split()]
    x = np.concatenate([f32([_value(a) for a, _ in pairs]), NANS])
    want = f32([_value(b) for _, b in pairs] + [math.nan] * len(NANS))
    got = call(libraries[build], name, x)
    for xi, gi, wi in zip(x, got, want):
        if np.isnan(wi):
            assert np.isnan(gi), f"{name}({xi!r}) = {gi!r}, want NaN"
        else:
            assert gi == wi and np.signbit(gi) == np.signbit(wi), f"{name}({xi!r}) = {gi!r}, want {wi!r}"


@pytest.mark.parametrize("compiler", COMPILERS)
def test_fast_math_stays_close(tmp_path, cases, compiler):
    """catenc's opt 'fast' adds -ffast-math: the compensated sums fold away and NaN / infinity
    handling is not promised, but the range reductions must survive reassociation."""
    lib = compile_library(tmp_path, "fast", compiler, ["-O3", "-ffast-math", "-march=native", *STD])
    for name in FUNCTIONS:
        x, ref = cases[name]
        with np.errstate(all="ignore"):
            ordinary = np.isfinite(x) & np.isfinite(ref) & ((np.abs(ref) >= 2.0**-126) | (ref == 0))
            ordinary &= np.abs(ref.astype(np.float32)) < F32_MAX  # results that round to finite floats
        err = ulp_errors(call(lib, name, x[ordinary]), ref[ordinary])
        worst = int(np.argmax(err))
        assert err[worst] <= FAST_MATH_BOUND, f"-ffast-math {name}({float(x[ordinary][worst])!r}): {err[worst]:.2f} ulp"


# compiler -> (the flag that reports vectorised loops, the report's pattern with the loop's line)
VECTORISE = {
    "clang": ("-Rpass=loop-vectorize", r":(\d+):\d+: remark: vectorized loop"),
    "gcc": ("-fopt-info-vec-optimized", r":(\d+):\d+: optimized: loop vectorized"),
}


@pytest.mark.parametrize("march", MARCHES)
@pytest.mark.parametrize("compiler", COMPILERS)
def test_loops_vectorise(tmp_path, compiler, march):
    """Each apply loop (and a GELU loop around erf) is vectorised under catenc's flags at its
    default level -O2 for AVX2 and for AVX-512 (compiled only: any machine checks both), and no
    call is left in the generated code. gcc needs the runtime's -fno-trapping-math to if-convert
    the selects without AVX-512 masks, and -fvect-cost-model=dynamic to vectorise at -O2."""
    require(compiler)
    report, pattern = VECTORISE[compiler]
    source = tmp_path / "vec.c"
    source.write_text(harness_source())
    command = [compiler, *runtime_flags(compiler, march), report, "-S", "-o", str(tmp_path / "vec.s"), str(source)]
    out = subprocess.run(command, check=True, capture_output=True, text=True)
    lines = source.read_text().splitlines()
    loops = {i + 1 for i, line in enumerate(lines) if line.startswith("    for (int64_t i = 0; i < n; i++)")}
    vectorised = {int(m.group(1)) for m in re.finditer(pattern, out.stderr)}
    assert len(loops) == len(LOOPS)
    assert loops <= vectorised, out.stderr
    assembly = (tmp_path / "vec.s").read_text()
    assert not re.search(r"^\s*(call|jmp)\s+[A-Za-z_]\w*(@PLT)?\s*$", assembly, re.M), "a call is left in the loops"
