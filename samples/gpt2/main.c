/* GPT-2 small, greedy generation with catenc's libgpt2 (samples/gpt2/gpt2.toml).
 *
 *   gpt2 WEIGHTS.safetensors [-n NEW_TOKENS] [-p "ID ID ID ..."]
 *
 * Maps the weights file (safetensors, one F32 tensor per weight input of the composite, named
 * as the input: samples/gpt2/weights.py), runs the prompt through `gpt2` (the logits of every
 * position and the keys and values of every layer, written straight into the KV cache), takes
 * the argmax of the last position, then decodes NEW_TOKENS - 1 more tokens with `gpt2_step`,
 * each step writing the new position's keys and values at the end of the cache. Prints the
 * generated token ids on one line, then the prefill time and the decoding speed.
 *
 * Plain C99 with POSIX (mmap, clock_gettime, posix_memalign): libc, libm and libgpt2.so.
 *
 *   cc -std=c99 -Wall -Wextra -O2 -Ibuild/gpt2 samples/gpt2/main.c -o build/gpt2/gpt2 \
 *      -Lbuild/gpt2 -lgpt2 -lm -Wl,-rpath,'$ORIGIN'
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpt2.h"

#define VOCAB 50257
#define POSITIONS 1024
#define CHANNELS 768
#define LAYERS 12
#define HEADS 12
#define HEAD_DIM 64
#define KV_ROW (LAYERS * HEADS * HEAD_DIM) /* floats of one position in the cache */
#define NUM_WEIGHTS 16
#define MAX_RANK 3

static const char *program = "gpt2";

/* ---------------------------------------------------------------------------------------- */
/* The weights: names (the order of the composite's weight arguments) and shapes.            */

typedef struct {
    const char *name;
    int rank;
    int64_t shape[MAX_RANK];
} WeightSpec;

static const WeightSpec SPECS[NUM_WEIGHTS] = {
    {"wte", 2, {VOCAB, CHANNELS, 0}},
    {"wpe", 2, {POSITIONS, CHANNELS, 0}},
    {"ln1_w", 2, {LAYERS, CHANNELS, 0}},
    {"ln1_b", 2, {LAYERS, CHANNELS, 0}},
    {"attn_w", 3, {LAYERS, 3 * CHANNELS, CHANNELS}},
    {"attn_b", 2, {LAYERS, 3 * CHANNELS, 0}},
    {"proj_w", 3, {LAYERS, CHANNELS, CHANNELS}},
    {"proj_b", 2, {LAYERS, CHANNELS, 0}},
    {"ln2_w", 2, {LAYERS, CHANNELS, 0}},
    {"ln2_b", 2, {LAYERS, CHANNELS, 0}},
    {"fc_w", 3, {LAYERS, 4 * CHANNELS, CHANNELS}},
    {"fc_b", 2, {LAYERS, 4 * CHANNELS, 0}},
    {"fcproj_w", 3, {LAYERS, CHANNELS, 4 * CHANNELS}},
    {"fcproj_b", 2, {LAYERS, CHANNELS, 0}},
    {"lnf_w", 1, {CHANNELS, 0, 0}},
    {"lnf_b", 1, {CHANNELS, 0, 0}},
};

/* What the header says about one tensor. */
typedef struct {
    int found;
    char dtype[16];
    int rank; /* -1: more than MAX_RANK dims (then `shape` holds the first ones) */
    int64_t shape[MAX_RANK];
    uint64_t begin, end; /* data_offsets, relative to the start of the data */
    int has_dtype, has_shape, has_offsets;
} TensorInfo;

/* ---------------------------------------------------------------------------------------- */
/* Errors and small helpers.                                                                 */

