// Fused attention on tensor cores: the FlashAttention-2 forward pass and split-key decode.
//
// Both kernels share one warp-level step: 16 or 32 query rows (Q held in registers as mma
// A fragments, or read from shared memory) against a chunk of keys in shared memory. S = Q K^T with mma.m16n8k16, the
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
// read nothing (src-size 0: the address is not dereferenced, as CUTLASS's zfill copies).
// Consecutive threads copy consecutive 16-byte chunks: coalesced. When the threads cover
// whole rows (THREADS a multiple of the chunks per row) each thread keeps one column and
// steps its source pointer by a fixed number of rows: one 64-bit add per copy, instead of
// an address computed from the row and column each time.
template <class T, int ROWS, int COLS, int SC, int THREADS>
NCDC_DEVICE void load_tile(T* smem, const T* gmem, long long row_stride, int valid, int tid) {
  constexpr int C = COLS / 8;
  if constexpr (THREADS % C == 0) {
    constexpr int R = THREADS / C;  // rows one pass of the threads covers
    const int row0 = tid / C, chunk = tid % C;
    const T* src = gmem + row0 * row_stride + chunk * 8;
    const long long step = R * row_stride;
#pragma unroll
    for (int i = 0; i < (ROWS + R - 1) / R; ++i) {
      const int row = row0 + i * R;
      if (ROWS % R == 0 || row < ROWS)
        cp_async_16_zfill(smem + swizzle<SC>(row, chunk), src, row < valid ? 16 : 0);
      src += step;
    }
  } else {
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
}

// ---- operands computed as they load ---------------------------------------------------
// A Q or K tile is copied by cp.async (NoLoad) or computed value by value by the diagram's
// elementwise ops on the kernel's inputs (TileLoad of a lambda (row, column) -> value the
// kernel defines: RoPE's rotated halves and angles, a scale, a cast), rounded to T and
// stored by fill_tile: synchronous global loads, the values once per tile load.
struct NoLoad {
  static constexpr bool kPlain = true;  // the callers' `if constexpr` never call it
};
template <class F>
struct TileLoad {
  static constexpr bool kPlain = false;
  F f;
  NCDC_DEVICE float operator()(int row, int col) const { return f(row, col); }
};
template <class F>
NCDC_DEVICE TileLoad<F> tile_load(const F& f) {
  return TileLoad<F>{f};
}

// Rows [0, ROWS) x columns [0, COLS) of a swizzled shared tile with SC chunks per row from
// f(row0 + row, column); rows at or past `valid` are zeros.
template <class T, int ROWS, int COLS, int SC, int THREADS, class F>
NCDC_DEVICE void fill_tile(T* smem, const F& f, int row0, int valid, int tid) {
  constexpr int C = COLS / 8, TOTAL = ROWS * C;
  for (int i = tid; i < TOTAL; i += THREADS) {
    const int row = i / C, chunk = i % C;
    T* p = smem + swizzle<SC>(row, chunk);
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const int col = chunk * 8 + 2 * h;
      smem_store_u32(p + 2 * h, row < valid ? Mma<T>::pack(f(row0 + row, col),
                                                           f(row0 + row, col + 1))
                                            : 0u);
    }
  }
}

// The running state of a warp's MB blocks of 16 query rows: in block b this lane holds rows
// g and g + 8 (g = lane / 4) of the output accumulator, their running max (base 2, scaled)
// and its partial running sum (the 4 lanes of a row sum different columns; reduced at the
// end). Two blocks (32 rows) share every K and V fragment a warp reads: half the ldmatrix
// per mma of one block.
template <int DV, int MB = 1>
struct RowState {
  float o[MB][DV / 8][4];
  float m[MB][2];
  float l[MB][2];
};

template <int DV, int MB>
NCDC_DEVICE void init_state(RowState<DV, MB>& st) {
#pragma unroll
  for (int b = 0; b < MB; ++b) {
#pragma unroll
    for (int n = 0; n < DV / 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) st.o[b][n][i] = 0.0f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      st.m[b][r] = neg_inf();
      st.l[b][r] = 0.0f;
    }
  }
}

// The mma A fragments of a warp's MB blocks of 16 query rows (rows row0.. of a shared tile
// of SC chunks per row), one per 16 values of the head: held in registers (REG), or read
// from shared memory at each use, which frees MB * D / 4 registers per thread.
template <class T, int D, int SC, int MB, bool REG>
struct QFragments;

template <class T, int D, int SC, int MB>
struct QFragments<T, D, SC, MB, true> {
  uint32_t f[MB][D / 16][4];
  NCDC_DEVICE QFragments(const T* qs, int row0, int lane) {
#pragma unroll
    for (int b = 0; b < MB; ++b)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        ldmatrix_x4(f[b][kk], qs + swizzle<SC>(row0 + 16 * b + (lane & 15), 2 * kk + (lane >> 4)));
  }
  NCDC_DEVICE void get(int b, int kk, uint32_t (&a)[4]) const {
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = f[b][kk][i];
  }
};

