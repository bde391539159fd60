// Fused attention on tensor cores: the FlashAttention-2 forward pass and split-key decode.
//
// Both kernels share one warp-level step: 16 query rows (Q held in registers as mma A
// fragments) against a chunk of keys in shared memory. S = Q K^T with mma.m16n8k16, the
// online softmax in registers (running max m and sum l per row, base 2), then O += P V with
// P taken straight from the S accumulators: the C fragments of two 16x8 tiles are, element
// for element, the A fragment of one 16x16 tile.
//
// Layouts. Q, K, V and O rows are contiguous along the head axis (d, d_v): 16-byte chunks,
// C = head / 8 of them per row (C even: heads are multiples of 16). In shared memory a row
// of C chunks, C a multiple of 8, stores chunk c at c ^ (row % 8); any other C pads the row
// to C + 1 chunks, an odd pitch. Either way the 8 rows an ldmatrix phase reads fall in 8
// distinct groups of 4 banks (no bank conflicts), and so do the 8 chunks of a cp.async
// phase with the swizzle (the padded pitch costs at most a 2-way conflict at a row's end).
//
// Sizes: query and key counts are runtime ints (below 2^31 per (batch, head)); offsets
// into the tensors are 64-bit.
#pragma once
#ifndef NCDC_ATTENTION_CUH
#define NCDC_ATTENTION_CUH

