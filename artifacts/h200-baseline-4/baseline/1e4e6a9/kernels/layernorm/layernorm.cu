// FP32 layer-norm forward over the last dimension:
//     y[r, :] = (x[r, :] - mean_r) * rsqrt(var_r + eps) * w + b      (var_r: biased, over n)
//
// Device code only: compiled at run time by NVRTC through CuPy (cupy.RawModule with name
// expressions, which instantiate the templates), or offline by the census (NVRTC, or nvcc as a
// fallback). No headers are included: NVRTC has no host headers.
//
// One thread block per row; the row (and its slice of w and b) is held in registers from load to
// store. Each thread owns SLOTS "slots"; slot s of thread t holds vector i = s * BLOCK + t of the
// row (VEC consecutive floats), so every slot is one coalesced sweep of the block over the row. A
// slot whose vector lies past the row's end is masked (the tail). All register arrays are indexed
// by compile-time constants only (fully unrolled loops), so nothing goes to local memory.
//
// Statistics (exact two-pass, one barrier), on the row shifted by its first element (so that sums
// stay at the scale of the spread even when the mean is far from zero; the shift cancels in
// x - mean): each warp sums its elements by butterfly shuffles, takes its own mean m_w, then sums
// the squared deviations of its elements from m_w (still in registers) into M2_w. Lane 0 of each warp puts (S_w, M2_w, c_w) in shared memory; after the one
// __syncthreads() every warp combines the NWARPS partials by shuffles:
//     mean = sum_w S_w / n,   M2 = sum_w [ M2_w + c_w * (m_w - mean)^2 ],   var = M2 / n.
// Every term is a sum of squares about a nearby centre, so there is no E[x^2] - E[x]^2
// cancellation. Butterfly all-reduces with + give bitwise-identical results in all lanes.

// Entry points (name expressions; the host picks BLOCK, SLOTS, LATE_WB from the width n):
//     layernorm_fwd_vec4<BLOCK, SLOTS, LATE_WB>   n % 4 == 0: 128-bit loads and stores
//                                                  (ld/st.global.v4.f32); needs x, w, b, y
//                                                  16-byte aligned.
//     layernorm_fwd_scalar<BLOCK, SLOTS, LATE_WB> any n: 32-bit loads and stores.
// Both take (x, w, b, y, n, eps) with x, y of shape [gridDim.x, n], w, b of shape [n], and must be
// launched with blockDim.x == BLOCK, gridDim.x == rows and SLOTS * VEC * BLOCK >= n.
// LATE_WB false: w and b are loaded with x, before the statistics (3 * SLOTS * VEC floats held in
// registers through the reductions); true: w and b are loaded in the final loop, just before their
// use (SLOTS * VEC floats held), which frees registers for occupancy at the cost of one L1 round
// trip after the barrier.
//     layernorm_fwd_warp_vec4<SLOTS, WARPS>        n % 4 == 0, n <= 32 * 4 * SLOTS: one warp per
//                                                  row, WARPS rows per block, no shared memory and
//                                                  no barrier (the whole row is in one warp's
//                                                  registers, so its statistics are shuffles only);
//                                                  w and b loaded late. Takes (x, w, b, y, rows, n,
//                                                  eps); launch with blockDim.x == 32 * WARPS,
//                                                  gridDim.x == ceil(rows / WARPS).

#define LN_FULL_MASK 0xffffffffu