template <class T, int D, int SC, int MB>
struct QFragments<T, D, SC, MB, false> {
  const T* qs;
  int row, half;  // this lane's ldmatrix row in block 0, and its chunk within a 16-value step
  NCDC_DEVICE QFragments(const T* tile, int row0, int lane)
      : qs(tile), row(row0 + (lane & 15)), half(lane >> 4) {}
  NCDC_DEVICE void get(int b, int kk, uint32_t (&a)[4]) const {
    ldmatrix_x4(a, qs + swizzle<SC>(row + 16 * b, 2 * kk + half));
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

// A tile's class under a mask rule (ncdc.model.masks.TileClass): every pair dropped, some
// dropped, or every pair kept.
constexpr int kTileMasked = 0, kTilePartial = 1, kTileKept = 2;

// Interval arithmetic over a tile of queries and keys, the device's copy of
// ncdc.model.masks.tile_class: the values a mask rule's term takes over the tile, exact for
// positions, whole constants and the operations that stay exact on them (the generated
// functor's `tile` nests these calls; anything else is unknown). A truth value lies in [0, 1].
struct Iv {
  double lo, hi;
};
constexpr double kIvBig = 1e300;  // an unbounded side: no position or exact constant is near it
NCDC_DEVICE Iv iv(double v) { return {v, v}; }
NCDC_DEVICE Iv iv_range(double lo, double hi) { return {lo, hi}; }
NCDC_DEVICE Iv iv_unknown() { return {-kIvBig, kIvBig}; }
NCDC_DEVICE bool iv_surely(Iv v) { return v.lo > 0 || v.hi < 0; }
NCDC_DEVICE bool iv_possibly(Iv v) { return !(v.lo == 0 && v.hi == 0); }
NCDC_DEVICE Iv iv_bool(bool surely, bool possibly) { return {surely ? 1.0 : 0.0, possibly ? 1.0 : 0.0}; }
NCDC_DEVICE Iv iv_not(Iv a) { return iv_bool(!iv_possibly(a), !iv_surely(a)); }
NCDC_DEVICE Iv iv_and(Iv a, Iv b) {
  return iv_bool(iv_surely(a) && iv_surely(b), iv_possibly(a) && iv_possibly(b));
}
NCDC_DEVICE Iv iv_or(Iv a, Iv b) {
  return iv_bool(iv_surely(a) || iv_surely(b), iv_possibly(a) || iv_possibly(b));
}
NCDC_DEVICE Iv iv_lt(Iv a, Iv b) { return iv_bool(a.hi < b.lo, a.lo < b.hi); }
NCDC_DEVICE Iv iv_le(Iv a, Iv b) { return iv_bool(a.hi <= b.lo, a.lo <= b.hi); }
NCDC_DEVICE Iv iv_gt(Iv a, Iv b) { return iv_lt(b, a); }
NCDC_DEVICE Iv iv_ge(Iv a, Iv b) { return iv_le(b, a); }
NCDC_DEVICE Iv iv_eq(Iv a, Iv b) {
  return iv_bool(a.lo == a.hi && b.lo == b.hi && a.lo == b.lo, !(a.hi < b.lo || b.hi < a.lo));
}
NCDC_DEVICE Iv iv_ne(Iv a, Iv b) {
  const Iv e = iv_eq(a, b);
  return iv_bool(!iv_possibly(e), !iv_surely(e));
}
NCDC_DEVICE Iv iv_where(Iv c, Iv a, Iv b) {
  if (iv_surely(c)) return a;
  if (!iv_possibly(c)) return b;
  return {a.lo < b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi};
}
NCDC_DEVICE Iv iv_add(Iv a, Iv b) { return {a.lo + b.lo, a.hi + b.hi}; }
NCDC_DEVICE Iv iv_sub(Iv a, Iv b) { return {a.lo - b.hi, a.hi - b.lo}; }
NCDC_DEVICE Iv iv_neg(Iv a) { return {-a.hi, -a.lo}; }
NCDC_DEVICE Iv iv_min(Iv a, Iv b) { return {a.lo < b.lo ? a.lo : b.lo, a.hi < b.hi ? a.hi : b.hi}; }
NCDC_DEVICE Iv iv_max(Iv a, Iv b) { return {a.lo > b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi}; }
NCDC_DEVICE Iv iv_abs(Iv a) {
  const double l = a.lo < 0 ? -a.lo : a.lo, h = a.hi < 0 ? -a.hi : a.hi;
  return {a.lo <= 0 && 0 <= a.hi ? 0.0 : (l < h ? l : h), l > h ? l : h};
}
NCDC_DEVICE Iv iv_mul(Iv a, Iv b) {
  const double p[4] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
  Iv r = {p[0], p[0]};
  for (int i = 1; i < 4; ++i) {  // a zero factor times an unbounded side is 0, not 0 * big
    r.lo = p[i] < r.lo ? p[i] : r.lo;
    r.hi = p[i] > r.hi ? p[i] : r.hi;
  }
  return r;
}
NCDC_DEVICE int iv_class(Iv keep) {
  return iv_surely(keep) ? kTileKept : iv_possibly(keep) ? kTilePartial : kTileMasked;
}
// The interval of a tensor's values at positions a..b along an axis of `pitch` elements (a
// document id per query or per key), as the score path reads them (in fp32): the warp's
// lanes take every 32nd position (at most N each: b - a < 32 N, the loads issued together)
// and meet in a min and a max. Unknown where some value is NaN (a compare with NaN follows
// no interval); an infinite value is kIvBig, as rule_tile writes an infinite constant, so
// that -inf equals -inf here as in the score path. Called by all 32 lanes.
template <int N, class T>
NCDC_DEVICE Iv iv_over(const T* p, long long pitch, int a, int b, int lane) {
  float lo = -neg_inf(), hi = neg_inf();
  bool nan = false;
#pragma unroll
  for (int u = 0; u < N; ++u) {
    const int k = a + lane + 32 * u;
    if (k > b) continue;
    const float v = to_float(ld_global(p + k * pitch));
    nan = nan || v != v;
    lo = fminf(lo, v);
    hi = fmaxf(hi, v);
  }
#pragma unroll
  for (int m = 16; m >= 1; m >>= 1) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, m));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, m));
  }
  if (__any_sync(0xffffffffu, nan)) return iv_unknown();
  const auto big = [](double v) { return v < -kIvBig ? -kIvBig : v > kIvBig ? kIvBig : v; };
  return iv_range(big(lo), big(hi));
}

// The logits as the diagram transforms them before its masks: the identity, or a functor
// `float operator()(float s, int i, int j)` of the scaled logit s of query i and key j
// (biases, soft-capping, position terms, a mask rule) generated for the kernel. A functor
// also gives `tile(i0, i1, j0, j1)`, the class of a tile of queries i0..i1 and keys j0..j1
// under its mask rule (kTileKept without one), and `kept(s, i, j)`, the logit where the rule
// keeps the pair; kRule: it has a rule; kKeptIdentity: `kept` is the identity (a rule on the
// plain logits).
struct PlainScores {
  static constexpr bool kIdentity = true, kKeptIdentity = true, kRule = false;
  static constexpr bool kSplit = false, kPairIdentity = false, kShift = false;  // scores.split_logit
  static constexpr int kTileData = 0;  // data tensors a tile's class reads (a block table)
  NCDC_DEVICE float operator()(float s, int, int) const { return s; }
  NCDC_DEVICE float kept(float s, int, int) const { return s; }
  NCDC_DEVICE float log2(float s, int, int) const { return s * kLog2e; }
  NCDC_DEVICE float kept_log2(float s, int, int) const { return s * kLog2e; }
  NCDC_DEVICE int tile(int, int, int, int) const { return kTileKept; }
  NCDC_DEVICE float grad(float, float dm, int, int) const { return dm; }  // the backward's dS
};

