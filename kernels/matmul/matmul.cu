// FP32 matrix product C = A * B, FFMA only (no tensor cores, no TF32):
//     A [M, K], B [K, N], C [M, N], all row-major and contiguous.
//
// Device code only: compiled at run time by NVRTC through CuPy (cupy.RawModule with name
// expressions, which instantiate the template), or offline by the census (NVRTC, or nvcc as a
// fallback). No headers are included: NVRTC has no host headers, so the cp.async instructions are
// written as inline PTX.
//
// Tiling. One block of 256 threads computes a 64 x 64 tile of C; each thread holds a 4 x 4
// sub-tile of accumulators in registers. K is walked in tiles of 32, double-buffered in shared
// memory: while the block multiplies tile t out of one buffer, the copies of tile t + 1 into the
// other are in flight (cp.async.commit_group after each tile's copies, cp.async.wait_group 1
// before a tile is used, so exactly one group stays outstanding during the multiply-adds).
//
// Shared memory layouts (both operands are read as float4 in the inner loop):
//   As[stage][k][m]  A's tile TRANSPOSED (k-major), rows padded from 64 to 68 floats. A is copied
//                    with 4-byte cp.async.ca, one element each; lane l of a warp copies element
//                    (m = m_base + l / 8, k = k_base + l % 8): in global memory that is 4 runs of
//                    8 consecutive floats (32-byte sectors), and in shared memory the banks are
//                    (68 k + m) mod 32 = (4 k + m) mod 32, all 32 distinct: no bank conflict.
//   Bs[stage][k][n]  B's tile as in memory (n-major), 64 floats a row, no padding needed: a warp's
//                    16-byte cp.async.cg copies cover two whole rows, and its float4 reads cover
//                    128 contiguous bytes of one row.
// Compute mapping: warp w covers rows 16 (w / 2) .. +15 and columns 32 (w % 2) .. +31 of the tile;
// lane l covers rows 4 (l / 8) .. +3 and columns 4 (l % 8) .. +3 of that. For each k a warp reads
// 4 distinct float4 of As (64 bytes) and 8 distinct float4 of Bs (128 bytes): one shared-memory
// wavefront each, for 16 FFMA per thread.
//
// Tails: copies of elements outside A or B use the cp.async src-size operand 0, which fills the
// shared-memory destination with zeros without reading global memory (the source address is then
// the matrix's base, a valid address); the epilogue stores only elements inside C. So any M, N,
// K >= 1 is correct; K = 0 writes zeros.
//
// Block order: tiles are numbered group-major (GROUP_M tile rows at a time, column by column
// inside a group), so that blocks running at the same time share A rows and B columns in L2.
//
// Entry points (name expressions; the host picks VEC_B from N):
//     matmul_f32<4>   N % 4 == 0: 16-byte cp.async.cg copies of B and float4 stores of C; needs
//                     B and C 16-byte aligned (then every B row and C row is).
//     matmul_f32<1>   any N: 4-byte cp.async.ca copies of B and 4-byte stores of C.
// Both take (A, B, C, M, N, K) and must be launched with blockDim.x == 256 and
// gridDim.x == ceil(M / 64) * ceil(N / 64).

#define MM_BLOCK_M 64
#define MM_BLOCK_N 64
#define MM_BLOCK_K 32
#define MM_THREADS 256
#define MM_PAD_A 4  // floats of padding per As row: keeps float4 alignment, spreads the banks
#define MM_GROUP_M 8

// Planted slowdown (the resolution check's `delay` variants, harness/ops/variants.py): with
// PLANT_DELAY_CYCLES > 0 one thread of every block waits that many SM clock cycles after the
// block's work, so the block holds its place on the SM that much longer; the output is unchanged.
// 0, the kernel as it ships, compiles to nothing.
#ifndef PLANT_DELAY_CYCLES
#define PLANT_DELAY_CYCLES 0
#endif
__device__ __forceinline__ void plant_delay() {
#if PLANT_DELAY_CYCLES > 0
    if (threadIdx.x == 0) {
        const long long start = clock64();
        while (clock64() - start < PLANT_DELAY_CYCLES) {
        }
    }
#endif
}

// ----------------------------------------------------------------------------- cp.async (PTX)

// Shared-memory address (32-bit, .shared window) of a generic pointer into shared memory.
__device__ __forceinline__ unsigned mm_smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// A 16-byte shared-memory read, written as the PTX instruction. The ring kernel reads its stages
// through it: with plain float4 reads, NVRTC 13.5 wrote differing PTX for the same ring instance
// from one process to the next (and now and then differing SASS; scripts/nvrtc_determinism.py);
// through this (and mmr_ring's loop over B's float4), the same PTX every time, and at every ring
// instance but one (ring4_bk8's 64 x 64 x 8) the SASS the plain reads gave (kernels/matmul/notebook.md).
__device__ __forceinline__ float4 mm_lds128(const float* p) {
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(mm_smem_addr(p)));
    return v;
}

