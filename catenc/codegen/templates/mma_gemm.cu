/* Tensor-core tiles of a contraction (docs/runtimes.md, "CUDA"): f16 or bf16 operands, f32
 * accumulators, mma.sync.m16n8k16 (sm_80 and later).
 *
 * A work-group computes a BM x BN tile of the output with one warp per 64 x WN part of it, as
 * 4 x WN/8 matrix instructions per 16 steps of depth. Operand tiles of BK = 32 steps of depth are
 * copied to shared memory (the kernel's dynamic shared memory: `shared_bytes`) by cp.async,
 * 16 bytes a copy, STAGES - 1 tiles ahead of the warps, which read them with ldmatrix. A tile is
 * stored with its unit-stride axis contiguous: depth-major ([P][32]; ldmatrix) or
 * rows/cols-major ([32][P]; ldmatrix.trans); its 16-byte chunks are XOR-swizzled so that the 8
 * rows ldmatrix reads at once fall in distinct banks. Operands whose pointer, row step or
 * contiguous extent are not multiples of 16 bytes are copied element by element instead (the
 * same tiles, the same results).
 *
 * Element (p, k) of operand A is a[p*lda + k] when A is depth-major, a[k*lda + p] otherwise
 * (p a row); likewise B with p a column. The epilogue gets (row, col, sum) for every output
 * element of the tile inside the M x N bounds. */
namespace catenc_mma {

constexpr int BK = 32, WM = 64, MI = WM / 16;

__device__ __forceinline__ unsigned shared_address(const void* p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void copy16(void* dst, const void* src, bool inside)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
                 "r"(inside ? 16 : 0));
}

__device__ __forceinline__ void commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}

template <int N>
__device__ __forceinline__ void wait_pending()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

template <bool TRANS>
__device__ __forceinline__ void ldmatrix4(unsigned (&r)[4], const void* p)
{
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(shared_address(p)));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(shared_address(p)));
}

template <bool BF16>
__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    if constexpr (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Where element (p, k) of a tile lies in shared memory (in elements). */
template <bool DEPTH_MAJOR, int P>
__device__ __forceinline__ int slot(int p, int k)
{
    if constexpr (DEPTH_MAJOR)  /* [P][BK]: 4 chunks a row, chunk ^ (row / 2 % 4) */
        return p * BK + ((((k >> 3) ^ (p >> 1)) & 3) << 3) + (k & 7);
    else  /* [BK][P]: P/8 chunks a row, chunk ^ (row % 8) */
        return k * P + ((((p >> 3) ^ k) & 7) | ((p >> 3) & ~7)) * 8 + (p & 7);
}

/* One stage: the P x BK tile of an operand from (p0, k0), zero past `extent` and `depth`;
 * VECTOR: 16-byte asynchronous copies (see `vectorizable`), else element by element. */
template <bool DEPTH_MAJOR, int P, int THREADS, bool VECTOR>
__device__ __forceinline__ void load_tile(uint16_t* tile, const uint16_t* g, int64_t ld, int64_t p0, int64_t k0,
                                          int64_t extent, int64_t depth, int item)
{
    constexpr int CHUNKS = P * BK / 8;
    constexpr int PER_ROW = DEPTH_MAJOR ? BK / 8 : P / 8;
#pragma unroll
    for (int c = 0; c < CHUNKS / THREADS; ++c) {
        const int chunk = item + c * THREADS;
        const int row = chunk / PER_ROW, column = chunk % PER_ROW * 8;
        const int p = DEPTH_MAJOR ? row : column, k = DEPTH_MAJOR ? column : row;
        const int64_t gp = p0 + p, gk = k0 + k;
        uint16_t* dst = tile + slot<DEPTH_MAJOR, P>(p, k);
        if constexpr (VECTOR) {
            const bool inside = gp < extent && gk < depth;
            copy16(dst, inside ? g + (DEPTH_MAJOR ? gp * ld + gk : gk * ld + gp) : g, inside);
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const int64_t ep = DEPTH_MAJOR ? gp : gp + e, ek = DEPTH_MAJOR ? gk + e : gk;
                dst[e] = ep < extent && ek < depth ? g[DEPTH_MAJOR ? ep * ld + ek : ek * ld + ep] : (uint16_t)0;
            }
        }
    }
}

/* A warp's fragments at depth kk of the stage's tiles: A's 4 row blocks of 16, B's 8 column
 * blocks of 8 (ldmatrix's lanes: `matrix` 0..3 a lane addresses a row of, and that `row`). */
template <int BM, int BN, int NI, bool A_DEPTH_MAJOR, bool B_DEPTH_MAJOR>
__device__ __forceinline__ void fragments(unsigned (&fa)[MI][4], unsigned (&fb)[NI][2], const uint16_t* ta,
                                          const uint16_t* tb, int kk, int wm, int wn, int matrix, int row)
{
#pragma unroll
    for (int i = 0; i < MI; ++i) {
        /* matrices: rows 0-7 and 8-15 at depth 0-7, then both at depth 8-15 */
        const int p = wm + i * 16 + (matrix & 1) * 8 + (A_DEPTH_MAJOR ? row : 0);
        const int k = kk + (matrix >> 1) * 8 + (A_DEPTH_MAJOR ? 0 : row);
        ldmatrix4<!A_DEPTH_MAJOR>(fa[i], ta + slot<A_DEPTH_MAJOR, BM>(p, k));
    }
#pragma unroll
    for (int j = 0; j < NI; j += 2) {
        /* matrices: columns 0-7 at depth 0-7 and 8-15, then columns 8-15 at both */
        const int p = wn + j * 8 + (matrix >> 1) * 8 + (B_DEPTH_MAJOR ? row : 0);
        const int k = kk + (matrix & 1) * 8 + (B_DEPTH_MAJOR ? 0 : row);
        unsigned r[4];
        ldmatrix4<!B_DEPTH_MAJOR>(r, tb + slot<B_DEPTH_MAJOR, BN>(p, k));
        fb[j][0] = r[0];
        fb[j][1] = r[1];
        fb[j + 1][0] = r[2];
        fb[j + 1][1] = r[3];
    }
}

