// Fused attention on Hopper (sm_90a) in FlashAttention-3 order (Shah et al. 2024, sec. 3):
// warp specialisation, TMA into an mbarrier ring, wgmma, and ping-pong between two consumer
// warpgroups. Template: templates/attention_wgmma.cu.j2; the planner: families/attention_wgmma.py.
//
// A block of 384 threads runs 128 queries of one (batch..., head) slice:
//   * warpgroup 0 drops to kProducerRegs registers (setmaxnreg) and one of its threads issues
//     the TMA loads: Q once, then each key tile's K and V into rings of STAGES slots, K and V
//     with full and empty mbarriers of their own (so S = Q K^T starts before V lands);
//   * warpgroups 1 and 2 rise to kConsumerRegs and each owns 64 queries: S = Q K^T by wgmma
//     m64nSXk16 (k32 for fp8 Q and K) from shared memory (both K-major), the diagram's score
//     functor if it has one, the online softmax on the accumulators (base 2, the scale folded
//     into the exponent), P packed to 16 bits in registers (the
//     accumulator layout of m64nNk16 is, element for element, its A fragment layout), and
//     O += P V by wgmma with A from registers and V as an MN-major B;
//   * with fp8 V, P is packed to V's type (permuted across the quad into the 8-bit A
//     fragment) and P V runs as wgmma k32 at the fp8 rate; V, which an 8-bit B can only be
//     K-major, lands as TMA copies it and warps 1-3 of the producer warpgroup transpose each
//     tile into a ring of its own (as the fp8 GEMM transposes a B given [k, n]).
// The epilogue stages O / l in the V ring (swizzled) and stores it with TMA (store_o).
// Within a warpgroup, the P V product of tile j - 1 is in flight while the softmax of tile j
// runs (issued together with S of tile j). Between the two, named barriers 1 and 2 order the
// GEMM issue: a warpgroup issues its GEMMs, lets the other issue its own, then runs its
// softmax while the tensor cores work for the other.
//
// Layouts (128-byte swizzle throughout, as TMA writes it): a tile of R rows and H head values
// is H / 64 column blocks of R rows of 128 bytes (8-row groups 1024 bytes apart), rounded up:
// a head of 96 takes two blocks, TMA filling the second's last 32 columns with zeros. For S the
// descriptors walk k (the head) 16 values at a time inside a block, then to the next block;
// for P V, V's column blocks are the MN-major B's 128-byte n blocks (LBO apart) and the keys
// its k rows (16 per wgmma, 8-key groups 1024 bytes apart). Each GEMM builds one descriptor
// per operand from its tile's address and advances it by an add per wgmma (desc_advance):
// rebuilding each from its address took four integer instructions a wgmma, in vector
// registers where ptxas could not prove the ring's slot uniform (the runs of a mask rule).
//
// Slices: Q, K, V and O are [batch..., rows, head] (3-D maps: head, rows, slice) or, rows
// strided, [outer..., rows, inner..., head] with at most two inner axes (FlashAttention's
// [b, s, h, d]; 5-D maps: head, the inner axes innermost first, rows, the outer axes as one
// slice), a box of one inner index either way, so a tile lands in shared memory alike.
//
// Tails: rows of Q beyond q_len and keys beyond x_len arrive as TMA's zeros; keys beyond
// x_len are masked to -inf in the last tile, rows beyond q_len are clipped by O's TMA store.
// Masks (attn::Visible: causal and window bands, a length mask's end, packed sequences):
// each query sees an interval of keys whose ends grow with the query, so a block reads only
// the key tiles between its first row's first key and its last row's last (key_tiles), and
// only the tiles that some row of the block does not see whole are masked; the rest run
// without a compare.
#pragma once
#ifndef NCDC_ATTENTION_HOPPER_CUH
#define NCDC_ATTENTION_HOPPER_CUH

#include "ncdc_attention.cuh"
#include "ncdc_hopper.cuh"

