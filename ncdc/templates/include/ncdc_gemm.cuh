// GEMM device code: one block computes a BM x BN tile of C = epilogue(A B), streaming k in
// BK chunks through a STAGES-deep cp.async pipeline in shared memory.
//
//   * 16-bit and 8-bit inputs: `MmaTile`, warps on mma.sync (m16n8k16, or m16n8k32 for e4m3 /
//     e5m2 / int8) with fp32 accumulators (int32 for int8), fragments from ldmatrix (.trans for the operand whose
//     contiguous axis is not k; 8-bit data has no transposing ldmatrix, so those fragments
//     are gathered byte by byte from shared memory).
//   * fp32 inputs: `SimtTile`, FFMA on CUDA cores with a TM x TN register tile per thread
//     (tf32 tensor cores would miss fp32 accuracy).
//
// Layouts: every operand tile is stored in shared memory as it lies in global memory (its
// contiguous axis stays contiguous), with 16 bytes of padding per row: rows are then an odd
// number of 16-byte chunks apart, so the 8 row addresses of an ldmatrix fall in 8 different
// bank groups. So do the chunks a warp writes with cp.async, 8 lanes at a time: 8 chunks of
// one row, or, in a row of fewer than 8 chunks (a 16-bit k tile of 16 or 32), one chunk
// column of 8 rows (`TileCopy`).
//
// Tails: any m, n, k works. Chunks past an edge are zero-filled by cp.async (src_bytes 0..16),
// with the byte counts worked out once per block tile (`TileCopy`). An operand whose rows are
// not whole 16-byte chunks at the planned sizes (a leading dimension that is no multiple of
// 16 bytes) is a separate variant of the kernel, chosen at compile time (VEC_A, VEC_B false):
// it loads that operand element by element. Rows and columns of C past the edges are never
// stored.
//
// Epilogue: tensor-core tiles pass C through shared memory (`store_staged`), so every store
// of a whole row run is one 16-byte st.global; tiles are assigned to blocks in grouped order
// (`grouped_tile`) for L2 reuse.
#pragma once
#ifndef NCDC_GEMM_CUH
#define NCDC_GEMM_CUH

namespace ncdc {
namespace gemm {

// The storage word of an element type, for raw copies and zero fills.
template <int N>
struct Word;
template <>
struct Word<1> { using type = uint8_t; };
template <>
struct Word<2> { using type = uint16_t; };
template <>
struct Word<4> { using type = uint32_t; };

NCDC_DEVICE bool is_aligned(const void* p, unsigned bytes) {
  return (reinterpret_cast<unsigned long long>(p) & (bytes - 1)) == 0;
}

// Problem sizes of one GEMM: C[m, n] = A[m, k] B[k, n]; each ld is the pitch (in elements) of
// the operand's non-contiguous axis; C has pitches along both m and n.
struct Shape {
  long long m, n, k;
  long long lda, ldb;
  long long ldc_m, ldc_n;
};

// A's rows read through an index (a gather fused into the GEMM, a mixture of experts'
// tokens in their experts' order): row r of A is row index[r] of the source, an index
// outside 0 .. rows - 1 reading nothing (zeros) and setting *status.
struct RowIndex {
  const int* index;
  long long rows;
  int* status;
};

// One operand's copies into shared memory, set up once per block tile. The operand tile is
// ROWS x COLS (COLS contiguous) at (row0, col0) of a rows x cols matrix with pitch ld, stored
// with pitch LD; its k axis is the columns (K_COLS) or the rows. Each thread copies the same
// 16-byte chunk column of every ROW_STEP-th row (its slots), so one pointer, one pitch and the
// slots' byte counts (16, fewer at the m or n edge, 0 past it) serve every whole k tile: a k
// tile's copies are pointer increments and cp.async, nothing else. The one k tile that ends
// past k (loaded first, see `mainloop`) takes `load_tail`, which bounds both axes.
// VEC: 16-byte cp.async (rows 16-byte aligned, a compile-time promise of the variant);
// otherwise element loads, any alignment. GATHER (k-contiguous A only): each slot's row is
// found through a `RowIndex` once per block tile, and keeps a pointer of its own.
template <class T, int ROWS, int COLS, int LD, int THREADS, bool K_COLS, bool VEC, bool GATHER = false>
struct TileCopy {
  using W = typename Word<sizeof(T)>::type;
  static constexpr int V = 16 / int(sizeof(T));
  static constexpr int PER_ROW = COLS / V;
  static constexpr int ROW_STEP = THREADS / PER_ROW;
  static constexpr int SLOTS = (ROWS + ROW_STEP - 1) / ROW_STEP;
  static constexpr int STEP = K_COLS ? COLS : ROWS;  // the k tile
  static_assert(COLS % V == 0 && THREADS % PER_ROW == 0, "a row is whole chunks, rows whole warps");
  static_assert(PER_ROW >= 8 || (THREADS % 32 == 0 && 32 % PER_ROW == 0),
                "a row shorter than 8 chunks is copied by whole warps");
  static_assert(!GATHER || K_COLS, "gathered rows are k-contiguous");

