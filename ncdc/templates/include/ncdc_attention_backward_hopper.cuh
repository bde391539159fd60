// Attention's fused backward on Hopper (sm_90a): the FlashAttention-2 order of
// ncdc_attention_backward.cuh with its five products on wgmma. One block per BX keys of one
// (batch..., head) slice, one warpgroup per 64 of them (one per 64 values of the head: BX = D),
// holding their dK and dV (fp32) while the queries stream 32 at a time through a 2-stage
// cp.async ring (Q, dO, L and D; the heads of a group one after the other). Every tile is
// stored as TMA and wgmma read it: column blocks of 64 values (128 bytes) a row, rows 128
// bytes apart, the 128-byte swizzle (16-byte chunk c of row r at c ^ r % 8). For each tile
// that sees some of its keys a warpgroup runs
//
//   S^T  = K Q^T          m64n32k16, both from shared memory (K-major: the head inner)
//   dP^T = V dO^T         the same for V and dO
//   P^T, dS^T             as the mma.sync kernel (the score path's functor, masks, varlen)
//   dV  += P^T dO         P^T from registers (the accumulator's layout is the A fragment's),
//   dK  += dS^T Q         dO and Q as MN-major B (the queries are k)
//   dQ^T += K^T dS^T      over the block's BX keys: K as an MN-major A (warpgroup w takes the
//                         head's values [64 w, 64 w + 64) as m), dS^T through shared memory
//                         (64-byte rows, the 64-byte swizzle) as an MN-major B (queries n);
//                         added into dQ's fp32 workspace with atomics
//
// each product issued, committed and waited for in turn (no producer warpgroup and no
// overlap of one product with the next: the block's warpgroups overlap each other's). The
// generic-proxy writes (cp.async, dS^T's stores) are fenced to the async proxy before a
// barrier and the wgmmas that read them. Without DQ_ATOMIC dQ is left to
// `dq_by_queries_wgmma`, below.
#pragma once
#ifndef NCDC_ATTENTION_BACKWARD_HOPPER_CUH
#define NCDC_ATTENTION_BACKWARD_HOPPER_CUH

#include "ncdc_attention_backward.cuh"
#include "ncdc_hopper.cuh"