namespace ncdc {
namespace fa3 {

constexpr int kConsumers = 2;
constexpr int kProducerRegs = 24, kConsumerRegs = 240;  // 128 * (24 + 2 * 240) <= 65536
constexpr unsigned kSchedulerBar = 1;                    // named barriers 1 and 2: whose turn
constexpr unsigned kPair = 2 * 128;                      // one warpgroup syncs, the other arrives
constexpr unsigned kStoreBar = 3;  // named barrier 3: both consumers are done with the V ring;
                                   // 4 and 5: a consumer's O tile is written

// S = Q K^T from descriptors (both K-major): m64nNk16 for 16-bit Q and K, k32 for fp8.
template <class T>
struct QkMma;
template <>
struct QkMma<__nv_bfloat16> {
  template <int N>
  static NCDC_DEVICE void run(float* d, unsigned long long a, unsigned long long b, int scale_d) {
    wgmma_m64k16_bf16<N, 0, 0>(d, a, b, scale_d);
  }
};
template <>
struct QkMma<__half> {
  template <int N>
  static NCDC_DEVICE void run(float* d, unsigned long long a, unsigned long long b, int scale_d) {
    wgmma_m64k16_f16<N, 0, 0>(d, a, b, scale_d);
  }
};
template <>
struct QkMma<__nv_fp8_e4m3> {
  template <int N>
  static NCDC_DEVICE void run(float* d, unsigned long long a, unsigned long long b, int scale_d) {
    wgmma_m64k32_e4m3<N>(d, a, b, scale_d);
  }
};
template <>
struct QkMma<__nv_fp8_e5m2> {
  template <int N>
  static NCDC_DEVICE void run(float* d, unsigned long long a, unsigned long long b, int scale_d) {
    wgmma_m64k32_e5m2<N>(d, a, b, scale_d);
  }
};

// O (+)= P V: P from registers, V a B from its descriptor: MN-major for 16-bit V (its rows
// as TMA lands them), K-major for fp8 V (transposed in shared memory: 8-bit operands have no
// MN-major form).
template <class T>
struct PvMma;
template <>
struct PvMma<__nv_bfloat16> {
  template <int N>
  static NCDC_DEVICE void run(float* d, const unsigned* a, unsigned long long b, int scale_d) {
    wgmma_m64k16_bf16_rs<N, 1>(d, a, b, scale_d);
  }
};
template <>
struct PvMma<__half> {
  template <int N>
  static NCDC_DEVICE void run(float* d, const unsigned* a, unsigned long long b, int scale_d) {
    wgmma_m64k16_f16_rs<N, 1>(d, a, b, scale_d);
  }
};
template <>
struct PvMma<__nv_fp8_e4m3> {
  template <int N>
  static NCDC_DEVICE void run(float* d, const unsigned* a, unsigned long long b, int scale_d) {
    wgmma_m64k32_e4m3_rs<N>(d, a, b, scale_d);
  }
};
template <>
struct PvMma<__nv_fp8_e5m2> {
  template <int N>
  static NCDC_DEVICE void run(float* d, const unsigned* a, unsigned long long b, int scale_d) {
    wgmma_m64k32_e5m2_rs<N>(d, a, b, scale_d);
  }
};

// TQ: Q's and K's type (16-bit or fp8), TV: V's (and P's in the P V product; 16-bit or
// fp8), TO: O's (16-bit). fp8 V (V8) lands in the V ring as TMA copies it and is transposed
// into a ring of its own (VT), K-major: DV rows of the tile's 128 keys.
template <class TQ, class TV, class TO_, int D_, int DV_, int SX_, int STAGES_, bool INNER_ = false>
struct Config {
  using TO = TO_;
  static constexpr bool INNER = INNER_;  // 5-D maps: rows strided by inner axes (Slice)
  static constexpr int BQ = 64 * kConsumers, D = D_, DV = DV_, SX = SX_, STAGES = STAGES_;
  static constexpr int ES_QK = sizeof(TQ), ES_V = sizeof(TV), ES_O = sizeof(TO_);
  static constexpr bool V8 = ES_V == 1;
  static constexpr int SPAN = 128;  // the swizzle span: one TMA box row
  static constexpr int ROW_QK = SPAN / ES_QK, ROW_V = SPAN / ES_V, ROW_O = SPAN / ES_O;  // values per row
  // Heads in shared memory: whole column blocks (DP, DVP values; TMA zero-fills a block's
  // columns past the head). S issues the head's own k steps, P V the n of DVP.
  static constexpr int DP = (D + ROW_QK - 1) / ROW_QK * ROW_QK, DVP = (DV + ROW_V - 1) / ROW_V * ROW_V;
  static constexpr int QK_STEPS = D * ES_QK / 32;  // S's wgmmas: 32 bytes of the head each
  static constexpr int PV_STEPS = SX * ES_V / 32;  // P V's: 32 bytes of the keys each
  static constexpr int P_REGS = SX * ES_V / 8;     // P packed: SX / 2 values a thread
  static constexpr int O_REGS = DVP / 2;           // O's accumulator: DVP / 2 values a thread
  static constexpr int Q_BYTES = BQ * DP * ES_QK, K_BYTES = SX * DP * ES_QK, V_BYTES = SX * DVP * ES_V;
  static constexpr int VT_BYTES = V8 ? V_BYTES : 0;  // a slot of the transposed V ring
  static constexpr int SMEM_BYTES = 1024 + Q_BYTES + STAGES * (K_BYTES + V_BYTES + VT_BYTES);
  static constexpr int O_BOXES = DVP / ROW_O;       // a consumer's O: boxes of 64 rows x 128 bytes
  static constexpr int O_TILE_BYTES = 64 * DVP * ES_O;  // one consumer's O, staged in the V ring
  // the transpose (wgmma_gemm::transpose_b): the tile's n (DV) by k (SX keys)
  static constexpr int BN = DVP, BK = SX;
  // fp8 V: three producer warps transpose, with the fp8 GEMM's budgets (40 + 2 x 232)
  static constexpr int PRODUCER_REGS = V8 ? 40 : kProducerRegs, CONSUMER_REGS = V8 ? 232 : kConsumerRegs;
  static_assert(ES_O == 2, "16-bit O");
  static_assert(!V8 || SX == 128, "fp8 V: key tiles of 128 (one 128-byte row of the transposed tile)");
  static_assert(D * ES_QK % 32 == 0 && D <= 256, "Q's and K's heads: whole k steps of 32 bytes, at most 256");
  static_assert(DV % 16 == 0 && DV <= 256 && (!V8 || DV == DVP), "d_v: a multiple of 16 up to 256 (fp8: of 128)");
  static_assert(SX == 64 || SX == 128, "key tiles of 64 or 128 (the n of S's wgmma)");
  static_assert(PRODUCER_REGS + kConsumers * CONSUMER_REGS <= 504, "the launch's 384 x 168 registers");
  static_assert(kConsumers * O_TILE_BYTES <= STAGES * (V_BYTES + VT_BYTES), "O is staged in the V rings");
};

// Where a tensor's (batch..., head) slice lies in its map: the outer slice `z` (the last
// coordinate) and, in a 5-D map, the inner axes' indices `a` (innermost) and `b`.
struct Slice {
  int z = 0, a = 0, b = 0;
};

struct Problem {
  int q_len, x_len;
  int q_tile;         // this block's queries: [128 q_tile, 128 q_tile + 128)
  Slice z_q, z_k, z_v, z_o;  // the slice of Q, K, V and O in their maps (each its own layout)
  attn::Visible vis;  // the keys each query sees (x_end: x_len, or a length mask's end)
  float scale_log2;   // the logits' scale times log2(e), positive
  float* lse = nullptr;      // the log-sum-exp of each query's logits (natural log), or none
  long long lse_stride = 0;  // its pitch along the queries
};

// The key tiles of a block (absolute tile indices): it reads [tile0, tile0 + tiles), and
// every row of the block sees the keys of [clear0, clear1) whole. UPPER: some mask bounds a
// query's keys from above (causal, a window); BELOW: from below (a window, packed
// sequences); attn::visible_keys. A query's first and last keys grow with the query, so the
// keys some row sees lie between the first row's first and the last row's last, and those
// every row sees between the last row's first and the first row's last. Computed once per
// block from block-uniform values: trip counts that differ by warpgroup are a divergent
// path to ptxas, which then serialises every wgmma (C7519). A data mask's classes are read
// from shared memory, the same bytes for every thread; the SASS test of
// document_mask_attention checks that ptxas still issues the wgmmas unserialised.
struct KeyTiles {
  int tile0, tiles, clear0, clear1;
  // a data mask's block table: the class of tiles tile0 .. tile0 + classed - 1 (classify_tiles)
  const unsigned char* classes = nullptr;
  int classed = 0;
};

// Key tiles a block's table of data-mask classes holds (bytes of shared memory): 131,072 keys
// in tiles of 64 (a score path reading data along the keys takes 64-key tiles); a tile past
// them is classed without the data (as a rule of positions).
constexpr int kClassTable = 2048;

template <class Cfg, bool UPPER, bool BELOW>
NCDC_DEVICE KeyTiles key_tiles(const Problem& p) {
  const int q0 = p.q_tile * Cfg::BQ, q1 = attn::imin(q0 + Cfg::BQ, p.q_len) - 1;
  int top_first, top_last, bottom_first, bottom_last;
  attn::visible_keys<UPPER, BELOW>(p.vis, q0, top_first, top_last);
  attn::visible_keys<UPPER, BELOW>(p.vis, q1, bottom_first, bottom_last);
  KeyTiles r;
  r.tile0 = BELOW ? top_first / Cfg::SX : 0;
  r.tiles = bottom_last < top_first ? 0 : bottom_last / Cfg::SX + 1 - r.tile0;
  // at most the end: a row past the last packed sequence, under a window, may see its
  // first key past the block's last
  r.clear0 = attn::imin(r.tile0 + r.tiles, attn::imax(r.tile0, (bottom_first + Cfg::SX - 1) / Cfg::SX));
  r.clear1 = attn::imax(r.clear0, attn::imin(r.tile0 + r.tiles, (top_last + 1) / Cfg::SX));
  return r;
}

// What the block does with key tile t: skips it (the diagram's mask rule drops every pair
// of it: Scores::tile), runs it masked (some row of the block does not see its keys whole,
// or the rule may drop some pair) or whole.
enum TileKind { kSkip, kMasked, kWhole };

template <class Cfg, class Scores>
NCDC_DEVICE TileKind tile_kind(const KeyTiles& r, const Problem& p, const Scores& scores, int t) {
  const bool edge = t < r.clear0 || t >= r.clear1;
  if (!Scores::kRule) return edge ? kMasked : kWhole;
  const int q0 = p.q_tile * Cfg::BQ, k0 = t * Cfg::SX;
  const int c = Scores::kTileData > 0 && t - r.tile0 < r.classed
                    ? int(r.classes[t - r.tile0])
                    : scores.tile(q0, attn::imin(q0 + Cfg::BQ, p.q_len) - 1, k0, attn::imin(k0 + Cfg::SX, p.x_len) - 1);
  return c == attn::kTileMasked ? kSkip : c == attn::kTileKept && !edge ? kWhole : kMasked;
}

// A data mask's block table (as FlexAttention's create_block_mask, for one block): the class
// of each of the block's first kClassTable key tiles under the diagram's rule, given the
// interval each data tensor the rule reads (a document id per query and per key) takes over
// the block's queries and the tile's keys. Warp w of the block classes tiles w, w + warps,
// ..., two at a time (their loads in flight together), before the warps take their roles;
// `classes` in shared memory, read by tile_kind.
template <class Cfg, class Scores>
NCDC_DEVICE void classify_tiles(KeyTiles& r, const Problem& p, const Scores& scores, unsigned char* classes) {
  if constexpr (Scores::kTileData > 0) {
    constexpr int ROWS = Cfg::BQ / 32, KEYS = Cfg::SX / 32;
    static_assert(Cfg::BQ == 32 * ROWS && Cfg::SX == 32 * KEYS, "iv_over: N values a lane cover the tile");
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    const int q0 = p.q_tile * Cfg::BQ, q1 = attn::imin(q0 + Cfg::BQ, p.q_len) - 1;
    const int n = attn::imin(r.tiles, kClassTable);
    attn::Iv rows[Scores::kTileData];  // the block's queries' values, once
    scores.template tile_values<ROWS, KEYS>(rows, q0, q1, 0, 0, lane, 1);
#pragma unroll 2
    for (int t = warp; t < n; t += warps) {
      const int k0 = (r.tile0 + t) * Cfg::SX, k1 = attn::imin(k0 + Cfg::SX, p.x_len) - 1;
      attn::Iv dv[Scores::kTileData];
#pragma unroll
      for (int i = 0; i < Scores::kTileData; ++i) dv[i] = rows[i];
      scores.template tile_values<ROWS, KEYS>(dv, q0, q1, k0, k1, lane, 2);
      if (lane == 0) classes[t] = (unsigned char)scores.tile_given(dv, q0, q1, k0, k1);
    }
    r.classes = classes;
    r.classed = n;
  } else {
    (void)r, (void)p, (void)scores, (void)classes;
  }
}

// The first of the block's tiles at or after t of another kind than `kind`; the end of its
// tiles when there is none.
template <TileKind KIND, class Cfg, class Scores>
NCDC_DEVICE int run_end(const KeyTiles& r, const Problem& p, const Scores& scores, int t) {
  const int end = r.tile0 + r.tiles;
  while (t < end && tile_kind<Cfg>(r, p, scores, t) == KIND) ++t;
  return t;
}

// A tile of `rows` rows and `head` values (`row` of them per 128-byte row) as column blocks.
template <class Cfg>
NCDC_DEVICE void load_rows(unsigned char* dst, const TensorMap* map, unsigned long long* bar,
                           int head, int row, int rows, int row0, const Slice& z) {
  for (int b = 0; b < head / row; ++b) {
    if constexpr (Cfg::INNER)
      tma_load_5d(dst + b * rows * Cfg::SPAN, map, bar, b * row, z.a, z.b, row0, z.z);
    else
      tma_load_3d(dst + b * rows * Cfg::SPAN, map, bar, b * row, row0, z.z);
  }
}

struct Barriers {
  unsigned long long* q_full;
  unsigned long long *full_k, *empty_k, *full_v, *empty_v;  // STAGES each
  unsigned long long* staged_v;  // fp8 V: a slot's tile landed, to be transposed (STAGES)
};

// A slot of the V ring (V as TMA lands it), of the transposed ring after it (fp8 V), and
// the one P V reads.
template <class Cfg, class B>
NCDC_DEVICE B* v_slot(B* smem, int stage) {
  return smem + Cfg::Q_BYTES + Cfg::STAGES * Cfg::K_BYTES + stage * Cfg::V_BYTES;
}
template <class Cfg, class B>
NCDC_DEVICE B* vt_slot(B* smem, int stage) {
  return v_slot<Cfg>(smem, Cfg::STAGES) + stage * Cfg::VT_BYTES;
}
template <class Cfg>
NCDC_DEVICE const unsigned char* pv_slot(const unsigned char* smem, int stage) {
  return Cfg::V8 ? vt_slot<Cfg>(smem, stage) : v_slot<Cfg>(smem, stage);
}

// The key tiles the block visits, in order: j = next_tile(.., j + 1) from first_tile.
template <class Cfg, class Scores>
NCDC_DEVICE int next_tile(const KeyTiles& r, const Problem& p, const Scores& scores, int j) {
  return Scores::kRule ? run_end<kSkip, Cfg>(r, p, scores, j) : j;  // all but those the rule drops
}

// Q's tile, issued by the producer thread as soon as the barriers are set (before a data
// mask's block table is built, so that it lands meanwhile).
template <class Cfg>
NCDC_DEVICE void load_q(const TensorMap* map_q, unsigned char* smem, const Barriers& bar, const Problem& p) {
  mbar_arrive_expect_tx(bar.q_full, Cfg::Q_BYTES);
  load_rows<Cfg>(smem, map_q, bar.q_full, Cfg::DP, Cfg::ROW_QK, Cfg::BQ, p.q_tile * Cfg::BQ, p.z_q);
}

template <class Cfg, class Scores>
NCDC_DEVICE void produce(const TensorMap* map_q, const TensorMap* map_k, const TensorMap* map_v,
                         unsigned char* smem, const Barriers& bar, const Problem& p, const KeyTiles& r,
                         const Scores& scores) {
  (void)map_q;  // Q is loaded before (load_q)
  unsigned char* ks = smem + Cfg::Q_BYTES;
  int stage = 0;
  unsigned phase = 0;
  const int end = r.tile0 + r.tiles;
  for (int j = next_tile<Cfg>(r, p, scores, r.tile0); j < end; j = next_tile<Cfg>(r, p, scores, j + 1)) {
    mbar_wait(&bar.empty_k[stage], phase ^ 1u);
    mbar_arrive_expect_tx(&bar.full_k[stage], Cfg::K_BYTES);
    load_rows<Cfg>(ks + stage * Cfg::K_BYTES, map_k, &bar.full_k[stage], Cfg::DP, Cfg::ROW_QK, Cfg::SX,
                   j * Cfg::SX, p.z_k);
    mbar_wait(&bar.empty_v[stage], phase ^ 1u);
    unsigned long long* landed = Cfg::V8 ? &bar.staged_v[stage] : &bar.full_v[stage];
    mbar_arrive_expect_tx(landed, Cfg::V_BYTES);
    load_rows<Cfg>(v_slot<Cfg>(smem, stage), map_v, landed, Cfg::DVP, Cfg::ROW_V, Cfg::SX, j * Cfg::SX, p.z_v);
    if (++stage == Cfg::STAGES) {
      stage = 0;
      phase ^= 1u;
    }
  }
}

// Warps 1-3 of the producer warpgroup, for fp8 V: each visited tile's V as it landed
// (DV / 128 column blocks of SX key rows) transposed into the VT ring (DV rows of SX keys,
// K-major, as wgmma_gemm's fp8 B), the writes ordered before wgmma's async-proxy reads, then
// one arrival per warp on the slot's full barrier. The VT slot is free once the tile has
// landed: the producer loaded it after the consumers released the slot.
template <class Cfg, class Scores>
NCDC_DEVICE void transpose_v(unsigned char* smem, const Barriers& bar, const Problem& p, const KeyTiles& r,
                             const Scores& scores, int worker) {
  int stage = 0;
  unsigned phase = 0;
  const int end = r.tile0 + r.tiles;
  for (int j = next_tile<Cfg>(r, p, scores, r.tile0); j < end; j = next_tile<Cfg>(r, p, scores, j + 1)) {
    mbar_wait(&bar.staged_v[stage], phase);
    wgmma_gemm::transpose_b<Cfg>(v_slot<Cfg>(smem, stage), vt_slot<Cfg>(smem, stage), worker);
    fence_proxy_async();
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbar_arrive(&bar.full_v[stage]);
    if (++stage == Cfg::STAGES) {
      stage = 0;
      phase ^= 1u;
    }
  }
}

template <int COUNT>
NCDC_DEVICE void fence_registers(unsigned* r) {
#ifdef NCDC_GPU
#pragma unroll
  for (int i = 0; i < COUNT; ++i) asm volatile("" : "+r"(r[i])::"memory");
#else
  (void)r;
#endif
}

// S = Q K^T for this warpgroup's 64 rows: one wgmma per 32 bytes of the head (16 values,
// or 32 of fp8), four to a 128-byte column block.
template <class T, class Cfg>
NCDC_DEVICE void issue_qk(float* s, const unsigned char* qs, const unsigned char* ks, int consumer) {
  const auto da = smem_desc(qs + consumer * 64 * Cfg::SPAN, 16, 1024, kSwizzle128);
  const auto db = smem_desc(ks, 16, 1024, kSwizzle128);
#pragma unroll
  for (int kk = 0; kk < Cfg::QK_STEPS; ++kk) {
    const unsigned block = kk / 4, in = (kk % 4) * 32;
    QkMma<T>::template run<Cfg::SX>(s, desc_advance(da, block * Cfg::BQ * Cfg::SPAN + in),
                                    desc_advance(db, block * Cfg::SX * Cfg::SPAN + in), kk > 0 ? 1 : 0);
  }
}

// O (+)= P V: one wgmma per 32 bytes of the keys (16, or 32 of fp8), P's fragment kk in
// p[4 kk .. 4 kk + 3]; V's rows an MN-major B (16-bit), or the transposed tile's 32-byte
// column a K-major one (fp8, walked as S walks K). The n of a wgmma is DVP, or for DVP = 192
// (16-bit) 128 and then 64 from V's third column block into O's values 64.. (the
// accumulator's columns follow its registers, 8 per 4 of them, so the two make one m64n192).
template <class T, class Cfg>
NCDC_DEVICE void issue_pv(float* o, const unsigned* pr, const unsigned char* vs, bool accumulate) {
  constexpr int N0 = Cfg::DVP == 192 ? 128 : Cfg::DVP, N1 = Cfg::DVP - N0;
  static_assert(N0 == 64 || N0 == 128 || N0 == 256, "P V's n: 64, 128, 256, or 128 + 64");
  const auto db = Cfg::V8 ? smem_desc(vs, 16, 1024, kSwizzle128) : smem_desc(vs, Cfg::SX * Cfg::SPAN, 1024, kSwizzle128);
#pragma unroll
  for (int kk = 0; kk < Cfg::PV_STEPS; ++kk) {
    const unsigned step = Cfg::V8 ? kk * 32 : kk * 16 * Cfg::SPAN;
    const int scale = (accumulate || kk > 0) ? 1 : 0;
    PvMma<T>::template run<N0>(o, pr + 4 * kk, desc_advance(db, step), scale);
    if constexpr (N1 > 0) {
      static_assert(!Cfg::V8 && N1 == 64, "fp8 V: n of 128 or 256");
      PvMma<T>::template run<N1>(o + N0 / 2, pr + 4 * kk, desc_advance(db, step + N0 / Cfg::ROW_V * Cfg::SX * Cfg::SPAN), scale);
    }
  }
}

// The running softmax state of a thread's two rows (16w + g and + 8 of its warpgroup).
struct Rows {
  float m[2], l[2];  // max of the logits (unscaled), partial sum of this thread's exps
  int lower[2], limit[2];  // the keys [lower, limit] each row sees (attn::visible_keys)
};

// Whether the score path's key part steps along the keys (linear in the position, from one
// origin: the block's first query): a thread's keys' steps from a tile's first key are then
// the same for every tile (key_steps), and the tile's first key's part one value.
template <class Scores>
constexpr bool stepped() {
  return Scores::kSplit && Scores::kShift;
}

// What the softmax of row i left out of its logits (split): the row part R(i) and, stepped
// (the key part K taken from origin o), K(o), as K(j) = K(j - o) + K(o). Both linear, that
// is R(i - o) + (K(o) + R(o) - R(0)): ALiBi's K(o) and R(o) - R(0) cancel exactly, so a row
// far from key 0 loses nothing to their rounding.
template <class Cfg, class Scores>
NCDC_DEVICE float row_part(const Scores& scores, const Problem& p, int i) {
  if constexpr (Scores::kShift) {
    const int o = p.q_tile * Cfg::BQ;
    return scores.row_log2(i - o) + (scores.key_log2(o) + (scores.row_log2(o) - scores.row_log2(0)));
  } else {
    return scores.row_log2(i);
  }
}

// A thread's keys' parts relative to its tile's first key (stepped): 2 t + 8 (c / 2) + c % 2
// steps of the key part, for c < SX / 4; made once, before the key loop.
template <class Cfg, class Scores>
NCDC_DEVICE void key_steps(float* kx, const Scores& scores, int t) {
  if constexpr (stepped<Scores>()) {
    const float step = scores.step_log2();
#pragma unroll
    for (int c = 0; c < Cfg::SX / 4; ++c) kx[c] = step * float(2 * t + 8 * (c / 2) + c % 2);
  } else {
    (void)kx, (void)scores, (void)t;
  }
}

// Whether the max and the exponent take raw logits, the scale folded into the exponent (one
// FFMA a score): plain scores, or a mask rule on the plain logits, whose tiles kept whole
// run no functor.
template <class Scores>
constexpr bool folds() {
  return Scores::kIdentity || Scores::kKeptIdentity;
}

// Transforms tile `key0`'s logits by the diagram's score path (unless Scores::kIdentity;
// a tile the rule keeps whole by the path's kept logits), masks it (MASKED) outside each
// row's visible keys, then turns the logits into
// exps against the new row max; alpha: the factor the old O and l are rescaled by. Plain
// scores fold the scale into the exponent (one FFMA a score, the max over raw logits); a
// score functor sees the natural-log logit s * scale of query i and key j, as in the
// FlashAttention-2 kernel (ncdc_attention.cuh, score_step), and its result times log2 e is
// what the max and exponent take. Its indices are clamped into the problem (rows past
// q_len are never stored, keys past x_len are masked), so it reads no tensor past its end.
template <class Cfg, bool BELOW, bool MASKED, class Scores>
NCDC_DEVICE void softmax_tile(float* s, Rows& st, float* alpha, int key0, long long row0, int t,
                              const Problem& p, const Scores& scores, const float* kx) {
  constexpr int N = Cfg::SX / 2;
  constexpr bool kFold = folds<Scores>();
  constexpr bool kStepped = stepped<Scores>();
  const float fold = kFold ? p.scale_log2 : 1.0f;
  float off = 0.0f;  // stepped: the tile's first key's part, the same for every thread
  if constexpr (Scores::kSplit) {
    // the key part once per key of the thread (its N / 2 keys: 8 (c / 2) + 2 t + c % 2) or,
    // stepped, the keys' steps from the tile's first key (`kx`, made once: key_steps) and
    // that key's part (`off`, added to the max); the pair part per score; the row part left
    // out (the same for the row's every key)
    const float scale = p.scale_log2 * (1.0f / attn::kLog2e);
    const int rows[2] = {int(attn::lmin(row0, p.q_len - 1)), int(attn::lmin(row0 + 8, p.q_len - 1))};
    float own[kStepped ? 1 : N / 2];
    if constexpr (kStepped) {
      off = scores.key_log2(key0 - p.q_tile * Cfg::BQ);
    } else {
#pragma unroll
      for (int c = 0; c < N / 2; ++c) {
        int key = key0 + 8 * (c / 2) + 2 * t + c % 2;
        if (MASKED) key = attn::imin(key, p.x_len - 1);
        own[c] = scores.key_log2(key);
      }
    }
    const float* part = kStepped ? kx : own;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int c = 2 * (i / 4) + i % 2;
      if constexpr (Scores::kPairIdentity) {
        s[i] = fmaf(s[i], p.scale_log2, part[c]);
      } else {
        int key = key0 + 8 * (i / 4) + 2 * t + i % 2;
        if (MASKED) key = attn::imin(key, p.x_len - 1);
        s[i] = scores.pair_log2(s[i] * scale, rows[(i / 2) % 2], key) + part[c];
      }
    }
  } else if (MASKED ? !Scores::kIdentity : !kFold) {
    const float scale = p.scale_log2 * (1.0f / attn::kLog2e);
    // folded, a rule's logit (s * scale, or -inf) goes back to the raw logit's units
    const float to_max = 1.0f / scale;
    const int rows[2] = {int(attn::lmin(row0, p.q_len - 1)), int(attn::lmin(row0 + 8, p.q_len - 1))};
#pragma unroll
    for (int i = 0; i < N; ++i) {
      int key = key0 + 8 * (i / 4) + 2 * t + i % 2;
      if (MASKED) key = attn::imin(key, p.x_len - 1);
      const float v = s[i] * scale;
      const int row = rows[(i / 2) % 2];
      if (kFold)
        s[i] = (MASKED ? scores(v, row, key) : scores.kept(v, row, key)) * to_max;
      else  // the functor's base-2 forms: their log2 e multiply folded into its constants
        s[i] = MASKED ? scores.log2(v, row, key) : scores.kept_log2(v, row, key);
    }
  }
  if (MASKED) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int key = key0 + 8 * (i / 4) + 2 * t + i % 2, h = (i / 2) % 2;
      if (key > st.limit[h] || (BELOW && key < st.lower[h])) s[i] = attn::neg_inf();
    }
  }
  float base[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = kStepped ? attn::neg_inf() : st.m[h];
#pragma unroll
    for (int i = 2 * h; i < N; i += 4) mx = fmaxf(mx, fmaxf(s[i], s[i + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    if constexpr (kStepped) mx = fmaxf(st.m[h], mx + off);
    base[h] = mx == attn::neg_inf() ? 0.0f : mx * fold;
    alpha[h] = attn::exp2_fast(fmaf(st.m[h], fold, -base[h]));
    st.m[h] = mx;
    if constexpr (kStepped) base[h] -= off;  // the scores are short of the tile's first key's part
  }
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < N; ++i) {
    s[i] = attn::exp2_fast(fmaf(s[i], fold, -base[(i / 2) % 2]));
    sum[(i / 2) % 2] += s[i];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) st.l[h] = st.l[h] * alpha[h] + sum[h];
}

// Two fp32 as fp8 (round to nearest even, saturating), `lo` in the low byte: one F2FP.
template <class T>
struct Fp8Pair;
template <>
struct Fp8Pair<__nv_fp8_e4m3> {
  static NCDC_DEVICE unsigned pack(float lo, float hi) {
#ifdef NCDC_GPU
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return unsigned(__nv_fp8_e4m3(lo).__x) | unsigned(__nv_fp8_e4m3(hi).__x) << 8;
#endif
  }
};
template <>
struct Fp8Pair<__nv_fp8_e5m2> {
  static NCDC_DEVICE unsigned pack(float lo, float hi) {
#ifdef NCDC_GPU
    unsigned short r;
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return unsigned(__nv_fp8_e5m2(lo).__x) | unsigned(__nv_fp8_e5m2(hi).__x) << 8;
#endif
  }
};

// P in registers as P V's A fragment. 16-bit: the accumulator layout of m64nNk16 is, element
// for element, its A fragment layout. fp8: the 8-bit fragment of a 32-key chunk
// (wgmma_m64k32_e4m3_rs) holds four consecutive keys a thread in each half (4t..4t + 3 and
// 16 + 4t..), the accumulator two of each group of eight (8j + 2t, + 1): lanes 2 (t % 2) and
// + 1 of the quad hold them, in groups j = t / 2 and 2 + t / 2; a register of the fragment is
// two shuffles and a byte permute of the quad's pairs.
template <class T, int N>
NCDC_DEVICE void pack_p(unsigned* pr, const float* s) {
  if constexpr (sizeof(T) == 2) {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) pr[i] = attn::Mma<T>::pack(s[2 * i], s[2 * i + 1]);
  } else {
    const int lane = threadIdx.x % 32, t = lane % 4;
    const int src0 = (lane & ~3) | (2 * (t % 2)), src1 = src0 + 1;
    const unsigned sel = t < 2 ? 0x5410u : 0x7632u;  // the low pairs (group t / 2) or the high
#pragma unroll
    for (int c = 0; c < N / 16; ++c) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        unsigned pair[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) pair[j] = Fp8Pair<T>::pack(s[16 * c + 4 * j + 2 * h], s[16 * c + 4 * j + 2 * h + 1]);
        const unsigned w01 = pair[0] | pair[1] << 16, w23 = pair[2] | pair[3] << 16;
        const unsigned x0 = __shfl_sync(0xffffffffu, w01, src0), y0 = __shfl_sync(0xffffffffu, w01, src1);
        const unsigned x2 = __shfl_sync(0xffffffffu, w23, src0), y2 = __shfl_sync(0xffffffffu, w23, src1);
        pr[4 * c + h] = wgmma_gemm::byte_perm(x0, y0, sel);
        pr[4 * c + h + 2] = wgmma_gemm::byte_perm(x2, y2, sel);
      }
    }
  }
}

