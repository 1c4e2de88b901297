"""Names generated code may not give to a user's tensor or symbol, and the renaming that keeps
the user's names out of their way.

Each backend's renderer declares `reserved`: the keywords of its language, the built-ins, library
functions, macros and types its emitted code or the headers it includes may use, and the locals
and parameters of catenc's own scaffolding. A user name (input, output, intermediate or symbol)
found there is renamed in the generated code, `name_1` (or the first `name_k` that is free); the
manifest, the loader and the entry's name keep the user's name (docs/abi.md). The header, which
C++ includes through `extern "C"`, also keeps its parameters clear of C++'s keywords.

The frontend rejects some of these names outright as a composite's name (its tables in
`catenc.frontend.composites`: C keywords and C library names), though not as a tensor's, param's
or symbol's; the C table here starts from those. A composite's name is the entry's and is never
renamed: one a backend reserves is an error (catenc/emit.py).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, is_dataclass, replace

from catenc.diagnostics import Loc
from catenc.dtypes import DType
from catenc.frontend.composites import C_LIBRARY_VARIANTS, C_RESERVED, C_TYPES_AND_MACROS
from catenc.ir.nodes import Buffer, Compute
from catenc.symbolic import Atom, Call, Expr, Sym


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _variants(functions: str, suffixes: tuple[str, ...]) -> frozenset[str]:
    """Every function of the list with every suffix (`exp`, `expf`, `expl`)."""
    return frozenset(f + s for f in functions.split() for s in suffixes)


_BITS = (8, 16, 32, 64)

C_KEYWORDS = _words(
    """auto break case char const continue default do double else enum extern float for goto if inline int
    long register restrict return short signed sizeof static struct switch typedef union unsigned void volatile
    while _Bool _Complex _Imaginary _Alignas _Alignof _Atomic _Generic _Noreturn _Static_assert _Thread_local
    alignas alignof bool constexpr false nullptr static_assert thread_local true typeof typeof_unqual _BitInt
    _Decimal32 _Decimal64 _Decimal128"""
)

# Macros and types of the C headers the emitted files include (<math.h>, <stdint.h>, <stddef.h>,
# <omp.h>) and of those a program including model.h has likely included before it (<float.h>,
# <limits.h>, <stdio.h>, <stdlib.h>, <errno.h>, <assert.h>, <stdbool.h>, <complex.h>, glibc's
# extensions to them); gcc's predefined `linux` and `unix` (GNU modes). A macro or a type name
# cannot even name a parameter in a declaration.
_M_CONSTANTS = "M_E M_LOG2E M_LOG10E M_LN2 M_LN10 M_PI M_PI_2 M_PI_4 M_1_PI M_2_PI M_2_SQRTPI M_SQRT2 M_SQRT1_2"
C_MACROS_AND_TYPES = (
    C_TYPES_AND_MACROS
    | _variants(_M_CONSTANTS, ("", "f", "l", "f32", "f32x", "f64", "f64x", "f128"))
    | frozenset(f"{kind}{b}_{what}" for b in _BITS for kind in ("INT", "UINT") for what in ("MAX", "WIDTH", "C"))
    | frozenset(f"INT{b}_MIN" for b in _BITS)
    | frozenset(
        f"{kind}_{speed}{b}_{what}"
        for b in _BITS
        for kind in ("INT", "UINT")
        for speed in ("LEAST", "FAST")
        for what in ("MIN", "MAX", "WIDTH")
    )
    | frozenset(f"{u}int{speed}{b}_t" for b in _BITS for u in ("", "u") for speed in ("", "_least", "_fast"))
    | _words(
        """NAN INFINITY HUGE_VAL HUGE_VALF HUGE_VALL HUGE_VAL_F32 HUGE_VAL_F32X HUGE_VAL_F64 HUGE_VAL_F64X MAXFLOAT
        SNAN SNANF SNANL SNANF32 SNANF32X SNANF64 SNANF64X FP_NAN FP_INFINITE FP_ZERO FP_SUBNORMAL FP_NORMAL
        FP_ILOGB0 FP_ILOGBNAN FP_LLOGB0 FP_LLOGBNAN FP_FAST_FMA FP_FAST_FMAF FP_FAST_FMAL FP_INT_UPWARD
        FP_INT_DOWNWARD FP_INT_TOWARDZERO FP_INT_TONEARESTFROMZERO FP_INT_TONEAREST MATH_ERRNO MATH_ERREXCEPT
        math_errhandling float_t double_t fpclassify isfinite isinf isnan isnormal signbit issignaling
        issubnormal iszero iscanonical isgreater isgreaterequal isless islessequal islessgreater isunordered
        INTMAX_MIN INTMAX_MAX UINTMAX_MAX INTMAX_C UINTMAX_C INTMAX_WIDTH UINTMAX_WIDTH INTPTR_MIN INTPTR_MAX
        UINTPTR_MAX INTPTR_WIDTH UINTPTR_WIDTH PTRDIFF_MIN PTRDIFF_MAX PTRDIFF_WIDTH SIZE_MAX SIZE_WIDTH
        SIG_ATOMIC_MIN SIG_ATOMIC_MAX SIG_ATOMIC_WIDTH WCHAR_MIN WCHAR_MAX WCHAR_WIDTH WINT_MIN WINT_MAX
        WINT_WIDTH intmax_t uintmax_t intptr_t uintptr_t size_t ptrdiff_t wchar_t wint_t max_align_t nullptr_t
        NULL offsetof unreachable
        FLT_RADIX FLT_ROUNDS FLT_EVAL_METHOD DECIMAL_DIG FLT_MANT_DIG FLT_DIG FLT_DECIMAL_DIG FLT_MIN_EXP
        FLT_MIN_10_EXP FLT_MAX_EXP FLT_MAX_10_EXP FLT_MAX FLT_MIN FLT_EPSILON FLT_TRUE_MIN FLT_HAS_SUBNORM
        DBL_MANT_DIG DBL_DIG DBL_DECIMAL_DIG DBL_MIN_EXP DBL_MIN_10_EXP DBL_MAX_EXP DBL_MAX_10_EXP DBL_MAX DBL_MIN
        DBL_EPSILON DBL_TRUE_MIN DBL_HAS_SUBNORM LDBL_MANT_DIG LDBL_DIG LDBL_DECIMAL_DIG LDBL_MIN_EXP
        LDBL_MIN_10_EXP LDBL_MAX_EXP LDBL_MAX_10_EXP LDBL_MAX LDBL_MIN LDBL_EPSILON LDBL_TRUE_MIN LDBL_HAS_SUBNORM
        CHAR_BIT CHAR_MIN CHAR_MAX SCHAR_MIN SCHAR_MAX UCHAR_MAX SHRT_MIN SHRT_MAX USHRT_MAX INT_MIN INT_MAX
        UINT_MAX LONG_MIN LONG_MAX ULONG_MAX LLONG_MIN LLONG_MAX ULLONG_MAX LONG_LONG_MIN LONG_LONG_MAX
        ULONG_LONG_MAX MB_LEN_MAX LONG_BIT WORD_BIT SSIZE_MAX BOOL_MAX BOOL_WIDTH CHAR_WIDTH SCHAR_WIDTH
        UCHAR_WIDTH SHRT_WIDTH USHRT_WIDTH INT_WIDTH UINT_WIDTH LONG_WIDTH ULONG_WIDTH LLONG_WIDTH ULLONG_WIDTH
        EOF BUFSIZ FILENAME_MAX FOPEN_MAX L_tmpnam L_ctermid L_cuserid P_tmpdir TMP_MAX SEEK_SET SEEK_CUR
        SEEK_END SEEK_DATA SEEK_HOLE FILE fpos_t stdin stdout stderr EXIT_SUCCESS EXIT_FAILURE RAND_MAX MB_CUR_MAX
        div_t ldiv_t lldiv_t alloca errno EDOM ERANGE EILSEQ assert assert_perror complex imaginary I CMPLX
        CMPLXF CMPLXL va_list clock_t time_t CLOCKS_PER_SEC omp_lock_t omp_nest_lock_t omp_sched_t
        omp_proc_bind_t linux unix i386
        AIO_PRIO_DELTA_MAX ARG_MAX BC_BASE_MAX BC_DIM_MAX BC_SCALE_MAX BC_STRING_MAX CHARCLASS_NAME_MAX
        COLL_WEIGHTS_MAX DELAYTIMER_MAX EXPR_NEST_MAX HOST_NAME_MAX IOV_MAX LINE_MAX LOGIN_NAME_MAX MAX_CANON
        MAX_INPUT MQ_PRIO_MAX NAME_MAX NGROUPS_MAX NL_ARGMAX NL_LANGMAX NL_MSGMAX NL_NMAX NL_SETMAX NL_TEXTMAX
        NZERO PATH_MAX PIPE_BUF PTHREAD_DESTRUCTOR_ITERATIONS PTHREAD_KEYS_MAX PTHREAD_STACK_MIN RE_DUP_MAX
        RTSIG_MAX SEM_VALUE_MAX TTY_NAME_MAX XATTR_LIST_MAX XATTR_NAME_MAX XATTR_SIZE_MAX BIG_ENDIAN
        LITTLE_ENDIAN PDP_ENDIAN BYTE_ORDER be16toh be32toh be64toh le16toh le32toh le64toh htobe16 htobe32
        htobe64 htole16 htole32 htole64 FD_CLR FD_ISSET FD_SET FD_SETSIZE FD_ZERO NFDBITS RENAME_EXCHANGE
        RENAME_NOREPLACE RENAME_WHITEOUT WCONTINUED WEXITED WEXITSTATUS WIFCONTINUED WIFEXITED WIFSIGNALED
        WIFSTOPPED WNOHANG WNOWAIT WSTOPPED WSTOPSIG WTERMSIG WUNTRACED TIMER_ABSTIME TIME_UTC CLOCK_REALTIME
        CLOCK_MONOTONIC CLOCK_PROCESS_CPUTIME_ID CLOCK_THREAD_CPUTIME_ID CLOCK_MONOTONIC_RAW
        CLOCK_REALTIME_COARSE CLOCK_MONOTONIC_COARSE CLOCK_BOOTTIME CLOCK_REALTIME_ALARM CLOCK_BOOTTIME_ALARM
        CLOCK_TAI ADJ_OFFSET ADJ_FREQUENCY ADJ_MAXERROR ADJ_ESTERROR ADJ_STATUS ADJ_TIMECONST ADJ_TAI
        ADJ_SETOFFSET ADJ_MICRO ADJ_NANO ADJ_TICK ADJ_OFFSET_SINGLESHOT ADJ_OFFSET_SS_READ MOD_OFFSET
        MOD_FREQUENCY MOD_MAXERROR MOD_ESTERROR MOD_STATUS MOD_TIMECONST MOD_TAI MOD_MICRO MOD_NANO MOD_CLKB
        MOD_CLKA STA_PLL STA_PPSFREQ STA_PPSTIME STA_FLL STA_INS STA_DEL STA_UNSYNC STA_FREQHOLD STA_PPSSIGNAL
        STA_PPSJITTER STA_PPSWANDER STA_PPSERROR STA_CLOCKERR STA_NANO STA_MODE STA_CLK STA_RONLY isascii
        toascii isalnum_l isalpha_l isascii_l isblank_l iscntrl_l isdigit_l isgraph_l islower_l isprint_l
        ispunct_l isspace_l isupper_l isxdigit_l toascii_l strdupa strndupa"""
    )
)
# The functions and variables of <math.h> (C99 and glibc's extensions: each in its double, float
# and long double spelling) and <omp.h>, and the C library functions the frontend knows: a
# parameter of such a name hides the function in the kernel that would call it.
_MATH = """acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh drem erf erfc exp exp10 exp2 expm1
fabs fdim finite floor fma fmax fmin fmod frexp gamma hypot ilogb j0 j1 jn ldexp lgamma llrint llround log log10
log1p log2 logb lrint lround modf nan nearbyint nextafter nexttoward pow pow10 remainder remquo rint round
scalb scalbln scalbn significand sin sincos sinh sqrt tan tanh tgamma trunc y0 y1 yn"""
C_FUNCTIONS = (
    _variants(_MATH, ("", "f", "l"))
    | C_LIBRARY_VARIANTS
    | _words("signgam omp_get_thread_num omp_get_num_threads omp_get_max_threads omp_in_parallel")
)
C_NAMES = C_RESERVED | C_KEYWORDS | C_MACROS_AND_TYPES | C_FUNCTIONS
# Locals and parameters of the entry function catenc writes (templates/model.c.j2).
C_LOCALS = _words("workspace workspace_bytes weights packed_weights need")

CXX_KEYWORDS = _words(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t
    class compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield
    decltype default delete do double dynamic_cast else enum explicit export extern false float for friend goto
    if inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected
    public register reinterpret_cast requires return short signed sizeof static static_assert static_cast
    struct switch template this thread_local throw true try typedef typeid typename union unsigned using virtual
    void volatile wchar_t while xor xor_eq"""
)