// 16-byte asynchronous copy global -> shared, bypassing L1 (.cg); src_bytes (0 or 16) bytes are
// read and the rest of the 16 filled with zeros.
__device__ __forceinline__ void mm_cp_async16(unsigned dst, const float* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

// 4-byte asynchronous copy global -> shared (.ca: only .ca allows 4 bytes); src_bytes is 0 or 4.
__device__ __forceinline__ void mm_cp_async4(unsigned dst, const float* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void mm_cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void mm_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ----------------------------------------------------------------------------- the kernel

// Grouped tile order (GROUP_M tile rows per group, column-major inside a group): the first row
// m0 and column n0 of the BM x BN tile of C numbered pid.
template <int BM, int BN>
__device__ __forceinline__ void mm_tile_origin_of(const int pid, const int M, const int N, int& m0, int& n0) {
    const int tiles_m = (M + BM - 1) / BM;
    const int tiles_n = (N + BN - 1) / BN;
    const int per_group = MM_GROUP_M * tiles_n;
    const int first_m = (pid / per_group) * MM_GROUP_M;
    const int group_rows = min(tiles_m - first_m, MM_GROUP_M);
    m0 = (first_m + (pid % per_group) % group_rows) * BM;
    n0 = ((pid % per_group) / group_rows) * BN;
}

// The same for block blockIdx.x (tile pid = blockIdx.x).
template <int BM, int BN>
__device__ __forceinline__ void mm_tile_origin(const int M, const int N, int& m0, int& n0) {
    mm_tile_origin_of<BM, BN>(blockIdx.x, M, N, m0, n0);
}

struct MmSmem {
    float a[2][MM_BLOCK_K][MM_BLOCK_M + MM_PAD_A];  // A^T tiles: [stage][k][m]
    float b[2][MM_BLOCK_K][MM_BLOCK_N];             // B tiles:   [stage][k][n]
};

// Issue the copies of K-tile `kt` into stage `s`: A transposed (8 elements per thread), B as is
// (2 x 16 bytes per thread for VEC_B = 4, 8 x 4 bytes for VEC_B = 1). Out-of-range elements are
// zero-filled (src-size 0).
template <int VEC_B>
__device__ __forceinline__ void mm_load_tile(MmSmem& sm, const int s, const int kt,
                                             const float* __restrict__ A,
                                             const float* __restrict__ B, const int M,
                                             const int N, const int K, const int m0, const int n0) {
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int k0 = kt * MM_BLOCK_K;

    // A: this thread copies column a_k of the tile, rows a_m + 8 c (c = 0..7).
    const int a_k = (lane & 7) + 8 * (warp & 3);
    const int a_m = (lane >> 3) + 4 * (warp >> 2);
    const int ka = k0 + a_k;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
        const int m = a_m + 8 * c;
        const int row = m0 + m;
        const bool ok = row < M && ka < K;
        const float* src = ok ? A + (static_cast<long long>(row) * K + ka) : A;
        mm_cp_async4(mm_smem_addr(&sm.a[s][a_k][m]), src, ok ? 4 : 0);
    }

    if (VEC_B == 4) {
        // B: 32 rows x 16 float4; this thread copies float4 b_n4 of rows b_k and b_k + 16.
        const int b_k = tid >> 4;
        const int b_n = 4 * (tid & 15);
        const int col = n0 + b_n;  // N % 4 == 0: the float4 is wholly inside or wholly outside
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const int k = b_k + 16 * c;
            const int kb = k0 + k;
            const bool ok = kb < K && col < N;
            const float* src = ok ? B + (static_cast<long long>(kb) * N + col) : B;
            mm_cp_async16(mm_smem_addr(&sm.b[s][k][b_n]), src, ok ? 16 : 0);
        }
    } else {
        // B: 32 rows x 64 floats; this thread copies element b_n of rows b_k + 4 c (c = 0..7).
        const int b_k = tid >> 6;
        const int b_n = tid & 63;
        const int col = n0 + b_n;
#pragma unroll
        for (int c = 0; c < 8; ++c) {
            const int k = b_k + 4 * c;
            const int kb = k0 + k;
            const bool ok = kb < K && col < N;
            const float* src = ok ? B + (static_cast<long long>(kb) * N + col) : B;
            mm_cp_async4(mm_smem_addr(&sm.b[s][k][b_n]), src, ok ? 4 : 0);
        }
    }
}

// acc += As[s]^T * Bs[s] over the 32 k of one tile, for this thread's 4 x 4 outputs.
__device__ __forceinline__ void mm_multiply_tile(const MmSmem& sm, const int s, const int tm,
                                                 const int tn, float (&acc)[4][4]) {
#pragma unroll
    for (int k = 0; k < MM_BLOCK_K; ++k) {
        const float4 a = *reinterpret_cast<const float4*>(&sm.a[s][k][tm]);
        const float4 b = *reinterpret_cast<const float4*>(&sm.b[s][k][tn]);
        const float av[4] = {a.x, a.y, a.z, a.w};
        const float bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
    }
}

// Store this thread's 4 x 4 outputs (rows m, columns n .. n + 3), the ones inside C only.
template <int VEC_B>
__device__ __forceinline__ void mm_store(float* __restrict__ C, const int M, const int N,
                                         const int m, const int n, const float (&acc)[4][4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = m + i;
        if (row >= M) break;
        float* dst = C + static_cast<long long>(row) * N + n;
        if (VEC_B == 4) {
            if (n < N) {
                *reinterpret_cast<float4*>(dst) =
                    make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (n + j < N) dst[j] = acc[i][j];
            }
        }
    }
}

template <int VEC_B>
__global__ void __launch_bounds__(MM_THREADS)
matmul_f32(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
           const int M, const int N, const int K) {
    static_assert(VEC_B == 4 || VEC_B == 1, "VEC_B is 4 (N % 4 == 0) or 1");
    __shared__ __align__(16) MmSmem sm;

    int m0, n0;
    mm_tile_origin<MM_BLOCK_M, MM_BLOCK_N>(M, N, m0, n0);

    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int tm = 16 * (warp >> 1) + 4 * (lane >> 3);  // first of this thread's 4 rows
    const int tn = 32 * (warp & 1) + 4 * (lane & 7);    // first of this thread's 4 columns

    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    }

    const int ktiles = (K + MM_BLOCK_K - 1) / MM_BLOCK_K;
    if (ktiles > 0) mm_load_tile<VEC_B>(sm, 0, 0, A, B, M, N, K, m0, n0);
    mm_cp_async_commit();
    for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt & 1;
        // Copy tile kt + 1 into the other stage (freed by the barrier at the end of kt - 1).
        if (kt + 1 < ktiles) mm_load_tile<VEC_B>(sm, s ^ 1, kt + 1, A, B, M, N, K, m0, n0);
        mm_cp_async_commit();  // possibly empty: keeps "all but the newest group" = tile kt
        mm_cp_async_wait<1>();
        __syncthreads();  // every thread's copies of tile kt have landed
        mm_multiply_tile(sm, s, tm, tn, acc);
        __syncthreads();  // stage s is read by all before it is refilled with tile kt + 2
    }

    mm_store<VEC_B>(C, M, N, m0 + tm, n0 + tn, acc);
    plant_delay();
}

// ----------------------------------------------------------------------------- 128 x 128 tiles

