// Fused attention backward on tensor cores, in FlashAttention-2 order (Dao 2023,
// arXiv:2307.08691, Algorithm 2): one block per BX keys of one (batch..., head) slice, one
// warp per 16 of them. The warp keeps its keys' dK and dV accumulators (fp32) while the
// queries stream BQ at a time through a 2-stage cp.async ring (the Q and dO tiles, the row
// log-sum-exp L and D = sum(dO * O)); with grouped-query heads, the queries of every head
// that shares the slice's K and V, one head after the other, so dK and dV sum over the
// group in registers. For each tile that sees some of its keys:
//
//   S^T  = K Q^T          keys as rows: the warp's 16 keys are the mma's m
//   P^T  = exp(S^T s - L) 0 where the band drops a pair (or past the tensors' ends)
//   dV  += P^T dO         P^T straight from the S^T accumulators as the A operand
//   dP^T = V dO^T
//   dS^T = P^T (dP^T - D)
//   dK  += dS^T Q
//   dQ  += dS K           dS^T through shared memory (read back transposed by ldmatrix);
//                         the block's share added into an fp32 workspace with atomics
//
// and writes dK (times the gradient's scale) and dV; `write_scaled` then turns the summed dQ
// into the output. Without DQ_ATOMIC the kernel leaves dQ to `dq_by_queries`, a second pass
// in query order that adds no atomics (the same bits every run). A score path's functor
// (`sc`) gives P from S and dS from dM; a varlen mask's spans drop the pairs of two
// sequences. Layouts as ncdc_attention.cuh's: rows contiguous along the head (16-byte
// chunks, swizzled or padded to an odd pitch); dS^T is a tile of BQ / 8 chunks per key row.
// On sm_90a, ncdc_attention_backward_hopper.cuh runs the same order on wgmma.
#pragma once
#ifndef NCDC_ATTENTION_BACKWARD_CUH
#define NCDC_ATTENTION_BACKWARD_CUH

#include "ncdc_attention.cuh"

namespace ncdc {
namespace attn {

// One (batch..., head) slice of the backward's tensors; row strides in elements.
template <class T>
struct BackwardSlice {
  const T* q;
  const T* k;
  const T* v;
  const T* dout;
  const float* lse;   // each query's log-sum-exp of its logits (natural log)
  const float* dvec;  // each query's D = sum over its head of dO * O
  long long q_stride = 0, k_stride = 0, v_stride = 0, do_stride = 0;
  int q_len = 0, x_len = 0;
  float scale_log2 = 0.0f;                        // the logits' scale times log2(e)
  float scale = 0.0f;                             // the logits' scale
  long long lo = -kUnbounded, hi = kUnbounded;    // query i sees keys i + lo <= j <= i + hi
  // Grouped-query heads: `heads` of Q (and dO, L, D) share this slice's K and V, each
  // `q_head` (`do_head`, `l_head`, `d_head`) elements after the one before
  int heads = 1;
  long long q_head = 0, do_head = 0, l_head = 0, d_head = 0;
  // A varlen mask: keys at or past x_end dropped (padded sequences), and with packed ones
  // (`seg`: seg_n lengths, int32) a query sees only the keys of its own sequence
  int x_end = 0;
  const int* seg = nullptr;
  int seg_n = 0;
};

// [s0, s1): the packed sequence that holds position `pos` (s0 = s1 = the end of the last
// one for a position past them all: it sees nothing, and nothing sees it).
NCDC_DEVICE void sequence_of(const int* seg, int seg_n, long long pos, long long& s0,
                             long long& s1) {
  long long start = 0;
  s0 = -1;
#pragma unroll 1
  for (int s = 0; s < seg_n; ++s) {
    const int len = ld_global(seg + s);
    const long long end = start + (len > 0 ? len : 0);
    if (pos >= start && pos < end) s0 = start, s1 = end;
    start = end;
  }
  if (s0 < 0) s0 = start, s1 = start;
}

// What a varlen mask keeps of each row of a block's tile (in shared memory, [start, end) a
// row, filled once by `fill_spans`): the positions along the other axis (queries for a key
// row, keys for a query row); `row` is a warp's own, from 0 at `span`. A kernel without one
// never reads it.
struct RowSpans {
  const int* span = nullptr;