_CUDA_VECTORS = "char uchar short ushort int uint long ulong longlong ulonglong float double"
# CUDA's built-in types, and the macros of the CUDA runtime headers the .cu includes; besides
# these, every `cudaXxx` without an underscore is the runtime API's (a function, enum value or
# macro: CUDA_API, below).
CUDA_MACROS_AND_TYPES = _words(
    """dim3 uint3 half half2 nv_bfloat16 nv_bfloat162 cudaStream_t cudaError_t cudaEvent_t CUstream_st
        CUDART_VERSION CUDA_VERSION CUDART_CB CUDARTAPI CUDARTAPI_CDECL CUDART_DEVICE CUDA_DOUBLE_MATH_FUNCTIONS
        CUDA_IPC_HANDLE_SIZE CU_UUID_HAS_BEEN_DEFINED"""
) | frozenset(f"{t}{n}" for t in _CUDA_VECTORS.split() for n in (1, 2, 3, 4))
CUDA_API = re.compile(r"cuda[A-Z][A-Za-z0-9]*")
# CUDA's built-in variables, the device functions (math, atomics, intrinsics) its headers declare
# at global scope, and the runtime API the host entry calls (templates/cuda_host.cu.j2).
CUDA_FUNCTIONS = (
    _words(
        """threadIdx blockIdx blockDim gridDim warpSize clusterDim clusterIdx __syncthreads __shfl_down_sync
        __launch_bounds__ __global__ __device__ __host__ __shared__ __restrict__
        min max umin umax llmin llmax ullmin ullmax norm rnorm fdivide fdividef saturate atomicAdd atomicSub
        atomicExch atomicMin atomicMax atomicInc atomicDec atomicCAS atomicAnd atomicOr atomicXor clock clock64
        printf malloc free memcpy memset cudaPeekAtLastError cudaGetLastError cudaSuccess cudaMemcpyAsync
        cudaMemcpy cudaMemcpyDeviceToHost cudaMemcpyHostToDevice cudaStreamSynchronize cudaStreamLegacy
        cudaStreamPerThread"""
    )
    | frozenset(f"make_{t}{n}" for t in _CUDA_VECTORS.split() for n in (1, 2, 3, 4))
    | _variants(
        "rsqrt rcbrt rhypot norm3d norm4d rnorm3d rnorm4d normcdf normcdfinv erfinv erfcinv erfcx cospi sinpi "
        "sincospi cyl_bessel_i0 cyl_bessel_i1 exp10",
        ("", "f"),
    )
)
CUDA_NAMES = CUDA_MACROS_AND_TYPES | CUDA_FUNCTIONS