// Masking of one step: key `j` is dropped for row g (r = 0) or g + 8 (r = 1) of block b
// (query row[b][r]) when it lies outside [lower[b][r], limit[b][r]]. BELOW: some mask bounds
// the keys from below (a window, or packed sequences); without one, lower is 0 and never
// compared (fewer live registers).
template <int MB = 1, bool BELOW = false>
struct KeyMask {
  bool any;  // some key of the step may be dropped (x tail, split end or a mask's edge)
  int key0;  // global index of the step's first key
  int lower[MB][2];
  int limit[MB][2];
  int row[MB][2];

  // block b's row r is query i: its keys, cut to those before `end`
  template <bool UPPER>
  NCDC_DEVICE void set(const Visible& vis, int b, int r, int i, int end) {
    row[b][r] = i;
    visible_keys<UPPER, BELOW>(vis, i, lower[b][r], limit[b][r]);
    limit[b][r] = imin(limit[b][r], end - 1);
  }
  NCDC_DEVICE bool dropped(int j, int b, int r) const {
    return j > limit[b][r] || (BELOW && j < lower[b][r]);
  }
};

// S = Q K^T over NK keys (smem rows krow0.. of a swizzled K tile of D / 8 chunks per row),
// masked where MASKED (and mask.any), then the online-softmax update in base 2. Plain
// scores (Scores::kIdentity) fold the scale into the exponent, p = 2^(s * scale_log2 - m)
// (one FFMA), the max taken over the raw scores (scale_log2 > 0: a negative scale was moved
// into Q). A score functor sees the natural-log logit s * scale (-Q times |scale|), and
// its result, in base 2, is what the max and exponent take. On return s holds P, and o and
// l are rescaled to the new running max; O only when some row's max moved.
template <class T, int D, int DV, int NK, int MB, bool MASKED, class QF, class Mask, class Scores>
NCDC_DEVICE void score_step(float (&s)[MB][NK / 8][4], RowState<DV, MB>& st, const QF& qf,
                            const T* ks, int krow0, const Mask& mask, float scale_log2,
                            const Scores& scores, int lane) {
  static_assert(NK % 16 == 0, "keys per warp step: a multiple of 16");
#pragma unroll
  for (int b = 0; b < MB; ++b)
#pragma unroll
    for (int n = 0; n < NK / 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[b][n][i] = 0.0f;
  // this lane's K row within a 16-key pair and its chunk within a 16-value step
  const int krow = krow0 + ((lane >> 4) << 3) + (lane & 7), khalf = (lane >> 3) & 1;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[MB][4];
#pragma unroll
    for (int b = 0; b < MB; ++b) qf.get(b, kk, a[b]);
#pragma unroll
    for (int np = 0; np < NK / 16; ++np) {
      // matrices: keys +0..7 / +8..15 of the pair, d chunks 2kk / 2kk+1
      uint32_t f[4];
      ldmatrix_x4(f, ks + swizzle<D / 8>(krow + 16 * np, 2 * kk + khalf));
#pragma unroll
      for (int b = 0; b < MB; ++b) {
        Mma<T>::run(s[b][2 * np], a[b], f);
        Mma<T>::run(s[b][2 * np + 1], a[b], f + 2);
      }
    }
  }
  const int t = lane & 3;
  // the scale the max and the exponent take: folded for plain scores, else applied
  const float fold = Scores::kIdentity ? scale_log2 : 1.0f;
#pragma unroll
  for (int b = 0; b < MB; ++b) {
    float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int n = 0; n < NK / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int j = mask.key0 + 8 * n + 2 * t + (i & 1);
        float v = s[b][n][i];
        if (!Scores::kIdentity)  // the functor sees natural-log logits: a bias adds to s
          v = scores(v * (scale_log2 * (1.0f / kLog2e)), mask.row[b][i >> 1], j) * kLog2e;
        if (MASKED && mask.any && mask.dropped(j, b, i >> 1)) v = neg_inf();
        s[b][n][i] = v;
        mx[i >> 1] = fmaxf(mx[i >> 1], v);
      }
    }
    float base[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(st.m[b][r], mx[r] * fold);
      // a row with every key so far masked keeps m = -inf: subtract 0 so no -inf - -inf
      base[r] = m_new == neg_inf() ? 0.0f : m_new;
      alpha[r] = exp2_fast(st.m[b][r] - base[r]);
      st.m[b][r] = m_new;
      st.l[b][r] *= alpha[r];
    }
#pragma unroll
    for (int n = 0; n < NK / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float p = exp2_fast(fmaf(s[b][n][i], fold, -base[i >> 1]));
        s[b][n][i] = p;
        st.l[b][i >> 1] += p;
      }
    }
    // once the maxima settle (most tiles), alpha = 1 for every row of the warp: skip O
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
      for (int n = 0; n < DV / 8; ++n) {
        st.o[b][n][0] *= alpha[0];
        st.o[b][n][1] *= alpha[0];
        st.o[b][n][2] *= alpha[1];
        st.o[b][n][3] *= alpha[1];
      }
    }
  }
}