// Variant switches (config: operations.layernorm.variants; each is compiled with -D and measured
// as an implementation of its own). The defaults are the kernel as it ships.
//   LN_LOAD_NC     1: x, w, b through the read-only (non-coherent) path, __ldg; 0: plain loads.
//   LN_STORE_CS    1: streaming stores (st.global.cs, evict-first) for y; 0: plain stores. Default 1
//                  (kernels/layernorm/notebook.md has the measurements).
//   LN_MIN_BLOCKS  0: __launch_bounds__(BLOCK) only; k > 0: __launch_bounds__(BLOCK, k), which asks
//                  the compiler to fit k blocks per SM (a register budget of 65536 / (k * BLOCK));
//                  -1: as many blocks as fill the SM's 2048 threads (32 registers per thread).
//   LN_ONE_PASS    0: exact two-pass statistics (below); 1: one pass, sum and sum of squares of the
//                  shifted row, fewer shuffles and instructions.
// Two more switches are read by the host's dispatch (harness/ops/layernorm/kernels.py), which picks
// the entry point and template arguments per width; the device code does not test them:
//   LN_LATE_WB     0 or 1: LATE_WB at every width instead of the dispatch's choice.
//   LN_WARP_ROWS   0 or 1: the warp-per-row kernel off or on (for n % 4 == 0, n <= 1024) instead of
//                  the dispatch's choice.
#ifndef LN_LOAD_NC
#define LN_LOAD_NC 1
#endif
#ifndef LN_STORE_CS
#define LN_STORE_CS 1
#endif
#ifndef LN_MIN_BLOCKS
#define LN_MIN_BLOCKS 0
#endif
#ifndef LN_ONE_PASS
#define LN_ONE_PASS 0
#endif
#if LN_MIN_BLOCKS > 0
#define LN_BOUNDS(BLOCK) __launch_bounds__(BLOCK, LN_MIN_BLOCKS)
#elif LN_MIN_BLOCKS < 0
#define LN_BOUNDS(BLOCK) __launch_bounds__(BLOCK, 2048 / (BLOCK))
#else
#define LN_BOUNDS(BLOCK) __launch_bounds__(BLOCK)
#endif
#if LN_LOAD_NC
#define LN_LDG(p) __ldg(p)
#else
#define LN_LDG(p) (*(p))
#endif

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

// Sum over lanes whose indices differ in bits below WIDTH (a power of two <= 32); every such lane
// gets the same (bitwise) result, since IEEE addition is commutative.
template <int WIDTH>
__device__ __forceinline__ float ln_butterfly_sum(float v) {
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(LN_FULL_MASK, v, offset);
    return v;
}

// Number of vectors of the row held by warp `warp` (slots of 32 consecutive vectors each).
template <int BLOCK, int SLOTS>
__device__ __forceinline__ int ln_warp_vectors(const int warp, const int nvec) {
    int count = 0;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) count += min(max(nvec - (s * BLOCK + warp * 32), 0), 32);
    return count;
}

// Read-only (non-coherent cache) load of VEC consecutive floats at vector index i.
template <int VEC>
__device__ __forceinline__ void ln_load(const float* __restrict__ p, int i, float (&out)[VEC]);

template <>
__device__ __forceinline__ void ln_load<4>(const float* __restrict__ p, int i, float (&out)[4]) {
    const float4 t = LN_LDG(reinterpret_cast<const float4*>(p) + i);
    out[0] = t.x;
    out[1] = t.y;
    out[2] = t.z;
    out[3] = t.w;
}

template <>
__device__ __forceinline__ void ln_load<1>(const float* __restrict__ p, int i, float (&out)[1]) {
    out[0] = LN_LDG(p + i);
}

// Store of VEC consecutive floats at vector index i.
template <int VEC>
__device__ __forceinline__ void ln_store(float* __restrict__ p, int i, const float (&v)[VEC]);

template <>
__device__ __forceinline__ void ln_store<4>(float* __restrict__ p, int i, const float (&v)[4]) {
#if LN_STORE_CS
    __stcs(reinterpret_cast<float4*>(p) + i, make_float4(v[0], v[1], v[2], v[3]));
#else
    reinterpret_cast<float4*>(p)[i] = make_float4(v[0], v[1], v[2], v[3]);
#endif
}

template <>
__device__ __forceinline__ void ln_store<1>(float* __restrict__ p, int i, const float (&v)[1]) {
#if LN_STORE_CS
    __stcs(p + i, v[0]);
#else
    p[i] = v[0];
#endif
}