# Parameters and locals of the CUDA host entry (templates/cuda_host.cu.j2).
CUDA_LOCALS = _words("stream groups count")

_CL_SCALARS = "char uchar short ushort int uint long ulong float double half"
_CL_ROUNDING = ("", "_rte", "_rtz", "_rtp", "_rtn")
# OpenCL C's keywords, types and built-in functions and macros (OpenCL C 1.2 to 3.0), C's keywords,
# and the typedefs and macros of catenc's OpenCL preamble (codegen/gpu.py).
OPENCL_NAMES = (
    C_KEYWORDS
    | frozenset(f"{u}int{b}_t" for b in _BITS for u in ("", "u"))
    | frozenset(f"INT{b}_{what}" for b in _BITS for what in ("MIN", "MAX"))
    | frozenset(f"UINT{b}_MAX" for b in _BITS)
    | _words(
        """kernel __kernel global __global local __local constant __constant private __private generic
        __generic read_only __read_only write_only __write_only read_write __read_write uniform pipe
        bool char uchar short ushort int uint long ulong float double half quad size_t ptrdiff_t intptr_t
        uintptr_t void image1d_t image1d_array_t image1d_buffer_t image2d_t image2d_array_t image3d_t
        image2d_depth_t image2d_array_depth_t image2d_msaa_t image2d_array_msaa_t image2d_msaa_depth_t
        image2d_array_msaa_depth_t sampler_t event_t queue_t ndrange_t clk_event_t reserve_id_t
        cl_mem_fence_flags memory_scope memory_order atomic_int atomic_uint atomic_long atomic_ulong
        atomic_float atomic_double atomic_intptr_t atomic_uintptr_t atomic_size_t atomic_ptrdiff_t atomic_flag
        complex imaginary
        get_work_dim get_global_size get_global_id get_local_size get_enqueued_local_size get_local_id
        get_num_groups get_group_id get_global_offset get_global_linear_id get_local_linear_id get_sub_group_size
        get_max_sub_group_size get_num_sub_groups get_enqueued_num_sub_groups get_sub_group_id
        get_sub_group_local_id barrier work_group_barrier sub_group_barrier mem_fence read_mem_fence
        write_mem_fence atomic_work_item_fence async_work_group_copy async_work_group_strided_copy
        wait_group_events prefetch printf vec_step shuffle shuffle2 vload_half vstore_half
        acos acosh acospi asin asinh asinpi atan atan2 atanh atanpi atan2pi cbrt ceil copysign cos cosh cospi
        erfc erf exp exp2 exp10 expm1 fabs fdim floor fma fmax fmin fmod fract frexp hypot ilogb ldexp lgamma
        lgamma_r log log2 log10 log1p logb mad maxmag minmag modf nan nextafter pow pown powr remainder remquo
        rint rootn round rsqrt sin sincos sinh sinpi sqrt tan tanh tanpi tgamma trunc
        abs abs_diff add_sat hadd rhadd clamp clz ctz mad_hi mad_sat max min mul_hi rotate sub_sat upsample
        popcount mad24 mul24 degrees mix radians step smoothstep sign cross dot distance length normalize
        fast_distance fast_length fast_normalize isequal isnotequal isgreater isgreaterequal isless islessequal
        islessgreater isfinite isinf isnan isnormal isordered isunordered signbit any all bitselect select
        read_imagef read_imagei read_imageui read_imageh write_imagef write_imagei write_imageui write_imageh
        get_image_width get_image_height get_image_depth get_image_dim get_image_channel_data_type
        get_image_channel_order get_image_array_size
        atomic_add atomic_sub atomic_xchg atomic_inc atomic_dec atomic_cmpxchg atomic_min atomic_max atomic_and
        atomic_or atomic_xor atomic_init atomic_store atomic_load atomic_exchange atomic_fetch_add
        atomic_fetch_sub atomic_fetch_or atomic_fetch_xor atomic_fetch_and atomic_fetch_min atomic_fetch_max
        atom_add atom_sub atom_xchg atom_inc atom_dec atom_cmpxchg atom_min atom_max atom_and atom_or atom_xor
        CLK_LOCAL_MEM_FENCE CLK_GLOBAL_MEM_FENCE CLK_IMAGE_MEM_FENCE CLK_NORMALIZED_COORDS_TRUE
        CLK_NORMALIZED_COORDS_FALSE CLK_ADDRESS_NONE CLK_ADDRESS_CLAMP CLK_ADDRESS_CLAMP_TO_EDGE
        CLK_ADDRESS_REPEAT CLK_ADDRESS_MIRRORED_REPEAT CLK_FILTER_NEAREST CLK_FILTER_LINEAR
        MAXFLOAT HUGE_VALF HUGE_VAL INFINITY NAN FLT_DIG FLT_MANT_DIG FLT_MAX_10_EXP FLT_MAX_EXP FLT_MIN_10_EXP
        FLT_MIN_EXP FLT_RADIX FLT_MAX FLT_MIN FLT_EPSILON DBL_DIG DBL_MANT_DIG DBL_MAX_10_EXP DBL_MAX_EXP
        DBL_MIN_10_EXP DBL_MIN_EXP DBL_MAX DBL_MIN DBL_EPSILON CHAR_BIT CHAR_MAX CHAR_MIN INT_MAX INT_MIN
        LONG_MAX LONG_MIN SCHAR_MAX SCHAR_MIN SHRT_MAX SHRT_MIN UCHAR_MAX USHRT_MAX UINT_MAX ULONG_MAX
        FP_FAST_FMA FP_FAST_FMAF FP_FAST_FMA_HALF CL_VERSION_1_0 CL_VERSION_1_1 CL_VERSION_1_2 CL_VERSION_2_0
        CL_VERSION_3_0 FLT_EVAL_METHOD ENDIAN_LITTLE cl_khr_fp64 cl_khr_fp16 cl_khr_int64_base_atomics
        cl_khr_int64_extended_atomics cl_khr_global_int32_base_atomics cl_khr_global_int32_extended_atomics
        cl_khr_local_int32_base_atomics cl_khr_local_int32_extended_atomics cl_khr_byte_addressable_store
        cl_khr_3d_image_writes cl_khr_depth_images cl_khr_subgroups cl_khr_spir cl_khr_il_program"""
    )
    | frozenset(f"{t}{n}" for t in _CL_SCALARS.split() for n in (2, 3, 4, 8, 16))
    | frozenset(f"as_{t}{n}" for t in _CL_SCALARS.split() for n in ("", 2, 3, 4, 8, 16))
    | frozenset(
        f"convert_{t}{n}{sat}{r}"
        for t in _CL_SCALARS.split()
        for n in ("", 2, 3, 4, 8, 16)
        for sat in ("", "_sat")
        for r in _CL_ROUNDING
    )
    | frozenset(
        f"{op}{n}" for op in ("vload", "vstore", "vload_half", "vstore_half", "vloada_half") for n in (2, 3, 4, 8, 16)
    )
    | frozenset(
        f"{p}_{f}"
        for p in ("half", "native")
        for f in "cos divide exp exp2 exp10 log log2 log10 powr recip rsqrt sin sqrt tan".split()
    )
    | _variants(_M_CONSTANTS, ("", "_F", "_H"))
)