// O += P V over NK keys (smem rows krow0.. of a swizzled V tile of DV / 8 chunks per row).
template <class T, int DV, int NK, int MB>
NCDC_DEVICE void value_step(RowState<DV, MB>& st, const float (&s)[MB][NK / 8][4], const T* vs,
                            int krow0, int lane) {
  const int vrow = krow0 + (((lane >> 3) & 1) << 3) + (lane & 7), vhalf = lane >> 4;
#pragma unroll
  for (int kk = 0; kk < NK / 16; ++kk) {
    uint32_t a[MB][4];
#pragma unroll
    for (int b = 0; b < MB; ++b) {
      a[b][0] = Mma<T>::pack(s[b][2 * kk][0], s[b][2 * kk][1]);
      a[b][1] = Mma<T>::pack(s[b][2 * kk][2], s[b][2 * kk][3]);
      a[b][2] = Mma<T>::pack(s[b][2 * kk + 1][0], s[b][2 * kk + 1][1]);
      a[b][3] = Mma<T>::pack(s[b][2 * kk + 1][2], s[b][2 * kk + 1][3]);
    }
#pragma unroll
    for (int np = 0; np < DV / 16; ++np) {
      // matrices (transposed): keys +0..7 / +8..15, d_v chunks 2np / 2np+1
      uint32_t f[4];
      ldmatrix_x4_trans(f, vs + swizzle<DV / 8>(vrow + 16 * kk, 2 * np + vhalf));
#pragma unroll
      for (int b = 0; b < MB; ++b) {
        Mma<T>::run(st.o[b][2 * np], a[b], f);
        Mma<T>::run(st.o[b][2 * np + 1], a[b], f + 2);
      }
    }
  }
}

// The running sums of a row, added over the 4 lanes that share it.
template <int DV, int MB>
NCDC_DEVICE void reduce_sums(RowState<DV, MB>& st) {
#pragma unroll
  for (int b = 0; b < MB; ++b)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      st.l[b][r] += __shfl_xor_sync(0xffffffffu, st.l[b][r], 1);
      st.l[b][r] += __shfl_xor_sync(0xffffffffu, st.l[b][r], 2);
    }
}

// Flip the sign of a shared tile's values (16-bit floats: the top bit of each half), so a
// negative logit scale becomes a positive one on -Q.
template <int ROWS, int SC, int THREADS>
NCDC_DEVICE void negate_tile(void* tile, int tid) {
  uint32_t* w = static_cast<uint32_t*>(tile);
  constexpr int WORDS = ROWS * row_chunks<SC>() * 4;
  for (int i = tid; i < WORDS; i += THREADS) smem_store_u32(w + i, w[i] ^ 0x80008000u);
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
  // Paged K and V (load_kv's PAGE rows a page): key x is row x % PAGE of page
  // pages[(x / PAGE) * pages_pitch] of the caches k and v, their pages k_page and v_page
  // elements apart; a page outside [0, page_count) reads nothing and sets *status.
  const int* pages = nullptr;
  long long pages_pitch = 1, k_page = 0, v_page = 0;
  int page_count = 0;
  int* status = nullptr;
};

// The log-sum-exp of a row from its running max m (base 2) and sum l: (m + log2 l) ln 2,
// -inf for a row that saw no key (log 0).
NCDC_DEVICE float row_lse(float m, float l) {
  return l > 0.0f ? (m + log2f(l)) * 0.6931471805599453f : neg_inf();
}

// The scale a step multiplies into the exponent: |scale log2 e|, at least 1e-30 so that a
// masked -inf times it stays -inf (a zero scale gives the same uniform softmax). A negative
// scale is carried by -Q (negate_tile), so that the max over raw scores is the max of the
// scaled ones.
NCDC_DEVICE float positive_scale(float scale_log2) { return fmaxf(fabsf(scale_log2), 1e-30f); }

// The cache page that holds page `pg` of this slice's sequence (Slice's block table), or -1
// where the table's entry is outside [0, page_count), which sets *status (every writer
// writes 1: no atomic needed).
template <class T>
NCDC_DEVICE int page_at(const Slice<T>& a, int pg) {
  const int p = ld_global(a.pages + pg * a.pages_pitch);
  if (p >= 0 && p < a.page_count) return p;
  *a.status = 1;
  return -1;
}

// Rows [key0, key0 + ROWS) of paged caches into swizzled shared tiles, as load_tile, for
// pages of PAGE rows that a tile spans several of: each row finds its page in the block
// table (an L1 hit but for a page's first row). K's and V's copies of a row share its page
// where their heads are equal (`vs` then non-null). Rows at or past `valid`, and rows of a
// page out of range, are zero-filled and read nothing.
template <class T, int ROWS, int COLS, int THREADS, int PAGE>
NCDC_DEVICE void load_paged_rows(T* ks, T* vs, const T* k, const T* v, long long k_page,
                                 long long v_page, long long k_stride, long long v_stride,
                                 const Slice<T>& a, int key0, int valid, int tid) {
  constexpr int C = COLS / 8, TOTAL = ROWS * C;
#pragma unroll
  for (int i0 = 0; i0 < TOTAL; i0 += THREADS) {
    const int i = i0 + tid;
    if (TOTAL % THREADS == 0 || i < TOTAL) {
      const int row = i / C, chunk = i % C, x = key0 + row;
      const int p = row < valid ? page_at(a, x / PAGE) : -1;
      const int bytes = p >= 0 ? 16 : 0;
      const long long r = x % PAGE;
      cp_async_16_zfill(ks + swizzle<C>(row, chunk),
                        k + (p >= 0 ? p * k_page + r * k_stride + chunk * 8 : 0), bytes);
      if (vs)
        cp_async_16_zfill(vs + swizzle<C>(row, chunk),
                          v + (p >= 0 ? p * v_page + r * v_stride + chunk * 8 : 0), bytes);
    }
  }
}