namespace ncdc {
namespace attn {

// The backward's wgmmas by element type: both operands from descriptors (ss, TA and TB: 1 =
// MN-major), or A from registers (rs).
template <class T>
struct BackwardMma;
template <>
struct BackwardMma<__nv_bfloat16> {
  template <int N, int TA, int TB>
  static NCDC_DEVICE void ss(float* d, unsigned long long a, unsigned long long b, int scale_d) {
    wgmma_m64k16_bf16<N, TA, TB>(d, a, b, scale_d);
  }
  template <int N, int TB>
  static NCDC_DEVICE void rs(float* d, const unsigned* a, unsigned long long b, int scale_d) {
    wgmma_m64k16_bf16_rs<N, TB>(d, a, b, scale_d);
  }
};
template <>
struct BackwardMma<__half> {
  template <int N, int TA, int TB>
  static NCDC_DEVICE void ss(float* d, unsigned long long a, unsigned long long b, int scale_d) {
    wgmma_m64k16_f16<N, TA, TB>(d, a, b, scale_d);
  }
  template <int N, int TB>
  static NCDC_DEVICE void rs(float* d, const unsigned* a, unsigned long long b, int scale_d) {
    wgmma_m64k16_f16_rs<N, TB>(d, a, b, scale_d);
  }
};

constexpr int kSpan = 128;  // bytes of a swizzled row: 64 values of 16 bits

// The byte of 16-byte chunk `chunk` (8 values) of row `row` in a swizzled tile of ROWS rows.
template <int ROWS>
NCDC_DEVICE int swizzled(int row, int chunk) {
  return (chunk / 8) * ROWS * kSpan + row * kSpan + (((chunk % 8) ^ (row % 8)) << 4);
}

// cp.async of rows [0, ROWS) x COLS values of a row-major global tile into a swizzled one;
// rows at or past `valid` zero-filled, reading nothing.
template <class T, int ROWS, int COLS, int THREADS>
NCDC_DEVICE void load_swizzled(unsigned char* smem, const T* gmem, long long row_stride, int valid,
                               int tid) {
  constexpr int C = COLS / 8, TOTAL = ROWS * C;
#pragma unroll
  for (int i0 = 0; i0 < TOTAL; i0 += THREADS) {
    const int i = i0 + tid;
    if (TOTAL % THREADS == 0 || i < TOTAL) {
      const int row = i / C, chunk = i % C;
      const bool ok = row < valid;
      const T* src = ok ? gmem + row * row_stride + chunk * 8 : gmem;
      cp_async_16_zfill(smem + swizzled<ROWS>(row, chunk), src, ok ? 16 : 0);
    }
  }
}

// acc (64 x N) = A B^T: the 64 rows of tile `a` (A_ROWS rows) from `a_row` by the N rows of
// tile `b`, both swizzled with their H values inner (K-major), 16 values a wgmma.
template <class T, int H, int A_ROWS, int N>
NCDC_DEVICE void rows_by_rows(float* acc, const unsigned char* a, int a_row,
                              const unsigned char* b) {
#pragma unroll
  for (int kk = 0; kk < H / 16; ++kk) {
    const int block = kk / 4, in = (kk % 4) * 32;
    const auto da = smem_desc(a + block * A_ROWS * kSpan + a_row * kSpan + in, 16, 1024,
                              kSwizzle128);
    const auto db = smem_desc(b + block * N * kSpan + in, 16, 1024, kSwizzle128);
    BackwardMma<T>::template ss<N, 0, 0>(acc, da, db, kk > 0 ? 1 : 0);
  }
}

// S = A1 B1^T and dP = A2 B2^T for a warpgroup's 64 rows of A1 and A2 (from `a_row`) by the
// N rows of B1 and B2: both products issued, then waited for. The main kernel's A are K and
// V (S^T and dP^T), the query-major pass's Q and dO.
template <class T, int D, int DV, int A_ROWS, int N>
NCDC_DEVICE void scores_and_grads(float (&s)[N / 2], float (&dp)[N / 2], const unsigned char* a1,
                                  const unsigned char* a2, int a_row, const unsigned char* b1,
                                  const unsigned char* b2) {
  wgmma_fence();
  rows_by_rows<T, D, A_ROWS, N>(s, a1, a_row, b1);
  rows_by_rows<T, DV, A_ROWS, N>(dp, a2, a_row, b2);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands<N / 2>(s);
  wgmma_fence_operands<N / 2>(dp);
}

// acc (64 x N) += A B: A (64 x K) from registers (packed by the accumulator's layout, four a
// k16 step), B the K rows of tile `b` (N values each, its rows the k: MN-major).
template <class T, int N, int K>
NCDC_DEVICE void add_from_registers(float* acc, const unsigned* a, const unsigned char* b) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    const auto db = smem_desc(b + kk * 16 * kSpan, K * kSpan, 1024, kSwizzle128);
    BackwardMma<T>::template rs<N, 1>(acc, a + 4 * kk, db, 1);
  }
}

// Queries [q0, q0 + BQ) of head `head`: Q and dO swizzled, L and D (zeros past q_len).
template <class T, int D, int DV, int BQ, int THREADS>
NCDC_DEVICE void load_queries_swizzled(unsigned char* qs, unsigned char* dos, float* ls, float* ds,
                                       const BackwardSlice<T>& a, int head, int q0, int tid) {
  const T* q = a.q + head * a.q_head;
  const T* dout = a.dout + head * a.do_head;
  const float* lse = a.lse + head * a.l_head;
  const float* dvec = a.dvec + head * a.d_head;
  load_swizzled<T, BQ, D, THREADS>(qs, q + q0 * a.q_stride, a.q_stride, a.q_len - q0, tid);
  load_swizzled<T, BQ, DV, THREADS>(dos, dout + q0 * a.do_stride, a.do_stride, a.q_len - q0, tid);
  for (int r = tid; r < BQ; r += THREADS) {
    const bool ok = q0 + r < a.q_len;
    cp_async_4_zfill(ls + r, ok ? lse + q0 + r : lse, ok ? 4 : 0);
    cp_async_4_zfill(ds + r, ok ? dvec + q0 + r : dvec, ok ? 4 : 0);
  }
}