namespace ncdc {
namespace attn {

constexpr float kLog2e = 1.4426950408889634f;

NCDC_DEVICE float neg_inf() { return __int_as_float(int(0xff800000u)); }
NCDC_DEVICE int imin(int a, int b) { return a < b ? a : b; }
NCDC_DEVICE int imax(int a, int b) { return a > b ? a : b; }
NCDC_DEVICE long long lmin(long long a, long long b) { return a < b ? a : b; }
NCDC_DEVICE long long lmax(long long a, long long b) { return a > b ? a : b; }

// 1 / l of a softmax sum, 0 for a row with no visible key. l >= 1 otherwise (the row's max
// adds 2^0), far inside __fdividef's range; an IEEE division would call a slow-path
// subroutine whose saved registers ptxas reports as spills.
NCDC_DEVICE float inverse_sum(float l) { return l > 0.0f ? __fdividef(1.0f, l) : 0.0f; }

// 2^x; 2^-inf = 0. One MUFU instruction on the GPU.
NCDC_DEVICE float exp2_fast(float x) {
#ifdef NCDC_GPU
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

// The mma and the register packing of one 16-bit input type.
template <class T>
struct Mma;
template <>
struct Mma<__nv_bfloat16> {
  static NCDC_DEVICE void run(float* acc, const uint32_t* a, const uint32_t* b) {
    mma_m16n8k16_bf16(acc, a, b, acc);
  }
  static NCDC_DEVICE uint32_t pack(float lo, float hi) { return pack_bf16x2(lo, hi); }
};
template <>
struct Mma<__half> {
  static NCDC_DEVICE void run(float* acc, const uint32_t* a, const uint32_t* b) {
    mma_m16n8k16_f16(acc, a, b, acc);
  }
  static NCDC_DEVICE uint32_t pack(float lo, float hi) { return pack_f16x2(lo, hi); }
};

// Chunks a shared-memory row of C chunks takes: C swizzled, or C + 1 (an odd pitch).
template <int C>
constexpr int row_chunks() {
  return C % 8 == 0 ? C : C + 1;
}

// Element offset of chunk `chunk` of row `row` in a shared tile of C chunks per row.
template <int C>
NCDC_DEVICE int swizzle(int row, int chunk) {
  static_assert(C % 2 == 0, "rows of whole 16-value mma steps (an even number of chunks)");
  if (C % 8 == 0) return row * C * 8 + ((chunk ^ (row & 7)) << 3);
  return (row * row_chunks<C>() + chunk) << 3;
}

// Shared-memory words read and written as plain 32- and 128-bit values.
NCDC_DEVICE void smem_store_u32(void* p, uint32_t v) {
#ifdef NCDC_GPU
  *reinterpret_cast<uint32_t*>(p) = v;
#else
  std::memcpy(p, &v, sizeof v);
#endif
}
NCDC_DEVICE uint4 smem_load_u128(const void* p) {
#ifdef NCDC_GPU
  return *reinterpret_cast<const uint4*>(p);
#else
  uint4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

// cp.async of rows [0, ROWS) x columns [0, COLS) of a row-major global tile into a
// swizzled shared tile with SC chunks per row; rows at or past `valid` are zero-filled and
// read nothing. Consecutive threads copy consecutive 16-byte chunks: coalesced.
template <class T, int ROWS, int COLS, int SC, int THREADS>
NCDC_DEVICE void load_tile(T* smem, const T* gmem, long long row_stride, int valid, int tid) {
  constexpr int C = COLS / 8;
  constexpr int TOTAL = ROWS * C;
#pragma unroll
  for (int i0 = 0; i0 < TOTAL; i0 += THREADS) {
    const int i = i0 + tid;
    if (TOTAL % THREADS == 0 || i < TOTAL) {
      const int row = i / C, chunk = i % C;
      const bool ok = row < valid;
      const T* src = ok ? gmem + row * row_stride + chunk * 8 : gmem;
      cp_async_16_zfill(smem + swizzle<SC>(row, chunk), src, ok ? 16 : 0);
    }
  }
}

// The running state of one warp's 16 query rows: this lane holds rows g and g + 8
// (g = lane / 4) of the output accumulator, their running max (base 2) and its partial
// running sum (the 4 lanes of a row sum different columns; reduced at the end).
template <int DV>
struct RowState {
  float o[DV / 8][4];
  float m[2];
  float l[2];
};

template <int DV>
NCDC_DEVICE void init_state(RowState<DV>& st) {
#pragma unroll
  for (int n = 0; n < DV / 8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) st.o[n][i] = 0.0f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    st.m[r] = neg_inf();
    st.l[r] = 0.0f;
  }
}

// The mma A fragments of a warp's 16 query rows (rows row0.. of a shared tile of SC chunks
// per row), one per 16 values of the head: held in registers (REG), or read from shared
// memory at each use, which frees D / 4 registers per thread for large heads.
template <class T, int D, int SC, bool REG>
struct QFragments;

template <class T, int D, int SC>
struct QFragments<T, D, SC, true> {
  uint32_t f[D / 16][4];
  NCDC_DEVICE QFragments(const T* qs, int row0, int lane) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      ldmatrix_x4(f[kk], qs + swizzle<SC>(row0 + (lane & 15), 2 * kk + (lane >> 4)));
  }
  NCDC_DEVICE void get(int kk, uint32_t (&a)[4]) const {
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = f[kk][i];
  }
};

template <class T, int D, int SC>
struct QFragments<T, D, SC, false> {
  const T* qs;
  int row, half;  // this lane's ldmatrix row, and its chunk within a 16-value step
  NCDC_DEVICE QFragments(const T* tile, int row0, int lane)
      : qs(tile), row(row0 + (lane & 15)), half(lane >> 4) {}
  NCDC_DEVICE void get(int kk, uint32_t (&a)[4]) const {
    ldmatrix_x4(a, qs + swizzle<SC>(row, 2 * kk + half));
  }
};

// Which keys a query sees: one interval of keys per query i, the intersection of a band
// i + lo <= j <= i + hi (causal and window masks; +-kUnbounded when there is none), the
// keys before x_end (the key axis, or a padded sequence's length) and, when sequences are
// packed, the keys of i's own sequence (sequence s takes [sum seg[:s], sum seg[:s+1]) of
// both axes; an index past the last sequence sees none). Both ends of the interval grow
// with i, so a tile of queries [i0, i1] sees only keys in [first(i0), last(i1)].
constexpr long long kUnbounded = 1ll << 40;

struct Visible {
  long long lo = -kUnbounded, hi = kUnbounded;
  int x_end = 0;
  const int* seg = nullptr;  // packed sequence lengths (int32), or none
  int seg_n = 0;
  int hi32 = 0;  // hi clamped to [-(q_len + 1), x_len]: i + hi32 stays an int (set_hi32)