// Keys [key0, key0 + ROWS) of K's and V's paged caches (Slice's pages, PAGE rows each) into
// one ring stage; key0 is a multiple of ROWS. A page of a multiple of ROWS rows holds the
// whole tile: one table read, then the copies of load_tile. A tile of whole pages: a read
// a page. Other pages (fewer rows than a pass of the threads covers): load_paged_rows.
template <class T, int ROWS, int D, int DV, int THREADS, int PAGE>
NCDC_DEVICE void load_paged_kv(T* ks, T* vs, const Slice<T>& a, int key0, int valid, int tid) {
  static_assert(PAGE > 0, "a page holds rows");
  if constexpr (PAGE % ROWS == 0) {
    const int p = valid > 0 ? page_at(a, key0 / PAGE) : -1;
    const long long r = key0 % PAGE;
    const int rows = p >= 0 ? valid : 0;
    load_tile<T, ROWS, D, D / 8, THREADS>(ks, a.k + (p >= 0 ? p * a.k_page + r * a.k_stride : 0),
                                          a.k_stride, rows, tid);
    load_tile<T, ROWS, DV, DV / 8, THREADS>(
        vs, a.v + (p >= 0 ? p * a.v_page + r * a.v_stride : 0), a.v_stride, rows, tid);
  } else if constexpr (D == DV && THREADS % (D / 8) == 0 && ROWS % PAGE == 0 &&
                       PAGE % (THREADS / (D / 8)) == 0) {
    // Whole pages in the tile, each thread one column of R-row strides: a thread's rows of a
    // page are its first row R apart, so one table read a page and pointer steps
    constexpr int C = D / 8, R = THREADS / C;
    const int row0 = tid / C, chunk = tid % C;
    const long long k_step = R * a.k_stride, v_step = R * a.v_stride;
#pragma unroll
    for (int pg = 0; pg < ROWS / PAGE; ++pg) {
      const int first = pg * PAGE;  // the page's first row in the tile
      const int p = first < valid ? page_at(a, key0 / PAGE + pg) : -1;
      const T* kp = a.k + (p >= 0 ? p * a.k_page + row0 * a.k_stride + chunk * 8 : 0);
      const T* vp = a.v + (p >= 0 ? p * a.v_page + row0 * a.v_stride + chunk * 8 : 0);
#pragma unroll
      for (int j = 0; j < PAGE / R; ++j) {
        const int row = first + row0 + j * R;
        const int bytes = p >= 0 && row < valid ? 16 : 0;
        cp_async_16_zfill(ks + swizzle<C>(row, chunk), kp, bytes);
        cp_async_16_zfill(vs + swizzle<C>(row, chunk), vp, bytes);
        kp += k_step;
        vp += v_step;
      }
    }
  } else if constexpr (D == DV) {
    load_paged_rows<T, ROWS, D, THREADS, PAGE>(ks, vs, a.k, a.v, a.k_page, a.v_page, a.k_stride,
                                               a.v_stride, a, key0, valid, tid);
  } else {
    load_paged_rows<T, ROWS, D, THREADS, PAGE>(ks, nullptr, a.k, a.k, a.k_page, 0, a.k_stride, 0,
                                               a, key0, valid, tid);
    load_paged_rows<T, ROWS, DV, THREADS, PAGE>(vs, nullptr, a.v, a.v, a.v_page, 0, a.v_stride,
                                                0, a, key0, valid, tid);
  }
}

// Keys [key0, key0 + SX) of K and V (rows at or past `end` zero-filled) into one ring stage;
// PAGE > 0: through the block table, pages of PAGE rows (load_paged_kv); KL: K computed
// as it loads (fill_tile).
template <class T, int SX, int D, int DV, int THREADS, int PAGE = 0, class KL = NoLoad>
NCDC_DEVICE void load_kv(T* ks, T* vs, const Slice<T>& a, int key0, int end, int tid,
                         const KL& kl = KL()) {
  if constexpr (!KL::kPlain) {  // K computed as it loads, V copied
    fill_tile<T, SX, D, D / 8, THREADS>(ks, kl, key0, end - key0, tid);
    load_tile<T, SX, DV, DV / 8, THREADS>(vs, a.v + key0 * a.v_stride, a.v_stride, end - key0,
                                          tid);
  } else if constexpr (PAGE > 0) {
    load_paged_kv<T, SX, D, DV, THREADS, PAGE>(ks, vs, a, key0, end - key0, tid);
  } else {
    load_tile<T, SX, D, D / 8, THREADS>(ks, a.k + key0 * a.k_stride, a.k_stride, end - key0,
                                        tid);
    load_tile<T, SX, DV, DV / 8, THREADS>(vs, a.v + key0 * a.v_stride, a.v_stride, end - key0,
                                          tid);
  }
}

// ---------------------------------------------------------------------------------------
// Fused forward: one block per (batch..., GQ queries), one warp per 16 * MB of them; K and
// V stream through a STAGES-deep cp.async ring of SX keys (one commit group per chunk,
// STAGES - 1 in flight while one is read). Query i sees the keys a.vis gives it (causal:
// j <= i + x_len - q_len); tiles no query of the block sees are never loaded, and a warp
// skips the math of tiles that are masked for all its rows. Without a lower bound on the
// keys (!BELOW) the tiles every row of the block sees whole (all of them but the x tail,
// or those left of the causal diagonal) come first and run in a loop with no mask code;
// the rest run in a second loop that masks. With one (windows, packed sequences) masked
// tiles lie on both sides, and every tile runs in the masked loop.
//
// Shared memory (elements of T, rows of row_chunks<C>() chunks of 8): Q [GQ][QC] (reused
// to stage O), K [STAGES][SX][D / 8], V [STAGES][SX][DV / 8], QC = max(D, DV) / 8. QREG:
// Q's mma fragments in registers, else read from the Q tile at each step. BELOW: some
// query's keys are bounded from below (KeyMask). LSE: write each row's log-sum-exp to
// a.lse (a flag, so that a kernel without one keeps no pointer live through the key loop).
// SPLIT: the block sees only keys [sp.begin, sp.end) (begin a multiple of SX, end one or
// x_len) and writes its rows' unnormalised O and (m, l) to the split's partials (Split);
// merge_partials combines them. PAGE > 0: K and V are read through the block table (load_kv).
struct Split {
  int begin = 0, end = 0;     // the keys of this split
  float* part_o = nullptr;    // [q_len][DV] fp32: this split's unnormalised O
  float* part_ml = nullptr;   // [q_len][2]: (m in base 2, l)
};

template <class T, int D, int DV, int GQ, int SX, int MB, int STAGES, bool QREG, bool UPPER,
          bool BELOW, bool LSE, bool SPLIT = false, int PAGE = 0, class Scores,
          class QL = NoLoad, class KL = NoLoad>