@dataclass(frozen=True)
class Reserved:
    """Reserved names: a set, the names a pattern matches in full (none with an underscore, so
    that `name_k` always escapes it), and the file's own functions: each entry's symbol with the
    suffixes catenc gives its workspace query, kernels and their helpers."""

    names: frozenset[str]
    pattern: re.Pattern[str] | None = None
    symbols: tuple[str, ...] = ()

    def __contains__(self, name: object) -> bool:
        if name in self.names:
            return True
        if self.pattern is not None and self.pattern.fullmatch(str(name)):
            return True
        return bool(self.symbols) and _file_scope(self.symbols).fullmatch(str(name)) is not None

    def with_symbols(self, symbols: Iterable[str]) -> Reserved:
        return replace(self, symbols=tuple(sorted(set(symbols))))


_HELPERS = (
    r"(?:_workspace_bytes|_pack_weights|_packed_weights_bytes"
    r"|_const_\d+|_k\d+(?:_row\d+|_g\d+(?:_pack_a|_pack_b|_epilogue)?)?)?"
)


@functools.cache
def _file_scope(symbols: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(f"(?:{'|'.join(re.escape(s) for s in symbols)}){_HELPERS}")


def fresh_names(names: Iterable[str], reserved: Reserved, taken: Iterable[str]) -> dict[str, str]:
    """A new name for each of `names` that is reserved: `name_1`, or the first `name_k` that is
    neither reserved, nor taken, nor given to another name (in sorted order: deterministic)."""
    used = set(taken)
    out: dict[str, str] = {}
    for name in sorted(set(names)):
        if name not in reserved:
            continue
        k = 1
        while f"{name}_{k}" in used or f"{name}_{k}" in reserved:
            k += 1
        out[name] = f"{name}_{k}"
        used.add(out[name])
    return out


# ---- renaming user names in what codegen renders (catenc/emit.py applies it to an entry) ----

_NAME_FIELDS = frozenset({"buffer", "buffers", "output", "pack", "symbols", "scalars"})  # hold buffer names
_PAIR_FIELDS = frozenset({"store", "view_of"})  # (buffer name, ...)


def collect_names(obj: object, out: set[str]) -> None:
    """Every string and symbol in obj (what a fresh name must not be)."""
    stack, seen = [obj], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, str):
            out.add(item)
        elif isinstance(item, Expr):
            out |= item.free_symbols()
        elif isinstance(item, (tuple, list, frozenset, set)):
            stack.extend(item)
        elif is_dataclass(item) and not isinstance(item, (DType, Loc, type)):
            stack.extend(getattr(item, name) for name in _field_names(type(item)))