  const T* src;        // slot 0's chunk in the next whole k tile
  long long pitch;     // ROW_STEP rows of global memory, in elements
  long long advance;   // one k tile, in elements
  int dst;             // slot 0's chunk in a stage, in elements
  int r0, cc;          // slot 0's tile row and column
  int bytes[SLOTS];    // each slot's bytes in a whole k tile
  const T* at[GATHER ? SLOTS : 1];  // GATHER: each slot's chunk in the next whole k tile
  bool live;           // this thread has slot 0 (false only where ROW_STEP > ROWS)

  NCDC_DEVICE TileCopy(const T* g, long long ld, long long row0, long long col0, long long rows,
                       long long cols, const RowIndex& gathered = RowIndex{}) {
    if constexpr (PER_ROW < 8) {
      // A warp's 32 / PER_ROW rows, each 8 lanes along one chunk column of 8 of them: their
      // 8 stores fall in 8 bank groups (rows an odd number of chunks apart). Chunk by chunk
      // along a row, a row of 2 or 4 chunks and a pitch of 3 or 5 put two in one group.
      const int lane = int(threadIdx.x) % 32;
      r0 = int(threadIdx.x) / 32 * (32 / PER_ROW) + lane % 8 + 8 * (lane / (8 * PER_ROW));
      cc = (lane / 8) % PER_ROW * V;
    } else {
      r0 = int(threadIdx.x) / PER_ROW;
      cc = (int(threadIdx.x) % PER_ROW) * V;
    }
    live = ROWS % ROW_STEP == 0 || r0 < ROWS;
    src = g + (row0 + r0) * ld + col0 + cc;
    pitch = ROW_STEP * ld;
    advance = K_COLS ? STEP : STEP * ld;
    dst = r0 * LD + cc;
    // In a whole k tile only the m or n axis can end: the rows (K_COLS) or the columns.
    const long long left = cols - (col0 + cc);
    const int in_cols = K_COLS ? V : (left <= 0 ? 0 : (left < V ? int(left) : V));
#pragma unroll
    for (int i = 0; i < SLOTS; ++i) {
      const bool row_in = !K_COLS || row0 + r0 + i * ROW_STEP < rows;
      bytes[i] = row_in ? in_cols * int(sizeof(T)) : 0;
      if constexpr (GATHER) {
        long long row = 0;
        if (live && row_in) {
          row = ld_global(gathered.index + row0 + r0 + i * ROW_STEP);
          if (row < 0 || row >= gathered.rows) {
            *gathered.status = 1;  // every writer writes 1: no atomic needed
            bytes[i] = 0;
            row = 0;
          }
        }
        at[i] = g + row * ld + col0 + cc;
      }
    }
  }

  static NCDC_DEVICE void copy(T* d, const T* s, int n) {
    if constexpr (VEC) {
      cp_async_16_zfill(d, s, n);
    } else {
      W* dw = reinterpret_cast<W*>(d);
      const W* sw = reinterpret_cast<const W*>(s);
#pragma unroll
      for (int e = 0; e < V; ++e) dw[e] = e * int(sizeof(T)) < n ? ld_global(sw + e) : W(0);
    }
  }

  // Issues the copies of the next whole k tile into `stage` and steps to the one after.
  NCDC_DEVICE void load(T* stage) {
    if (!live) return;
    const T* s = src;
#pragma unroll
    for (int i = 0; i < SLOTS; ++i) {
      if (ROWS % ROW_STEP != 0 && r0 + i * ROW_STEP >= ROWS) break;
      if constexpr (GATHER) {
        copy(stage + dst + i * ROW_STEP * LD, at[i], bytes[i]);
        at[i] += advance;
      } else {
        copy(stage + dst + i * ROW_STEP * LD, s, bytes[i]);
        s += pitch;
      }
    }
    src += advance;
  }