  NCDC_DEVICE bool dropped(int row, int pos) const {
    return pos < ld_shared(span + 2 * row) || pos >= ld_shared(span + 2 * row + 1);
  }
};

// The spans of rows [p0, p0 + ROWS): for keys (KEYS), a padded key sees every query and none
// past x_end, a packed key the queries of its sequence; for queries, the keys before x_end,
// of its sequence where they are packed.
template <bool KEYS, int ROWS, int THREADS, class T>
NCDC_DEVICE void fill_spans(int* span, const BackwardSlice<T>& a, int p0, int tid) {
  for (int r = tid; r < ROWS; r += THREADS) {
    const int pos = p0 + r;
    long long s0 = 0, s1 = KEYS ? a.q_len : a.x_end;
    if (a.seg != nullptr) sequence_of(a.seg, a.seg_n, pos, s0, s1);
    span[2 * r] = int(s0);
    span[2 * r + 1] = KEYS ? (pos < a.x_end ? int(lmin(s1, a.q_len)) : 0) : int(lmin(s1, a.x_end));
  }
}

// The tiles [first, last] along one axis that a varlen mask leaves the block's positions
// [p0, p1] along the other: with packed sequences, those of the sequences they lie in.
template <class T>
NCDC_DEVICE void varlen_range(const BackwardSlice<T>& a, int p0, int p1, long long& first,
                              long long& last) {
  if (a.seg == nullptr) return;
  long long s0, s1, t0, t1;
  sequence_of(a.seg, a.seg_n, p0, s0, s1);
  sequence_of(a.seg, a.seg_n, p1, t0, t1);
  first = lmax(first, s0);
  last = lmin(last, t1 - 1);
}

// Key j is dropped for query i: outside the band (MASKED; lo and hi clamped to ints, see
// `band32`), or past either tensor's end.
template <bool MASKED>
NCDC_DEVICE bool dropped_pair(int lo, int hi, int q_len, int x_len, int i, int j) {
  if (i >= q_len || j >= x_len) return true;
  return MASKED && (j > i + hi || j < i + lo);
}

// A band's bound clamped to [-(q_len + x_len + 1), q_len + x_len + 1]: the same answers for
// every pair of the slice, in 32-bit arithmetic (the sizes are below 2^30 each).
NCDC_DEVICE int band32(long long v, int q_len, int x_len) {
  const long long m = q_len + 1ll + x_len;
  return int(v < -m ? -m : v > m ? m : v);
}

// The tiles of TILE positions along the other axis that some row of a block's [p0, p0 +
// ROWS) sees, as [tile0, tile0 + tiles): with KEYS the rows are keys and the tiles queries
// (j <= i + hi and j >= i + lo), else the rows are queries and the tiles keys; under a varlen
// mask only those of the rows' sequences (none for padded keys), and each row's span filled
// into `span` (read after a barrier).
template <bool KEYS, int ROWS, int TILE, bool MASKED, bool VARLEN, int THREADS, class T>
NCDC_DEVICE void tile_range(const BackwardSlice<T>& a, int p0, int* span, int tid, int& tile0,
                            int& tiles) {
  const int p1 = imin(p0 + ROWS, KEYS ? a.x_len : a.q_len) - 1;
  long long first, last;
  if (KEYS) {
    first = MASKED ? lmax(0, p0 - a.hi) : 0;
    last = MASKED ? lmin(a.q_len - 1ll, p1 - a.lo) : a.q_len - 1ll;
  } else {
    const int lo = band32(a.lo, a.q_len, a.x_len), hi = band32(a.hi, a.q_len, a.x_len);
    first = MASKED ? lmax(0, p0 + (long long)lo) : 0;
    last = MASKED ? lmin(a.x_len - 1ll, p1 + (long long)hi) : a.x_len - 1ll;
  }
  if (VARLEN) {
    if (KEYS && p0 >= a.x_end) last = -1;  // padding: no query sees these keys
    if (!KEYS) last = lmin(last, a.x_end - 1ll);
    varlen_range(a, p0, p1, first, last);
    fill_spans<KEYS, ROWS, THREADS>(span, a, p0, tid);
  }
  tile0 = first > last ? 0 : int(first / TILE);
  tiles = first > last ? 0 : int(last / TILE) + 1 - tile0;
}

// L and D of query rows `row` and `row` + 8 (0 past the queries' end).
template <class T>
NCDC_DEVICE void row_stats(const BackwardSlice<T>& a, int row, float (&l2)[2], float (&d2)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const bool ok = row + 8 * h < a.q_len;
    l2[h] = ok ? ld_global(a.lse + row + 8 * h) : 0.0f;
    d2[h] = ok ? ld_global(a.dvec + row + 8 * h) : 0.0f;
  }
}

// P from one logit of the accumulator: 2^(acc scale_log2 - L log2 e); with a score path
// (SC not the identity) 2^((sc(s) - L) log2 e) of the scaled logit s = acc scale, which is
// kept in `s` for the gradient, and 0 where the path puts -inf (a rule's dropped pair).
template <class SC>
NCDC_DEVICE float p_of(float acc, float& s, float lse, const SC& sc, float scale,
                       float scale_log2, int i, int j) {
  if constexpr (SC::kIdentity) {
    return exp2_fast(fmaf(acc, scale_log2, -kLog2e * lse));
  } else {
    s = acc * scale;
    const float m = sc(s, i, j);
    return m == neg_inf() ? 0.0f : exp2_fast((m - lse) * kLog2e);
  }
}

// P^T from S^T (through the score path `sc`), 0 for a dropped pair where CHECK (a tile that
// the band or a tensor's end cuts; the others take no test at all); the scaled logits in
// `s` where the path needs them for its gradient.
template <bool CHECK, bool MASKED, bool VARLEN, int BQ, class SC>
NCDC_DEVICE void scores_to_p(float (&p)[BQ / 8][4], float (&s)[BQ / 8][4], const SC& sc,
                             const float* l_t, float scale, float scale_log2, int lo, int hi,
                             int q_len, int x_len, const RowSpans& spans, int q0, int key_row0,
                             int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int n = 0; n < BQ / 8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int col = 8 * n + 2 * t + (i & 1), key = key_row0 + g + 8 * (i >> 1);
      const float v = p_of(p[n][i], s[n][i], l_t[col], sc, scale, scale_log2, q0 + col, key);
      p[n][i] = CHECK && (dropped_pair<MASKED>(lo, hi, q_len, x_len, q0 + col, key) ||
                          (VARLEN && spans.dropped(g + 8 * (i >> 1), q0 + col))) ? 0.0f : v;
    }
}