// Second kernel, for large products (the host dispatches by shape: harness/ops/matmul/kernels.py
// launches it where N % 4 == 0, K % 4 == 0 and C has at least as many 128 x 128 tiles as the H200
// has SMs, and matmul_f32<VEC_B> elsewhere; the variants tile64 and tile128, -DMM_TILE=64 or 128,
// make the host launch one kernel at every shape):
//     matmul_f32_128   128 x 128 x 8 tiles, 256 threads, 8 x 8 outputs per thread held as two
//                      4 x 4 blocks 64 rows and 64 columns apart (so the 128-bit shared-memory
//                      reads of a warp are conflict-free), A and B read as float4 from global
//                      memory into registers while the previous tile is multiplied, then stored
//                      to the other of two shared-memory stages (one barrier per K tile).
// Takes (A, B, C, M, N, K) like matmul_f32; needs N % 4 == 0, K % 4 == 0 and 16-byte aligned
// A, B, C; launch with blockDim.x == 256, gridDim.x == ceil(M / 128) * ceil(N / 128).

#define MM2_BM 128
#define MM2_BN 128
#define MM2_BK 8
#define MM2_THREADS 256

struct Mm2Smem {
    float a[2][MM2_BK][MM2_BM];  // A^T tiles: [stage][k][m]
    float b[2][MM2_BK][MM2_BN];  // B tiles:   [stage][k][n]
};

// This thread's share of K-tile k0: a float4 of A (row tid / 2, k k0 + 4 (tid % 2)) and a float4
// of B (row k0 + tid / 32, columns 4 (tid % 32)); zeros outside the matrices.
__device__ __forceinline__ void mm2_fetch(const float* __restrict__ A, const float* __restrict__ B,
                                          const int M, const int N, const int K, const int m0,
                                          const int n0, const int k0, float4& a, float4& b) {
    const int tid = threadIdx.x;
    const int row = m0 + (tid >> 1);
    const int ka = k0 + 4 * (tid & 1);
    a = (row < M && ka < K) ? *reinterpret_cast<const float4*>(A + static_cast<long long>(row) * K + ka)
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const int kb = k0 + (tid >> 5);
    const int col = n0 + 4 * (tid & 31);
    b = (kb < K && col < N) ? *reinterpret_cast<const float4*>(B + static_cast<long long>(kb) * N + col)
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

// Store the fetched float4s into stage s: A transposed, B as is.
__device__ __forceinline__ void mm2_stash(Mm2Smem& sm, const int s, const float4& a, const float4& b) {
    const int tid = threadIdx.x;
    const int m = tid >> 1;
    const int k = 4 * (tid & 1);
    sm.a[s][k + 0][m] = a.x;
    sm.a[s][k + 1][m] = a.y;
    sm.a[s][k + 2][m] = a.z;
    sm.a[s][k + 3][m] = a.w;
    *reinterpret_cast<float4*>(&sm.b[s][tid >> 5][4 * (tid & 31)]) = b;
}

__global__ void __launch_bounds__(MM2_THREADS, 2)
matmul_f32_128(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
               const int M, const int N, const int K) {
    __shared__ __align__(16) Mm2Smem sm;

    int m0, n0;
    mm_tile_origin<MM2_BM, MM2_BN>(M, N, m0, n0);

    const int tx = threadIdx.x & 15;  // columns 4 tx .. 4 tx + 3 and 64 + 4 tx ..
    const int ty = threadIdx.x >> 4;  // rows    4 ty .. 4 ty + 3 and 64 + 4 ty ..

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
    }

    const int ktiles = (K + MM2_BK - 1) / MM2_BK;
    float4 fa, fb;
    mm2_fetch(A, B, M, N, K, m0, n0, 0, fa, fb);
    mm2_stash(sm, 0, fa, fb);
    __syncthreads();
    for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt & 1;
        const bool more = kt + 1 < ktiles;
        if (more) mm2_fetch(A, B, M, N, K, m0, n0, (kt + 1) * MM2_BK, fa, fb);  // in flight below
#pragma unroll
        for (int k = 0; k < MM2_BK; ++k) {
            const float4 a0 = *reinterpret_cast<const float4*>(&sm.a[s][k][4 * ty]);
            const float4 a1 = *reinterpret_cast<const float4*>(&sm.a[s][k][64 + 4 * ty]);
            const float4 b0 = *reinterpret_cast<const float4*>(&sm.b[s][k][4 * tx]);
            const float4 b1 = *reinterpret_cast<const float4*>(&sm.b[s][k][64 + 4 * tx]);
            const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i) {
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
            }
        }
        // Stage s ^ 1 was last read in iteration kt - 1, which every thread finished before the
        // barrier that ended it; the barrier below publishes the new tile before kt + 1 reads it.
        if (more) mm2_stash(sm, s ^ 1, fa, fb);
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = m0 + (i < 4 ? 4 * ty + i : 64 + 4 * ty + (i - 4));
        if (row >= M) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int col = n0 + 64 * h + 4 * tx;  // N % 4 == 0: the float4 is wholly in or out
            if (col < N) {
                *reinterpret_cast<float4*>(C + static_cast<long long>(row) * N + col) =
                    make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
            }
        }
    }
    plant_delay();
}

// ----------------------------------------------------------------------------- warp-tiled, ROWS x 8 outputs per thread

// Third kernel, matmul_f32_128's successor (the host dispatches by shape, harness/ops/matmul/kernels.py):
//     matmul_f32_tiled<BM, BN, BK, ROWS>   BM x BN x BK tiles, BM * BN / (8 ROWS) threads, ROWS x 8
//                      outputs per thread (ROWS = 8: two 4 x 4 blocks BM / 2 rows and BN / 2 columns
//                      apart; ROWS = 4: one row block, two column blocks BN / 2 apart), two
//                      shared-memory stages, one barrier per K tile. While K tile t is multiplied,
//                      tile t + 1 is on its way: B by 16-byte cp.async.cg straight into the other
//                      stage, A as float4 global loads into registers, stored transposed to the
//                      other stage after the multiply-adds (B needs no registers for staging).
// Takes (A, B, C, M, N, K) like matmul_f32; needs N % 4 == 0, K % 4 == 0 and 16-byte aligned
// A, B, C; launch with blockDim.x == BM * BN / (8 ROWS), gridDim.x == ceil(M / BM) * ceil(N / BN).
//
// Thread layout. Thread (ty, tx), ty < BM / ROWS, tx < BN / 8, owns rows 4 ty .. +3 (and, ROWS = 8,
// BM / 2 + 4 ty .. +3), columns 4 tx .. +3 and BN / 2 + 4 tx .. +3. By default (MM_THREAD_ROWS=1)
// a warp is 32 consecutive threads of one or two thread rows: at BN = 128 its B reads touch 16
// distinct float4, two shared-memory wavefronts each. With MM_THREAD_ROWS=0 a warp is a 4 x 8 block
// of threads (warp tiling): per k its float4 reads of A^T touch 4 distinct float4 (64 contiguous
// bytes) and its reads of B 8 (128 contiguous bytes), one wavefront each. At K tiles of 16 the
// thread rows measured about 1% faster above 132 tiles of 128x128 and the same below
// (kernels/matmul/notebook.md), so fewer wavefronts do not pay here.