NCDC_DEVICE void attention_forward(const Slice<T>& a, T* o_slice, long long o_stride, int q_tile,
                                   const Scores& scores, const Split& sp = Split(),
                                   const QL& ql = QL(), const KL& kl = KL()) {
  constexpr int WQ = 16 * MB, W = GQ / WQ, THREADS = 32 * W;
  constexpr int QC = (D > DV ? D : DV) / 8;
  constexpr int KT = SX * row_chunks<D / 8>() * 8, VT = SX * row_chunks<DV / 8>() * 8;
  static_assert(GQ % WQ == 0 && SX % 16 == 0, "tiles are multiples of 16 (a warp's rows)");
  static_assert(STAGES >= 2, "a ring of at least two stages");
  T* qs = dynamic_smem<T>();
  T* ks = qs + GQ * row_chunks<QC>() * 8;
  T* vs = ks + STAGES * KT;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int q0 = q_tile * GQ;
  const float scale_log2 = positive_scale(a.scale_log2);

  // key tiles [tile0, tile0 + tiles): those some query of the block sees
  int first_key, last_key, unused, block_last;
  visible_keys<UPPER, BELOW>(a.vis, q0, first_key, block_last);
  visible_keys<UPPER, BELOW>(a.vis, imin(q0 + GQ, a.q_len) - 1, unused, last_key);
  if (SPLIT) {
    first_key = imax(first_key, sp.begin);
    last_key = imin(last_key, sp.end - 1);
    block_last = imin(block_last, sp.end - 1);
  }
  // without a lower bound or a split, first_key is 0
  const int tile0 = BELOW || SPLIT ? first_key / SX : 0;
  const int tiles = last_key < first_key ? 0 : last_key / SX + 1 - tile0;
  // tiles [0, clear) every row of the block sees whole (the keys the first row sees grow
  // with the row); none with a lower bound
  const int clear = BELOW || block_last < 0 ? 0
                    : SPLIT ? imax(0, imin(tiles, (block_last + 1) / SX - tile0))
                            : imin(tiles, (block_last + 1) / SX);
  const int wrow = q0 + WQ * warp;  // this warp's first query
  KeyMask<MB, BELOW> mask;
#pragma unroll
  for (int b = 0; b < MB; ++b)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      mask.template set<UPPER>(a.vis, b, r, wrow + 16 * b + g + 8 * r, a.x_len);
  // a step needs no mask when its keys lie inside every row's interval. The last row is
  // not clipped to q_len: its interval only widens the test (rows past q_len are never
  // stored), and clipping it cost a causal d = 240 tile 26 registers and a spill.
  int top_first, top_last, bottom_first, bottom_last;  // of the warp's first and last rows
  visible_keys<UPPER, BELOW>(a.vis, wrow, top_first, top_last);
  visible_keys<UPPER, BELOW>(a.vis, wrow + WQ - 1, bottom_first, bottom_last);

  RowState<DV, MB> st;
  init_state(st);
  if (tiles > 0) {
    const int k0 = tile0 * SX;
    if constexpr (QL::kPlain)
      load_tile<T, GQ, D, QC, THREADS>(qs, a.q + q0 * a.q_stride, a.q_stride, a.q_len - q0, tid);
    else
      fill_tile<T, GQ, D, QC, THREADS>(qs, ql, q0, a.q_len - q0, tid);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < tiles)
        load_kv<T, SX, D, DV, THREADS, PAGE>(ks + s * KT, vs + s * VT, a, k0 + s * SX, a.x_len, tid,
                                             kl);
      cp_async_commit();
    }
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (a.scale_log2 < 0.0f) {
      negate_tile<GQ, QC, THREADS>(qs, tid);
      __syncthreads();
    }
    const QFragments<T, D, QC, MB, QREG> qf(qs, WQ * warp, lane);

    // pass 0: the clear tiles [0, clear), no mask; pass 1: [clear, tiles), masked
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {
      const bool masked = pass == 1;
      for (int j = masked ? clear : 0; j < (masked ? tiles : clear); ++j) {
        const int stage = j % STAGES, fill = (j + STAGES - 1) % STAGES;  // read, loaded
        const int key0 = k0 + j * SX;
        // tile j has landed; every warp is done with tile j - 1, whose stage is `fill`
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (j + STAGES - 1 < tiles)
          load_kv<T, SX, D, DV, THREADS, PAGE>(ks + fill * KT, vs + fill * VT, a,
                                               k0 + (j + STAGES - 1) * SX, a.x_len, tid, kl);
        cp_async_commit();
        float s[MB][SX / 8][4];
        if (!masked) {
          mask.key0 = key0;
          score_step<T, D, DV, SX, MB, false>(s, st, qf, ks + stage * KT, 0, mask, scale_log2,
                                              scores, lane);
          value_step<T, DV, SX, MB>(st, s, vs + stage * VT, 0, lane);
        } else if (key0 <= bottom_last && (!BELOW || key0 + SX - 1 >= top_first)) {
          mask.any = key0 + SX - 1 > top_last || (BELOW && key0 < bottom_first);
          mask.key0 = key0;
          score_step<T, D, DV, SX, MB, true>(s, st, qf, ks + stage * KT, 0, mask, scale_log2,
                                             scores, lane);
          value_step<T, DV, SX, MB>(st, s, vs + stage * VT, 0, lane);
        }
      }
    }
    cp_async_wait<0>();
  }

  // the O pointer passes an empty asm after the loop: without it ptxas (sm_80, causal
  // d = 128, 168 registers) kept its high half on the stack through the loop (4 B spilled)
  T* o = o_slice;
#ifdef NCDC_GPU
  asm volatile("" : "+l"(o));
#endif
  reduce_sums(st);
  if (SPLIT) {
    // unnormalised O (4 lanes store 32 contiguous bytes of a row) and (m, l) of each row
#pragma unroll
    for (int b = 0; b < MB; ++b)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int qi = wrow + 16 * b + g + 8 * r;
        if (qi < a.q_len) {
          float* po = sp.part_o + (long long)qi * DV + 2 * t;
#pragma unroll
          for (int n = 0; n < DV / 8; ++n)
            st_global(reinterpret_cast<float2*>(po + 8 * n),
                      make_float2(st.o[b][n][2 * r], st.o[b][n][2 * r + 1]));
          if (t == 0)
            st_global(reinterpret_cast<float2*>(sp.part_ml + 2ll * qi),
                      make_float2(st.m[b][r], st.l[b][r]));
        }
      }
    return;
  }
  // O / l, staged through this warp's own rows of the Q tile (no other warp reads them),
  // then stored as 16-byte rows; a row with no visible key has l = 0 and stores zeros.
  if (LSE && t == 0) {
#pragma unroll
    for (int b = 0; b < MB; ++b)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int qi = wrow + 16 * b + g + 8 * r;
        if (qi < a.q_len) st_global(a.lse + qi * a.lse_stride, row_lse(st.m[b][r], st.l[b][r]));
      }
  }
  __syncwarp();  // this warp's reads of its Q rows are done before O overwrites them
  T* os = qs + WQ * warp * row_chunks<QC>() * 8;