// Every value of a warp's fp32 accumulator fragments set to 0.
template <int N>
NCDC_DEVICE void zero_fragments(float (&acc)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[n][i] = 0.0f;
}

// A 16-key by N tile of S^T = K_w X^T (X: a tile of rows in shared memory, N of them from row
// 0, HC chunks of the head per row) for the warp's keys at row kr0 of a tile of HC chunks.
template <class T, int H, int N>
NCDC_DEVICE void keys_by_rows(float (&acc)[N / 8][4], const T* keys, int kr0, const T* rows,
                              int lane) {
  constexpr int HC = H / 8;
  zero_fragments(acc);
  const int arow = kr0 + (lane & 15), ahalf = lane >> 4;
  const int brow = ((lane >> 4) << 3) + (lane & 7), bhalf = (lane >> 3) & 1;
#pragma unroll
  for (int kk = 0; kk < H / 16; ++kk) {
    uint32_t a[4];
    ldmatrix_x4(a, keys + swizzle<HC>(arow, 2 * kk + ahalf));
#pragma unroll
    for (int np = 0; np < N / 16; ++np) {
      uint32_t f[4];
      ldmatrix_x4(f, rows + swizzle<HC>(brow + 16 * np, 2 * kk + bhalf));
      Mma<T>::run(acc[2 * np], a, f);
      Mma<T>::run(acc[2 * np + 1], a, f + 2);
    }
  }
}