class Renamer:
    """Rebuilds frozen dataclasses with buffer names and symbols renamed; what holds no renamed
    name is kept as it is, and a subtree shared by several parents is rebuilt once."""

    def __init__(self, names: Mapping[str, str]):
        self.names = names
        self.memo: dict[int, tuple[object, object]] = {}

    def name(self, value):
        """A name, or a tuple or frozenset of names, renamed (a Graph's `buffers` are Buffers)."""
        if isinstance(value, str):
            return self.names.get(value, value)
        if not isinstance(value, (tuple, frozenset)):
            return self.visit(value)
        return _same_or(value, type(value)(self.name(v) for v in value))

    def expr(self, expr: Expr) -> Expr:
        """expr over the renamed symbols: the same polynomial (a renaming merges no terms), its
        monomials and terms put back in canonical order."""
        terms = {}
        for monomial, coef in expr.terms:
            atoms = [(self.atom(atom), power) for atom, power in monomial]
            terms[tuple(sorted(atoms, key=lambda item: item[0].key))] = coef
        renamed = Expr.from_dict(terms)
        return expr if renamed == expr else renamed

    def atom(self, atom: Atom) -> Atom:
        if isinstance(atom, Sym):
            return Sym(self.names.get(atom.name, atom.name))
        assert isinstance(atom, Call)
        return Call(atom.func, tuple(self.visit(arg) for arg in atom.args))

    def visit(self, obj):
        key = id(obj)
        if key not in self.memo:
            self.memo[key] = (obj, self._visit(obj))  # obj kept alive, so its id stays its own
        return self.memo[key][1]

    def _visit(self, obj):
        if isinstance(obj, Expr):
            return self.expr(obj)
        if isinstance(obj, (tuple, list)):
            return _same_or(obj, type(obj)(self.visit(v) for v in obj))
        if not is_dataclass(obj) or isinstance(obj, (DType, Loc, type)):
            return obj
        changes = {}
        for field in _field_names(type(obj)):
            value = getattr(obj, field)
            if value is None:
                continue
            if field in _NAME_FIELDS or (field == "name" and isinstance(obj, (Buffer, Compute))):
                new = self.name(value)
            elif field in _PAIR_FIELDS:
                new = _same_or(value, (self.name(value[0]), *(self.visit(v) for v in value[1:])))
            else:
                new = self.visit(value)
            if new is not value:
                changes[field] = new
        return replace(obj, **changes) if changes else obj


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _same_or(old, new):
    """old when new holds the very same items (so that nothing unchanged is rebuilt), else new."""
    return old if len(old) == len(new) and all(a is b for a, b in zip(old, new)) else new