  // Issues the copies of the k tile at offset k0 (its end past k: zeros beyond) into `stage`.
  NCDC_DEVICE void load_tail(T* stage, const T* g, long long ld, long long row0, long long col0,
                             long long rows, long long cols) const {
    if (!live) return;
    const long long left = cols - (col0 + cc);
    const int in_cols = left <= 0 ? 0 : (left < V ? int(left) : V);
#pragma unroll
    for (int i = 0; i < SLOTS; ++i) {
      if (ROWS % ROW_STEP != 0 && r0 + i * ROW_STEP >= ROWS) break;
      if constexpr (GATHER) {  // before any whole k tile: `at` is still at column 0
        const int n = bytes[i] ? in_cols * int(sizeof(T)) : 0;
        copy(stage + dst + i * ROW_STEP * LD, n ? at[i] + col0 : g, n);
        continue;
      }
      const long long row = row0 + r0 + i * ROW_STEP;
      const int n = row < rows ? in_cols * int(sizeof(T)) : 0;
      copy(stage + dst + i * ROW_STEP * LD, n ? g + row * ld + col0 + cc : g, n);
    }
  }
};

// The A and B copies of one block tile (m0, n0) of a tile type: `load` the next whole k tile,
// `load_tail` the partial one at k0; GATHER_A: A's rows through a `RowIndex`.
template <class Tile, class T, bool VEC_A, bool VEC_B, bool GATHER_A = false>
struct Copies {
  using A = TileCopy<T, Tile::A_ROWS, Tile::A_COLS, Tile::A_LD, Tile::THREADS, Tile::A_K_, VEC_A,
                     GATHER_A>;
  using TB = typename Tile::TypeB;  // B's storage type (int8 weights under 16-bit A)
  using B = TileCopy<TB, Tile::B_ROWS, Tile::B_COLS, Tile::B_LD, Tile::THREADS, Tile::B_K_, VEC_B>;
  A a;
  B b;

  // Copies start at k offset k0 (the first whole k tile).
  NCDC_DEVICE Copies(const T* ga, const TB* gb, const Shape& s, long long m0, long long n0,
                     long long k0, const RowIndex& gathered)
      : a(ga, s.lda, Tile::A_K_ ? m0 : k0, Tile::A_K_ ? k0 : m0, Tile::A_K_ ? s.m : s.k,
          Tile::A_K_ ? s.k : s.m, gathered),
        b(gb, s.ldb, Tile::B_K_ ? n0 : k0, Tile::B_K_ ? k0 : n0, Tile::B_K_ ? s.n : s.k,
          Tile::B_K_ ? s.k : s.n) {}

  // B's slots follow all of A's.
  static NCDC_DEVICE TB* stage_b(T* smem, int stage) {
    return reinterpret_cast<TB*>(smem + Tile::PIPE * Tile::A_STAGE) + stage * Tile::B_STAGE;
  }

  NCDC_DEVICE void load(T* smem, int stage) {
    a.load(smem + stage * Tile::A_STAGE);
    b.load(stage_b(smem, stage));
  }

