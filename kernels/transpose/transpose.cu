// FP32 out-of-place transpose: y = x^T, with x [R, C] and y [C, R] both row-major (contiguous).
//
// Device code only: compiled at run time by NVRTC through CuPy (cupy.RawModule with name
// expressions, which instantiate the templates), or offline by the census (NVRTC, or nvcc as a
// fallback). No headers are included: NVRTC has no host headers.
//
// A block moves one TILE x TILE tile through shared memory: it reads rows of x (coalesced), writes
// them to the tile, and after one barrier reads the tile's columns and writes them as rows of y
// (coalesced). The tile's rows are padded by one float (pitch TILE + 1) so that both the row-wise
// and the column-wise shared-memory accesses of a warp fall in 32 different banks. Tiles at the
// right and bottom edges are masked. Only data moves: the output is bit-exact.
//
// The grid is one-dimensional: block b serves tile (b / tiles_c, b % tiles_c), tiles_c =
// ceil(C / TILE), so consecutive blocks read neighbouring tiles of the same band of x's rows.
//
// Entry points (name expressions):
//     transpose_vec4<TILE, BLOCK>    R % 4 == 0 and C % 4 == 0, x and y 16-byte aligned: 128-bit
//                                    global loads and stores (ld.global.nc.v4.f32 /
//                                    st.global.v4.f32). Each warp covers 2 rows x 16 float4 (256
//                                    contiguous bytes per row, as Triton's kernel) both ways; a
//                                    thread reads float4s of x's rows, writes their 4 floats to 4
//                                    tile columns, and after the barrier gathers 4 floats of a
//                                    tile column into a float4 of y's row. Pitch TILE + 1, with
//                                    the upper half-row's lanes taking the components in the
//                                    order z, w, x, y, keeps every scalar shared-memory access of
//                                    a warp conflict-free (bank = row + 4 * (vector % 8) +
//                                    component, all 32 distinct).
//     transpose_scalar<TILE, BLOCK>  any R, C: 32-bit accesses, a warp covering 32 consecutive
//                                    floats of one row both ways (the classic padded tile).
// Both take (x, y, R, C, tiles_c) and are launched with blockDim.x == BLOCK and gridDim.x ==
// ceil(R / TILE) * tiles_c.
//
// Switches (-D, the variants of config.yaml; kernels/transpose/notebook.md has each one's
// prediction and result):
//     TP_LANES_C  lanes of a warp along a tile row on the vec4 path: 16 (256 bytes, 2 rows per
//                 warp, as Triton's kernel; the default) or 8 (128 bytes, 4 rows per warp).
//     TP_ORDER    the order of the tiles over the 1-D grid: 0 bands of x's rows (the default,
//                 above), 1 bands of x's columns (consecutive blocks write neighbouring rows of
//                 y), 2 groups of TP_GROUP tile rows, column-major inside a group.
//     TP_ASYNC    1: the vec4 path copies x's float4s into shared memory by 16-byte cp.async (no
//                 registers hold the data, so bytes in flight are bounded by shared memory, not
//                 by registers), into an unpadded tile whose 16-byte chunks are swizzled (chunk v
//                 of row r at v ^ ((r / 4) % 8)), which keeps both the copies and the column
//                 reads conflict-free; needs TP_LANES_C == 8 (the variants set both).
//     TP_LOAD     how the vec4 path (registers, TP_ASYNC 0) loads x: 0 `ld.global.nc` (__ldg, the
//                 default), 1 `ld.global.cs` (__ldcs: streaming, evict-first in L1 and L2), 2
//                 `ld.global.nc.L2::cache_hint` under an L2 evict-first policy (createpolicy).
//                 x is read once a call; evict-first leaves the L2 to y's lines.
// The host reads TP_BLOCK (128 or 256 threads for the vec4 path), which is a template argument.

#ifndef TP_LANES_C
#define TP_LANES_C 16
#endif
#ifndef TP_ORDER
#define TP_ORDER 0
#endif
#ifndef TP_GROUP
#define TP_GROUP 8
#endif
#ifndef TP_ASYNC
#define TP_ASYNC 0
#endif
#ifndef TP_LOAD
#define TP_LOAD 0
#endif