NCDC_DEVICE void release(unsigned long long* bar, int lane) {
  __syncwarp();
  if (lane == 0) mbar_arrive(bar);
}

// Key tile j of a consumer warpgroup, not the block's first, in its turn at the tensor
// cores: S of tile j and P V of the tile before issued together, the softmax of j while P V
// runs, then O rescaled and P of j packed. `stage` and `phase` are the tile before's slot,
// advanced to j's; `accumulate`: the tile before was not the block's first, whose P V
// starts O (the tile after the first, or, past tiles a mask rule skips, a later one that
// adds to the zeros O starts from).
template <class TQ, class TV, class Cfg, bool BELOW, bool MASKED, class Scores>
NCDC_DEVICE void step(float* s, float* o_acc, unsigned* pr, Rows& st, unsigned char* smem,
                      const Barriers& bar, const Problem& p, int j, bool accumulate, int consumer,
                      int& stage, unsigned& phase, long long row0, const Scores& scores, const float* kx) {
  const int lane = threadIdx.x % 32, t = lane % 4;
  const unsigned mine = kSchedulerBar + consumer, other = kSchedulerBar + (consumer ^ 1);
  const unsigned char* ks = smem + Cfg::Q_BYTES;
  float alpha[2];
  const int next = stage + 1 == Cfg::STAGES ? 0 : stage + 1;
  const unsigned next_phase = next == 0 ? phase ^ 1u : phase;
  named_bar_sync(mine, kPair);
  mbar_wait(&bar.full_k[next], next_phase);
  fence_registers<Cfg::P_REGS>(pr);
  wgmma_fence_operands<Cfg::O_REGS>(o_acc);
  wgmma_fence();
  issue_qk<TQ, Cfg>(s, smem, ks + next * Cfg::K_BYTES, consumer);
  wgmma_commit();
  mbar_wait(&bar.full_v[stage], phase);
  issue_pv<TV, Cfg>(o_acc, pr, pv_slot<Cfg>(smem, stage), accumulate);
  wgmma_commit();
  named_bar_arrive(other, kPair);
  wgmma_wait<1>();  // S of tile j
  wgmma_fence_operands<Cfg::SX / 2>(s);
  release(&bar.empty_k[next], lane);
  softmax_tile<Cfg, BELOW, MASKED>(s, st, alpha, j * Cfg::SX, row0, t, p, scores, kx);
  wgmma_wait<0>();  // P V of tile j - 1: its P registers and V slot are free
  wgmma_fence_operands<Cfg::O_REGS>(o_acc);
  fence_registers<Cfg::P_REGS>(pr);
  release(&bar.empty_v[stage], lane);
#pragma unroll
  for (int i = 0; i < Cfg::O_REGS; ++i) o_acc[i] *= alpha[(i / 2) % 2];
  pack_p<TV, Cfg::SX / 2>(pr, s);
  stage = next;
  phase = next_phase;
}