  NCDC_DEVICE void load_tail(T* smem, int stage, const T* ga, const TB* gb, const Shape& s,
                             long long m0, long long n0, long long k0) const {
    T* sa = smem + stage * Tile::A_STAGE;
    TB* sb = stage_b(smem, stage);
    if (Tile::A_K_) a.load_tail(sa, ga, s.lda, m0, k0, s.m, s.k);
    else a.load_tail(sa, ga, s.lda, k0, m0, s.k, s.m);
    if (Tile::B_K_) b.load_tail(sb, gb, s.ldb, n0, k0, s.n, s.k);
    else b.load_tail(sb, gb, s.ldb, k0, n0, s.k, s.n);
  }
};

// ---- tensor-core instruction per input type ------------------------------------------------
// Acc: the accumulator type (fp32, or int32 for int8 inputs).
template <class T>
struct Mma;
template <>
struct Mma<__nv_bfloat16> {
  using Acc = float;
  static constexpr int K = 16;
  static NCDC_DEVICE void run(float* d, const uint32_t* a, const uint32_t* b) {
    mma_m16n8k16_bf16(d, a, b, d);
  }
};
template <>
struct Mma<__half> {
  using Acc = float;
  static constexpr int K = 16;
  static NCDC_DEVICE void run(float* d, const uint32_t* a, const uint32_t* b) {
    mma_m16n8k16_f16(d, a, b, d);
  }
};
// fp8 tensor cores exist from sm_89: an fp8 GEMM compiled for an older target does not
// compile (incomplete type) instead of failing at run time.
#if !defined(NCDC_GPU) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890)
template <>
struct Mma<__nv_fp8_e4m3> {
  using Acc = float;
  static constexpr int K = 32;
  static NCDC_DEVICE void run(float* d, const uint32_t* a, const uint32_t* b) {
    mma_m16n8k32_e4m3(d, a, b, d);
  }
};
template <>
struct Mma<__nv_fp8_e5m2> {
  using Acc = float;
  static constexpr int K = 32;
  static NCDC_DEVICE void run(float* d, const uint32_t* a, const uint32_t* b) {
    mma_m16n8k32_e5m2(d, a, b, d);
  }
};
#endif
// int8: exact int32 accumulation (sm_80 and later).
template <>
struct Mma<signed char> {
  using Acc = int;
  static constexpr int K = 32;
  static NCDC_DEVICE void run(int* d, const uint32_t* a, const uint32_t* b) {
    mma_m16n8k32_s8(d, a, b, d);
  }
};

// Four bytes of column `col` of a byte matrix in shared memory (pitch ld), rows row..row+3,
// packed low to high: an 8-bit fragment register read across the contiguous axis.
NCDC_DEVICE uint32_t gather_bytes(const void* smem, int ld, int row, int col) {
  const uint8_t* s = reinterpret_cast<const uint8_t*>(smem) + row * ld + col;
  return uint32_t(s[0]) | uint32_t(s[ld]) << 8 | uint32_t(s[2 * ld]) << 16 |
         uint32_t(s[3 * ld]) << 24;
}

// Two int8 weights as the 16-bit pair of an mma fragment register (low half = lo): exact,
// as every int8 is a bf16 and an fp16 value.
template <class T>
NCDC_DEVICE uint32_t widen_int8_pair(signed char lo, signed char hi);
template <>
NCDC_DEVICE uint32_t widen_int8_pair<__nv_bfloat16>(signed char lo, signed char hi) {
  return pack_bf16x2(float(lo), float(hi));
}
template <>
NCDC_DEVICE uint32_t widen_int8_pair<__half>(signed char lo, signed char hi) {
  return pack_f16x2(float(lo), float(hi));
}

// ---- tensor-core tile ------------------------------------------------------------------------
// A_K: A's contiguous axis is k (else m). B_K: B's contiguous axis is k (else n).
// TB: B's storage type. TB = T runs on T's tensor cores; TB = int8 with a 16-bit T is the
// weight-only GEMM: B stays int8 in shared memory (half the bytes of a 16-bit B) and each
// fragment is widened to T in registers (dequantised in the main loop: the per-column scale
// is exact to apply after the sum, in the epilogue).
template <class T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool A_K, bool B_K,
          class TB = T>
struct MmaTile {
  static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // warp tile
  static constexpr int MI = WM / 16, NI = WN / 8;             // mma tiles per warp
  using Acc = typename Mma<T>::Acc;
  static constexpr int KSTEP = Mma<T>::K;
  static constexpr int PAD = 16 / int(sizeof(T)), B_PAD = 16 / int(sizeof(TB));
  static constexpr int A_ROWS = A_K ? BM : BK, A_COLS = A_K ? BK : BM, A_LD = A_COLS + PAD;
  static constexpr int B_ROWS = B_K ? BN : BK, B_COLS = B_K ? BK : BN, B_LD = B_COLS + B_PAD;
  static constexpr int A_STAGE = A_ROWS * A_LD, B_STAGE = B_ROWS * B_LD;
  static constexpr int SMEM_BYTES = STAGES * (A_STAGE * int(sizeof(T)) + B_STAGE * int(sizeof(TB)));
  static constexpr bool BYTES8 = sizeof(T) == 1;
  static constexpr bool WIDEN_B = sizeof(TB) < sizeof(T);  // int8 weights, 16-bit activations
  using TypeB = TB;
  static_assert(!WIDEN_B || (sizeof(T) == 2 && sizeof(TB) == 1), "B widens from int8 to 16 bits");
  static constexpr int K_TILE = BK, PIPE = STAGES;
  static constexpr bool A_K_ = A_K, B_K_ = B_K;
  static constexpr int BM_ = BM, BN_ = BN;
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile is a multiple of 16 x 16");
  static_assert(BK % KSTEP == 0, "k tile is a multiple of the mma k");
  static_assert(STAGES >= 2, "the pipeline has at least two stages");

  Acc acc[MI][NI][4];

  NCDC_DEVICE void clear() {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = Acc(0);
  }

  // A fragment (16 x KSTEP) at warp row m, k offset kk.
  static NCDC_DEVICE void frag_a(uint32_t* a, const T* sa, int m, int kk, int lane) {
    const int r = lane & 7, j = lane >> 3;
    if constexpr (A_K) {
      ldmatrix_x4(a, sa + (m + r + 8 * (j & 1)) * A_LD + kk + (KSTEP / 2) * (j >> 1));
    } else if constexpr (!BYTES8) {
      ldmatrix_x4_trans(a, sa + (kk + r + 8 * (j >> 1)) * A_LD + m + 8 * (j & 1));
    } else {
      const int g = lane >> 2, t = lane & 3;
#pragma unroll
      for (int i = 0; i < 4; ++i)
        a[i] = gather_bytes(sa, A_LD, kk + 4 * t + 16 * (i >> 1), m + g + 8 * (i & 1));
    }
  }

  // Pipeline slot `stage` of B in shared memory, after every slot of A.
  static NCDC_DEVICE const TB* stage_b(const T* smem, int stage) {
    return reinterpret_cast<const TB*>(smem + STAGES * A_STAGE) + stage * B_STAGE;
  }

