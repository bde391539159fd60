// Matrix-vector products and GEMMs with at most a few rows: C[r, n] = epi(sum_k X[r, k] W[n, k])
// for r < R (R <= 8, 1 for a vector), streaming W once at full bandwidth.
//
// Memory-bound: every value of W is used R times, so the kernel is a stream of 16-byte loads
// of W (several per thread issued before the first is used, so they are in flight together),
// fp32 fused multiply-adds against X (small, it stays in L1: vector loads where its rows are
// k-contiguous and aligned like W's, else scalar ones), and a
// reduction over k. Two layouts of W:
//   k contiguous (W[n, k]): one warp per column n of C; each lane reads V consecutive k of the
//     row per step, the warp covers 32 V of k, and a shuffle tree sums the lanes.
//   n contiguous (W[k, n]): a block owns CT * V columns; thread (ct, ks) holds the V columns
//     at ct * V for the k rows ks, ks + KS, ...; the KS partials meet in shared memory and
//     are summed in order of ks, so the result does not depend on timing.
// V is 16 bytes of W where every row of W starts 16-byte aligned, else 1.
#pragma once
#ifndef NCDC_GEMV_CUH
#define NCDC_GEMV_CUH

namespace ncdc {
namespace gemv {

struct Shape {
  long long n, k;
  long long w_n, w_k;  // W's pitch along n and along k (one of them 1)
  long long x_m, x_k;  // X's pitch along its row axis (0 for a vector) and along k
  long long c_m, c_n;  // C's pitch along the row axis (0 for a vector) and along n
};

template <class TC>
NCDC_DEVICE void store_one(TC* p, float v) {
  st_global(p, from_float<TC>(v));
}

// One warp per column of C: W k-contiguous. XV: X's rows are k-contiguous and 16-byte
// aligned too, so its V values per step are one vector load.
template <int R, int V, int U, int WARPS, bool XV, class TW, class TX, class TC, class Epi>
NCDC_DEVICE void run_kc(const TW* W, const TX* X, TC* C, const Shape& s, const Epi& epi) {
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  const long long col = (long long)blockIdx.x * WARPS + warp;
  if (col >= s.n) return;  // the whole warp: every lane has the same column
  const TW* w = W + col * s.w_n;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  constexpr long long kStep = 32LL * V;
  for (long long k0 = (long long)lane * V; k0 < s.k; k0 += kStep * U) {
    float wv[U][V];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long k = k0 + kStep * u;
      if (k < s.k) {
        load_vec<V>(w + k, wv[u]);  // k % V == 0 and V | s.k on the vector path
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) wv[u][j] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long k = k0 + kStep * u;
      if (k >= s.k) break;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const TX* x = X + r * s.x_m + k * s.x_k;
        if constexpr (XV) {
          float xv[V];
          load_vec<V>(x, xv);
#pragma unroll
          for (int j = 0; j < V; ++j) acc[r] = fmaf(wv[u][j], xv[j], acc[r]);
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j) acc[r] = fmaf(wv[u][j], to_float(ld_global(x + j * s.x_k)), acc[r]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) store_one(C + r * s.c_m + col * s.c_n, epi(acc[r], r, col));
  }
}

// CT * V columns per block: W n-contiguous. `partials` holds KS * R * CT * V floats.
template <int R, int V, int U, int CT, int KS, class TW, class TX, class TC, class Epi>
NCDC_DEVICE void run_nc(const TW* W, const TX* X, TC* C, const Shape& s, const Epi& epi,
                        float* partials) {
  constexpr int kCols = CT * V;
  const int ct = int(threadIdx.x % CT), ks = int(threadIdx.x / CT);
  const long long first = (long long)blockIdx.x * kCols;
  const long long col0 = first + ct * V;
  const bool whole = col0 + V <= s.n;
  float acc[R][V];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < V; ++j) acc[r][j] = 0.0f;
  for (long long k0 = ks; k0 < s.k; k0 += (long long)KS * U) {
    float wv[U][V];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long k = k0 + (long long)KS * u;
      const TW* w = W + k * s.w_k + col0;
      if (k < s.k && whole) {
        load_vec<V>(w, wv[u]);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) wv[u][j] = k < s.k && col0 + j < s.n ? to_float(ld_global(w + j)) : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long k = k0 + (long long)KS * u;
      if (k >= s.k) break;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float x = to_float(ld_global(X + r * s.x_m + k * s.x_k));
#pragma unroll
        for (int j = 0; j < V; ++j) acc[r][j] = fmaf(wv[u][j], x, acc[r][j]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < V; ++j) partials[(ks * R + r) * kCols + ct * V + j] = acc[r][j];
  __syncthreads();
  for (int i = int(threadIdx.x); i < R * kCols; i += CT * KS) {
    const int r = i / kCols, c = i % kCols;
    const long long col = first + c;
    if (col >= s.n) continue;
    float sum = 0.0f;
    for (int q = 0; q < KS; ++q) sum += partials[(q * R + r) * kCols + c];
    store_one(C + r * s.c_m + col * s.c_n, epi(sum, r, col));
  }
}

}  // namespace gemv
}  // namespace ncdc

#endif  // NCDC_GEMV_CUH