  NCDC_DEVICE void set_hi32(int q_len, int x_len) { hi32 = int(lmax(lmin(hi, x_len), -(q_len + 1ll))); }

  // keys [first, last] of query i; last < first when it sees none
  NCDC_DEVICE void keys(int i, int& first, int& last) const {
    long long f = i + lo, l = i + hi;
    if (seg != nullptr) {
      long long start = 0, s0 = -1, s1 = -1;
#pragma unroll 1
      for (int s = 0; s < seg_n; ++s) {
        const int len = ld_global(seg + s);
        const long long end = start + (len > 0 ? len : 0);
        if (i >= start && i < end) s0 = start, s1 = end;
        start = end;
      }
      if (s0 < 0) s0 = start, s1 = start;  // past the last sequence: nothing, and monotone
      f = f > s0 ? f : s0;
      l = l < s1 - 1 ? l : s1 - 1;
    }
    f = f < 0 ? 0 : f > x_end ? x_end : f;
    l = l > x_end - 1 ? x_end - 1 : l < -1 ? -1 : l;
    first = int(f);
    last = int(l);
  }
};

// Visible::keys, with what the kernel's masks cannot do known at compile time: without a
// lower bound (BELOW) the first key is 0, and without an upper one (UPPER) the last is
// x_end - 1, so a plain or causal kernel keeps its limits as cheap as i + shift.
template <bool UPPER, bool BELOW>
NCDC_DEVICE void visible_keys(const Visible& v, int i, int& first, int& last) {
  if (BELOW) {
    v.keys(i, first, last);
    return;
  }
  first = 0;
  last = v.x_end - 1;
  if (UPPER) last = imin(last, i + v.hi32);  // below -1 when none: still "no key"
}

// The logits as the diagram transforms them before its masks: the identity, or a functor
// `float operator()(float s, int i, int j)` of the scaled logit s of query i and key j
// (biases, soft-capping, position terms) generated for the kernel.
struct PlainScores {
  static constexpr bool kIdentity = true;
  NCDC_DEVICE float operator()(float s, int, int) const { return s; }
};

// Masking of one step: key `j` is dropped for the lane's row r (query row[r]) when it lies
// outside [lower[r], limit[r]]. BELOW: some mask bounds the keys from below (a window, or
// packed sequences); without one, lower is 0 and never compared (fewer live registers).
template <bool BELOW>
struct KeyMask {
  bool any;  // some key of the step may be dropped (x tail, split end or a mask's edge)
  int key0;  // global index of the step's first key
  int lower[2];
  int limit[2];
  int row[2];

  template <bool UPPER>
  NCDC_DEVICE void rows(const Visible& vis, int row0, int end) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row[r] = row0 + 8 * r;
      visible_keys<UPPER, BELOW>(vis, row[r], lower[r], limit[r]);
      limit[r] = imin(limit[r], end - 1);
    }
  }
  NCDC_DEVICE bool dropped(int j, int r) const {
    return j > limit[r] || (BELOW && j < lower[r]);
  }
};

// S = Q K^T over NK keys (smem rows krow0.. of a swizzled K tile of D / 8 chunks per row),
// scaled to base 2 and masked, then the online-softmax update: on return s holds
// P = 2^(S - m), and o and l are rescaled to the new running max.
template <class T, int D, int DV, int NK, class QF, class Mask, class Scores>
NCDC_DEVICE void score_step(float (&s)[NK / 8][4], RowState<DV>& st, const QF& qf,
                            const T* ks, int krow0, const Mask& mask, float scale_log2,
                            const Scores& scores, int lane) {
  static_assert(NK % 16 == 0, "keys per warp step: a multiple of 16");
#pragma unroll
  for (int n = 0; n < NK / 8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) s[n][i] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4];
    qf.get(kk, a);
