// FP32 neighbour aggregation over a graph in CSR form (each row lists its in-edges):
//     out[i, :] = sum over e in [indptr[i], indptr[i + 1]) of x[indices[e], :]
//
// Device code only: compiled at run time by NVRTC through CuPy (cupy.RawModule with name
// expressions, which instantiate the templates), or offline by the census (NVRTC, or nvcc as a
// fallback). No headers are included: NVRTC has no host headers.
//
// Warp layout. The 32 lanes of a warp form GROUPS = 32 / GROUP groups of GROUP lanes; a group
// covers one row of x: lane `sub` of a group holds vectors v = s * GROUP + sub (s < SLOTS) of VEC
// consecutive floats each, so a group's load of a row is one coalesced sweep (GROUP * VEC floats
// per slot). The groups of a warp take different in-edges of the same destination row (group g
// takes edges g, g + GROUPS, ...), each accumulating its own partial sums in registers; at the end
// the partials are summed across groups by butterfly shuffles and group 0 stores the row.
//
// Indices: the warp loads 32 consecutive entries of `indices` at once (one coalesced 128-byte
// load, lane k holding entry base + k) and hands them to the groups by __shfl_sync, so each index
// is read from memory once per warp. Each step then issues UNROLL independent row loads per group
// (UNROLL * SLOTS vector loads per lane, all in flight before the first add), i.e. GROUPS * UNROLL
// edges per step; GROUPS * UNROLL divides 32, so a step never straddles a batch of 32 indices.
//
// Load balance (power-law graphs). One warp per row makes a hub with 10^5 in-edges a single warp
// running for milliseconds while the rest of the GPU idles. So rows are cut into pieces, and the
// pieces of long rows run beside the short rows in the same launch:
//   neighbor_sum, warps 0 .. nodes - 1: warp i sums row i's first `chunk` in-edges
//     [indptr[i], min(indptr[i + 1], indptr[i] + chunk)) and stores them (plain 128-bit stores;
//     an empty row stores zeros, so every output element is written), or, for a row longer than
//     `chunk` (a long row), adds them with atomics.
//   neighbor_sum, warps nodes + c: piece c of the edge array, edges [c * piece, (c + 1) * piece),
//     piece <= chunk. The warp finds the row r holding edge c * piece (a warp-cooperative 32-ary
//     search of indptr: 4 steps for 65536 rows) and adds, with atomics, r's edges in the piece
//     past r's first `chunk`: [max(c * piece, indptr[r] + chunk), min(indptr[r + 1],
//     (c + 1) * piece)). Every such edge e is covered exactly once: with c = e / piece,
//     indptr[r] + chunk <= e < c * piece + piece, so indptr[r] < c * piece (piece <= chunk) and r
//     is the row holding edge c * piece; a row starting inside piece c has its edges past its
//     first `chunk` in later pieces only.
//   neighbor_zero_long_rows: zeroes the long rows first (same stream, launched before), since
//     all their sums arrive as atomic adds.
// For a graph whose maximum in-degree is <= chunk the host launches neighbor_sum with the row
// warps only (no pieces, no zeroing): one kernel, plain stores. Long rows' sums depend on the
// order of the atomic adds (not bitwise reproducible from run to run); rows of at most `chunk`
// edges are summed in a fixed order.
//
// Entry points (name expressions; the host picks VEC, GROUP, SLOTS, UNROLL from the width F):
//     neighbor_sum<VEC, GROUP, SLOTS, UNROLL>(x, indptr, indices, out, nodes, edges, features,
//                                             chunk, piece)
//     neighbor_zero_long_rows<VEC>(indptr, out, nodes, features, chunk)
// x [nodes, features] and out [nodes, features] FP32 row-major; indptr int32 [nodes + 1] and
// indices int32 [edges] a valid CSR (indptr[0] == 0, non-decreasing, indptr[nodes] == edges,
// 0 <= indices < nodes). VEC == 4 needs features % 4 == 0 and x, out 16-byte aligned. Blocks of
// any multiple of 32 threads up to NA_MAX_BLOCK (one warp per row or piece; one thread per row
// for the zeroing); GROUP * SLOTS * VEC >= features; 32 <= piece <= chunk.

#define NA_FULL_MASK 0xffffffffu
#define NA_MAX_BLOCK 128
// At least 8 blocks of 128 threads per multiprocessor: a cap of 64 registers per thread. Without
// a minimum, ptxas 13.0 kept one specialization at 40 registers and spilled 4 bytes to the stack;
// with it no specialization spills (the census checks).
#define NA_MIN_BLOCKS 8