/* Whether an operand's tiles can be copied 16 bytes at a time. */
__device__ __forceinline__ bool vectorizable(const uint16_t* g, int64_t ld, int64_t contiguous)
{
    return ((uintptr_t)g % 16 == 0) && ld % 8 == 0 && contiguous % 8 == 0;
}

/* The depth loop: acc += the tile's products. */
template <int BM, int BN, int WN, int STAGES, bool BF16, bool A_DEPTH_MAJOR, bool B_DEPTH_MAJOR, bool VECTOR>
__device__ __forceinline__ void products(float (&acc)[MI][WN / 8][4], const uint16_t* a, int64_t lda, const uint16_t* b,
                                         int64_t ldb, int64_t M, int64_t N, int64_t K, int64_t m0, int64_t n0)
{
    constexpr int WARPS_N = BN / WN, THREADS = 32 * (BM / WM) * WARPS_N, NI = WN / 8;
    extern __shared__ __align__(128) uint16_t catenc_mma_shared[];
    uint16_t(*tiles_a)[BM * BK] = reinterpret_cast<uint16_t(*)[BM * BK]>(catenc_mma_shared);
    uint16_t(*tiles_b)[BN * BK] = reinterpret_cast<uint16_t(*)[BN * BK]>(catenc_mma_shared + STAGES * BM * BK);
    const int item = (int)threadIdx.x, lane = item % 32, warp = item / 32;
    const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN, matrix = lane / 8, row = lane % 8;
    const int steps = (int)((K + BK - 1) / BK);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < steps) {
            load_tile<A_DEPTH_MAJOR, BM, THREADS, VECTOR>(tiles_a[s], a, lda, m0, s * BK, M, K, item);
            load_tile<B_DEPTH_MAJOR, BN, THREADS, VECTOR>(tiles_b[s], b, ldb, n0, s * BK, N, K, item);
        }
        commit();
    }
    int stage = 0, fill = STAGES - 1;  /* the stage the warps read, the stage the copies fill */
    for (int step = 0; step < steps; ++step) {
        wait_pending<STAGES - 2>();
        __syncthreads();
        const int next = step + STAGES - 1;
        if (next < steps) {
            load_tile<A_DEPTH_MAJOR, BM, THREADS, VECTOR>(tiles_a[fill], a, lda, m0, (int64_t)next * BK, M, K, item);
            load_tile<B_DEPTH_MAJOR, BN, THREADS, VECTOR>(tiles_b[fill], b, ldb, n0, (int64_t)next * BK, N, K, item);
        }
        commit();
        const uint16_t* ta = tiles_a[stage];
        const uint16_t* tb = tiles_b[stage];
        unsigned fa[2][MI][4], fb[2][NI][2];  /* the next depth's fragments load during these products */
        fragments<BM, BN, NI, A_DEPTH_MAJOR, B_DEPTH_MAJOR>(fa[0], fb[0], ta, tb, 0, wm, wn, matrix, row);
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            if (kk + 1 < BK / 16)
                fragments<BM, BN, NI, A_DEPTH_MAJOR, B_DEPTH_MAJOR>(fa[(kk + 1) % 2], fb[(kk + 1) % 2], ta, tb, (kk + 1) * 16,
                                                                wm, wn, matrix, row);
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) mma<BF16>(acc[i][j], fa[kk % 2][i], fb[kk % 2][j][0], fb[kk % 2][j][1]);
        }
        stage = stage + 1 == STAGES ? 0 : stage + 1;
        fill = fill + 1 == STAGES ? 0 : fill + 1;
    }
    wait_pending<0>();
}

template <int BM, int BN, int WN, int STAGES, bool BF16, bool A_DEPTH_MAJOR, bool B_DEPTH_MAJOR, typename Epilogue>
__device__ __forceinline__ void gemm(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, int64_t M,
                                     int64_t N, int64_t K, int64_t m0, int64_t n0, Epilogue epilogue)
{
    constexpr int NI = WN / 8;
    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    if (vectorizable(a, lda, A_DEPTH_MAJOR ? K : M) && vectorizable(b, ldb, B_DEPTH_MAJOR ? K : N))
        products<BM, BN, WN, STAGES, BF16, A_DEPTH_MAJOR, B_DEPTH_MAJOR, true>(acc, a, lda, b, ldb, M, N, K, m0, n0);
    else
        products<BM, BN, WN, STAGES, BF16, A_DEPTH_MAJOR, B_DEPTH_MAJOR, false>(acc, a, lda, b, ldb, M, N, K, m0, n0);
    const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
    const int wm = warp / (BN / WN) * WM, wn = warp % (BN / WN) * WN, group = lane / 4, pair = lane % 4 * 2;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int64_t r = m0 + wm + i * 16 + group + (e >> 1) * 8, c = n0 + wn + j * 8 + pair + (e & 1);
                if (r < M && c < N) epilogue(r, c, acc[i][j][e]);
            }
}

}  // namespace catenc_mma