#pragma unroll
  for (int b = 0; b < MB; ++b)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float inv = inverse_sum(st.l[b][r]);
#pragma unroll
      for (int n = 0; n < DV / 8; ++n)
        smem_store_u32(os + swizzle<QC>(16 * b + g + 8 * r, n) + 2 * t,
                       Mma<T>::pack(st.o[b][n][2 * r] * inv, st.o[b][n][2 * r + 1] * inv));
    }
  __syncwarp();
  constexpr int VC = DV / 8;
#pragma unroll
  for (int i0 = 0; i0 < WQ * VC; i0 += 32) {
    const int i = i0 + lane, row = i / VC, chunk = i % VC;
    const int qi = wrow + row;
    if (qi < a.q_len)
      st_global_v16(o + qi * o_stride + chunk * 8, smem_load_u128(os + swizzle<QC>(row, chunk)));
  }
}

// ---------------------------------------------------------------------------------------
// Decode, pass 1: the rows of one (batch..., K/V head) against keys [split *
// keys_per_split, +keys_per_split). The rows are the q <= 16 queries of `heads` query heads
// that share the K/V head (a GQA group packed into the mma's 16 rows: row r is query
// r % q_len of head r / q_len; only plain or causal kernels pack: a score functor, a
// bias or the log-sum-exp address one head), padded to 16. The keys are cut to those some
// query sees (a.vis; tiles stay aligned to the split). The block streams SX keys per stage through
// a STAGES-deep cp.async ring (STAGES - 1 tiles in flight while one is used); warp w takes
// keys [w * SX / W, (w + 1) * SX / W) of each stage and keeps its own (m, l, O), written
// unnormalised to the fp32 workspace as partial split * W + w:
//   part_o[partial][row][DV], part_ml[partial][row][2] = (m in base 2, l).
// Shared memory (elements of T, rows as in attention_forward): Q [16][D / 8],
// K [STAGES][SX][D / 8], V [STAGES][SX][DV / 8].
struct Packing {
  int heads;                          // query heads in the rows (1: no packing)
  long long q_head_stride, o_head_stride;  // elements between those heads in Q and O
};

template <class T, int D, int DV, int SX, int W, int STAGES, bool QREG, bool UPPER, bool BELOW,
          int PAGE = 0, class Scores, class QL = NoLoad, class KL = NoLoad>
NCDC_DEVICE void decode_partial(const Slice<T>& a, const Packing& pk, int split,
                                int keys_per_split, float* part_o, float* part_ml,
                                const Scores& scores, const QL& ql = QL(), const KL& kl = KL()) {
  constexpr int THREADS = 32 * W, NK = SX / W;
  constexpr int KT = SX * row_chunks<D / 8>() * 8, VT = SX * row_chunks<DV / 8>() * 8;
  static_assert(SX % (16 * W) == 0, "each warp takes a multiple of 16 keys per stage");
  static_assert(STAGES >= 2, "a ring of at least two stages");
  T* qs = dynamic_smem<T>();
  T* ks = qs + 16 * row_chunks<D / 8>() * 8;
  T* vs = ks + STAGES * KT;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int rows = pk.heads * a.q_len;

  // this split's keys, cut to those some query sees (tiles stay aligned to the split)
  int first_key, last_key, top_last, bottom_first;
  visible_keys<UPPER, BELOW>(a.vis, 0, first_key, top_last);
  visible_keys<UPPER, BELOW>(a.vis, imin(16, a.q_len) - 1, bottom_first, last_key);
  const int split0 = split * keys_per_split;
  const int begin =
      BELOW && first_key > split0 ? split0 + (first_key - split0) / SX * SX : split0;
  const int end = imin(imin(a.x_len, split0 + keys_per_split), last_key + 1);
  const int tiles = end > begin ? (end - begin + SX - 1) / SX : 0;
  const float scale_log2 = positive_scale(a.scale_log2);
  // row r holds query r % q_len; padding rows (r >= rows) are never stored
  KeyMask<1, BELOW> mask;
  mask.template set<UPPER>(a.vis, 0, 0, g % a.q_len, end);
  mask.template set<UPPER>(a.vis, 0, 1, (g + 8) % a.q_len, end);

  RowState<DV, 1> st;
  init_state(st);
  if (tiles > 0) {
    // the Q rows (16-byte chunks of the packed heads' queries) join the first group
    if constexpr (!QL::kPlain) {  // computed as it loads (no heads packed: rows are queries)
      fill_tile<T, 16, D, D / 8, THREADS>(qs, ql, 0, rows, tid);
    } else {
#pragma unroll
      for (int i0 = 0; i0 < 16 * (D / 8); i0 += THREADS) {
        const int i = i0 + tid;
        if ((16 * (D / 8)) % THREADS == 0 || i < 16 * (D / 8)) {
          const int row = i / (D / 8), chunk = i % (D / 8);
          const bool ok = row < rows;
          const int head = row / a.q_len;  // rows < 16: no 64-bit division
          const T* src = ok ? a.q + head * pk.q_head_stride + (row - head * a.q_len) * a.q_stride +
                                  chunk * 8
                            : a.q;
          cp_async_16_zfill(qs + swizzle<D / 8>(row, chunk), src, ok ? 16 : 0);
        }
      }
    }
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < tiles)
        load_kv<T, SX, D, DV, THREADS, PAGE>(ks + s * KT, vs + s * VT, a, begin + s * SX, end, tid,
                                             kl);
      cp_async_commit();
    }
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (a.scale_log2 < 0.0f) {
      negate_tile<16, D / 8, THREADS>(qs, tid);
      __syncthreads();
    }
    const QFragments<T, D, D / 8, 1, QREG> qf(qs, 0, lane);

    for (int j = 0; j < tiles; ++j) {
      const int stage = j % STAGES, fill = (j + STAGES - 1) % STAGES;  // read, loaded
      const int key0 = begin + j * SX + warp * NK;
      // tile j has landed; every warp is done with tile j - 1, whose stage is `fill`
      cp_async_wait<STAGES - 2>();
      __syncthreads();
      if (j + STAGES - 1 < tiles)
        load_kv<T, SX, D, DV, THREADS, PAGE>(ks + fill * KT, vs + fill * VT, a,
                                       begin + (j + STAGES - 1) * SX, end, tid, kl);
      cp_async_commit();
      const bool active = key0 < end && (!BELOW || key0 + NK - 1 >= first_key);
      mask.any = key0 + NK - 1 > imin(top_last, end - 1) || (BELOW && key0 < bottom_first);
      mask.key0 = key0;
      float s[1][NK / 8][4];
      if (active)
        score_step<T, D, DV, NK, 1, true>(s, st, qf, ks + stage * KT, warp * NK, mask,
                                          scale_log2, scores, lane);
      if (active) value_step<T, DV, NK, 1>(st, s, vs + stage * VT, warp * NK, lane);
    }
    cp_async_wait<0>();
  }

  reduce_sums(st);
  const long long partial = (long long)split * W + warp;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    if (row < rows) {
      const long long at = partial * rows + row;
      float* po = part_o + at * DV + 2 * t;
#pragma unroll
      for (int n = 0; n < DV / 8; ++n)
        st_global(reinterpret_cast<float2*>(po + 8 * n), make_float2(st.o[0][n][2 * r], st.o[0][n][2 * r + 1]));
      if (t == 0) st_global(reinterpret_cast<float2*>(part_ml + 2 * at), make_float2(st.m[0][r], st.l[0][r]));
    }
  }
}