// Read-only (non-coherent cache) load of VEC consecutive floats at vector index i of a row.
template <int VEC>
__device__ __forceinline__ void na_load(const float* __restrict__ row, int i, float (&out)[VEC]);

template <>
__device__ __forceinline__ void na_load<4>(const float* __restrict__ row, int i, float (&out)[4]) {
    const float4 t = __ldg(reinterpret_cast<const float4*>(row) + i);
    out[0] = t.x;
    out[1] = t.y;
    out[2] = t.z;
    out[3] = t.w;
}

template <>
__device__ __forceinline__ void na_load<1>(const float* __restrict__ row, int i, float (&out)[1]) {
    out[0] = __ldg(row + i);
}

// Store of VEC consecutive floats at vector index i of a row.
template <int VEC>
__device__ __forceinline__ void na_store(float* __restrict__ row, int i, const float (&v)[VEC]);

template <>
__device__ __forceinline__ void na_store<4>(float* __restrict__ row, int i, const float (&v)[4]) {
    reinterpret_cast<float4*>(row)[i] = make_float4(v[0], v[1], v[2], v[3]);
}

template <>
__device__ __forceinline__ void na_store<1>(float* __restrict__ row, int i, const float (&v)[1]) {
    row[i] = v[0];
}

// Atomic add (result unused: a `red`) of VEC consecutive floats at vector index i of a row. On
// sm_90 the float4 form is one 128-bit vector reduction (red.global.add.v4.f32).
template <int VEC>
__device__ __forceinline__ void na_atomic_add(float* row, int i, const float (&v)[VEC]);

template <>
__device__ __forceinline__ void na_atomic_add<4>(float* row, int i, const float (&v)[4]) {
#if __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float4*>(row) + i, make_float4(v[0], v[1], v[2], v[3]));
#else
    float* p = row + 4 * i;
    atomicAdd(p + 0, v[0]);
    atomicAdd(p + 1, v[1]);
    atomicAdd(p + 2, v[2]);
    atomicAdd(p + 3, v[3]);
#endif
}

template <>
__device__ __forceinline__ void na_atomic_add<1>(float* row, int i, const float (&v)[1]) {
    atomicAdd(row + i, v[0]);
}

// Sum x[indices[e], :] over e in [begin, end) into this lane's partials acc (its group's edges,
// its vectors of the row). All 32 lanes of the warp must call it with the same begin and end.
template <int VEC, int GROUP, int SLOTS, int UNROLL>
__device__ __forceinline__ void na_gather(const float* __restrict__ x, const int* __restrict__ indices,
                                          const int features, const int begin, const int end,
                                          float (&acc)[SLOTS][VEC]) {
    static_assert(GROUP >= 1 && GROUP <= 32 && (32 % GROUP) == 0, "GROUP must divide 32");
    constexpr int GROUPS = 32 / GROUP;
    constexpr int STEP = GROUPS * UNROLL;  // edges per step
    static_assert(STEP <= 32 && (32 % STEP) == 0, "GROUPS * UNROLL must divide 32");
    const int lane = threadIdx.x & 31;
    const int group = lane / GROUP;
    const int sub = lane % GROUP;
    const int nvec = features / VEC;

    for (int base = begin; base < end; base += 32) {
        const int n = min(32, end - base);  // edges in this batch (warp-uniform)
        const int mine = lane < n ? __ldg(indices + base + lane) : 0;
        for (int k = 0; k < n; k += STEP) {  // k <= 32 - STEP, so every source lane is < 32
            float v[UNROLL][SLOTS][VEC];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int e = k + u * GROUPS + group;
                const int j = __shfl_sync(NA_FULL_MASK, mine, e);
                const float* __restrict__ xr = x + static_cast<long long>(j) * features;
#pragma unroll
                for (int s = 0; s < SLOTS; ++s) {
                    const int i = s * GROUP + sub;
                    if (e < n && i < nvec) {
                        na_load<VEC>(xr, i, v[u][s]);
                    } else {
#pragma unroll
                        for (int c = 0; c < VEC; ++c) v[u][s][c] = 0.0f;
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
                for (int s = 0; s < SLOTS; ++s) {
#pragma unroll
                    for (int c = 0; c < VEC; ++c) acc[s][c] += v[u][s][c];
                }
            }
        }
    }
}

// Sum the partials of the GROUPS groups (lanes that differ in the bits at and above GROUP); every
// lane ends with its vectors' full sums.
template <int VEC, int GROUP, int SLOTS>
__device__ __forceinline__ void na_reduce_groups(float (&acc)[SLOTS][VEC]) {
#pragma unroll
    for (int offset = GROUP; offset < 32; offset <<= 1) {
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
#pragma unroll
            for (int c = 0; c < VEC; ++c) acc[s][c] += __shfl_xor_sync(NA_FULL_MASK, acc[s][c], offset);
        }
    }
}