#pragma unroll
    for (int np = 0; np < NK / 16; ++np) {
      // matrices: keys +0..7 / +8..15 of the pair, d chunks 2kk / 2kk+1
      uint32_t b[4];
      const int row = krow0 + 16 * np + ((lane >> 4) << 3) + (lane & 7);
      ldmatrix_x4(b, ks + swizzle<D / 8>(row, 2 * kk + ((lane >> 3) & 1)));
      Mma<T>::run(s[2 * np], a, b);
      Mma<T>::run(s[2 * np + 1], a, b + 2);
    }
  }
  const int t = lane & 3;
  float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
  for (int n = 0; n < NK / 8; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float v;
      if (Scores::kIdentity)
        v = s[n][i] * scale_log2;
      else  // the functor sees natural-log logits: a bias adds to s, not to s log2(e)
        v = scores(s[n][i] * (scale_log2 * (1.0f / kLog2e)), mask.row[i >> 1],
                   mask.key0 + 8 * n + 2 * t + (i & 1)) * kLog2e;
      if (mask.any && mask.dropped(mask.key0 + 8 * n + 2 * t + (i & 1), i >> 1)) v = neg_inf();
      s[n][i] = v;
      mx[i >> 1] = fmaxf(mx[i >> 1], v);
    }
  }
  float base[2], alpha[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    const float m_new = fmaxf(st.m[r], mx[r]);
    // a row with every key so far masked keeps m = -inf: subtract 0 so no -inf - -inf
    base[r] = m_new == neg_inf() ? 0.0f : m_new;
    alpha[r] = exp2_fast(st.m[r] - base[r]);
    st.m[r] = m_new;
    st.l[r] *= alpha[r];
  }
#pragma unroll
  for (int n = 0; n < NK / 8; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float p = exp2_fast(s[n][i] - base[i >> 1]);
      s[n][i] = p;
      st.l[i >> 1] += p;
    }
  }
#pragma unroll
  for (int n = 0; n < DV / 8; ++n) {
    st.o[n][0] *= alpha[0];
    st.o[n][1] *= alpha[0];
    st.o[n][2] *= alpha[1];
    st.o[n][3] *= alpha[1];
  }
}

// O += P V over NK keys (smem rows krow0.. of a swizzled V tile of DV / 8 chunks per row).
template <class T, int DV, int NK>
NCDC_DEVICE void value_step(RowState<DV>& st, const float (&s)[NK / 8][4], const T* vs,
                            int krow0, int lane) {
#pragma unroll
  for (int kk = 0; kk < NK / 16; ++kk) {
    uint32_t a[4];
    a[0] = Mma<T>::pack(s[2 * kk][0], s[2 * kk][1]);
    a[1] = Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]);
    a[2] = Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = Mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
    for (int np = 0; np < DV / 16; ++np) {
      // matrices (transposed): keys +0..7 / +8..15, d_v chunks 2np / 2np+1
      uint32_t b[4];
      const int row = krow0 + 16 * kk + (((lane >> 3) & 1) << 3) + (lane & 7);
      ldmatrix_x4_trans(b, vs + swizzle<DV / 8>(row, 2 * np + (lane >> 4)));
      Mma<T>::run(st.o[2 * np], a, b);
      Mma<T>::run(st.o[2 * np + 1], a, b + 2);
    }
  }
}

// The running sums of a row, added over the 4 lanes that share it.
template <int DV>
NCDC_DEVICE void reduce_sums(RowState<DV>& st) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    st.l[r] += __shfl_xor_sync(0xffffffffu, st.l[r], 1);
    st.l[r] += __shfl_xor_sync(0xffffffffu, st.l[r], 2);
  }
}