  // B fragments of two n8 tiles (KSTEP x 16) at warp column n, k offset kk.
  static NCDC_DEVICE void frag_b(uint32_t* b0, uint32_t* b1, const TB* sb, int n, int kk, int lane) {
    const int r = lane & 7, j = lane >> 3;
    if constexpr (WIDEN_B) {
      // Register h of an n8 tile holds rows (k) 2t + 8h and 2t + 8h + 1 of column (n) g.
      const int g = lane >> 2, t = lane & 3;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int k = kk + 2 * t + 8 * h;
        const int i0 = B_K ? (n + g) * B_LD + k : k * B_LD + n + g;
        const int i1 = B_K ? (n + 8 + g) * B_LD + k : k * B_LD + n + 8 + g;
        const int next = B_K ? 1 : B_LD;  // the following k
        b0[h] = widen_int8_pair<T>(sb[i0], sb[i0 + next]);
        b1[h] = widen_int8_pair<T>(sb[i1], sb[i1 + next]);
      }
    } else if constexpr (B_K || !BYTES8) {
      uint32_t x[4];
      if constexpr (B_K) ldmatrix_x4(x, sb + (n + r + 8 * (j >> 1)) * B_LD + kk + (KSTEP / 2) * (j & 1));
      else ldmatrix_x4_trans(x, sb + (kk + r + 8 * (j & 1)) * B_LD + n + 8 * (j >> 1));
      b0[0] = x[0];
      b0[1] = x[1];
      b1[0] = x[2];
      b1[1] = x[3];
    } else {
      const int g = lane >> 2, t = lane & 3;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        b0[i] = gather_bytes(sb, B_LD, kk + 4 * t + 16 * i, n + g);
        b1[i] = gather_bytes(sb, B_LD, kk + 4 * t + 16 * i, n + 8 + g);
      }
    }
  }

  // Multiplies the k tile in pipeline slot `stage` into the accumulators.
  NCDC_DEVICE void compute(const T* smem, int stage) {
    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
    const T* sa = smem + stage * A_STAGE;
    const TB* sb = stage_b(smem, stage);
    // Byte-gathered fragments: one k step at a time, or the loads of all steps stay live.
    constexpr int UNROLL = (BYTES8 && !(A_K && B_K)) ? 1 : BK / KSTEP;
#pragma unroll UNROLL
    for (int kk = 0; kk < BK; kk += KSTEP) {
      if constexpr (BYTES8 && !B_K) {
        // B gathered byte by byte: all A fragments, then one B fragment at a time.
        const int g = lane >> 2, t = lane & 3;
        uint32_t a[MI][4];
#pragma unroll
        for (int i = 0; i < MI; ++i) frag_a(a[i], sa, wm + 16 * i, kk, lane);
#pragma unroll
        for (int j = 0; j < NI; ++j) {
          uint32_t b[2];
#pragma unroll
          for (int h = 0; h < 2; ++h) b[h] = gather_bytes(sb, B_LD, kk + 4 * t + 16 * h, wn + 8 * j + g);
#pragma unroll
          for (int i = 0; i < MI; ++i) Mma<T>::run(acc[i][j], a[i], b);
        }
        continue;
      }
      // All B fragments of the step, then one A fragment at a time: fewer live registers.
      uint32_t b[NI][2];
#pragma unroll
      for (int j = 0; j < NI; j += 2) frag_b(b[j], b[j + 1], sb, wn + 8 * j, kk, lane);
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        uint32_t a[4];
        frag_a(a, sa, wm + 16 * i, kk, lane);
#pragma unroll
        for (int j = 0; j < NI; ++j) Mma<T>::run(acc[i][j], a, b[j]);
      }
    }
  }

  // Calls out(row, col, acc) for this thread's elements, in adjacent column pairs.
  template <class Out>
  NCDC_DEVICE void for_each_pair(long long m0, long long n0, Out&& out) const {
    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    const long long row = m0 + (warp / WARPS_N) * WM + (lane >> 2);
    const long long col = n0 + (warp % WARPS_N) * WN + 2 * (lane & 3);
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          out(row + 16 * i + 8 * h, col + 8 * j, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
  }
};

// ---- CUDA-core tile (fp32) -------------------------------------------------------------------
// Thread (tx, ty) owns rows ty + TY*i and columns tx + TX*j: the shared-memory reads of a warp
// are then broadcasts or consecutive words, and its stores to C consecutive columns.
template <int BM, int BN, int BK, int NTHREADS, int TM, int TN, int STAGES, bool A_K, bool B_K>
struct SimtTile {
  using T = float;
  using TypeB = float;
  static constexpr int THREADS = NTHREADS;
  static constexpr int TX = BN / TN, TY = BM / TM;
  static constexpr int PAD = 4;
  static constexpr int A_ROWS = A_K ? BM : BK, A_COLS = A_K ? BK : BM, A_LD = A_COLS + PAD;
  static constexpr int B_ROWS = B_K ? BN : BK, B_COLS = B_K ? BK : BN, B_LD = B_COLS + PAD;
  static constexpr int A_STAGE = A_ROWS * A_LD, B_STAGE = B_ROWS * B_LD;
  static constexpr int SMEM_BYTES = STAGES * (A_STAGE + B_STAGE) * int(sizeof(T));
  static_assert(TX * TY == THREADS && TX * TN == BN && TY * TM == BM, "thread tile covers the block");
  static constexpr int K_TILE = BK, PIPE = STAGES;
  static constexpr bool A_K_ = A_K, B_K_ = B_K;
  static_assert(BK % 8 == 0, "k tile is a multiple of 8");