// The row r with indptr[r] <= e < indptr[r + 1] (the last r with indptr[r] <= e), for
// 0 <= e < indptr[nodes]: a 32-ary search, each step one probe per lane and a ballot.
__device__ __forceinline__ int na_row_of_edge(const int* __restrict__ indptr, const int nodes,
                                              const int e) {
    const int lane = threadIdx.x & 31;
    int lo = 0, hi = nodes;  // indptr[lo] <= e < indptr[hi]
    while (hi - lo > 1) {
        const int step = (hi - lo + 31) / 32;
        const long long q = lo + static_cast<long long>(lane + 1) * step;
        const bool le = q < hi && __ldg(indptr + q) <= e;
        const int count = __popc(__ballot_sync(NA_FULL_MASK, le));  // probes 1..count are <= e
        lo += count * step;
        hi = min(hi, lo + step);  // probe count + 1 is > e, or at or past hi
    }
    return lo;
}

// Warps 0 .. nodes - 1: row `warp`, its first `chunk` in-edges; stored, or added atomically if
// the row is longer than `chunk`. Warps nodes + c: piece c of the edge array, the part of the row
// holding edge c * piece that lies in the piece and past that row's first `chunk` edges, added
// atomically (nothing if that part is empty).
template <int VEC, int GROUP, int SLOTS, int UNROLL>
__global__ void __launch_bounds__(NA_MAX_BLOCK, NA_MIN_BLOCKS)
neighbor_sum(const float* __restrict__ x, const int* __restrict__ indptr,
             const int* __restrict__ indices, float* __restrict__ out, const int nodes,
             const int edges, const int features, const int chunk, const int piece) {
    const long long warp = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    int row, begin, end;
    bool atomic;
    if (warp < nodes) {  // warp-uniform branches throughout
        row = static_cast<int>(warp);
        begin = __ldg(indptr + row);
        const int row_end = __ldg(indptr + row + 1);
        end = min(row_end, begin + chunk);
        atomic = row_end - begin > chunk;
    } else {
        const long long first = (warp - nodes) * piece;
        if (first >= edges) return;
        const int piece_begin = static_cast<int>(first);
        row = na_row_of_edge(indptr, nodes, piece_begin);
        begin = max(piece_begin, __ldg(indptr + row) + chunk);
        end = min(__ldg(indptr + row + 1), piece_begin + piece);
        if (begin >= end) return;  // nothing of a long row in this piece
        atomic = true;
    }

    float acc[SLOTS][VEC];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
#pragma unroll
        for (int c = 0; c < VEC; ++c) acc[s][c] = 0.0f;
    }
    na_gather<VEC, GROUP, SLOTS, UNROLL>(x, indices, features, begin, end, acc);
    na_reduce_groups<VEC, GROUP, SLOTS>(acc);

    const int lane = threadIdx.x & 31;
    if (lane < GROUP) {  // group 0 writes the row
        float* __restrict__ orow = out + static_cast<long long>(row) * features;
        const int nvec = features / VEC;
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int i = s * GROUP + lane;
            if (i < nvec) {
                if (atomic) {
                    na_atomic_add<VEC>(orow, i, acc[s]);
                } else {
                    na_store<VEC>(orow, i, acc[s]);
                }
            }
        }
    }
}

// One thread per row: zero the rows longer than `chunk` (the ones neighbor_sum adds into).
template <int VEC>
__global__ void __launch_bounds__(NA_MAX_BLOCK)
neighbor_zero_long_rows(const int* __restrict__ indptr, float* __restrict__ out, const int nodes,
                        const int features, const int chunk) {
    const long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (row >= nodes) return;
    if (__ldg(indptr + row + 1) - __ldg(indptr + row) <= chunk) return;
    float* __restrict__ orow = out + row * features;
    const float zeros[VEC] = {};
    for (int i = 0; i < features / VEC; ++i) na_store<VEC>(orow, i, zeros);
}