// The epilogue: O / l through shared memory and TMA. Once both consumer warpgroups are past
// their last wgmma (named barrier 3) every TMA load has landed and no wgmma reads the ring, so
// each stages its 64 rows in the V ring as O_BOXES boxes of 64 rows x 128 bytes, swizzled as
// TMA reads them (row r's 16-byte chunk c at c ^ r % 8: a warp's 32-bit writes, 8 rows g x 4
// words t, hit 32 banks), orders those writes before the async proxy (fence.proxy.async, then
// its own named barrier), and one thread stores the boxes. Rows beyond q_len are clipped by
// TMA (not written); a box wholly past q_len is not issued.
template <class Cfg>
NCDC_DEVICE void store_o(unsigned char* smem, const TensorMap* map_o, const float* o_acc, const float* inv,
                         const Problem& p, int consumer) {
  const int tid = threadIdx.x % 128, w = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  unsigned char* tile = smem + Cfg::Q_BYTES + Cfg::STAGES * Cfg::K_BYTES + consumer * Cfg::O_TILE_BYTES;
  named_bar_sync(kStoreBar, kConsumers * 128);
#pragma unroll
  for (int i = 0; i < Cfg::O_REGS; i += 2) {
    const int h = (i / 2) % 2, r = 16 * w + g + 8 * h, col = 8 * (i / 4) + 2 * t;
    const int byte = (col % Cfg::ROW_O) * Cfg::ES_O;
    unsigned char* at = tile + (col / Cfg::ROW_O) * 64 * Cfg::SPAN + r * Cfg::SPAN +
                        (((byte / 16) ^ (r % 8)) * 16) + byte % 16;
    st_shared(reinterpret_cast<unsigned*>(at), attn::Mma<typename Cfg::TO>::pack(o_acc[i] * inv[h], o_acc[i + 1] * inv[h]));
  }
  fence_proxy_async();
  named_bar_sync(kStoreBar + 1 + consumer, 128);
  const int row0 = p.q_tile * Cfg::BQ + 64 * consumer;
  if (tid == 0 && row0 < p.q_len) {
#pragma unroll
    for (int b = 0; b < Cfg::O_BOXES; ++b)
      if constexpr (Cfg::INNER)
        tma_store_5d(map_o, tile + b * 64 * Cfg::SPAN, b * Cfg::ROW_O, p.z_o.a, p.z_o.b, row0, p.z_o.z);
      else
        tma_store_3d(map_o, tile + b * 64 * Cfg::SPAN, b * Cfg::ROW_O, row0, p.z_o.z);
    tma_store_commit();
    tma_store_wait<0>();  // the boxes are read before the block exits and its shared memory goes
  }
}