  float acc[TM][TN];

  NCDC_DEVICE void clear() {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
  }

  NCDC_DEVICE void compute(const T* smem, int stage) {
    const int tx = int(threadIdx.x) % TX, ty = int(threadIdx.x) / TX;
    const T* sa = smem + stage * A_STAGE;
    const T* sb = smem + STAGES * A_STAGE + stage * B_STAGE;
#pragma unroll 4
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int m = ty + TY * i;
        a[i] = A_K ? sa[m * A_LD + kk] : sa[kk * A_LD + m];
      }
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int n = tx + TX * j;
        b[j] = B_K ? sb[n * B_LD + kk] : sb[kk * B_LD + n];
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
  }

  // Calls out(row, col, v) for this thread's elements.
  template <class Out>
  NCDC_DEVICE void for_each(long long m0, long long n0, Out&& out) const {
    const int tx = int(threadIdx.x) % TX, ty = int(threadIdx.x) / TX;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) out(m0 + ty + TY * i, n0 + tx + TX * j, acc[i][j]);
  }
};

// ---- the block's work --------------------------------------------------------------------------

// Runs the k loop of the block tile at (m0, n0): STAGES-1 k tiles in flight while one is
// multiplied; one barrier per k tile (it also frees the slot the next copy overwrites). The
// k tile that ends past k, if any, is loaded first, so every copy the loop issues is of a
// whole k tile (the sums over k are taken in another order, which fp32 accumulation allows).
template <bool VEC_A, bool VEC_B, bool GATHER_A, class Tile, class T>
NCDC_DEVICE void mainloop(Tile& tile, const T* A, const typename Tile::TypeB* B, const Shape& s,
                          long long m0, long long n0, const RowIndex& gathered) {
  constexpr int bk = Tile::K_TILE, stages = Tile::PIPE;
  T* smem = dynamic_smem<T>();
  const int ktiles = int((s.k + bk - 1) / bk);  // k < 2^31
  const int tail = int(s.k % bk != 0);
  Copies<Tile, T, VEC_A, VEC_B, GATHER_A> copies(A, B, s, m0, n0, 0, gathered);
  tile.clear();
#pragma unroll
  for (int st = 0; st < stages - 1; ++st) {
    if (st == 0 && tail) copies.load_tail(smem, 0, A, B, s, m0, n0, (ktiles - 1) * (long long)bk);
    else if (st < ktiles) copies.load(smem, st);
    cp_async_commit();
  }
  int read = 0, write = stages - 1;  // pipeline slots: multiplied now, filled now
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<stages - 2>();
    __syncthreads();
    if (kt + stages - 1 < ktiles) copies.load(smem, write);
    cp_async_commit();
    tile.compute(smem, read);
    read = read + 1 == stages ? 0 : read + 1;
    write = write + 1 == stages ? 0 : write + 1;
  }
  cp_async_wait<0>();
  __syncthreads();  // shared memory is free for the block's next tile
}

template <class TC>
NCDC_DEVICE void store_one(TC* p, float v) {
  st_global(p, from_float<TC>(v));
}

// The stored value of one accumulator: through the epilogue in fp32 (an int32 accumulator
// converted first: exact below 2^24, the dequantised GEMM), or, when `Epi::EXACT` (an int32
// C with nothing after the contraction), the accumulator itself.
template <class TC, class Epi, class Acc>
NCDC_DEVICE TC output_value(const Epi& epi, Acc a, long long row, long long col) {
  if constexpr (Epi::EXACT) return TC(a);
  else return from_float<TC>(epi(float(a), row, col));
}

// Two adjacent outputs of C at (row, col) and (row, col + 1), through the epilogue; one
// vector store when C's n pitch is 1 and the pair is aligned.
template <class TC, class Epi, class Acc>
NCDC_DEVICE void store_pair(TC* C, const Shape& s, bool vec_c, const Epi& epi, long long row,
                            long long col, Acc a0, Acc a1) {
  using W = typename Word<sizeof(TC)>::type;
  if (row >= s.m || col >= s.n) return;
  TC* p = C + row * s.ldc_m + col * s.ldc_n;
  const TC c0 = output_value<TC>(epi, a0, row, col);
  if (col + 1 >= s.n) {
    st_global(p, c0);
    return;
  }
  const TC c1 = output_value<TC>(epi, a1, row, col + 1);
  if constexpr (sizeof(TC) >= 2) {
    if (vec_c) {
      const W w0 = *reinterpret_cast<const W*>(&c0), w1 = *reinterpret_cast<const W*>(&c1);
      if constexpr (sizeof(TC) == 2) st_global_v4(p, uint32_t(w0) | uint32_t(w1) << 16);
      else st_global_v8(p, make_uint2(w0, w1));
      return;
    }
  }
  st_global(p, c0);
  st_global(p + s.ldc_n, c1);
}