static void die(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s: error: ", program);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: %s WEIGHTS.safetensors [-n NEW_TOKENS] [-p \"ID ID ...\"]\n"
            "  -n NEW_TOKENS  tokens to generate (default 32)\n"
            "  -p IDS         the prompt as GPT-2 token ids, separated by spaces or commas\n"
            "                 (default: 15496 11 616 1438 318 1757 290 314)\n"
            "The prompt plus NEW_TOKENS - 1 must fit in GPT-2's %d positions.\n",
            program, POSITIONS);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static const char *catenc_error(int rc) {
    switch (rc) {
    case CATENC_E_SHAPE: return "CATENC_E_SHAPE (a constraint on the sizes does not hold)";
    case CATENC_E_WORKSPACE: return "CATENC_E_WORKSPACE (workspace too small or not 64-byte aligned)";
    case CATENC_E_INDEX: return "CATENC_E_INDEX (a token id out of range)";
    default: return "an unknown error code";
    }
}

/* A whole decimal integer in [lo, hi] (no sign for lo >= 0 needed; strtoll accepts one). */
static int parse_int(const char *text, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE || value < lo || value > hi) return -1;
    *out = value;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* A small JSON scanner over the safetensors header: the top-level object, the 16 tensors'   */
/* dtype, shape and data_offsets; everything else (__metadata__, other tensors) is skipped.  */

typedef struct {
    const char *p, *end;
    char error[200];
} Scanner;

static int fail(Scanner *s, const char *what) {
    if (!s->error[0]) snprintf(s->error, sizeof s->error, "%s", what);
    return -1;
}

static void skip_ws(Scanner *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) s->p++;
}

static int expect(Scanner *s, char c) {
    skip_ws(s);
    if (s->p >= s->end || *s->p != c) {
        char msg[64];
        snprintf(msg, sizeof msg, "expected '%c' in the JSON header", c);
        return fail(s, msg);
    }
    s->p++;
    return 0;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A JSON string into out (NUL-terminated; non-ASCII characters become '?'; a string longer
 * than the buffer is truncated and flagged with *long_out). out may be NULL to skip it. */
static int scan_string(Scanner *s, char *out, size_t cap, int *long_out) {
    size_t n = 0;
    int too_long = 0;
    if (expect(s, '"')) return -1;
    for (;;) {
        if (s->p >= s->end) return fail(s, "unterminated string in the JSON header");
        unsigned char c = (unsigned char)*s->p++;
        if (c == '"') break;
        if (c < 0x20) return fail(s, "control character in a string of the JSON header");
        if (c == '\\') {
            if (s->p >= s->end) return fail(s, "unterminated string in the JSON header");
            char e = *s->p++;
            switch (e) {
            case '"': c = '"'; break;
            case '\\': c = '\\'; break;
            case '/': c = '/'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u': {
                unsigned code = 0;
                for (int i = 0; i < 4; i++) {
                    int d = s->p < s->end ? hex_digit(*s->p) : -1;
                    if (d < 0) return fail(s, "bad \\u escape in the JSON header");
                    code = code * 16 + (unsigned)d;
                    s->p++;
                }
                c = code < 0x80 ? (unsigned char)code : '?';
                break;
            }
            default: return fail(s, "bad escape in a string of the JSON header");
            }
        } else if (c >= 0x80) {
            c = '?';
        }
        if (out) {
            if (n + 1 < cap) out[n++] = (char)c;
            else too_long = 1;
        }
    }
    if (out) out[n] = '\0';
    if (long_out) *long_out = too_long;
    return 0;
}

/* A non-negative integer (digits only: shapes and offsets have no sign, fraction or exponent). */
static int scan_uint(Scanner *s, uint64_t *out) {
    skip_ws(s);
    if (s->p >= s->end || *s->p < '0' || *s->p > '9')
        return fail(s, "expected a non-negative integer in the JSON header");
    uint64_t value = 0;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
        unsigned d = (unsigned)(*s->p - '0');
        if (value > (UINT64_MAX - d) / 10) return fail(s, "integer too large in the JSON header");
        value = value * 10 + d;
        s->p++;
    }
    if (s->p < s->end && (*s->p == '.' || *s->p == 'e' || *s->p == 'E'))
        return fail(s, "expected an integer, found a fraction, in the JSON header");
    *out = value;
    return 0;
}