// A warpgroup's 64 rows of an fp32 accumulator (64 x H, the m64nH layout), times `scale`,
// into row-major global rows [row0, row0 + 64) (rows at or past `valid` not written).
template <class T, int H>
NCDC_DEVICE void store_accumulator(T* out, long long stride, const float* acc, int row0,
                                   int valid, float scale, int w, int g, int t) {
#pragma unroll
  for (int i = 0; i < H / 2; i += 2) {
    const int row = row0 + 16 * w + g + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * t;
    if (row < valid)
      st_global(reinterpret_cast<uint32_t*>(out + row * stride + col),
                Mma<T>::pack(acc[i] * scale, acc[i + 1] * scale));
  }
}

template <class T, int D, int DV, int BX, bool MASKED, bool VARLEN, bool DQ_ATOMIC, class SC>
NCDC_DEVICE void attention_backward_wgmma(const BackwardSlice<T>& a, T* dk_out,
                                          long long dk_stride, T* dv_out, long long dv_stride,
                                          float* dq_acc, int key_tile, float grad_scale,
                                          const SC& sc) {
  constexpr int BQ = 32, W = BX / 64, THREADS = 128 * W, SROW = BQ * 2;
  static_assert((BX == 64 || BX == 128) && D == BX, "a warpgroup per 64 keys and 64 of the head");
  static_assert(DV == 64 || DV == 128, "d_v is a wgmma n");
  constexpr int KT = BX * D * 2, VT = BX * DV * 2, QT = BQ * D * 2, OT = BQ * DV * 2;
  constexpr int ST = DQ_ATOMIC ? BX * SROW : 0;
  unsigned char* ks = wgmma_gemm::aligned_smem();  // every tile 1024-byte aligned
  unsigned char* vs = ks + KT;
  unsigned char* qs = vs + VT;        // [2][QT]
  unsigned char* dos = qs + 2 * QT;   // [2][OT]
  unsigned char* dst = dos + 2 * OT;  // dS^T: BX key rows of the step's 32 queries (64 bytes)
  float* ls = reinterpret_cast<float*>(dst + ST);  // [2][BQ] L
  float* dvs = ls + 2 * BQ;                        // [2][BQ] D
  int* span = reinterpret_cast<int*>(dvs + 2 * BQ);  // [BX][2] a varlen mask's (VARLEN only)
  // the warpgroup from lane 0: warp-uniform to ptxas, so its descriptors live in uniform
  // registers
  const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int w = (tid % 128) / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int x0 = key_tile * BX;
  const int kr0 = 64 * wg + 16 * w;  // the warp's first key row in the tile
  const int lo = band32(a.lo, a.q_len, a.x_len), hi = band32(a.hi, a.q_len, a.x_len);

  int tile0, tiles;  // the query tiles that see some key of the block
  tile_range<true, BX, BQ, MASKED, VARLEN, THREADS>(a, x0, span, tid, tile0, tiles);
  const RowSpans spans{span + 2 * kr0};  // a varlen mask's queries for each of the warp's keys

  float dk[D / 2], dv[DV / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < DV / 2; ++i) dv[i] = 0.0f;

  if (tiles > 0) {
    load_swizzled<T, BX, D, THREADS>(ks, a.k + x0 * a.k_stride, a.k_stride, a.x_len - x0, tid);
    load_swizzled<T, BX, DV, THREADS>(vs, a.v + x0 * a.v_stride, a.v_stride, a.x_len - x0, tid);
    load_queries_swizzled<T, D, DV, BQ, THREADS>(qs, dos, ls, dvs, a, 0, tile0 * BQ, tid);
    cp_async_commit();
  }
  const int steps = tiles * a.heads;
  int next_head = 0, next_tile = 0;  // of the step after this one
  for (int it = 0; it < steps; ++it) {
    const int stage = it & 1, head = next_head, q0 = (tile0 + next_tile) * BQ;
    if (++next_tile == tiles) {
      next_tile = 0;
      ++next_head;
    }
    // tile `it` has landed and is visible to the async proxy; every warpgroup is done with
    // the stage the next tile fills (and with dS^T)
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads();
    if (it + 1 < steps)
      load_queries_swizzled<T, D, DV, BQ, THREADS>(qs + (stage ^ 1) * QT, dos + (stage ^ 1) * OT,
                                                   ls + (stage ^ 1) * BQ, dvs + (stage ^ 1) * BQ,
                                                   a, next_head, (tile0 + next_tile) * BQ, tid);
    cp_async_commit();
    const unsigned char* q_t = qs + stage * QT;
    const unsigned char* do_t = dos + stage * OT;
    const float* l_t = ls + stage * BQ;
    const float* d_t = dvs + stage * BQ;

    // S^T and dP^T: the warpgroup's 64 keys by the step's 32 queries (element i: key row
    // kr0 + g + 8 (i / 2 % 2), query column 8 (i / 4) + 2 t + i % 2)
    float s[BQ / 2], dp[BQ / 2];
    scores_and_grads<T, D, DV, BX, BQ>(s, dp, ks, vs, 64 * wg, q_t, do_t);

    // P^T and dS^T = P^T (dP^T - D): the score path's gradient is linear in dM (the family
    // checks), so its factor at each pair is found with P, and s keeps P times it; a tile
    // whose every pair the band keeps and the tensors hold is not tested
    const bool cut = VARLEN || q0 + BQ > a.q_len || x0 + BX > a.x_len ||
                     (MASKED && (x0 + BX - 1 > q0 + hi || x0 < q0 + BQ - 1 + lo));
    unsigned pr[BQ / 4], dsr[BQ / 4];
    float p_even = 0.0f;  // P of the pair's first element, packed with the second's
#pragma unroll
    for (int i = 0; i < BQ / 2; ++i) {
      const int r = g + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * t + i % 2;
      const int key = x0 + kr0 + r, query = q0 + col;
      float sv = 0.0f;
      float p = p_of(s[i], sv, l_t[col], sc, a.scale, a.scale_log2, query, key);
      if (cut && (dropped_pair<MASKED>(lo, hi, a.q_len, a.x_len, query, key) ||
                  (VARLEN && spans.dropped(r, query))))
        p = 0.0f;
      if (i % 2 == 1) pr[i / 2] = Mma<T>::pack(p_even, p);
      p_even = p;
      s[i] = p;
      if (!SC::kIdentity) s[i] = p * sc.grad(sv, 1.0f, query, key);
    }
#pragma unroll
    for (int i = 0; i < BQ / 4; ++i) {
      const int col = 8 * (i / 2) + 2 * t;
      dsr[i] = Mma<T>::pack(s[2 * i] * (dp[2 * i] - d_t[col]),
                            s[2 * i + 1] * (dp[2 * i + 1] - d_t[col + 1]));
    }
    // dV += P^T dO and dK += dS^T Q: the queries are k, 16 a wgmma
    wgmma_fence_operands<DV / 2>(dv);
    wgmma_fence_operands<D / 2>(dk);
    wgmma_fence();
    add_from_registers<T, DV, BQ>(dv, pr, do_t);
    add_from_registers<T, D, BQ>(dk, dsr, q_t);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands<DV / 2>(dv);
    wgmma_fence_operands<D / 2>(dk);
    if constexpr (!DQ_ATOMIC) continue;  // dQ by the query-major pass (dq_by_queries)
    // dS^T into shared memory: a 64-byte row a key, the 64-byte swizzle (16-byte chunk c of
    // row r at c ^ (r / 2) % 4)
#pragma unroll
    for (int i = 0; i < BQ / 2; i += 2) {
      const int row = kr0 + g + 8 * ((i / 2) % 2), off = row * SROW + (8 * (i / 4) + 2 * t) * 2;
      st_shared(reinterpret_cast<unsigned*>(dst + (off ^ (((off >> 7) & 3) << 4))), dsr[i / 2]);
    }
    fence_proxy_async();
    __syncthreads();  // every warpgroup's keys are in
    // dQ^T (the warpgroup's 64 values of the head x 32 queries) = K^T dS^T over BX keys
    {
      float dq[BQ / 2];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BX / 16; ++kk) {
        const auto da = smem_desc(ks + wg * BX * kSpan + kk * 16 * kSpan, BX * kSpan, 1024,
                                  kSwizzle128);
        const auto db = smem_desc(dst + kk * 16 * SROW, BX * SROW, 8 * SROW, kSwizzle64);
        BackwardMma<T>::template ss<BQ, 1, 1>(dq, da, db, kk > 0 ? 1 : 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands<BQ / 2>(dq);
#pragma unroll
      for (int i = 0; i < BQ / 2; ++i) {
        const int col = 64 * wg + 16 * w + g + 8 * ((i / 2) % 2);  // of the head
        const int row = q0 + 8 * (i / 4) + 2 * t + i % 2;          // the query
        if (row < a.q_len) atomicAdd(dq_acc + ((long long)head * a.q_len + row) * D + col, dq[i]);
      }
    }
  }
  store_accumulator<T, D>(dk_out + (long long)x0 * dk_stride, dk_stride, dk, 64 * wg,
                          a.x_len - x0, grad_scale, w, g, t);
  store_accumulator<T, DV>(dv_out + (long long)x0 * dv_stride, dv_stride, dv, 64 * wg,
                           a.x_len - x0, 1.0f, w, g, t);
}

// dQ without atomics on wgmma: the query-major second pass (dq_by_queries's order), one
// warpgroup per 64 queries of a block of BQ, holding their dQ (fp32) while the keys stream
// 64 at a time through a 2-stage cp.async ring of K and V (only the tiles the masks leave):
//
//   S  = Q K^T, dP = dO V^T   m64n64k16 from shared memory (K-major)
//   P, dS                     as the main kernel, rows the queries
//   dQ += dS K                dS from registers (S's accumulator layout is the A fragment's),
//                             K as an MN-major B (the keys are k)
//
// and writes dQ times the gradient's scale: each value summed by one thread in key order.
template <class T, int D, int DV, int BQ, bool MASKED, bool VARLEN, class SC>
NCDC_DEVICE void dq_by_queries_wgmma(const BackwardSlice<T>& a, T* dq_out, long long dq_stride,
                                     int query_tile, float grad_scale, const SC& sc) {
  constexpr int BK = 64, W = BQ / 64, THREADS = 128 * W;
  static_assert((BQ == 64 || BQ == 128) && (D == 64 || D == 128) && (DV == 64 || DV == 128),
                "warpgroups of 64 queries; heads are wgmma n's");
  constexpr int QT = BQ * D * 2, OT = BQ * DV * 2, KT = BK * D * 2, VT = BK * DV * 2;
  unsigned char* qs = wgmma_gemm::aligned_smem();
  unsigned char* dos = qs + QT;
  unsigned char* ks = dos + OT;      // [2][KT]
  unsigned char* vs = ks + 2 * KT;   // [2][VT]
  int* span = reinterpret_cast<int*>(vs + 2 * VT);  // [BQ][2] a varlen mask's (VARLEN only)
  // the warpgroup from lane 0: warp-uniform to ptxas, so its descriptors live in uniform
  // registers
  const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int w = (tid % 128) / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int q0 = query_tile * BQ, qr0 = 64 * wg + 16 * w;  // the warp's first query row
  const int lo = band32(a.lo, a.q_len, a.x_len), hi = band32(a.hi, a.q_len, a.x_len);
  int tile0, tiles;  // the key tiles some query of the block sees
  tile_range<false, BQ, BK, MASKED, VARLEN, THREADS>(a, q0, span, tid, tile0, tiles);
  const RowSpans spans{span + 2 * qr0};  // a varlen mask's keys for each of the warp's queries

  float l2[2], d2[2];  // the thread's rows g and g + 8: L and D
  row_stats(a, q0 + qr0 + g, l2, d2);
  float dq[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dq[i] = 0.0f;
  if (tiles > 0) {
    load_swizzled<T, BQ, D, THREADS>(qs, a.q + q0 * a.q_stride, a.q_stride, a.q_len - q0, tid);
    load_swizzled<T, BQ, DV, THREADS>(dos, a.dout + q0 * a.do_stride, a.do_stride, a.q_len - q0,
                                      tid);
    const int x0 = tile0 * BK;
    load_swizzled<T, BK, D, THREADS>(ks, a.k + x0 * a.k_stride, a.k_stride, a.x_len - x0, tid);
    load_swizzled<T, BK, DV, THREADS>(vs, a.v + x0 * a.v_stride, a.v_stride, a.x_len - x0, tid);
    cp_async_commit();
  }
  for (int it = 0; it < tiles; ++it) {
    const int stage = it & 1, x0 = (tile0 + it) * BK;
    cp_async_wait_all();  // tile `it` has landed; every warpgroup is done with the other stage
    fence_proxy_async();
    __syncthreads();
    if (it + 1 < tiles) {
      const int x1 = x0 + BK;
      load_swizzled<T, BK, D, THREADS>(ks + (stage ^ 1) * KT, a.k + x1 * a.k_stride, a.k_stride,
                                       a.x_len - x1, tid);
      load_swizzled<T, BK, DV, THREADS>(vs + (stage ^ 1) * VT, a.v + x1 * a.v_stride,
                                        a.v_stride, a.x_len - x1, tid);
    }
    cp_async_commit();
    const unsigned char* k_t = ks + stage * KT;
    const unsigned char* v_t = vs + stage * VT;
    // S and dP: the warpgroup's 64 queries by the step's 64 keys (element i: query row
    // qr0 + g + 8 (i / 2 % 2), key column 8 (i / 4) + 2 t + i % 2)
    float s[BK / 2], dp[BK / 2];
    scores_and_grads<T, D, DV, BQ, BK>(s, dp, qs, dos, 64 * wg, k_t, v_t);
    const bool cut = VARLEN || q0 + BQ > a.q_len || x0 + BK > a.x_len ||
                     (MASKED && (x0 + BK - 1 > q0 + hi || x0 < q0 + BQ - 1 + lo));
    unsigned dsr[BK / 4];
#pragma unroll
    for (int i = 0; i < BK / 2; ++i) {
      const int r = g + 8 * ((i / 2) % 2), h = (i / 2) % 2;
      const int query = q0 + qr0 + r, key = x0 + 8 * (i / 4) + 2 * t + i % 2;
      float sv = 0.0f;
      float p = p_of(s[i], sv, l2[h], sc, a.scale, a.scale_log2, query, key);
      if (cut && (dropped_pair<MASKED>(lo, hi, a.q_len, a.x_len, query, key) ||
                  (VARLEN && spans.dropped(r, key))))
        p = 0.0f;
      if (!SC::kIdentity) p *= sc.grad(sv, 1.0f, query, key);  // linear in dM: its factor
      s[i] = p * (dp[i] - d2[h]);
    }
#pragma unroll
    for (int i = 0; i < BK / 4; ++i) dsr[i] = Mma<T>::pack(s[2 * i], s[2 * i + 1]);
    // dQ += dS K: the keys are k, 16 a wgmma
    wgmma_fence_operands<D / 2>(dq);
    wgmma_fence();
    add_from_registers<T, D, BK>(dq, dsr, k_t);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands<D / 2>(dq);
  }
  store_accumulator<T, D>(dq_out + (long long)q0 * dq_stride, dq_stride, dq, 64 * wg,
                          a.q_len - q0, grad_scale, w, g, t);
}

}  // namespace attn
}  // namespace ncdc

#endif  // NCDC_ATTENTION_BACKWARD_HOPPER_CUH