#ifndef MM_THREAD_ROWS
#define MM_THREAD_ROWS 1
#endif
#define MMT_PAD_A 4  // floats of padding per A^T row: float4 alignment kept, transposed stores spread

template <int BM, int BN, int BK, int ROWS>
struct MmTSmem {
    float a[2][BK][BM + MMT_PAD_A];  // A^T tiles: [stage][k][m]
    float b[2][BK][BN];              // B tiles:   [stage][k][n]
};

// The float4s of A this thread carries from global memory to shared memory per K tile: number
// f = tid + THREADS c (c < A4) of the tile's BM * BK / 4, row f / (BK / 4), k 4 (f % (BK / 4)).
template <int BM, int BN, int BK, int ROWS>
struct MmTFetch {
    static constexpr int THREADS = BM * BN / (8 * ROWS);
    static constexpr int A4 = BM * BK / 4 / THREADS;
    static constexpr int B4 = BK * BN / 4 / THREADS;  // 16-byte copies of B per thread per K tile
    float4 a[A4];
};

// Start K tile k0 on its way: this thread's float4s of A into registers, its 16-byte copies of B
// (number f = tid + THREADS c: row f / (BN / 4), columns 4 (f % (BN / 4))) into stage s by
// cp.async.cg, committed as one group. Zeros outside the matrices (src-size 0 for B).
template <int BM, int BN, int BK, int ROWS>
__device__ __forceinline__ void mmt_fetch(MmTSmem<BM, BN, BK, ROWS>& sm, const int s,
                                          const float* __restrict__ A, const float* __restrict__ B,
                                          const int M, const int N, const int K, const int m0,
                                          const int n0, const int k0, MmTFetch<BM, BN, BK, ROWS>& f) {
    using F = MmTFetch<BM, BN, BK, ROWS>;
#pragma unroll
    for (int c = 0; c < F::B4; ++c) {
        const int idx = threadIdx.x + F::THREADS * c;
        const int k = idx / (BN / 4);
        const int n = 4 * (idx % (BN / 4));
        const int kb = k0 + k;
        const int col = n0 + n;  // N % 4 == 0: the float4 is wholly in or out
        const bool ok = kb < K && col < N;
        const float* src = ok ? B + (static_cast<long long>(kb) * N + col) : B;
        mm_cp_async16(mm_smem_addr(&sm.b[s][k][n]), src, ok ? 16 : 0);
    }
    mm_cp_async_commit();
#pragma unroll
    for (int c = 0; c < F::A4; ++c) {
        const int idx = threadIdx.x + F::THREADS * c;
        const int row = m0 + idx / (BK / 4);
        const int ka = k0 + 4 * (idx % (BK / 4));  // K % 4 == 0: the float4 is wholly in or out
        f.a[c] = (row < M && ka < K)
                     ? *reinterpret_cast<const float4*>(A + static_cast<long long>(row) * K + ka)
                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

// Finish the K tile started by mmt_fetch into stage s: A stored transposed, B's copies waited for
// (the barrier that follows makes both visible to every thread).
template <int BM, int BN, int BK, int ROWS>
__device__ __forceinline__ void mmt_stash(MmTSmem<BM, BN, BK, ROWS>& sm, const int s,
                                          const MmTFetch<BM, BN, BK, ROWS>& f) {
    using F = MmTFetch<BM, BN, BK, ROWS>;
#pragma unroll
    for (int c = 0; c < F::A4; ++c) {
        const int idx = threadIdx.x + F::THREADS * c;
        const int m = idx / (BK / 4);
        const int k = 4 * (idx % (BK / 4));
        sm.a[s][k + 0][m] = f.a[c].x;
        sm.a[s][k + 1][m] = f.a[c].y;
        sm.a[s][k + 2][m] = f.a[c].z;
        sm.a[s][k + 3][m] = f.a[c].w;
    }
    mm_cp_async_wait<0>();
}

// Row of C of this thread's output row i (ROWS x 8 outputs: row blocks of 4, BM / RB rows apart).
template <int BM, int ROWS>
__device__ __forceinline__ int mmt_row(const int m0, const int ty, const int i) {
    return m0 + (BM / (ROWS / 4)) * (i / 4) + 4 * ty + (i % 4);
}

// Zero this thread's ROWS x COLS accumulators.
template <int ROWS, int COLS = 8>
__device__ __forceinline__ void mmt_zero(float (&acc)[ROWS][COLS]) {
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
#pragma unroll
        for (int j = 0; j < COLS; ++j) acc[i][j] = 0.0f;
    }
}

// Store this thread's ROWS x COLS outputs (rows mmt_row, columns 4 tx .. +3 of each of the tile's
// COLS / 4 column blocks, BN / (COLS / 4) apart: 4 tx .. +3 and BN / 2 + 4 tx .. +3 at COLS = 8, of
// the tile at (m0, n0)) as float4s, the ones inside C only (N % 4 == 0: a float4 is wholly in or out).
template <int BM, int BN, int ROWS, int COLS = 8>
__device__ __forceinline__ void mmt_store(float* __restrict__ C, const int M, const int N, const int m0, const int n0,
                                          const int ty, const int tx, const float (&acc)[ROWS][COLS]) {
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        const int row = mmt_row<BM, ROWS>(m0, ty, i);
        if (row >= M) continue;
#pragma unroll
        for (int h = 0; h < COLS / 4; ++h) {
            const int col = n0 + (BN / (COLS / 4)) * h + 4 * tx;
            if (col < N) {
                *reinterpret_cast<float4*>(C + static_cast<long long>(row) * N + col) =
                    make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
            }
        }
    }
}