/* Any JSON value, skipped. */
static int skip_value(Scanner *s, int depth) {
    if (depth > 64) return fail(s, "the JSON header nests too deep");
    skip_ws(s);
    if (s->p >= s->end) return fail(s, "the JSON header ends early");
    char c = *s->p;
    if (c == '"') return scan_string(s, NULL, 0, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        s->p++;
        skip_ws(s);
        if (s->p < s->end && *s->p == close) {
            s->p++;
            return 0;
        }
        for (;;) {
            if (c == '{') {
                if (scan_string(s, NULL, 0, NULL) || expect(s, ':')) return -1;
            }
            if (skip_value(s, depth + 1)) return -1;
            skip_ws(s);
            if (s->p < s->end && *s->p == ',') {
                s->p++;
                continue;
            }
            return expect(s, close);
        }
    }
    /* a number, true, false or null: the characters they are made of */
    const char *start = s->p;
    while (s->p < s->end && strchr("0123456789+-.eEtruefalsn", *s->p) && *s->p != '\0') s->p++;
    return s->p == start ? fail(s, "unexpected character in the JSON header") : 0;
}

/* [n, n, ...] of non-negative integers: the first `cap` into out, the count into *count. */
static int scan_uint_array(Scanner *s, uint64_t *out, int cap, int *count) {
    int n = 0;
    if (expect(s, '[')) return -1;
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        *count = 0;
        return 0;
    }
    for (;;) {
        uint64_t v;
        if (scan_uint(s, &v)) return -1;
        if (n < cap) out[n] = v;
        if (n < 1000) n++;
        skip_ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        if (expect(s, ']')) return -1;
        *count = n;
        return 0;
    }
}

/* {"dtype": "...", "shape": [...], "data_offsets": [b, e]} (other keys skipped). */
static int scan_tensor(Scanner *s, TensorInfo *t) {
    if (expect(s, '{')) return -1;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 0;
    }
    for (;;) {
        char key[32];
        int too_long;
        if (scan_string(s, key, sizeof key, &too_long) || expect(s, ':')) return -1;
        if (!too_long && strcmp(key, "dtype") == 0) {
            int long_dtype;
            if (scan_string(s, t->dtype, sizeof t->dtype, &long_dtype)) return -1;
            if (long_dtype) snprintf(t->dtype, sizeof t->dtype, "(unknown)");
            t->has_dtype = 1;
        } else if (!too_long && strcmp(key, "shape") == 0) {
            uint64_t dims[MAX_RANK];
            int rank;
            if (scan_uint_array(s, dims, MAX_RANK, &rank)) return -1;
            t->rank = rank > MAX_RANK ? -1 : rank;
            for (int i = 0; i < MAX_RANK; i++)
                t->shape[i] = i < rank ? (dims[i] > (uint64_t)INT64_MAX ? -1 : (int64_t)dims[i]) : 0;
            t->has_shape = 1;
        } else if (!too_long && strcmp(key, "data_offsets") == 0) {
            uint64_t offsets[2];
            int count;
            if (scan_uint_array(s, offsets, 2, &count)) return -1;
            if (count != 2) return fail(s, "data_offsets must hold two integers");
            t->begin = offsets[0];
            t->end = offsets[1];
            t->has_offsets = 1;
        } else if (skip_value(s, 1)) {
            return -1;
        }
        skip_ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        return expect(s, '}');
    }
}