// acc (16 keys x H) += A (16 keys x N, C fragments of fp32 as packed 16-bit A fragments)
// times X (N rows of a tile of H / 8 chunks a row, read transposed: k = the rows).
template <class T, int H, int N>
NCDC_DEVICE void add_product(float (&acc)[H / 8][4], const float (&a32)[N / 8][4], const T* rows,
                             int lane) {
  const int vrow = (((lane >> 3) & 1) << 3) + (lane & 7), vhalf = lane >> 4;
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk) {
    uint32_t a[4];
    a[0] = Mma<T>::pack(a32[2 * kk][0], a32[2 * kk][1]);
    a[1] = Mma<T>::pack(a32[2 * kk][2], a32[2 * kk][3]);
    a[2] = Mma<T>::pack(a32[2 * kk + 1][0], a32[2 * kk + 1][1]);
    a[3] = Mma<T>::pack(a32[2 * kk + 1][2], a32[2 * kk + 1][3]);
#pragma unroll
    for (int np = 0; np < H / 16; ++np) {
      uint32_t f[4];
      ldmatrix_x4_trans(f, rows + swizzle<H / 8>(vrow + 16 * kk, 2 * np + vhalf));
      Mma<T>::run(acc[2 * np], a, f);
      Mma<T>::run(acc[2 * np + 1], a, f + 2);
    }
  }
}

// A warp's 16 key rows of an fp32 accumulator (16 x H), times `scale`, into row-major global
// rows of type T (rows at or past `valid` not written).
template <class T, int H>
NCDC_DEVICE void store_rows(T* out, long long stride, const float (&acc)[H / 8][4], int row0,
                            int valid, float scale, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    if (row >= valid) continue;
#pragma unroll
    for (int n = 0; n < H / 8; ++n) {
      const uint32_t two = Mma<T>::pack(acc[n][2 * h] * scale, acc[n][2 * h + 1] * scale);
      st_global(reinterpret_cast<uint32_t*>(out + row * stride + 8 * n + 2 * t), two);
    }
  }
}

// Queries [q0, q0 + BQ) of head `head` of Q and dO (rows at or past q_len zero-filled) and
// their L and D into one stage of the ring (L and D of rows past q_len: zeros, never read).
template <class T, int D, int DV, int BQ, int THREADS>
NCDC_DEVICE void load_queries(T* qs, T* dos, float* ls, float* ds, const BackwardSlice<T>& a,
                              int head, int q0, int tid) {
  const T* q = a.q + head * a.q_head;
  const T* dout = a.dout + head * a.do_head;
  const float* lse = a.lse + head * a.l_head;
  const float* dvec = a.dvec + head * a.d_head;
  load_tile<T, BQ, D, D / 8, THREADS>(qs, q + q0 * a.q_stride, a.q_stride, a.q_len - q0, tid);
  load_tile<T, BQ, DV, DV / 8, THREADS>(dos, dout + q0 * a.do_stride, a.do_stride, a.q_len - q0,
                                        tid);
  for (int r = tid; r < BQ; r += THREADS) {
    const bool ok = q0 + r < a.q_len;
    cp_async_4_zfill(ls + r, ok ? lse + q0 + r : lse, ok ? 4 : 0);
    cp_async_4_zfill(ds + r, ok ? dvec + q0 + r : dvec, ok ? 4 : 0);
  }
}

template <class T, int D, int DV, int BX, int BQ, bool MASKED, bool VARLEN, bool DQ_ATOMIC,
          class SC>