// One (batch..., head) slice of the tensors; row strides in elements.
template <class T>
struct Slice {
  const T* q;
  const T* k;
  const T* v;
  long long q_stride, k_stride, v_stride;
  int q_len, x_len;
  float scale_log2;  // the logits' scale times log2(e)
  Visible vis;       // the keys each query sees (x_end is x_len without a length mask)
  float* lse;        // the log-sum-exp of each query's logits (natural log), or none
  long long lse_stride;
};

// The log-sum-exp of a row from its running max m (base 2) and sum l: (m + log2 l) ln 2,
// -inf for a row that saw no key (log 0).
NCDC_DEVICE float row_lse(float m, float l) {
  return l > 0.0f ? (m + log2f(l)) * 0.6931471805599453f : neg_inf();
}

// ---------------------------------------------------------------------------------------
// Fused forward: one block per (batch..., GQ queries), one warp per 16 of them; K and V
// stream through a 2-stage cp.async ring of SX keys. Query i sees the keys a.vis gives it
// (causal: j <= i + x_len - q_len); tiles no query of the block sees are never loaded, and
// a warp skips the math of tiles that are masked for all its rows.
//
// Shared memory (elements of T, rows of row_chunks<C>() chunks of 8): Q [GQ][QC] (reused
// to stage O), K [2][SX][D / 8], V [2][SX][DV / 8], QC = max(D, DV) / 8. QREG: Q's mma
// fragments in registers, else read from the Q tile at each step. BELOW: some query's keys
// are bounded from below (KeyMask). LSE: write each row's log-sum-exp to a.lse (a flag, so
// that a kernel without one keeps no pointer live through the key loop).
template <class T, int D, int DV, int GQ, int SX, bool QREG, bool UPPER, bool BELOW, bool LSE,
          class Scores>