// Pass 2 of a split (decode, and forward attention over too few query tiles): merge the
// partials of rows [row0, row0 + count) of one (batch..., head) slice, whose `rows` rows
// each have `partials` partials laid out part_o[partial][rows][DV] and
// part_ml[partial][rows][2] = (m in base 2, l):
//   m = max m_p, l = sum l_p 2^(m_p - m), O = sum O_p 2^(m_p - m) / l,
// summed in partial order (the result does not depend on timing). A partial that saw no
// key has m_p = -inf and l_p = 0 and weighs 0; a row with no key anywhere stores zeros.
// The block first copies its rows' (m, l) pairs to shared memory, consecutive threads
// reading consecutive pairs (each partial's rows are contiguous: coalesced); then a warp
// per row turns them into weights 2^(m_p - m) in place and sums O, 4 columns a lane. Row r
// is stored as query r % q_len of packed head r / q_len; its log-sum-exp goes to lse when
// not null (only unpacked kernels have one). Shared memory: float2 [count][merge_pitch].
NCDC_DEVICE constexpr int merge_pitch(int partials) { return partials | 1; }  // odd: no conflicts

template <class T, int DV, int THREADS>
NCDC_DEVICE void merge_partials(const float* part_o, const float* part_ml, int rows, int row0,
                                int count, int partials, T* o, long long o_stride, int q_len,
                                const Packing& pk, float* lse, long long lse_stride) {
  float2* ml = dynamic_smem<float2>();
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int pitch = merge_pitch(partials);
#pragma unroll 1
  for (int i = tid; i < partials * count; i += THREADS) {
    const int p = i / count, r = i - p * count;
    const uint2 v = ld_global_v8(part_ml + 2 * ((long long)p * rows + row0 + r));
    ml[r * pitch + p] = make_float2(__uint_as_float(v.x), __uint_as_float(v.y));
  }
  __syncthreads();
  // no division by DV / 4 and no runtime column loop, either of which made ptxas spill for
  // heads that are not powers of two
#pragma unroll 1
  for (int r = warp; r < count; r += THREADS / 32) {
    float2* w = ml + r * pitch;
    float m = neg_inf();
#pragma unroll 1
    for (int p = lane; p < partials; p += 32) m = fmaxf(m, w[p].x);
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, k));
    const float base = m == neg_inf() ? 0.0f : m;
    float l = 0.0f;
#pragma unroll 1
    for (int p = lane; p < partials; p += 32) {
      const float2 v = w[p];
      const float e = exp2_fast(v.x - base);
      w[p] = make_float2(e, v.y);
      l += v.y * e;
    }
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) l += __shfl_xor_sync(0xffffffffu, l, k);
    __syncwarp();  // the weights are written before any lane of the warp reads them
    const int row = row0 + r;
    if (lse != nullptr && lane == 0) st_global(lse + row * lse_stride, row_lse(m, l));
    float acc[(DV + 127) / 128][4] = {};
#pragma unroll 1
    for (int p = 0; p < partials; ++p) {
      const float e = w[p].x;
      const float* po = part_o + ((long long)p * rows + row) * DV + 4 * lane;
#pragma unroll
      for (int cc = 0; cc < (DV + 127) / 128; ++cc) {
        if (DV % 128 == 0 || 128 * cc + 4 * lane < DV) {
          const uint4 v = ld_global_v16(po + 128 * cc);
          // a partial with weight 0 may hold 0 * (large) but never NaN: it was written
          acc[cc][0] += e * __uint_as_float(v.x);
          acc[cc][1] += e * __uint_as_float(v.y);
          acc[cc][2] += e * __uint_as_float(v.z);
          acc[cc][3] += e * __uint_as_float(v.w);
        }
      }
    }
    const float inv = inverse_sum(l);
    const int head = row / q_len;
    T* out_row = o + head * pk.o_head_stride + (row - head * q_len) * o_stride;
#pragma unroll
    for (int cc = 0; cc < (DV + 127) / 128; ++cc) {
      const int c = 128 * cc + 4 * lane;
      if (DV % 128 == 0 || c < DV) {
        uint2 out;
        out.x = Mma<T>::pack(acc[cc][0] * inv, acc[cc][1] * inv);
        out.y = Mma<T>::pack(acc[cc][2] * inv, acc[cc][3] * inv);
        st_global_v8(out_row + c, out);
      }
    }
  }
}

}  // namespace attn
}  // namespace ncdc

#endif  // NCDC_ATTENTION_CUH