NCDC_DEVICE void attention_backward(const BackwardSlice<T>& a, T* dk_out, long long dk_stride,
                                    T* dv_out, long long dv_stride, float* dq_acc, int key_tile,
                                    float grad_scale, const SC& sc) {
  constexpr int W = BX / 16, THREADS = 32 * W, QB = BQ / 16, CP = W / QB, DQ = D / CP;
  static_assert(BX % 16 == 0 && BQ % 16 == 0 && W % QB == 0 && DQ % 16 == 0,
                "whole 16-row mma blocks; the warps split dQ's columns evenly");
  constexpr int KT = BX * row_chunks<D / 8>() * 8, VT = BX * row_chunks<DV / 8>() * 8;
  constexpr int QT = BQ * row_chunks<D / 8>() * 8, OT = BQ * row_chunks<DV / 8>() * 8;
  constexpr int ST = DQ_ATOMIC ? BX * row_chunks<BQ / 8>() * 8 : 0;
  T* ks = dynamic_smem<T>();
  T* vs = ks + KT;
  T* qs = vs + VT;        // [2][QT]
  T* dos = qs + 2 * QT;   // [2][OT]
  T* dst = dos + 2 * OT;  // dS^T: [BX keys][BQ queries] (DQ_ATOMIC only)
  float* ls = reinterpret_cast<float*>(dst + ST);  // [2][BQ] L
  float* dvs = ls + 2 * BQ;                        // [2][BQ] D
  int* span = reinterpret_cast<int*>(dvs + 2 * BQ);  // [BX][2] a varlen mask's (VARLEN only)
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int x0 = key_tile * BX;
  const int kr0 = 16 * warp;  // the warp's first key row in the tile
  const int lo = band32(a.lo, a.q_len, a.x_len), hi = band32(a.hi, a.q_len, a.x_len);

  int tile0, tiles;  // the query tiles that see some key of the block
  tile_range<true, BX, BQ, MASKED, VARLEN, THREADS>(a, x0, span, tid, tile0, tiles);
  const RowSpans spans{span + 2 * kr0};  // a varlen mask's queries for each of the warp's keys

  float dk[D / 8][4], dv[DV / 8][4];
  zero_fragments(dk);
  zero_fragments(dv);

  if (tiles > 0) {
    load_tile<T, BX, D, D / 8, THREADS>(ks, a.k + x0 * a.k_stride, a.k_stride, a.x_len - x0, tid);
    load_tile<T, BX, DV, DV / 8, THREADS>(vs, a.v + x0 * a.v_stride, a.v_stride, a.x_len - x0,
                                          tid);
    load_queries<T, D, DV, BQ, THREADS>(qs, dos, ls, dvs, a, 0, tile0 * BQ, tid);
    cp_async_commit();
  }
  // each head of a group in turn (one without grouped-query heads), its query tiles in order
  const int steps = tiles * a.heads;
  int next_head = 0, next_tile = 0;  // of the step after this one (no division a step)
  for (int it = 0; it < steps; ++it) {
    const int stage = it & 1, head = next_head, q0 = (tile0 + next_tile) * BQ;
    if (++next_tile == tiles) {
      next_tile = 0;
      ++next_head;
    }
    // tile `it` has landed; every warp is done with the stage the next tile fills
    cp_async_wait_all();
    __syncthreads();
    if (it + 1 < steps)
      load_queries<T, D, DV, BQ, THREADS>(qs + (stage ^ 1) * QT, dos + (stage ^ 1) * OT,
                                          ls + (stage ^ 1) * BQ, dvs + (stage ^ 1) * BQ, a,
                                          next_head, (tile0 + next_tile) * BQ, tid);
    cp_async_commit();
    const T* q_t = qs + stage * QT;
    const T* do_t = dos + stage * OT;
    const float* l_t = ls + stage * BQ;
    const float* d_t = dvs + stage * BQ;

    // P^T: the warp's 16 keys by the tile's BQ queries (element i of tile n: key row
    // kr0 + g + 8 (i / 2), query column 8 n + 2 t + i % 2)
    float p[BQ / 8][4], s[BQ / 8][4];
    keys_by_rows<T, D, BQ>(p, ks, kr0, q_t, lane);
    // a tile whose every pair the band keeps and the tensors hold (most of them) is not tested
    const bool cut = VARLEN || q0 + BQ > a.q_len || x0 + BX > a.x_len ||
                     (MASKED && (x0 + BX - 1 > q0 + hi || x0 < q0 + BQ - 1 + lo));
    if (cut)
      scores_to_p<true, MASKED, VARLEN, BQ>(p, s, sc, l_t, a.scale, a.scale_log2, lo, hi,
                                            a.q_len, a.x_len, spans, q0, x0 + kr0, lane);
    else
      scores_to_p<false, MASKED, VARLEN, BQ>(p, s, sc, l_t, a.scale, a.scale_log2, lo, hi,
                                             a.q_len, a.x_len, spans, q0, x0 + kr0, lane);
    add_product<T, DV, BQ>(dv, p, do_t, lane);  // dV += P^T dO
    float ds[BQ / 8][4];
    keys_by_rows<T, DV, BQ>(ds, vs, kr0, do_t, lane);  // dP^T = V dO^T
#pragma unroll
    for (int n = 0; n < BQ / 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int col = 8 * n + 2 * t + (i & 1);
        // dS^T = P^T (dP^T - D), through the score path's gradient
        ds[n][i] = sc.grad(s[n][i], p[n][i] * (ds[n][i] - d_t[col]), q0 + col,
                           x0 + kr0 + g + 8 * (i >> 1));
      }
    add_product<T, D, BQ>(dk, ds, q_t, lane);  // dK += dS^T Q
    if constexpr (!DQ_ATOMIC) continue;  // dQ by the query-major pass (dq_by_queries)
    // dS^T into shared memory, 16-bit as the tensor cores take it
#pragma unroll
    for (int n = 0; n < BQ / 8; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = kr0 + g + 8 * h;
        smem_store_u32(dst + swizzle<BQ / 8>(row, n) + 2 * t,
                       Mma<T>::pack(ds[n][2 * h], ds[n][2 * h + 1]));
      }
    __syncthreads();
    // dQ (BQ x D) += dS K: warp w takes queries 16 (w % QB).. and head columns DQ (w / QB)..
    {
      const int qb = warp % QB, c0 = DQ * (warp / QB);
      float dq[DQ / 8][4];
      zero_fragments(dq);
      // A = dS (16 queries x 16 keys) from dS^T, transposed: matrix m of lane l covers keys
      // 8 (m / 2).. and queries 8 (m % 2)..; B = K (16 keys x 16 columns), transposed
      const int m = lane >> 3, r = lane & 7;
      const int krow = (((lane >> 3) & 1) << 3) + (lane & 7), khalf = lane >> 4;
#pragma unroll
      for (int kk = 0; kk < BX / 16; ++kk) {
        uint32_t af[4];
        ldmatrix_x4_trans(af, dst + swizzle<BQ / 8>(16 * kk + ((m >> 1) << 3) + r, 2 * qb + (m & 1)));
#pragma unroll
        for (int np = 0; np < DQ / 16; ++np) {
          uint32_t f[4];
          ldmatrix_x4_trans(f, ks + swizzle<D / 8>(krow + 16 * kk, c0 / 8 + 2 * np + khalf));
          Mma<T>::run(dq[2 * np], af, f);
          Mma<T>::run(dq[2 * np + 1], af, f + 2);
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = q0 + 16 * qb + g + 8 * h;
        if (row >= a.q_len) continue;
        float* dst_row = dq_acc + ((long long)head * a.q_len + row) * D + c0 + 2 * t;
#pragma unroll
        for (int n = 0; n < DQ / 8; ++n) {
          atomicAdd(dst_row + 8 * n, dq[n][2 * h]);
          atomicAdd(dst_row + 8 * n + 1, dq[n][2 * h + 1]);
        }
      }
    }
  }
  store_rows<T, D>(dk_out + (long long)x0 * dk_stride, dk_stride, dk, kr0, a.x_len - x0,
                   grad_scale, lane);
  store_rows<T, DV>(dv_out + (long long)x0 * dv_stride, dv_stride, dv, kr0, a.x_len - x0, 1.0f,
                    lane);
}

// P from S for rows of queries (through the score path `sc`, as `p_of`) with the row's L
// (rows g and g + 8 of the warp's 16: l2[0], l2[1]), 0 for a dropped pair where CHECK.
template <bool CHECK, bool MASKED, bool VARLEN, int BX, class SC>
NCDC_DEVICE void scores_to_p_rows(float (&p)[BX / 8][4], float (&s)[BX / 8][4], const SC& sc,
                                  const float (&l2)[2], float scale, float scale_log2, int lo,
                                  int hi, int q_len, int x_len, const RowSpans& spans,
                                  int query_row0, int x0, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int n = 0; n < BX / 8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int query = query_row0 + g + 8 * (i >> 1), key = x0 + 8 * n + 2 * t + (i & 1);
      const float v = p_of(p[n][i], s[n][i], l2[i >> 1], sc, scale, scale_log2, query, key);
      p[n][i] = CHECK && (dropped_pair<MASKED>(lo, hi, q_len, x_len, query, key) ||
                          (VARLEN && spans.dropped(g + 8 * (i >> 1), key))) ? 0.0f : v;
    }
}