/* The whole header: the 16 tensors we need into infos (indexed as SPECS). */
static int scan_header(Scanner *s, TensorInfo infos[NUM_WEIGHTS]) {
    if (expect(s, '{')) return -1;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
    } else {
        for (;;) {
            char key[64];
            int too_long, which = -1;
            if (scan_string(s, key, sizeof key, &too_long) || expect(s, ':')) return -1;
            for (int i = 0; i < NUM_WEIGHTS && !too_long; i++)
                if (strcmp(key, SPECS[i].name) == 0) which = i;
            if (which >= 0) {
                if (infos[which].found) {
                    snprintf(s->error, sizeof s->error, "tensor '%s' appears twice in the header", key);
                    return -1;
                }
                infos[which].found = 1;
                skip_ws(s);
                if (s->p < s->end && *s->p != '{') {
                    snprintf(s->error, sizeof s->error, "tensor '%s': expected an object", key);
                    return -1;
                }
                if (scan_tensor(s, &infos[which])) return -1;
            } else if (skip_value(s, 1)) {
                return -1;
            }
            skip_ws(s);
            if (s->p < s->end && *s->p == ',') {
                s->p++;
                continue;
            }
            if (expect(s, '}')) return -1;
            break;
        }
    }
    skip_ws(s); /* the header may be padded with spaces */
    if (s->p != s->end) return fail(s, "trailing characters after the JSON header");
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* The weights file: mapped, checked, the 16 pointers into it.                               */

typedef struct {
    void *map;
    size_t size;
    const float *tensor[NUM_WEIGHTS];
} Weights;

static void format_shape(char *out, size_t cap, int rank, const int64_t *shape) {
    size_t n = 0;
    n += (size_t)snprintf(out + n, cap - n, "[");
    if (rank < 0) {
        snprintf(out + n, cap - n, "more than %d dims]", MAX_RANK);
        return;
    }
    for (int i = 0; i < rank && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < cap) snprintf(out + n, cap - n, "]");
}

static void load_weights(const char *path, Weights *w) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) die("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) die("%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) die("%s: not a regular file", path);
    if (st.st_size < 8) die("%s: %lld bytes; too short for a safetensors file", path, (long long)st.st_size);
    w->size = (size_t)st.st_size;
    w->map = mmap(NULL, w->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (w->map == MAP_FAILED) die("%s: cannot map: %s", path, strerror(errno));
    close(fd);

    const unsigned char *bytes = (const unsigned char *)w->map;
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--) header_len = header_len << 8 | bytes[i]; /* little-endian */
    if (header_len > w->size - 8)
        die("%s: the header claims %llu bytes but the file holds %llu after the length: "
            "not a safetensors file, or truncated",
            path, (unsigned long long)header_len, (unsigned long long)(w->size - 8));
    uint64_t data_start = 8 + header_len, data_len = w->size - data_start;

    TensorInfo infos[NUM_WEIGHTS];
    memset(infos, 0, sizeof infos);
    Scanner s = {(const char *)bytes + 8, (const char *)bytes + data_start, {0}};
    if (scan_header(&s, infos))
        die("%s: bad safetensors header: %s (at byte %lld)", path, s.error, (long long)(s.p - (const char *)bytes));

    /* First what the header says: every tensor there, F32, of the composite's shape. */
    for (int i = 0; i < NUM_WEIGHTS; i++) {
        const WeightSpec *spec = &SPECS[i];
        const TensorInfo *t = &infos[i];
        char want[64], got[64];
        if (!t->found) die("%s: no tensor named '%s'", path, spec->name);
        if (!t->has_dtype || !t->has_shape || !t->has_offsets)
            die("%s: tensor '%s' lacks %s", path, spec->name,
                !t->has_dtype ? "a dtype" : !t->has_shape ? "a shape" : "data_offsets");
        if (strcmp(t->dtype, "F32") != 0)
            die("%s: tensor '%s' has dtype %s; this program needs F32", path, spec->name, t->dtype);
        format_shape(want, sizeof want, spec->rank, spec->shape);
        format_shape(got, sizeof got, t->rank, t->shape);
        if (strcmp(want, got) != 0) die("%s: tensor '%s' has shape %s; expected %s", path, spec->name, got, want);
        uint64_t nbytes = 4;
        for (int d = 0; d < spec->rank; d++) nbytes *= (uint64_t)spec->shape[d];
        if (t->begin > t->end || t->end - t->begin != nbytes)
            die("%s: tensor '%s': data_offsets [%llu, %llu] do not span %llu bytes", path, spec->name,
                (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)nbytes);
    }
    /* Then where the data lies (a truncated file passes the checks above). */
    for (int i = 0; i < NUM_WEIGHTS; i++) {
        const WeightSpec *spec = &SPECS[i];
        const TensorInfo *t = &infos[i];
        if (t->end > data_len)
            die("%s: tensor '%s' ends at byte %llu of the data, but the file holds %llu bytes of data "
                "(truncated?)",
                path, spec->name, (unsigned long long)t->end, (unsigned long long)data_len);
        if ((data_start + t->begin) % sizeof(float) != 0)
            die("%s: tensor '%s' starts at byte %llu of the file, not a multiple of 4", path, spec->name,
                (unsigned long long)(data_start + t->begin));
        w->tensor[i] = (const float *)(const void *)(bytes + data_start + t->begin);
    }
}