// A consumer warpgroup: its 64 rows through the block's key tiles, then O / l stored.
template <class TQ, class TV, class Cfg, bool UPPER, bool BELOW, class Scores>
NCDC_DEVICE void consume(unsigned char* smem, const Barriers& bar, const Problem& p, const KeyTiles& r,
                         int consumer, const TensorMap* map_o, const Scores& scores) {
  const int tid = threadIdx.x % 128, w = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const unsigned char* ks = smem + Cfg::Q_BYTES;
  const long long row0 = (long long)p.q_tile * Cfg::BQ + 64 * consumer + 16 * w + g;
  const unsigned mine = kSchedulerBar + consumer, other = kSchedulerBar + (consumer ^ 1);
  float o_acc[Cfg::O_REGS], s[Cfg::SX / 2], alpha[2];
  float kx[stepped<Scores>() ? Cfg::SX / 4 : 1];  // the key part's steps (key_steps)
  key_steps<Cfg>(kx, scores, t);
  unsigned pr[Cfg::P_REGS];
  Rows st = {{attn::neg_inf(), attn::neg_inf()}, {0.0f, 0.0f}, {0, 0}, {0, 0}};
#pragma unroll
  for (int h = 0; h < 2; ++h)
    attn::visible_keys<UPPER, BELOW>(p.vis, int(row0) + 8 * h, st.lower[h], st.limit[h]);
#pragma unroll
  for (int i = 0; i < Cfg::O_REGS; ++i) o_acc[i] = 0.0f;
  mbar_wait(bar.q_full, 0);
  const int end = r.tile0 + r.tiles;
  // the first tile the block visits: S alone
  const int first = Scores::kRule ? run_end<kSkip, Cfg>(r, p, scores, r.tile0) : r.tile0;
  if (first < end) {
    if (consumer == 1) named_bar_arrive(other, kPair);  // consumer 0 issues first
    named_bar_sync(mine, kPair);
    mbar_wait(&bar.full_k[0], 0);
    wgmma_fence();
    issue_qk<TQ, Cfg>(s, smem, ks, consumer);
    wgmma_commit();
    named_bar_arrive(other, kPair);
    wgmma_wait<0>();
    wgmma_fence_operands<Cfg::SX / 2>(s);
    release(&bar.empty_k[0], lane);
    if (tile_kind<Cfg>(r, p, scores, first) == kMasked)
      softmax_tile<Cfg, BELOW, true>(s, st, alpha, first * Cfg::SX, row0, t, p, scores, kx);
    else
      softmax_tile<Cfg, BELOW, false>(s, st, alpha, first * Cfg::SX, row0, t, p, scores, kx);
    pack_p<TV, Cfg::SX / 2>(pr, s);
  }
  // the rest in order: without a mask rule the tiles before clear0 and from clear1 run
  // masked, those between whole; with one, runs of tiles of one kind (loops of their own,
  // so that no wgmma sits under a branch), those the rule drops skipped
  int stage = 0;  // of the tile before
  unsigned phase = 0;
  if (!Scores::kRule) {
    const int whole0 = attn::imax(r.clear0, first + 1), whole1 = attn::imax(whole0, r.clear1);
    if (BELOW)  // a lower bound: tiles that cross the first keys of the block's later rows
      for (int j = first + 1; j < whole0; ++j)
        step<TQ, TV, Cfg, BELOW, true>(s, o_acc, pr, st, smem, bar, p, j, j > first + 1, consumer,
                                       stage, phase, row0, scores, kx);
    for (int j = whole0; j < whole1; ++j)
      step<TQ, TV, Cfg, BELOW, false>(s, o_acc, pr, st, smem, bar, p, j, j > first + 1, consumer,
                                      stage, phase, row0, scores, kx);
    for (int j = whole1; j < end; ++j)
      step<TQ, TV, Cfg, BELOW, true>(s, o_acc, pr, st, smem, bar, p, j, j > first + 1, consumer,
                                     stage, phase, row0, scores, kx);
  } else {
    for (int j = first + 1; j < end;) {
      j = run_end<kSkip, Cfg>(r, p, scores, j);
      for (const int run = run_end<kMasked, Cfg>(r, p, scores, j); j < run; ++j)
        step<TQ, TV, Cfg, BELOW, true>(s, o_acc, pr, st, smem, bar, p, j, j > first + 1, consumer,
                                       stage, phase, row0, scores, kx);
      for (const int run = run_end<kWhole, Cfg>(r, p, scores, j); j < run; ++j)
        step<TQ, TV, Cfg, BELOW, false>(s, o_acc, pr, st, smem, bar, p, j, j > first + 1, consumer,
                                        stage, phase, row0, scores, kx);
    }
  }
  if (first < end) {  // the last tile's P V
    named_bar_sync(mine, kPair);
    mbar_wait(&bar.full_v[stage], phase);
    fence_registers<Cfg::P_REGS>(pr);
    wgmma_fence_operands<Cfg::O_REGS>(o_acc);
    wgmma_fence();
    issue_pv<TV, Cfg>(o_acc, pr, pv_slot<Cfg>(smem, stage), end > first + 1);
    wgmma_commit();
    if (consumer == 0) named_bar_arrive(other, kPair);  // warpgroup 1's last turn needs it
    wgmma_wait<0>();
    wgmma_fence_operands<Cfg::O_REGS>(o_acc);
    release(&bar.empty_v[stage], lane);
  }
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = st.l[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[h] = attn::inverse_sum(l);
    // the row's log-sum-exp from its max (raw logits, or base 2 after a score functor)
    const long long row = row0 + 8 * h;
    if (p.lse != nullptr && t == 0 && row < p.q_len) {
      float m = folds<Scores>() ? st.m[h] * p.scale_log2 : st.m[h];
      if constexpr (Scores::kSplit)  // the row part the softmax left out
        m += row_part<Cfg>(scores, p, int(row));
      st_global(p.lse + row * p.lse_stride, attn::row_lse(m, l));
    }
  }
  store_o<Cfg>(smem, map_o, o_acc, inv, p, consumer);
}