NCDC_DEVICE void attention_forward(const Slice<T>& a, T* o, long long o_stride, int q_tile,
                                   const Scores& scores) {
  constexpr int W = GQ / 16, THREADS = 32 * W;
  constexpr int QC = (D > DV ? D : DV) / 8;
  constexpr int KT = SX * row_chunks<D / 8>() * 8, VT = SX * row_chunks<DV / 8>() * 8;
  static_assert(GQ % 16 == 0 && SX % 16 == 0, "tiles are multiples of 16");
  T* qs = dynamic_smem<T>();
  T* ks = qs + GQ * row_chunks<QC>() * 8;
  T* vs = ks + 2 * KT;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int q0 = q_tile * GQ;

  // key tiles [tile0, tile0 + tiles): those some query of the block sees
  int first_key, last_key, unused;
  visible_keys<UPPER, BELOW>(a.vis, q0, first_key, unused);
  visible_keys<UPPER, BELOW>(a.vis, imin(q0 + GQ, a.q_len) - 1, unused, last_key);
  const int tile0 = BELOW ? first_key / SX : 0;  // without a lower bound, first_key is 0
  const int tiles = last_key < first_key ? 0 : last_key / SX + 1 - tile0;
  const int wrow = q0 + 16 * warp;  // this warp's first query
  KeyMask<BELOW> mask;
  mask.template rows<UPPER>(a.vis, wrow + g, a.x_len);
  // the step needs no mask when its keys lie inside every row's interval. The last row is
  // not clipped to q_len: its interval only widens the test (rows past q_len are never
  // stored), and clipping it cost a causal d = 240 tile 26 registers and a spill.
  int top_first, top_last, bottom_first, bottom_last;  // of the warp's first and last rows
  visible_keys<UPPER, BELOW>(a.vis, wrow, top_first, top_last);
  visible_keys<UPPER, BELOW>(a.vis, wrow + 15, bottom_first, bottom_last);

  RowState<DV> st;
  init_state(st);
  if (tiles > 0) {
    const int k0 = tile0 * SX;
    load_tile<T, GQ, D, QC, THREADS>(qs, a.q + q0 * a.q_stride, a.q_stride, a.q_len - q0, tid);
    load_tile<T, SX, D, D / 8, THREADS>(ks, a.k + k0 * a.k_stride, a.k_stride, a.x_len - k0,
                                        tid);
    cp_async_commit();
    load_tile<T, SX, DV, DV / 8, THREADS>(vs, a.v + k0 * a.v_stride, a.v_stride, a.x_len - k0,
                                          tid);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const QFragments<T, D, QC, QREG> qf(qs, 16 * warp, lane);

    for (int j = 0; j < tiles; ++j) {
      const int stage = j & 1;
      const int key0 = (tile0 + j) * SX;
      const T* kt = ks + stage * KT;
      const T* vt = vs + stage * VT;
      // K_j has landed (V_j may still be in flight); every warp is done with stage^1
      cp_async_wait<1>();
      __syncthreads();
      if (j + 1 < tiles) {
        const int next = key0 + SX;
        load_tile<T, SX, D, D / 8, THREADS>(ks + (stage ^ 1) * KT, a.k + next * a.k_stride,
                                            a.k_stride, a.x_len - next, tid);
      }
      cp_async_commit();
      const bool active = key0 <= bottom_last && (!BELOW || key0 + SX - 1 >= top_first);
      mask.any = key0 + SX - 1 > top_last || (BELOW && key0 < bottom_first);
      mask.key0 = key0;
      float s[SX / 8][4];
      if (active) score_step<T, D, DV, SX>(s, st, qf, kt, 0, mask, a.scale_log2, scores, lane);
      // V_j has landed (K_{j+1} may still be in flight)
      cp_async_wait<1>();
      __syncthreads();
      if (j + 1 < tiles) {
        const int next = key0 + SX;
        load_tile<T, SX, DV, DV / 8, THREADS>(vs + (stage ^ 1) * VT, a.v + next * a.v_stride,
                                              a.v_stride, a.x_len - next, tid);
      }
      cp_async_commit();
      if (active) value_step<T, DV, SX>(st, s, vt, 0, lane);
    }
    cp_async_wait<0>();
  }

  // O / l, staged through this warp's own rows of the Q tile (no other warp reads them),
  // then stored as 16-byte rows; a row with no visible key has l = 0 and stores zeros.
  reduce_sums(st);
  if (LSE && t == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (mask.row[r] < a.q_len) st_global(a.lse + mask.row[r] * a.lse_stride, row_lse(st.m[r], st.l[r]));
  }
  __syncwarp();  // this warp's reads of its Q rows are done before O overwrites them
  T* os = qs + 16 * warp * row_chunks<QC>() * 8;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float inv = inverse_sum(st.l[r]);
#pragma unroll
    for (int n = 0; n < DV / 8; ++n)
      smem_store_u32(os + swizzle<QC>(g + 8 * r, n) + 2 * t,
                     Mma<T>::pack(st.o[n][2 * r] * inv, st.o[n][2 * r + 1] * inv));
  }
  __syncwarp();
  constexpr int VC = DV / 8;
#pragma unroll
  for (int i0 = 0; i0 < 16 * VC; i0 += 32) {
    const int i = i0 + lane, row = i / VC, chunk = i % VC;
    const int qi = wrow + row;
    if (qi < a.q_len)
      st_global_v16(o + qi * o_stride + chunk * 8, smem_load_u128(os + swizzle<QC>(row, chunk)));
  }
}