template <int BM, int BN, int BK, int ROWS>
__global__ void __launch_bounds__(BM * BN / (8 * ROWS), 2)  // 128 registers at 256 threads, 255 at 128
matmul_f32_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                 const int M, const int N, const int K) {
    constexpr int RB = ROWS / 4;  // row blocks of 4 per thread, BM / RB rows apart
    constexpr int THREADS = BM * BN / (8 * ROWS);
    static_assert(ROWS == 4 || ROWS == 8, "ROWS is 4 or 8");
    static_assert((BM / ROWS) % 4 == 0 && BN % 64 == 0 && BK % 4 == 0, "tile: BM / ROWS % 4, BN % 64, BK % 4");
    static_assert((BM * BK / 4) % THREADS == 0 && (BK * BN / 4) % THREADS == 0,
                  "each thread carries whole float4s of A and B");
    __shared__ __align__(16) MmTSmem<BM, BN, BK, ROWS> sm;

    int m0, n0;
    mm_tile_origin<BM, BN>(M, N, m0, n0);

#if MM_THREAD_ROWS
    const int tx = threadIdx.x % (BN / 8);
    const int ty = threadIdx.x / (BN / 8);
#else
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    constexpr int WARPS_N = BN / 64;  // a warp: 4 thread rows x 8 thread columns
    const int ty = 4 * (warp / WARPS_N) + (lane >> 3);
    const int tx = 8 * (warp % WARPS_N) + (lane & 7);
#endif

    float acc[ROWS][8];
    mmt_zero<ROWS>(acc);

    const int ktiles = (K + BK - 1) / BK;
    MmTFetch<BM, BN, BK, ROWS> f;
    mmt_fetch<BM, BN, BK, ROWS>(sm, 0, A, B, M, N, K, m0, n0, 0, f);
    mmt_stash<BM, BN, BK, ROWS>(sm, 0, f);
    __syncthreads();
    for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt & 1;
        // Stage s ^ 1 was last read in iteration kt - 1, which every thread finished before the
        // barrier that ended it, so tile kt + 1 may land there while tile kt is multiplied.
        const bool more = kt + 1 < ktiles;
        if (more) mmt_fetch<BM, BN, BK, ROWS>(sm, s ^ 1, A, B, M, N, K, m0, n0, (kt + 1) * BK, f);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float av[ROWS];
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                const float4 a = *reinterpret_cast<const float4*>(&sm.a[s][k][(BM / RB) * r + 4 * ty]);
                av[4 * r + 0] = a.x;
                av[4 * r + 1] = a.y;
                av[4 * r + 2] = a.z;
                av[4 * r + 3] = a.w;
            }
            const float4 b0 = *reinterpret_cast<const float4*>(&sm.b[s][k][4 * tx]);
            const float4 b1 = *reinterpret_cast<const float4*>(&sm.b[s][k][BN / 2 + 4 * tx]);
            const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < ROWS; ++i) {
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
            }
        }
        if (more) mmt_stash<BM, BN, BK, ROWS>(sm, s ^ 1, f);
        __syncthreads();  // tile kt + 1 published; stage s free for tile kt + 2
    }

    mmt_store<BM, BN, ROWS>(C, M, N, m0, n0, ty, tx, acc);
    plant_delay();
}

// This thread's place in the tile: thread (ty, tx) (the layout above, MM_THREAD_ROWS; with COLS
// outputs a row, BN / COLS thread columns, in thread rows only).
template <int BN, int COLS = 8>
__device__ __forceinline__ void mmt_thread(int& ty, int& tx) {
#if MM_THREAD_ROWS
    tx = threadIdx.x % (BN / COLS);
    ty = threadIdx.x / (BN / COLS);
#else
    static_assert(COLS == 8, "the warp-tiled layout has 8 outputs a row");
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    constexpr int WARPS_N = BN / 64;  // a warp: 4 thread rows x 8 thread columns
    ty = 4 * (warp / WARPS_N) + (lane >> 3);
    tx = 8 * (warp % WARPS_N) + (lane & 7);
#endif
}

// acc += the product of K tiles kt0 .. kt1 - 1 (kt0 < kt1) of the tile at (m0, n0): two shared-memory
// stages, one barrier per K tile; every thread has passed the last barrier when it returns (the
// shared memory may be reused after it). The same loop as matmul_f32_tiled's, which keeps its own
// copy for now: through this function its cubin comes out with other register numbers (nvcc 13.0),
// and the default kernel changes only with a measurement. When a split instance becomes a default,
// both take this one.
template <int BM, int BN, int BK, int ROWS>
__device__ __forceinline__ void mmt_accumulate(MmTSmem<BM, BN, BK, ROWS>& sm, const float* __restrict__ A,
                                               const float* __restrict__ B, const int M, const int N,
                                               const int K, const int m0, const int n0, const int ty,
                                               const int tx, const int kt0, const int kt1,
                                               float (&acc)[ROWS][8]) {
    constexpr int RB = ROWS / 4;  // row blocks of 4 per thread, BM / RB rows apart
    MmTFetch<BM, BN, BK, ROWS> f;
    mmt_fetch<BM, BN, BK, ROWS>(sm, 0, A, B, M, N, K, m0, n0, kt0 * BK, f);
    mmt_stash<BM, BN, BK, ROWS>(sm, 0, f);
    __syncthreads();
    for (int kt = kt0; kt < kt1; ++kt) {
        const int s = (kt - kt0) & 1;
        // Stage s ^ 1 was last read in iteration kt - 1, which every thread finished before the
        // barrier that ended it, so tile kt + 1 may land there while tile kt is multiplied.
        const bool more = kt + 1 < kt1;
        if (more) mmt_fetch<BM, BN, BK, ROWS>(sm, s ^ 1, A, B, M, N, K, m0, n0, (kt + 1) * BK, f);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float av[ROWS];
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                const float4 a = *reinterpret_cast<const float4*>(&sm.a[s][k][(BM / RB) * r + 4 * ty]);
                av[4 * r + 0] = a.x;
                av[4 * r + 1] = a.y;
                av[4 * r + 2] = a.z;
                av[4 * r + 3] = a.w;
            }
            const float4 b0 = *reinterpret_cast<const float4*>(&sm.b[s][k][4 * tx]);
            const float4 b1 = *reinterpret_cast<const float4*>(&sm.b[s][k][BN / 2 + 4 * tx]);
            const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < ROWS; ++i) {
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
            }
        }
        if (more) mmt_stash<BM, BN, BK, ROWS>(sm, s ^ 1, f);
        __syncthreads();  // tile kt + 1 published; stage s free for tile kt + 2
    }
}