// One float4 of x, loaded as TP_LOAD says (above); `policy` is the L2 policy of TP_LOAD 2.
__device__ __forceinline__ float4 tp_load(const float* p, const unsigned long long policy) {
#if TP_LOAD == 1
    return __ldcs(reinterpret_cast<const float4*>(p));
#elif TP_LOAD == 2
    float4 v;
    asm volatile("ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p), "l"(policy));
    return v;
#else
    return __ldg(reinterpret_cast<const float4*>(p));
#endif
}

// The L2 policy TP_LOAD 2 loads under (evict first, for every line); 0 otherwise (unused).
__device__ __forceinline__ unsigned long long tp_policy() {
#if TP_LOAD == 2
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
#else
    return 0ull;
#endif
}

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

// Tile coordinates (first row and column of x) of this block (TP_ORDER, above).
template <int TILE>
__device__ __forceinline__ void tp_tile_origin(const int tiles_c, int& r0, int& c0) {
#if TP_ORDER == 1
    const int b = blockIdx.x;
    const int tiles_r = gridDim.x / tiles_c;
    const int tc = b / tiles_r;
    const int tr = b - tc * tiles_r;
#elif TP_ORDER == 2
    const int b = blockIdx.x;
    const int tiles_r = gridDim.x / tiles_c;
    const int per_group = TP_GROUP * tiles_c;
    const int first = (b / per_group) * TP_GROUP;
    const int rows_in = min(tiles_r - first, TP_GROUP);
    const int tr = first + (b % per_group) % rows_in;
    const int tc = (b % per_group) / rows_in;
#else
    const int tr = blockIdx.x / tiles_c;
    const int tc = blockIdx.x - tr * tiles_c;
#endif
    r0 = tr * TILE;
    c0 = tc * TILE;
}

__device__ __forceinline__ unsigned tp_smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

template <int TILE, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
transpose_vec4(const float* __restrict__ x, float* __restrict__ y, const int R, const int C,
               const int tiles_c) {
    constexpr int VECS = TILE / 4;                   // float4 per tile row
    constexpr int LANES_C = TP_LANES_C;              // lanes of a warp along a row (16: 256 bytes)
    constexpr int LANES_R = 32 / LANES_C;            // rows a warp covers
    constexpr int WARPS = BLOCK / 32;
    constexpr int WARPS_C = VECS / LANES_C;          // warps side by side along a row
    constexpr int WARPS_R = WARPS / WARPS_C;
    constexpr int ROWS_PER_PASS = LANES_R * WARPS_R;
    constexpr int PASSES = TILE / ROWS_PER_PASS;     // float4s each thread moves each way
    static_assert(TILE % 32 == 0 && BLOCK % 32 == 0, "TILE and BLOCK must be multiples of 32");
    static_assert(WARPS % WARPS_C == 0 && TILE % ROWS_PER_PASS == 0, "BLOCK must tile TILE x TILE");
    static_assert(LANES_C == 8 || LANES_C == 16, "TP_LANES_C is 8 or 16");

    int r0, c0;
    tp_tile_origin<TILE>(tiles_c, r0, c0);
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int vec = (warp % WARPS_C) * LANES_C + (lane % LANES_C);  // float4 index in a tile row
    const int sub = (warp / WARPS_C) * LANES_R + (lane / LANES_C);  // first row of this thread

#if TP_ASYNC
    static_assert(LANES_C == 8 && TILE == 64, "the swizzled tile is 64 wide, 8 lanes along a row");
    __shared__ __align__(16) float tile[TILE][TILE];
    // 1. The copies, all in flight before the barrier; a float4 is whole inside or outside x.
    {
        const int gc = c0 + 4 * vec;
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            const int row = sub + p * ROWS_PER_PASS;
            const int gr = r0 + row;
            const bool ok = gr < R && gc < C;
            const float* src = ok ? x + static_cast<long long>(gr) * C + gc : x;
            const unsigned dst = tp_smem_addr(&tile[row][4 * (vec ^ ((row >> 2) & 7))]);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                         "r"(ok ? 16 : 0) : "memory");
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    }
    __syncthreads();
    // 2. As below; element (r, c) of the tile sits at column 4 ((c / 4) ^ ((r / 4) % 8)) + c % 4.
    {
        const int gr = r0 + 4 * vec;
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            const int col = sub + p * ROWS_PER_PASS;
            const int oc = c0 + col;
            if (oc < C && gr < R) {
                const int sc = 4 * ((col >> 2) ^ (vec & 7)) + (col & 3);
                const float4 out = make_float4(tile[4 * vec + 0][sc], tile[4 * vec + 1][sc],
                                               tile[4 * vec + 2][sc], tile[4 * vec + 3][sc]);
                *reinterpret_cast<float4*>(y + static_cast<long long>(oc) * R + gr) = out;
            }
        }
    }