/* Read one byte of every page, so that the prefill time does not include faulting the
 * weights in from the page cache (or the disk). */
static unsigned touch_pages(const Weights *w) {
    const volatile unsigned char *bytes = (const volatile unsigned char *)w->map;
    long page = sysconf(_SC_PAGESIZE);
    size_t step = page > 0 ? (size_t)page : 4096;
    unsigned sum = 0;
    for (size_t i = 0; i < w->size; i += step) sum += bytes[i];
    return sum;
}

/* ---------------------------------------------------------------------------------------- */

static int parse_prompt(const char *text, int64_t *tokens, int cap) {
    int n = 0;
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long id = strtoll(p, &end, 10);
        if (end == p || (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != ','))
            die("-p: '%s' is not a list of token ids", text);
        if (errno == ERANGE || id < 0 || id >= VOCAB) die("-p: token id %.*s is not in [0, %d)", (int)(end - p), p, VOCAB);
        if (n == cap) die("-p: more than %d tokens", cap);
        tokens[n++] = id;
        p = end;
    }
    if (n == 0) die("-p: the prompt is empty");
    return n;
}

static int64_t argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void *alloc_workspace(size_t bytes) {
    void *p = NULL;
    size_t rounded = (bytes + 63) / 64 * 64;
    int rc = posix_memalign(&p, 64, rounded ? rounded : 64);
    if (rc != 0) die("cannot allocate a %zu-byte workspace: %s", bytes, strerror(rc));
    return p;
}

static void *alloc_or_die(size_t count, size_t size, const char *what) {
    void *p = calloc(count, size);
    if (!p) die("cannot allocate the %s (%zu bytes)", what, count * size);
    return p;
}