// C through shared memory: each warp writes its accumulators, already through the epilogue
// and converted to TC, into a BM x BN tile (rows padded by 16 bytes: the 8 rows a warp
// writes at once fall in 8 different bank groups); then the block stores whole 16-byte
// runs of C rows, coalesced. Needs the tile to fit in the mainloop's shared memory.
template <class Tile, class TC>
struct StagedC {
  static constexpr int V = 16 / int(sizeof(TC));
  static constexpr int LD = Tile::BN_ + V;
  static constexpr int BYTES = Tile::BM_ * LD * int(sizeof(TC));
  static constexpr bool FITS = BYTES <= Tile::SMEM_BYTES;
};

template <class Tile, class TC, class Epi>
NCDC_DEVICE void store_staged(const Tile& tile, TC* C, const Shape& s, const Epi& epi,
                              long long m0, long long n0) {
  using W = typename Word<sizeof(TC)>::type;
  using S = StagedC<Tile, TC>;
  TC* smem = dynamic_smem<TC>();
  using Acc = typename Tile::Acc;
  tile.for_each_pair(0, 0, [&](long long r, long long c, Acc a0, Acc a1) {
    const long long row = m0 + r, col = n0 + c;
    const bool in = row < s.m;
    const TC zero = from_float<TC>(0.0f);
    const TC c0 = in && col < s.n ? output_value<TC>(epi, a0, row, col) : zero;
    const TC c1 = in && col + 1 < s.n ? output_value<TC>(epi, a1, row, col + 1) : zero;
    W* d = reinterpret_cast<W*>(smem + r * S::LD + c);
    d[0] = *reinterpret_cast<const W*>(&c0);
    d[1] = *reinterpret_cast<const W*>(&c1);
  });
  __syncthreads();
  const bool vec_c = s.ldc_n == 1 && s.ldc_m % S::V == 0 && is_aligned(C, 16);
  constexpr int PER_ROW = Tile::BN_ / S::V, CHUNKS = Tile::BM_ * PER_ROW;
  for (int i = int(threadIdx.x); i < CHUNKS; i += Tile::THREADS) {
    const int r = i / PER_ROW, c = (i % PER_ROW) * S::V;
    const long long row = m0 + r, col = n0 + c;
    if (row >= s.m || col >= s.n) continue;
    const TC* src = smem + r * S::LD + c;
    TC* dst = C + row * s.ldc_m + col * s.ldc_n;
    if (vec_c && col + S::V <= s.n) {
      st_global_v16(dst, *reinterpret_cast<const uint4*>(src));
    } else {
      const int n = int(s.n - col < S::V ? s.n - col : S::V);
      for (int e = 0; e < n; ++e) st_global(dst + e * s.ldc_n, src[e]);
    }
  }
  __syncthreads();  // shared memory is free for the block's next tile
}

// The block tile of block (blockIdx.x, blockIdx.y), in grouped order for L2 reuse: blocks
// run in launch order (x fastest), and consecutive blocks walk GROUP_M tile rows down one
// tile column before the next column, so a wave shares a few A row panels and B column
// panels instead of sweeping one row of tiles across all of B (Triton's grouped ordering).
// The grid is the plain (n tiles, m tiles); only the assignment changes.
template <int GROUP_M>
NCDC_DEVICE void grouped_tile(long long& tile_m, long long& tile_n) {
  const long long tiles_n = gridDim.x, tiles_m = gridDim.y;
  const long long pid = (long long)blockIdx.y * tiles_n + blockIdx.x;
  const long long per_group = GROUP_M * tiles_n;
  const long long first_m = pid / per_group * GROUP_M;
  const long long rows = tiles_m - first_m < GROUP_M ? tiles_m - first_m : GROUP_M;
  tile_m = first_m + pid % per_group % rows;
  tile_n = pid % per_group / rows;
}

// ---- grouped GEMMs (a mixture of experts) ----------------------------------------------------
// Rows of A come in runs, run g ending at row ends[g] (ends[-1] = 0), and run g multiplies
// slice g of B; rows after the last run are a run of their own with no B (their C is the
// epilogue of 0). Each run takes whole block tiles of its own, in order: a run of r rows
// ceil(r / BM) of them, so a grid of (T + (G + 1) (BM - 1)) / BM tile rows covers any ends,
// and a block whose tile lies past the last run's has nothing to do.
struct RowRun {
  long long group;  // the run's slice of B; -1 for the rows after the last run
  long long start;  // its first row
  long long rows;   // its rows
  long long m0;     // the block tile's first row within the run
};