// ----------------------------------------------------------------------------- split K over a cluster

// A variant's kernel (MM_SPLIT_K, harness/ops/matmul/kernels.py):
//     matmul_f32_splitk<BM, BN, BK, ROWS, S>   the tiled kernel's tile and thread layout, with the K
//                      tiles of each tile of C shared by a cluster of S blocks (sm_90 thread-block
//                      clusters, S consecutive blocks): block rank r multiplies K tiles
//                      [r T / S, (r + 1) T / S), T = ceil(K / BK), then every block leaves its partial
//                      sums in its own shared memory and, after a cluster barrier, block r adds up
//                      the S partials of every S-th float4 of each thread (its own slice, read
//                      through distributed shared memory in rank order, so the sum is
//                      deterministic) and stores them to C. No atomics, no zeroing of C. More,
//                      shorter blocks fill the SMs where C has few tiles (1024^3: 256 tiles of
//                      64 x 64 leave 2 blocks per SM; split in 2, 512 blocks of 4 warps at 4 per
//                      SM). Launch with gridDim.x == S * ceil(M / BM) * ceil(N / BN).
#ifndef MM_SPLIT_MIN_BLOCKS
#define MM_SPLIT_MIN_BLOCKS 0  // 0: 512 / THREADS blocks per SM (128 registers a thread)
#endif

__device__ __forceinline__ unsigned mm_cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

// Every thread of every block of the cluster arrives, then waits for all (release / acquire:
// shared-memory writes before it are visible to the cluster's reads after it).
__device__ __forceinline__ void mm_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The float4 at shared address `p` (this block's layout) in the shared memory of cluster block `rank`.
__device__ __forceinline__ float4 mm_ld_cluster(const void* p, const unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(mm_smem_addr(p)), "r"(rank));
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(remote) : "memory");
    return v;
}

template <int BM, int BN, int BK, int ROWS, int S>
__global__ void __cluster_dims__(S, 1, 1)
__launch_bounds__(BM * BN / (8 * ROWS), MM_SPLIT_MIN_BLOCKS ? MM_SPLIT_MIN_BLOCKS : 512 / (BM * BN / (8 * ROWS)))
matmul_f32_splitk(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                  const int M, const int N, const int K) {
    constexpr int THREADS = BM * BN / (8 * ROWS);
    constexpr int J = 2 * ROWS;  // float4s of C per thread: J / 2 rows, two column blocks
    constexpr int FIT = static_cast<int>(sizeof(MmTSmem<BM, BN, BK, ROWS>)) / (16 * THREADS);
    constexpr int CH = J <= FIT ? J : J / 2;  // float4s per thread per round of the reduction
    static_assert(S == 2 || S == 4, "S is 2 or 4");
    static_assert(CH <= FIT && CH % S == 0 && J % CH == 0, "the partials fit the shared memory in one or two rounds");
    static_assert(ROWS == 4 || ROWS == 8, "ROWS is 4 or 8");
    static_assert((BM / ROWS) % 4 == 0 && BN % 64 == 0 && BK % 4 == 0, "tile: BM / ROWS % 4, BN % 64, BK % 4");
    static_assert((BM * BK / 4) % THREADS == 0 && (BK * BN / 4) % THREADS == 0,
                  "each thread carries whole float4s of A and B");
    __shared__ __align__(16) MmTSmem<BM, BN, BK, ROWS> sm;

    const unsigned rank = mm_cluster_rank();
    int m0, n0;
    mm_tile_origin_of<BM, BN>(static_cast<int>(blockIdx.x / S), M, N, m0, n0);
    int ty, tx;
    mmt_thread<BN>(ty, tx);

    float acc[ROWS][8];
    mmt_zero<ROWS>(acc);
    const int ktiles = (K + BK - 1) / BK;
    const int kt0 = static_cast<int>((static_cast<long long>(ktiles) * rank) / S);
    const int kt1 = static_cast<int>((static_cast<long long>(ktiles) * (rank + 1)) / S);
    if (kt0 < kt1) mmt_accumulate<BM, BN, BK, ROWS>(sm, A, B, M, N, K, m0, n0, ty, tx, kt0, kt1, acc);
    __syncthreads();  // (where this block had no K tile) the stages are free either way

    float4* part = reinterpret_cast<float4*>(&sm);
#pragma unroll
    for (int c0 = 0; c0 < J; c0 += CH) {
        // Float4 q of this thread: output row q / 2, column block q % 2.
#pragma unroll
        for (int q = 0; q < CH; ++q) {
            const int i = (c0 + q) / 2, h = (c0 + q) % 2;
            part[q * THREADS + threadIdx.x] =
                make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
        }
        mm_cluster_sync();  // every block's partials of this round are in place
#pragma unroll
        for (int t = 0; t < CH / S; ++t) {
            const int q = t * S + static_cast<int>(rank);
            const float* slot = reinterpret_cast<const float*>(&part[q * THREADS + threadIdx.x]);
            float4 sum = mm_ld_cluster(slot, 0);
#pragma unroll
            for (int r = 1; r < S; ++r) {
                const float4 v = mm_ld_cluster(slot, r);
                sum.x += v.x;
                sum.y += v.y;
                sum.z += v.z;
                sum.w += v.w;
            }
            const int i = (c0 + q) / 2, h = (c0 + q) % 2;
            const int row = mmt_row<BM, ROWS>(m0, ty, i);
            const int col = n0 + (BN / 2) * h + 4 * tx;  // N % 4 == 0: the float4 is wholly in or out
            if (row < M && col < N) *reinterpret_cast<float4*>(C + static_cast<long long>(row) * N + col) = sum;
        }
        mm_cluster_sync();  // every read of this round done: the shared memory may be rewritten, or freed
    }
    plant_delay();
}

// ----------------------------------------------------------------------------- a ring of stages, both operands by cp.async