#else
    __shared__ float tile[TILE][TILE + 1];
    // At 16 lanes along a row, the upper half's lanes take the components in the order z, w, x, y.
    const int rot = (LANES_C == 16 && (vec & 8)) ? 2 : 0;

    // 1. All PASSES loads in flight before any use; a float4 is whole inside or outside x
    //    (C % 4 == 0).
    const int gc = c0 + 4 * vec;
    const unsigned long long policy = tp_policy();
    float4 in[PASSES];
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
        const int gr = r0 + sub + p * ROWS_PER_PASS;
        if (gr < R && gc < C) {
            in[p] = tp_load(x + static_cast<long long>(gr) * C + gc, policy);
        } else {
            in[p] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
        const int row = sub + p * ROWS_PER_PASS;
        if (LANES_C == 8) {
            tile[row][4 * vec + 0] = in[p].x;
            tile[row][4 * vec + 1] = in[p].y;
            tile[row][4 * vec + 2] = in[p].z;
            tile[row][4 * vec + 3] = in[p].w;
        } else {
            const float v[4] = {rot ? in[p].z : in[p].x, rot ? in[p].w : in[p].y,
                                rot ? in[p].x : in[p].z, rot ? in[p].y : in[p].w};
#pragma unroll
            for (int j = 0; j < 4; ++j) tile[row][4 * vec + (j ^ rot)] = v[j];
        }
    }
    __syncthreads();

    // 2. Row `col` of y's tile is column `col` of x's tile; this thread writes its floats
    //    4 * vec .. 4 * vec + 3 (x's rows r0 + 4 * vec ..), whole inside or outside y (R % 4 == 0).
    const int gr = r0 + 4 * vec;
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
        const int col = sub + p * ROWS_PER_PASS;
        const int oc = c0 + col;
        if (oc < C && gr < R) {
            float v[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) v[j] = tile[4 * vec + (j ^ rot)][col];
            const float4 out = rot ? make_float4(v[2], v[3], v[0], v[1]) : make_float4(v[0], v[1], v[2], v[3]);
            *reinterpret_cast<float4*>(y + static_cast<long long>(oc) * R + gr) = out;
        }
    }
#endif
    plant_delay();
}

template <int TILE, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
transpose_scalar(const float* __restrict__ x, float* __restrict__ y, const int R, const int C,
                 const int tiles_c) {
    constexpr int ROWS_PER_PASS = BLOCK / 32;
    constexpr int PASSES = TILE / ROWS_PER_PASS;
    static_assert(TILE == 32 && BLOCK % 32 == 0 && TILE % ROWS_PER_PASS == 0,
                  "the scalar tile is 32 wide, swept by whole warps");

    __shared__ float tile[TILE][TILE + 1];

    int r0, c0;
    tp_tile_origin<TILE>(tiles_c, r0, c0);
    const int lane = threadIdx.x & 31;
    const int sub = threadIdx.x >> 5;

    float in[PASSES];
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
        const int gr = r0 + sub + p * ROWS_PER_PASS;
        const int gc = c0 + lane;
        in[p] = (gr < R && gc < C) ? __ldg(x + static_cast<long long>(gr) * C + gc) : 0.0f;
    }
#pragma unroll
    for (int p = 0; p < PASSES; ++p) tile[sub + p * ROWS_PER_PASS][lane] = in[p];
    __syncthreads();

#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
        const int col = sub + p * ROWS_PER_PASS;
        const int oc = c0 + col;
        const int gr = r0 + lane;
        if (oc < C && gr < R) y[static_cast<long long>(oc) * R + gr] = tile[lane][col];
    }
    plant_delay();
}