// The whole kernel body: barriers, the warp split and the register budgets. `scores`: the
// diagram's score path (attn::PlainScores, or the functor its template generates).
template <class TQ, class TV, class Cfg, bool UPPER, bool BELOW, class Scores = attn::PlainScores>
NCDC_DEVICE void forward(const TensorMap* map_q, const TensorMap* map_k, const TensorMap* map_v,
                         const TensorMap* map_o, const Problem& p, const Scores& scores = Scores()) {
  __shared__ unsigned long long q_full, full_k[Cfg::STAGES], empty_k[Cfg::STAGES];
  __shared__ unsigned long long full_v[Cfg::STAGES], empty_v[Cfg::STAGES], staged_v[Cfg::STAGES];
  __shared__ unsigned char classes[Scores::kTileData > 0 ? kClassTable : 1];
  unsigned char* smem = wgmma_gemm::aligned_smem();
  if (threadIdx.x == 0) {
    mbar_init(&q_full, 1);
    for (int s = 0; s < Cfg::STAGES; ++s) {
      mbar_init(&full_k[s], 1);
      mbar_init(&full_v[s], Cfg::V8 ? wgmma_gemm::kTransposeWarps : 1);
      mbar_init(&staged_v[s], 1);
      mbar_init(&empty_k[s], 4 * kConsumers);  // one arrival per consumer warp
      mbar_init(&empty_v[s], 4 * kConsumers);
    }
    fence_barrier_init();
  }
  __syncthreads();
  const Barriers bar{&q_full, full_k, empty_k, full_v, empty_v, staged_v};
  if (threadIdx.x == 0) load_q<Cfg>(map_q, smem, bar, p);
  KeyTiles tiles = key_tiles<Cfg, UPPER, BELOW>(p);
  if constexpr (Scores::kTileData > 0) {
    classify_tiles<Cfg>(tiles, p, scores, classes);
    __syncthreads();  // the table written, before any warp reads it
  }
  const KeyTiles r = tiles;
  // the warpgroup from lane 0: warp-uniform to ptxas, so the values made from it (the
  // consumer's Q descriptor) live in uniform registers
  const int group = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);
  if (group == 0) {
    setmaxnreg_dec<Cfg::PRODUCER_REGS>();
    if (threadIdx.x == 0) produce<Cfg>(map_q, map_k, map_v, smem, bar, p, r, scores);
    if (Cfg::V8 && threadIdx.x >= 32) transpose_v<Cfg>(smem, bar, p, r, scores, threadIdx.x / 32 - 1);
  } else {
    setmaxnreg_inc<Cfg::CONSUMER_REGS>();
    consume<TQ, TV, Cfg, UPPER, BELOW>(smem, bar, p, r, group - 1, map_o, scores);
  }
}

}  // namespace fa3
}  // namespace ncdc

#endif  // NCDC_ATTENTION_HOPPER_CUH