// The default below 132 tiles of 128 x 128 (matmul_f32_ring<64, 64, 32, 4, 3>, in place of the tiled
// kernel's 64 x 64 x 32 instance), and a variant's kernel at any shape (MM_STAGES,
// harness/ops/matmul/kernels.py):
//     matmul_f32_ring<BM, BN, BK, ROWS, STAGES>   the tiled kernel's tile, threads and outputs,
//                      with both operands copied by 16-byte cp.async.cg into a ring of STAGES
//                      shared-memory stages: K tiles t + 1 .. t + STAGES - 1 are in flight while
//                      tile t is multiplied (the tiled kernel has one, and carries A through
//                      registers). One barrier per K tile: it publishes tile t and frees the stage
//                      tile t - 1 was read from, which the copies issued right after it refill.
//     matmul_f32_ring16<BM, BN, BK, ROWS, STAGES>   the same with ROWS x 16 outputs a thread (MM_COLS=16):
//                      BN / 16 thread columns, four float4 of B a k (BN / 4 apart) against two
//                      float4 of A: 6 shared-memory reads for 128 multiply-adds where 8 x 8 has 4 for
//                      64, so the reads no longer keep pace with the FMA pipes only just; one block
//                      an SM fits (__launch_bounds__(threads, 1): up to 255 registers).
// Both are mmr_ring<..., COLS> (COLS 8 or 16 outputs a thread in each of its rows).
// Takes (A, B, C, M, N, K) like matmul_f32_tiled, with its requirements (N % 4 == 0, K % 4 == 0,
// 16-byte aligned A, B, C) and launch (blockDim.x == BM * BN / (COLS ROWS), gridDim.x ==
// ceil(M / BM) * ceil(N / BN)); the stages are static shared memory, at most 48 KB.
//
// A lands as in memory, [m][k], so a thread reads its rows' 4 consecutive k as one float4 (one
// 16-byte read a row per 4 k, as many as the transposed layout's one a k for 4 rows). The rows a
// warp reads at once are 4 apart (4 ty + i), BK floats long: at BK = 32 every one starts in bank 0,
// so the float4 slots of a row are swizzled, slot q of row m stored at q XOR ((m / 4) mod (BK / 4)):
// the warp's (up to 4) thread rows then read distinct slots, one wavefront.
// Per-thread bookkeeping, computed once: every copy's shared-memory offset within a stage, its
// global source (advanced by one K tile after each copy: BK floats for A, BK rows for B) and its
// byte count, so that the main loop spends its issue slots on the multiply-adds (the first version,
// which recomputed every address and bound each tile, issued 78.8% FFMA in its loop; Triton's
// program 86.9%).
//   A copy c: float4 f = tid + THREADS c of the tile, row f / (BK / 4), slot f % (BK / 4) (swizzled);
//   B copy c: row f / (BN / 4), columns 4 (f % (BN / 4)).
// A copy whose row of A (column of B) is outside the matrix reads nothing (src-size 0) from a valid
// address (the last row, column); in the last K tile, where K % BK != 0, neither does one past K
// (its source is then the matrix's base).
template <int BM, int BN, int BK, int THREADS>
struct MmRCopies {
    static constexpr int A4 = BM * BK / 4 / THREADS;
    static constexpr int B4 = BK * BN / 4 / THREADS;
    const float* a[A4];  // source of the next copy
    const float* b[B4];
    int a_off[A4];       // float offsets within a stage
    int b_off[B4];
    int a_bytes[A4];     // 16 inside the matrix, 0 outside
    int b_bytes[B4];
};

// The float4 slot that holds k = 4 q .. 4 q + 3 of row m of an A stage.
template <int BK>
__device__ __forceinline__ int mmr_slot(const int m, const int q) {
    return q ^ ((m >> 2) & (BK / 4 - 1));
}

template <int BM, int BN, int BK, int THREADS>
__device__ __forceinline__ void mmr_plan(MmRCopies<BM, BN, BK, THREADS>& cp, const float* __restrict__ A,
                                         const float* __restrict__ B, const int M, const int N, const int K,
                                         const int m0, const int n0) {
    using P = MmRCopies<BM, BN, BK, THREADS>;
#pragma unroll
    for (int c = 0; c < P::A4; ++c) {
        const int idx = threadIdx.x + THREADS * c;
        const int m = idx / (BK / 4);
        const int q = idx % (BK / 4);
        cp.a[c] = A + (static_cast<long long>(min(m0 + m, M - 1)) * K + 4 * q);
        cp.a_off[c] = m * BK + 4 * mmr_slot<BK>(m, q);
        cp.a_bytes[c] = m0 + m < M ? 16 : 0;
    }
#pragma unroll
    for (int c = 0; c < P::B4; ++c) {
        const int idx = threadIdx.x + THREADS * c;
        const int k = idx / (BN / 4);
        const int n = 4 * (idx % (BN / 4));
        cp.b[c] = B + (static_cast<long long>(min(k, K - 1)) * N + min(n0 + n, N - 4));  // N % 4 == 0
        cp.b_off[c] = BM * BK + k * BN + n;
        cp.b_bytes[c] = n0 + n < N ? 16 : 0;
    }
}

// Issue this thread's copies of the next K tile (starting at k0) into the stage at `st`, commit them
// as one group and advance the sources; TAIL: the tile reaches past K (K % BK != 0), so each copy
// also checks its k.
template <int BM, int BN, int BK, int THREADS, bool TAIL>
__device__ __forceinline__ void mmr_copy(MmRCopies<BM, BN, BK, THREADS>& cp, float* st, const float* A,
                                         const float* B, const long long b_step, const int K, const int k0) {
    using P = MmRCopies<BM, BN, BK, THREADS>;
#pragma unroll
    for (int c = 0; c < P::B4; ++c) {
        const int idx = threadIdx.x + THREADS * c;
        const bool in_k = !TAIL || k0 + idx / (BN / 4) < K;
        mm_cp_async16(mm_smem_addr(st + cp.b_off[c]), in_k ? cp.b[c] : B, in_k ? cp.b_bytes[c] : 0);
        cp.b[c] += b_step;
    }
#pragma unroll
    for (int c = 0; c < P::A4; ++c) {
        const int idx = threadIdx.x + THREADS * c;
        const bool in_k = !TAIL || k0 + 4 * (idx % (BK / 4)) < K;  // K % 4 == 0: wholly in or out
        mm_cp_async16(mm_smem_addr(st + cp.a_off[c]), in_k ? cp.a[c] : A, in_k ? cp.a_bytes[c] : 0);
        cp.a[c] += BK;
    }
    mm_cp_async_commit();
}