// Normalise one row with a block of BLOCK threads, SLOTS slots of VEC floats per thread; w and b
// loaded with x (LATE_WB false) or just before the store (true).
template <int VEC, int BLOCK, int SLOTS, bool LATE_WB>
__device__ __forceinline__ void ln_row(const float* __restrict__ x, const float* __restrict__ w,
                                       const float* __restrict__ b, float* __restrict__ y,
                                       const int n, const float eps) {
    static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "BLOCK must be whole warps, at most 1024");
    constexpr int NWARPS = BLOCK / 32;
    static_assert((NWARPS & (NWARPS - 1)) == 0, "BLOCK / 32 must be a power of two");

    __shared__ float warp_partials[NWARPS][3];  // (S_w, M2_w, c_w) per warp

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int nvec = n / VEC;  // vectors in the row (n % VEC == 0 by dispatch)
    const long long row_offset = static_cast<long long>(blockIdx.x) * n;
    const float* __restrict__ xr = x + row_offset;
    float* __restrict__ yr = y + row_offset;

    // 1. Load x (and, unless LATE_WB, w and b): all loads are independent and issued before any
    //    use, so w and b (cache hits, shared by all rows) arrive while the statistics are
    //    computed; LATE_WB leaves them to step 4 and holds a third of the registers. The row is
    //    kept shifted by its first element (one broadcast load): sums of x - x[0] stay at the
    //    scale of the spread, so a mean far from zero costs no precision, and the shift cancels
    //    in x - mean.
    const float shift = LN_LDG(xr);
    float v[SLOTS][VEC];
    float wv[SLOTS][VEC];
    float bv[SLOTS][VEC];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int i = s * BLOCK + tid;
        if (i < nvec) {
            ln_load<VEC>(xr, i, v[s]);
            if (!LATE_WB) {
                ln_load<VEC>(w, i, wv[s]);
                ln_load<VEC>(b, i, bv[s]);
            }
#pragma unroll
            for (int k = 0; k < VEC; ++k) v[s][k] -= shift;
        } else {
#pragma unroll
            for (int k = 0; k < VEC; ++k) v[s][k] = 0.0f;
        }
    }

#if LN_ONE_PASS
    // 2-3 (variant one_pass). One pass over the shifted row: sum and sum of squares, both reduced
    // in each warp (two independent butterflies), one shared-memory exchange behind one barrier,
    // then var = E[d^2] - E[d]^2 of the shifted values d = x - x[0]. The shift keeps E[d]^2 within
    // a few times var for a row whose spread is not tiny against its offset from x[0].
    float sum = 0.0f;
    float sq = 0.0f;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            sum += v[s][k];  // masked slots hold zeros
            sq = fmaf(v[s][k], v[s][k], sq);
        }
    }
    const float warp_sum = ln_butterfly_sum<32>(sum);
    const float warp_sq = ln_butterfly_sum<32>(sq);
    if (lane == 0) {
        warp_partials[warp][0] = warp_sum;
        warp_partials[warp][1] = warp_sq;
    }
    __syncthreads();
    const int other = lane & (NWARPS - 1);
    const float inv_n = __fdividef(1.0f, static_cast<float>(n));
    const float mean = ln_butterfly_sum<NWARPS>(warp_partials[other][0]) * inv_n;  // of the shifted row
    const float mean_sq = ln_butterfly_sum<NWARPS>(warp_partials[other][1]) * inv_n;
    const float rstd = rsqrtf(fmaxf(fmaf(-mean, mean, mean_sq), 0.0f) + eps);
#else
    // 2. Warp-level two-pass over the shifted row: sum, warp mean, squared deviations from it.
    float sum = 0.0f;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) sum += v[s][k];  // masked slots hold zeros
    }
    const float warp_sum = ln_butterfly_sum<32>(sum);
    const float warp_count = static_cast<float>(VEC * ln_warp_vectors<BLOCK, SLOTS>(warp, nvec));
    const float warp_mean = warp_count > 0.0f ? __fdividef(warp_sum, warp_count) : 0.0f;
    float m2 = 0.0f;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        if (s * BLOCK + tid < nvec) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const float d = v[s][k] - warp_mean;
                m2 = fmaf(d, d, m2);
            }
        }
    }
    const float warp_m2 = ln_butterfly_sum<32>(m2);

    // 3. Across warps: one shared-memory exchange behind one barrier, then shuffles.
    if (lane == 0) {
        warp_partials[warp][0] = warp_sum;
        warp_partials[warp][1] = warp_m2;
        warp_partials[warp][2] = warp_count;
    }
    __syncthreads();
    const int other = lane & (NWARPS - 1);  // lanes l, l + NWARPS, ... read the same partial
    const float o_sum = warp_partials[other][0];
    const float o_m2 = warp_partials[other][1];
    const float o_count = warp_partials[other][2];
    const float inv_n = __fdividef(1.0f, static_cast<float>(n));
    const float mean = ln_butterfly_sum<NWARPS>(o_sum) * inv_n;  // of the shifted row
    const float o_mean = o_count > 0.0f ? __fdividef(o_sum, o_count) : 0.0f;
    const float o_dev = o_mean - mean;
    const float m2_total = ln_butterfly_sum<NWARPS>(fmaf(o_count * o_dev, o_dev, o_m2));
    const float rstd = rsqrtf(fmaf(m2_total, inv_n, eps));