int main(int argc, char **argv) {
    static const int64_t default_prompt[] = {15496, 11, 616, 1438, 318, 1757, 290, 314};
    const char *path = NULL, *prompt_text = NULL;
    long long new_tokens = 32;

    if (argc > 0 && argv[0] && argv[0][0]) {
        const char *slash = strrchr(argv[0], '/');
        program = slash ? slash + 1 : argv[0];
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(arg, "-n") == 0 || strcmp(arg, "-p") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: error: %s needs a value\n", program, arg);
                usage(stderr);
                return 1;
            }
            if (arg[1] == 'n') {
                if (parse_int(argv[++i], 1, POSITIONS, &new_tokens))
                    die("-n: '%s' is not a whole number in [1, %d]", argv[i], POSITIONS);
            } else {
                prompt_text = argv[++i];
            }
        } else if (arg[0] == '-' && arg[1] != '\0') {
            fprintf(stderr, "%s: error: unknown option %s\n", program, arg);
            usage(stderr);
            return 1;
        } else if (path) {
            fprintf(stderr, "%s: error: more than one weights file (%s, %s)\n", program, path, arg);
            usage(stderr);
            return 1;
        } else {
            path = arg;
        }
    }
    if (!path) {
        usage(stderr);
        return 1;
    }

    /* The prompt: T tokens at positions 0..T-1; then N new tokens, of which all but the last
     * are fed back at positions T..T+N-2, so T + N - 1 <= 1024 positions. */
    int64_t prompt[POSITIONS];
    int64_t T;
    if (prompt_text) {
        T = parse_prompt(prompt_text, prompt, POSITIONS);
    } else {
        T = (int64_t)(sizeof default_prompt / sizeof default_prompt[0]);
        memcpy(prompt, default_prompt, sizeof default_prompt);
    }
    const int64_t N = new_tokens;
    if (T + N - 1 > POSITIONS)
        die("a prompt of %lld tokens and %lld new tokens need %lld positions; GPT-2 has %d", (long long)T,
            (long long)N, (long long)(T + N - 1), POSITIONS);

    Weights w;
    load_weights(path, &w);
    (void)touch_pages(&w);
    const float *const *p = w.tensor;

    /* The KV cache, position-major [T + N, 12, 12, 64]: prefill fills positions 0..T-1, every
     * decoding step reads the S positions before it and writes its own at position S. */
    const size_t capacity = (size_t)(T + N);
    float *k_cache = alloc_or_die(capacity * KV_ROW, sizeof(float), "key cache");
    float *v_cache = alloc_or_die(capacity * KV_ROW, sizeof(float), "value cache");
    float *logits = alloc_or_die((size_t)T * VOCAB, sizeof(float), "logits");

    /* One workspace for both entries: the largest either needs (the step's grows with S). */
    size_t ws_bytes = gpt2_workspace_bytes(T);
    for (int64_t S = T; S <= T + N - 2; S++) {
        size_t b = gpt2_step_workspace_bytes(S);
        if (b > ws_bytes) ws_bytes = b;
    }
    void *workspace = alloc_workspace(ws_bytes);

    int64_t *out = alloc_or_die((size_t)N, sizeof(int64_t), "generated tokens");

    double t0 = now_ms();
    int rc = gpt2(prompt, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13],
                  p[14], p[15], logits, k_cache, v_cache, T, workspace, ws_bytes);
    double t1 = now_ms();
    if (rc != 0) die("gpt2 (prefill, T=%lld) returned %d: %s", (long long)T, rc, catenc_error(rc));
    out[0] = argmax(logits + (size_t)(T - 1) * VOCAB, VOCAB);

    /* Decoding: token out[i-1] at position S = T + i - 1 against the S cached positions. Its
     * keys and values are written directly at position S of the cache (k_new and v_new do not
     * overlap past_k and past_v, the S positions before them), which appends them. */
    for (int64_t i = 1; i < N; i++) {
        const int64_t S = T + i - 1;
        rc = gpt2_step(out[i - 1], k_cache, v_cache, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9],
                       p[10], p[11], p[12], p[13], p[14], p[15], logits, k_cache + (size_t)S * KV_ROW,
                       v_cache + (size_t)S * KV_ROW, S, workspace, ws_bytes);
        if (rc != 0) die("gpt2_step (S=%lld) returned %d: %s", (long long)S, rc, catenc_error(rc));
        out[i] = argmax(logits, VOCAB);
    }
    double t2 = now_ms();

    for (int64_t i = 0; i < N; i++) printf(i ? " %lld" : "%lld", (long long)out[i]);
    printf("\n");
    printf("prefill: %lld tokens in %.1f ms\n", (long long)T, t1 - t0);
    if (N > 1)
        printf("decode: %lld tokens in %.1f ms, %.2f tokens/s\n", (long long)(N - 1), t2 - t1,
               (double)(N - 1) * 1e3 / (t2 - t1));
    else
        printf("decode: no steps (-n 1)\n");

    free(out);
    free(workspace);
    free(logits);
    free(v_cache);
    free(k_cache);
    munmap(w.map, w.size);
    return 0;
}