// Keys [x0, x0 + BX) of K and V (rows at or past x_len zero-filled) into one stage.
template <class T, int D, int DV, int BX, int THREADS>
NCDC_DEVICE void load_keys(T* ks, T* vs, const BackwardSlice<T>& a, int x0, int tid) {
  load_tile<T, BX, D, D / 8, THREADS>(ks, a.k + x0 * a.k_stride, a.k_stride, a.x_len - x0, tid);
  load_tile<T, BX, DV, DV / 8, THREADS>(vs, a.v + x0 * a.v_stride, a.v_stride, a.x_len - x0, tid);
}

// dQ without atomics: a second pass, one block per BQ queries (one warp per 16 of them)
// holding their dQ (fp32) while the keys stream BX at a time through a 2-stage cp.async ring
// (only the tiles the band leaves them), recomputing for each
//
//   S  = Q K^T,  P = exp(S s - L),  dP = dO V^T,  dS = P (dP - D),  dQ += dS K
//
// and writing dQ times the gradient's scale. Each value is summed by one thread in key order:
// the same bits on every run (the deterministic mode), at the price of S and dP computed again.
template <class T, int D, int DV, int BQ, int BX, bool MASKED, bool VARLEN, class SC>
NCDC_DEVICE void dq_by_queries(const BackwardSlice<T>& a, T* dq_out, long long dq_stride,
                               int query_tile, float grad_scale, const SC& sc) {
  constexpr int W = BQ / 16, THREADS = 32 * W;
  static_assert(BQ % 16 == 0 && BX % 16 == 0, "whole 16-row mma blocks");
  constexpr int QT = BQ * row_chunks<D / 8>() * 8, OT = BQ * row_chunks<DV / 8>() * 8;
  constexpr int KT = BX * row_chunks<D / 8>() * 8, VT = BX * row_chunks<DV / 8>() * 8;
  T* qs = dynamic_smem<T>();
  T* dos = qs + QT;
  T* ks = dos + OT;      // [2][KT]
  T* vs = ks + 2 * KT;   // [2][VT]
  int* span = reinterpret_cast<int*>(vs + 2 * VT);  // [BQ][2] a varlen mask's (VARLEN only)
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2;
  const int q0 = query_tile * BQ, qr0 = 16 * warp;
  const int lo = band32(a.lo, a.q_len, a.x_len), hi = band32(a.hi, a.q_len, a.x_len);
  int tile0, tiles;  // the key tiles some query of the block sees
  tile_range<false, BQ, BX, MASKED, VARLEN, THREADS>(a, q0, span, tid, tile0, tiles);
  const RowSpans spans{span + 2 * qr0};  // a varlen mask's keys for each of the warp's queries

  float l2[2], d2[2];  // the warp's rows g and g + 8: L and D
  row_stats(a, q0 + qr0 + g, l2, d2);
  float dq[D / 8][4];
  zero_fragments(dq);
  if (tiles > 0) {
    load_tile<T, BQ, D, D / 8, THREADS>(qs, a.q + q0 * a.q_stride, a.q_stride, a.q_len - q0, tid);
    load_tile<T, BQ, DV, DV / 8, THREADS>(dos, a.dout + q0 * a.do_stride, a.do_stride,
                                          a.q_len - q0, tid);
    load_keys<T, D, DV, BX, THREADS>(ks, vs, a, tile0 * BX, tid);
    cp_async_commit();
  }
  for (int it = 0; it < tiles; ++it) {
    const int stage = it & 1, x0 = (tile0 + it) * BX;
    cp_async_wait_all();  // tile `it` has landed; every warp is done with the other stage
    __syncthreads();
    if (it + 1 < tiles)
      load_keys<T, D, DV, BX, THREADS>(ks + (stage ^ 1) * KT, vs + (stage ^ 1) * VT, a, x0 + BX,
                                       tid);
    cp_async_commit();
    const T* k_t = ks + stage * KT;
    const T* v_t = vs + stage * VT;
    float p[BX / 8][4], s[BX / 8][4];
    keys_by_rows<T, D, BX>(p, qs, qr0, k_t, lane);  // S: the warp's 16 queries by BX keys
    const bool cut = VARLEN || q0 + BQ > a.q_len || x0 + BX > a.x_len ||
                     (MASKED && (x0 + BX - 1 > q0 + hi || x0 < q0 + BQ - 1 + lo));
    if (cut)
      scores_to_p_rows<true, MASKED, VARLEN, BX>(p, s, sc, l2, a.scale, a.scale_log2, lo, hi,
                                                 a.q_len, a.x_len, spans, q0 + qr0, x0, lane);
    else
      scores_to_p_rows<false, MASKED, VARLEN, BX>(p, s, sc, l2, a.scale, a.scale_log2, lo, hi,
                                                  a.q_len, a.x_len, spans, q0 + qr0, x0, lane);
    float ds[BX / 8][4];
    keys_by_rows<T, DV, BX>(ds, dos, qr0, v_t, lane);  // dP = dO V^T
#pragma unroll
    for (int n = 0; n < BX / 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i)  // dS = P (dP - D), through the score path's gradient
        ds[n][i] = sc.grad(s[n][i], p[n][i] * (ds[n][i] - d2[i >> 1]),
                           q0 + qr0 + g + 8 * (i >> 1), x0 + 8 * n + 2 * (lane & 3) + (i & 1));
    add_product<T, D, BX>(dq, ds, k_t, lane);  // dQ += dS K
  }
  store_rows<T, D>(dq_out + (long long)q0 * dq_stride, dq_stride, dq, qr0, a.q_len - q0,
                   grad_scale, lane);
}

// dQ = scale x the fp32 sums, 4 values a thread (index `slot`) of a slice's q_len x H of them.
template <class T, int H>
NCDC_DEVICE void write_scaled(const float* acc, T* out, long long stride, long long n, float scale,
                              long long slot) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const long long i = slot * 4 + r;
    if (i >= n) return;
    const long long row = i / H, col = i % H;
    st_global(out + row * stride + col, T(ld_global(acc + i) * scale));
  }
}

}  // namespace attn
}  // namespace ncdc

#endif  // NCDC_ATTENTION_BACKWARD_CUH