// ---------------------------------------------------------------------------------------
// Decode, pass 1: the q <= 16 queries of one (batch..., head), padded to one 16-row mma
// block, against keys [split * keys_per_split, +keys_per_split). The block streams SX keys
// per stage; warp w takes keys [w * SX / W, (w + 1) * SX / W) of each stage and keeps its
// own (m, l, O), written unnormalised to the fp32 workspace as partial split * W + w:
//   part_o[partial][q][DV], part_ml[partial][q][2] = (m in base 2, l).
// Shared memory (elements of T, rows as in attention_forward): Q [16][D / 8],
// K [2][SX][D / 8], V [2][SX][DV / 8].
template <class T, int D, int DV, int SX, int W, bool QREG, bool UPPER, bool BELOW, class Scores>
NCDC_DEVICE void decode_partial(const Slice<T>& a, int split, int keys_per_split, float* part_o,
                                float* part_ml, const Scores& scores) {
  constexpr int THREADS = 32 * W, NK = SX / W;
  constexpr int KT = SX * row_chunks<D / 8>() * 8, VT = SX * row_chunks<DV / 8>() * 8;
  static_assert(SX % (16 * W) == 0, "each warp takes a multiple of 16 keys per stage");
  T* qs = dynamic_smem<T>();
  T* ks = qs + 16 * row_chunks<D / 8>() * 8;
  T* vs = ks + 2 * KT;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;

  // this split's keys, cut to those some query sees (tiles stay aligned to the split)
  int first_key, last_key, top_last, bottom_first;
  visible_keys<UPPER, BELOW>(a.vis, 0, first_key, top_last);
  visible_keys<UPPER, BELOW>(a.vis, imin(16, a.q_len) - 1, bottom_first, last_key);
  const int split0 = split * keys_per_split;
  const int begin =
      BELOW && first_key > split0 ? split0 + (first_key - split0) / SX * SX : split0;
  const int end = imin(imin(a.x_len, split0 + keys_per_split), last_key + 1);
  const int tiles = end > begin ? (end - begin + SX - 1) / SX : 0;
  KeyMask<BELOW> mask;
  mask.template rows<UPPER>(a.vis, g, end);

  RowState<DV> st;
  init_state(st);
  if (tiles > 0) {
    load_tile<T, 16, D, D / 8, THREADS>(qs, a.q, a.q_stride, a.q_len, tid);
    load_tile<T, SX, D, D / 8, THREADS>(ks, a.k + begin * a.k_stride, a.k_stride, end - begin,
                                        tid);
    cp_async_commit();
    load_tile<T, SX, DV, DV / 8, THREADS>(vs, a.v + begin * a.v_stride, a.v_stride,
                                          end - begin, tid);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const QFragments<T, D, D / 8, QREG> qf(qs, 0, lane);

    for (int j = 0; j < tiles; ++j) {
      const int stage = j & 1;
      const int tile0 = begin + j * SX;
      const int key0 = tile0 + warp * NK;
      cp_async_wait<1>();
      __syncthreads();
      if (j + 1 < tiles) {
        const int next = tile0 + SX;
        load_tile<T, SX, D, D / 8, THREADS>(ks + (stage ^ 1) * KT, a.k + next * a.k_stride,
                                            a.k_stride, end - next, tid);
      }
      cp_async_commit();
      const bool active = key0 < end && (!BELOW || key0 + NK - 1 >= first_key);
      mask.any = key0 + NK - 1 > imin(top_last, end - 1) || (BELOW && key0 < bottom_first);
      mask.key0 = key0;
      float s[NK / 8][4];
      if (active)
        score_step<T, D, DV, NK>(s, st, qf, ks + stage * KT, warp * NK, mask, a.scale_log2,
                                 scores, lane);
      cp_async_wait<1>();
      __syncthreads();
      if (j + 1 < tiles) {
        const int next = tile0 + SX;
        load_tile<T, SX, DV, DV / 8, THREADS>(vs + (stage ^ 1) * VT, a.v + next * a.v_stride,
                                              a.v_stride, end - next, tid);
      }
      cp_async_commit();
      if (active) value_step<T, DV, NK>(st, s, vs + stage * VT, warp * NK, lane);
    }
    cp_async_wait<0>();
  }

  reduce_sums(st);
  const long long partial = (long long)split * W + warp;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    if (row < a.q_len) {
      const long long at = partial * a.q_len + row;
      float* po = part_o + at * DV + 2 * t;
#pragma unroll
      for (int n = 0; n < DV / 8; ++n)
        st_global(reinterpret_cast<float2*>(po + 8 * n), make_float2(st.o[n][2 * r], st.o[n][2 * r + 1]));
      if (t == 0) st_global(reinterpret_cast<float2*>(part_ml + 2 * at), make_float2(st.m[r], st.l[r]));
    }
  }
}