// Copies of tile kt (full, or the tail) into stage st, or an empty group past the last tile, so that
// "all but STAGES - 2 groups done" always means "the oldest tile landed".
template <int BM, int BN, int BK, int THREADS>
__device__ __forceinline__ void mmr_issue(MmRCopies<BM, BN, BK, THREADS>& cp, float* st, const float* A,
                                          const float* B, const long long b_step, const int K, const int kt,
                                          const int full, const int ktiles) {
    if (kt < full) mmr_copy<BM, BN, BK, THREADS, false>(cp, st, A, B, b_step, K, kt * BK);
    else if (kt < ktiles) mmr_copy<BM, BN, BK, THREADS, true>(cp, st, A, B, b_step, K, kt * BK);
    else mm_cp_async_commit();
}

template <int BM, int BN, int BK, int ROWS, int STAGES, int COLS>
__device__ __forceinline__ void mmr_ring(const float* __restrict__ A, const float* __restrict__ B,
                                         float* __restrict__ C, const int M, const int N, const int K) {
    constexpr int RB = ROWS / 4;  // row blocks of 4 per thread, BM / RB rows apart
    constexpr int CB = COLS / 4;  // float4 column blocks per thread, BN / CB columns apart
    constexpr int THREADS = BM * BN / (COLS * ROWS);
    constexpr int STAGE = BM * BK + BK * BN;  // floats a stage: A's tile, then B's
    static_assert(ROWS == 4 || ROWS == 8, "ROWS is 4 or 8");
    static_assert(COLS == 8 || COLS == 16, "COLS is 8 or 16");
    static_assert(STAGES >= 2 && STAGES <= 4, "2 to 4 stages");
    static_assert(BK == 8 || BK == 16 || BK == 32, "BK is 8, 16 or 32 (the swizzle's 2, 4 or 8 slots)");
    static_assert((BM / ROWS) % 4 == 0 && BN % 64 == 0, "tile: BM / ROWS % 4, BN % 64");
    static_assert((BM * BK / 4) % THREADS == 0 && (BK * BN / 4) % THREADS == 0,
                  "each thread copies whole float4s of A and B");
    static_assert((BM / RB / 4) % (BK / 4) == 0, "a thread's row blocks share one swizzle");
    static_assert(4 * STAGES * STAGE <= 48 * 1024, "the stages fit 48 KB of static shared memory");
    __shared__ __align__(16) float sm[STAGES * STAGE];

    int m0, n0;
    mm_tile_origin<BM, BN>(M, N, m0, n0);
    int ty, tx;
    mmt_thread<BN, COLS>(ty, tx);
    MmRCopies<BM, BN, BK, THREADS> cp;
    mmr_plan<BM, BN, BK, THREADS>(cp, A, B, M, N, K, m0, n0);

    float acc[ROWS][COLS];
    mmt_zero<ROWS, COLS>(acc);

    const int ktiles = (K + BK - 1) / BK;
    const int full = K / BK;  // tiles wholly inside K
    const long long b_step = static_cast<long long>(BK) * N;
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) mmr_issue<BM, BN, BK, THREADS>(cp, sm + t * STAGE, A, B, b_step, K, t, full, ktiles);
    // This thread's reads within a stage: rows 4 ty + i of each row block, whose float4 slot q is at
    // q XOR swz; columns 4 tx + (BN / CB) c of B (4 tx and BN / 2 + 4 tx at COLS = 8).
    const int swz = ty & (BK / 4 - 1);
    const int a_row = 4 * ty * BK;
    const int b_col = BM * BK + 4 * tx;
    int rd = 0;                     // float offset of tile kt's stage
    int wr = (STAGES - 1) * STAGE;  // ... of tile kt + STAGES - 1's
    for (int kt = 0; kt < ktiles; ++kt) {
        mm_cp_async_wait<STAGES - 2>();  // this thread's copies of tile kt have landed
        __syncthreads();  // everyone's have, and everyone is done with tile kt - 1 (the stage at wr)
        mmr_issue<BM, BN, BK, THREADS>(cp, sm + wr, A, B, b_step, K, kt + STAGES - 1, full, ktiles);
        const float* st = sm + rd;
#pragma unroll
        for (int q = 0; q < BK / 4; ++q) {
            const int slot = 4 * (q ^ swz);
            float4 a4[ROWS];
#pragma unroll
            for (int i = 0; i < ROWS; ++i) {
                a4[i] = mm_lds128(st + a_row + ((BM / RB) * (i / 4) + i % 4) * BK + slot);
            }
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                const float* brow = st + b_col + (4 * q + kk) * BN;
                float bv[COLS];
#pragma unroll
                for (int c = 0; c < CB; ++c) {
                    const float4 b4 = mm_lds128(brow + (BN / CB) * c);
                    bv[4 * c] = b4.x;
                    bv[4 * c + 1] = b4.y;
                    bv[4 * c + 2] = b4.z;
                    bv[4 * c + 3] = b4.w;
                }
#pragma unroll
                for (int i = 0; i < ROWS; ++i) {
                    const float av = kk == 0 ? a4[i].x : kk == 1 ? a4[i].y : kk == 2 ? a4[i].z : a4[i].w;
#pragma unroll
                    for (int j = 0; j < COLS; ++j) acc[i][j] = fmaf(av, bv[j], acc[i][j]);
                }
            }
        }
        rd = rd + STAGE == STAGES * STAGE ? 0 : rd + STAGE;
        wr = wr + STAGE == STAGES * STAGE ? 0 : wr + STAGE;
    }
    mm_cp_async_wait<0>();  // (only empty groups remain) nothing in flight when the block exits

    mmt_store<BM, BN, ROWS, COLS>(C, M, N, m0, n0, ty, tx, acc);
}

template <int BM, int BN, int BK, int ROWS, int STAGES>
__global__ void __launch_bounds__(BM * BN / (8 * ROWS), 2)  // 128 registers at 256 threads, 255 at 128
matmul_f32_ring(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                const int M, const int N, const int K) {
    mmr_ring<BM, BN, BK, ROWS, STAGES, 8>(A, B, C, M, N, K);
    plant_delay();
}

// ROWS x 16 outputs a thread: one block an SM (up to 255 registers).
template <int BM, int BN, int BK, int ROWS, int STAGES>
__global__ void __launch_bounds__(BM * BN / (16 * ROWS), 1)
matmul_f32_ring16(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                  const int M, const int N, const int K) {
    mmr_ring<BM, BN, BK, ROWS, STAGES, 16>(A, B, C, M, N, K);
    plant_delay();
}