#endif

    // 4. Normalise, scale, shift, store.
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int i = s * BLOCK + tid;
        if (i < nvec) {
            if (LATE_WB) {
                ln_load<VEC>(w, i, wv[s]);
                ln_load<VEC>(b, i, bv[s]);
            }
            float out[VEC];
#pragma unroll
            for (int k = 0; k < VEC; ++k) out[k] = fmaf((v[s][k] - mean) * rstd, wv[s][k], bv[s][k]);
            ln_store<VEC>(yr, i, out);
        }
    }
}

// n % 4 == 0: the row as float4 vectors; x, w, b, y 16-byte aligned.
template <int BLOCK, int SLOTS, bool LATE_WB>
__global__ void LN_BOUNDS(BLOCK)
layernorm_fwd_vec4(const float* __restrict__ x, const float* __restrict__ w,
                   const float* __restrict__ b, float* __restrict__ y, const int n,
                   const float eps) {
    ln_row<4, BLOCK, SLOTS, LATE_WB>(x, w, b, y, n, eps);
    plant_delay();
}

// n == N, a compile-time width (n % 4 == 0): as layernorm_fwd_vec4 with the width folded into the
// code, so the row's offsets and which slots hold vectors are constants (the launch's n is N).
template <int BLOCK, int SLOTS, bool LATE_WB, int N>
__global__ void LN_BOUNDS(BLOCK)
layernorm_fwd_vec4_fixed(const float* __restrict__ x, const float* __restrict__ w,
                         const float* __restrict__ b, float* __restrict__ y, const int /* n == N */,
                         const float eps) {
    static_assert(N % 4 == 0 && N <= 4 * BLOCK * SLOTS, "the row must fill at most SLOTS float4 a thread");
    ln_row<4, BLOCK, SLOTS, LATE_WB>(x, w, b, y, N, eps);
    plant_delay();
}

// Any n: the row as single floats.
template <int BLOCK, int SLOTS, bool LATE_WB>
__global__ void LN_BOUNDS(BLOCK)
layernorm_fwd_scalar(const float* __restrict__ x, const float* __restrict__ w,
                     const float* __restrict__ b, float* __restrict__ y, const int n,
                     const float eps) {
    ln_row<1, BLOCK, SLOTS, LATE_WB>(x, w, b, y, n, eps);
    plant_delay();
}

// n % 4 == 0, n <= 128 * SLOTS: one warp per row, WARPS rows per block. Vector i = s * 32 + lane of
// the row sits in slot s of lane `lane`. The warp holds the whole (shifted) row, so the exact
// two-pass statistics need no partials: mean by one butterfly, then the squared deviations from
// it by another. A warp past the last row returns at once (there is no barrier to wait at).
template <int SLOTS, int WARPS>
__global__ void LN_BOUNDS(32 * WARPS)
layernorm_fwd_warp_vec4(const float* __restrict__ x, const float* __restrict__ w,
                        const float* __restrict__ b, float* __restrict__ y, const int rows,
                        const int n, const float eps) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int nvec = n / 4;
    const long long row_offset = static_cast<long long>(row) * n;
    const float* __restrict__ xr = x + row_offset;
    float* __restrict__ yr = y + row_offset;

    const float shift = LN_LDG(xr);
    float v[SLOTS][4];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int i = s * 32 + lane;
        if (i < nvec) {
            ln_load<4>(xr, i, v[s]);
#pragma unroll
            for (int k = 0; k < 4; ++k) v[s][k] -= shift;
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) v[s][k] = 0.0f;
        }
    }
    float sum = 0.0f;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
#pragma unroll
        for (int k = 0; k < 4; ++k) sum += v[s][k];  // masked slots hold zeros
    }
    const float inv_n = __fdividef(1.0f, static_cast<float>(n));
    const float mean = ln_butterfly_sum<32>(sum) * inv_n;  // of the shifted row
    float m2 = 0.0f;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        if (s * 32 + lane < nvec) {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const float d = v[s][k] - mean;
                m2 = fmaf(d, d, m2);
            }
        }
    }
    const float rstd = rsqrtf(fmaf(ln_butterfly_sum<32>(m2), inv_n, eps));
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int i = s * 32 + lane;
        if (i < nvec) {
            float wv[4], bv[4], out[4];
            ln_load<4>(w, i, wv);
            ln_load<4>(b, i, bv);
#pragma unroll
            for (int k = 0; k < 4; ++k) out[k] = fmaf((v[s][k] - mean) * rstd, wv[k], bv[k]);
            ln_store<4>(yr, i, out);
        }
    }
    plant_delay();
}