// Decode, pass 2: merge the partials of one (batch..., head):
//   m = max m_p, l = sum l_p 2^(m_p - m), O = sum O_p 2^(m_p - m) / l.
// Warps first turn (m_p, l_p) into weights 2^(m_p - m) / l in shared memory (a row with
// l = 0 gets weight 0 everywhere, so zeros), then lanes sum 4 columns each.
// The log-sum-exp of each row goes to lse (when not null). Shared memory: float
// [q_len][partials].
template <class T, int DV, int THREADS>
NCDC_DEVICE void decode_merge(const float* part_o, const float* part_ml, T* o, long long o_stride,
                              int q_len, int partials, float* lse, long long lse_stride) {
  float* weight = dynamic_smem<float>();
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  for (int row = warp; row < q_len; row += THREADS / 32) {
    float m = neg_inf();
#pragma unroll 1
    for (int p = lane; p < partials; p += 32)
      m = fmaxf(m, ld_global(part_ml + 2 * ((long long)p * q_len + row)));
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, k));
    const float base = m == neg_inf() ? 0.0f : m;
    float l = 0.0f;
#pragma unroll 1
    for (int p = lane; p < partials; p += 32) {
      const long long at = 2 * ((long long)p * q_len + row);
      const float w = exp2_fast(ld_global(part_ml + at) - base);
      weight[row * partials + p] = w;
      l += ld_global(part_ml + at + 1) * w;
    }
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) l += __shfl_xor_sync(0xffffffffu, l, k);
    if (lse != nullptr && lane == 0) st_global(lse + row * lse_stride, row_lse(m, l));
    const float inv = inverse_sum(l);
#pragma unroll 1
    for (int p = lane; p < partials; p += 32) weight[row * partials + p] *= inv;
  }
  __syncthreads();
  // a warp per row, 4 columns per lane (coalesced); no division by DV / 4 and no runtime
  // column loop, either of which made ptxas spill for heads that are not powers of two
  for (int row = warp; row < q_len; row += THREADS / 32) {
    float acc[(DV + 127) / 128][4] = {};
#pragma unroll 1
    for (int p = 0; p < partials; ++p) {
      const float w = weight[row * partials + p];
      const float* po = part_o + ((long long)p * q_len + row) * DV + 4 * lane;
#pragma unroll
      for (int cc = 0; cc < (DV + 127) / 128; ++cc) {
        if (DV % 128 == 0 || 128 * cc + 4 * lane < DV) {
          const uint4 v = ld_global_v16(po + 128 * cc);
          // a partial with weight 0 may hold 0 * (large) but never NaN: it was written
          acc[cc][0] += w * __uint_as_float(v.x);
          acc[cc][1] += w * __uint_as_float(v.y);
          acc[cc][2] += w * __uint_as_float(v.z);
          acc[cc][3] += w * __uint_as_float(v.w);
        }
      }
    }
#pragma unroll
    for (int cc = 0; cc < (DV + 127) / 128; ++cc) {
      const int c = 128 * cc + 4 * lane;
      if (DV % 128 == 0 || c < DV) {
        uint2 out;
        out.x = Mma<T>::pack(acc[cc][0], acc[cc][1]);
        out.y = Mma<T>::pack(acc[cc][2], acc[cc][3]);
        st_global_v8(o + row * o_stride + c, out);
      }
    }
  }
}

}  // namespace attn
}  // namespace ncdc

#endif  // NCDC_ATTENTION_CUH