// The run of tile row `tile` of a grouped GEMM over `total` rows, or false where the tile
// lies past them. An end below the one before is taken as that one (an empty run), one past
// the rows as their end: no row is read twice or outside A (`check_ends` reports them). The
// first warp walks the ends 32 runs at a time (a running max, then a running sum of their
// tiles, by shuffles) and hands the run to the block through shared memory; every thread
// of the block calls it (it holds a barrier).
template <int BM>
NCDC_DEVICE bool find_run(const int* ends, long long groups, long long total, long long tile,
                          RowRun& run) {
  __shared__ long long found[4];  // group (-2: past every run), start, rows, m0
  if (threadIdx.x < 32) {
    const int lane = int(threadIdx.x);
    long long start = 0, before = 0;  // rows and tiles of the chunks of runs before
    long long hit[4] = {-2, 0, 0, 0};
    for (long long g0 = 0; g0 <= groups; g0 += 32) {
      const long long g = g0 + lane;
      long long end = g < groups ? (long long)ld_global(ends + g) : total;
      end = end > total ? total : (end < start ? start : end);
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {  // the running max: each end at least the ones before
        const long long o = __shfl_up_sync(0xffffffffu, end, d);
        if (lane >= d && o > end) end = o;
      }
      long long first = __shfl_up_sync(0xffffffffu, end, 1);
      if (lane == 0) first = start;
      const long long tiles = g <= groups ? (end - first + BM - 1) / BM : 0;
      long long sum = tiles;  // tiles of this chunk's runs up to this lane's
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const long long o = __shfl_up_sync(0xffffffffu, sum, d);
        if (lane >= d) sum += o;
      }
      const unsigned mine = __ballot_sync(0xffffffffu, before + sum > tile);
      if (mine) {
        const int l = __ffs(int(mine)) - 1;
        const long long group = __shfl_sync(0xffffffffu, g, l);
        const long long lo = __shfl_sync(0xffffffffu, first, l);
        const long long hi = __shfl_sync(0xffffffffu, end, l);
        const long long earlier = before + __shfl_sync(0xffffffffu, sum - tiles, l);
        hit[0] = group < groups ? group : -1;
        hit[1] = lo;
        hit[2] = hi - lo;
        hit[3] = (tile - earlier) * BM;
        break;
      }
      before += __shfl_sync(0xffffffffu, sum, 31);
      start = __shfl_sync(0xffffffffu, end, 31);
    }
    if (lane == 0)
      for (int i = 0; i < 4; ++i) found[i] = hit[i];
  }
  __syncthreads();
  run = RowRun{found[0], found[1], found[2], found[3]};
  return found[0] != -2;
}

// Sets *status where an end is below the one before (the first below 0) or past the rows;
// the host then names the first such entry. One block checks them all, its threads apart.
NCDC_DEVICE void check_ends(const int* ends, long long groups, long long total, int* status) {
  for (long long g = threadIdx.x; g < groups; g += blockDim.x) {
    const int end = ld_global(ends + g), before = g ? ld_global(ends + g - 1) : 0;
    if (end < before || end > total) *status = 1;  // every writer writes 1: no atomic needed
  }
}

// One block tile of C = epi(A B) on tensor cores (GATHER_A: A's rows through `gathered`).
template <bool VEC_A, bool VEC_B, bool GATHER_A = false, class Tile, class T, class TC, class Epi>
NCDC_DEVICE void run_mma(Tile& tile, const T* A, const typename Tile::TypeB* B, TC* C, const Shape& s,
                         long long m0, long long n0, const Epi& epi,
                         const RowIndex& gathered = RowIndex{}) {
  using Acc = typename Tile::Acc;
  mainloop<VEC_A, VEC_B, GATHER_A>(tile, A, B, s, m0, n0, gathered);
  if constexpr (StagedC<Tile, TC>::FITS) {
    store_staged(tile, C, s, epi, m0, n0);
  } else {
    const bool vec_c = s.ldc_n == 1 && s.ldc_m % 2 == 0 && is_aligned(C, 2 * sizeof(TC));
    tile.for_each_pair(m0, n0, [&](long long row, long long col, Acc a0, Acc a1) {
      store_pair(C, s, vec_c, epi, row, col, a0, a1);
    });
  }
}

// One block tile of C = epi(A B) on CUDA cores.
template <bool VEC_A, bool VEC_B, bool GATHER_A = false, class Tile, class TC, class Epi>
NCDC_DEVICE void run_simt(Tile& tile, const float* A, const float* B, TC* C, const Shape& s,
                          long long m0, long long n0, const Epi& epi,
                          const RowIndex& gathered = RowIndex{}) {
  mainloop<VEC_A, VEC_B, GATHER_A>(tile, A, B, s, m0, n0, gathered);
  tile.for_each(m0, n0, [&](long long row, long long col, float a) {
    if (row < s.m && col < s.n) store_one(C + row * s.ldc_m + col * s.ldc_n, epi(a, row, col));
  });
}


}  // namespace gemm
}  // namespace ncdc

#endif  // NCDC_GEMM_CUH
