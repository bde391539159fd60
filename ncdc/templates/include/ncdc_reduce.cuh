// Reductions, softmax and norms over any axes of a tensor: a column softmax of X[m, n] over
// m, a whole-tensor max to a scalar, a sum over the leading axes to a vector.
//
// The operand is seen as KEPT x N: k flattens the axes the op keeps, j the axes it reduces
// (each in the operand's memory order, so consecutive k, or consecutive j when the operand's
// last axis is reduced, are consecutive addresses). A block of THREADS threads is TX kept
// indices (threadIdx.x % TX, coalesced across the kept axis when it is the contiguous one)
// by TY = THREADS / TX slices of the reduced range; with VEC > 1 each of the TX is VEC
// consecutive kept indices, loaded and stored as one 16-byte vector a tensor (a column
// reduction of 2-byte values then issues one load for 8 columns, not 8). A thread takes HOLD values at a time,
// element h of chunk c being j = ((c * SPLITS + g) * HOLD + h) * TY + ty, for split g
// (blockIdx.y); when its share fits in one chunk the values stay in registers between the
// statistics and the output, else the output pass reads them again. The TY partial
// statistics are merged through shared memory in a fixed tree over ty (a longer share may be
// held in shared memory instead of read again: STAGE_ROWS), and SPLITS > 1 blocks
// per kept index (reductions only) write fp32 partials that a second kernel merges in the
// order of g: the result does not depend on scheduling.
//
// The statistics are rowwise's (`Running`, `accumulate`, `Stats`, `finish_value`); the
// `Io` class from the template knows the tensors: `begin(k)`, `source(j)`, `finish(j, y,
// stat)` per element (`source_vec` and `finish_vec` for VEC of them) and `finish_row(stat)`
// per kept index.
#pragma once
#ifndef NCDC_REDUCE_CUH
#define NCDC_REDUCE_CUH

namespace ncdc {
namespace reduce {

using rowwise::Running;
using rowwise::Stats;

template <int KIND>
NCDC_DEVICE Running start() {
  return Running{KIND == rowwise::kMax || rowwise::kExpSum<KIND> ? negative_infinity() : 0.0f, 0.0f, 0.0f};
}

// a <- the statistics of a's values and b's together.
template <int KIND>
NCDC_DEVICE void combine(Running& a, const Running& b) {
  if constexpr (rowwise::kExpSum<KIND>) {
    const float m = fmaxf(a.m, b.m);
    const float base = m == negative_infinity() ? 0.0f : m;
    const float sa = a.m == negative_infinity() ? 0.0f : a.s * expf(a.m - base);
    const float sb = b.m == negative_infinity() ? 0.0f : b.s * expf(b.m - base);
    // a NaN sum stays NaN (the max ignores NaN, as rowwise's does)
    a.s = (a.s != a.s ? a.s : sa) + (b.s != b.s ? b.s : sb);
    a.m = m;
  } else if constexpr (KIND == rowwise::kLayernorm) {
    if (b.c == 0.0f) return;
    if (a.c == 0.0f) {
      a = b;
      return;
    }
    // Chan et al.: the merged mean and sum of squared deviations, exactly.
    const float c = a.c + b.c;
    const float d = b.m - a.m;
    a.m += d * (b.c / c);
    a.s += b.s + d * d * (a.c * b.c / c);
    a.c = c;
  } else if constexpr (KIND == rowwise::kMax) {
    a.m = op_max(a.m, b.m);
  } else {
    a.s += b.s;
  }
}

template <int KIND>
NCDC_DEVICE Stats final_stats(const Running& r, long long n, float eps) {
  Stats s;
  if constexpr (rowwise::kExpSum<KIND>) {
    s.a = r.m == negative_infinity() ? 0.0f : r.m;
    if constexpr (KIND == rowwise::kSoftmax) s.b = rowwise::softmax_inverse(r.s);
    else if constexpr (KIND == rowwise::kLogSoftmax) s.b = logf(r.s);
    else s.stat = s.a + logf(r.s);
  } else if constexpr (KIND == rowwise::kLayernorm) {
    s.a = r.m;
    s.b = rsqrtf(r.s * rowwise::fast_rcp(float(n)) + eps);
  } else if constexpr (KIND == rowwise::kRmsnorm) {
    s.b = rsqrtf(r.s * rowwise::fast_rcp(float(n)) + eps);
  } else if constexpr (KIND == rowwise::kMax) {
    s.stat = r.m;
  } else {
    s.stat = r.s;
    if constexpr (KIND == rowwise::kMean) s.stat *= rowwise::fast_rcp(float(n));
  }
  return s;
}

NCDC_DEVICE void put(float* p, const Running& r) {
  p[0] = r.m;
  p[1] = r.s;
  p[2] = r.c;
}
NCDC_DEVICE Running get(const float* p) { return Running{p[0], p[1], p[2]}; }

// A thread's VEC staged values go to shared memory as whole 16-byte vectors (the stage
// starts 16-byte aligned: 12 (THREADS + TX) VEC bytes in).
template <int VEC, class StageT>
constexpr bool kVectorStage = VEC > 1 && VEC * int(sizeof(StageT)) % 16 == 0;

// The thread's VEC consecutive kept indices' values at reduced index j: one vector load a
// tensor (Io::source_vec) where VEC > 1.
template <int VEC, class Io>
NCDC_DEVICE void fetch(const Io& io, long long j, float (&v)[VEC]) {
  if constexpr (VEC == 1) v[0] = io.source(j);
  else io.source_vec(j, v);
}

// The per-element outputs at reduced index j of the thread's VEC kept indices, from their
// statistics and values (element h of each of `x`).
template <int KIND, int VEC, class Io, int HOLD>
NCDC_DEVICE void finish(const Io& io, long long j, const Stats (&s)[VEC], const float (&x)[VEC][HOLD], int h) {
  if constexpr (VEC == 1) {
    io.finish(j, rowwise::finish_value<KIND>(s[0], x[0][h]), s[0].stat);
  } else {
    float y[VEC], stat[VEC];
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      y[v] = rowwise::finish_value<KIND>(s[v], x[v][h]);
      stat[v] = s[v].stat;
    }
    io.finish_vec(j, y, stat);
  }
}

// One block of TX x VEC kept indices (VEC consecutive ones a thread: Io::source_vec and
// finish_vec load and store them as one vector). Dynamic shared memory: 3 * THREADS * VEC
// floats of partial statistics, then 3 * TX * VEC of the merged ones, then the staged
// columns. `partial` (SPLITS > 1): 3 floats per (split, kept index). TX and THREADS are
// powers of two.
template <int KIND, int THREADS, int TX, int HOLD, int SPLITS, int STAGE_ROWS, class StageT, int VEC, class Io>
NCDC_DEVICE void run_block(Io& io, long long kept, long long n, float* partial, long long kb) {
  constexpr int TY = THREADS / TX;
  const int tx = int(threadIdx.x) % TX;
  const int ty = int(threadIdx.x) / TX;
  const long long k = (kb * TX + tx) * VEC;  // kept is a multiple of VEC (run's caller)
  const bool active = k < kept;
  const long long g = blockIdx.y;
  io.begin(active ? k : 0);
  const long long per_chunk = (long long)SPLITS * HOLD * TY;
  const long long chunks = (n + per_chunk - 1) / per_chunk;
  float* smem = dynamic_smem<float>();
  // The block's columns in shared memory, element (j, tx, v) at (j * TX + tx) * VEC + v (a
  // warp's 32 threads touch consecutive words), when they fit where the plan put them.
  StageT* stage = reinterpret_cast<StageT*>(smem + 3 * THREADS * VEC + 3 * TX * VEC);
  const bool staged = STAGE_ROWS > 0 && n <= STAGE_ROWS && chunks > 1;
  Running r[VEC];
#pragma unroll
  for (int v = 0; v < VEC; ++v) r[v] = start<KIND>();
  float x[VEC][HOLD];
  int count = 0;
  for (long long c = 0; c < chunks && active; ++c) {
    const long long j0 = (c * SPLITS + g) * HOLD * TY + ty;
    count = 0;
    // Every load of the chunk is issued before any value is used (staged or summed): one
    // round trip to memory a chunk, not one a value.
#pragma unroll
    for (int h = 0; h < HOLD; ++h) {
      const long long j = j0 + (long long)h * TY;
      float got[VEC];
#pragma unroll
      for (int v = 0; v < VEC; ++v) got[v] = 0.0f;
      if (j < n) {
        fetch<VEC>(io, j, got);
        count = h + 1;
      }
#pragma unroll
      for (int v = 0; v < VEC; ++v) x[v][h] = got[v];
    }
    if (STAGE_ROWS > 0 && staged) {
#pragma unroll
      for (int h = 0; h < HOLD; ++h)
        if (h < count) {
          StageT* at = stage + ((j0 + (long long)h * TY) * TX + tx) * VEC;
          if constexpr (kVectorStage<VEC, StageT>) {
            float row[VEC];
#pragma unroll
            for (int v = 0; v < VEC; ++v) row[v] = x[v][h];
            store_shared_vec<VEC>(at, row);
          } else {
#pragma unroll
            for (int v = 0; v < VEC; ++v) at[v] = from_float<StageT>(x[v][h]);
          }
        }
    }
#pragma unroll
    for (int v = 0; v < VEC; ++v) rowwise::accumulate<KIND, HOLD>(r[v], x[v], count);
  }
  // The partial statistics as three arrays, entry (v, y, tx) at (v * TY + y) * TX + tx (a
  // warp's stores of one statistic hit consecutive words), merged over y in a fixed tree:
  // at each step entry y takes y + step's (y a multiple of 2 step), the block's threads
  // sharing the pairs of its TX * VEC columns, log2 TY barriers.
  static_assert((TY & (TY - 1)) == 0, "the tree halves the slices");
  constexpr int ENTRIES = THREADS * VEC, COLS = TX * VEC;
  float* const pm = smem;
  float* const ps = smem + ENTRIES;
  float* const pc = smem + 2 * ENTRIES;
#pragma unroll
  for (int v = 0; v < VEC; ++v) {
    const int e = (v * TY + ty) * TX + tx;
    pm[e] = r[v].m;
    ps[e] = r[v].s;
    pc[e] = r[v].c;
  }
  __syncthreads();
  for (int step = 1; step < TY; step *= 2) {
    const int half = TY / (2 * step), pairs = COLS * half;
    for (int i = int(threadIdx.x); i < pairs; i += THREADS) {
      // pair i: tx fastest, then y, then v (a warp's lanes read words 2 step TX apart)
      const int x = i % TX, y = (i / TX) % half * 2 * step, v = i / (TX * half);
      const int a = (v * TY + y) * TX + x, b = a + step * TX;
      Running ra{pm[a], ps[a], pc[a]};
      combine<KIND>(ra, Running{pm[b], ps[b], pc[b]});
      pm[a] = ra.m;
      ps[a] = ra.s;
      pc[a] = ra.c;
    }
    __syncthreads();
  }
  float* merged = smem + 3 * ENTRIES;
  if (ty == 0) {
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      const int e = v * TY * TX + tx;
      const Running all{pm[e], ps[e], pc[e]};
      if constexpr (SPLITS > 1) {
        if (active) put(partial + 3 * (g * kept + k + v), all);
      } else {
        const Stats s = final_stats<KIND>(all, n, Io::kEps);
        merged[3 * (tx * VEC + v)] = s.a;
        merged[3 * (tx * VEC + v) + 1] = s.b;
        merged[3 * (tx * VEC + v) + 2] = s.stat;
      }
    }
  }
  __syncthreads();  // the partials are read before the next kept block rewrites them
  if constexpr (SPLITS == 1) {
    Stats s[VEC];
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      s[v].a = merged[3 * (tx * VEC + v)];
      s[v].b = merged[3 * (tx * VEC + v) + 1];
      s[v].stat = merged[3 * (tx * VEC + v) + 2];
    }
    if constexpr (Io::kPerElement) {
      if (chunks == 1 && active) {
#pragma unroll
        for (int h = 0; h < HOLD; ++h)
          if (h < count) finish<KIND, VEC>(io, ty + (long long)h * TY, s, x, h);
      } else {
        for (long long c = 0; c < chunks && active; ++c) {
          const long long j0 = c * HOLD * TY + ty;
          // the chunk's values read first, then its outputs: one round trip a chunk
          float w[VEC][HOLD];
#pragma unroll
          for (int h = 0; h < HOLD; ++h) {
            const long long j = j0 + (long long)h * TY;
            float got[VEC];
#pragma unroll
            for (int v = 0; v < VEC; ++v) got[v] = 0.0f;
            // each thread reads back only what it staged itself: no barrier needed
            if (j < n) {
              if (STAGE_ROWS > 0 && staged) {
                const StageT* at = stage + (j * TX + tx) * VEC;
                if constexpr (kVectorStage<VEC, StageT>) {
                  load_shared_vec<VEC>(at, got);
                } else {
#pragma unroll
                  for (int v = 0; v < VEC; ++v) got[v] = to_float(at[v]);
                }
              } else {
                fetch<VEC>(io, j, got);
              }
            }
#pragma unroll
            for (int v = 0; v < VEC; ++v) w[v][h] = got[v];
          }
#pragma unroll
          for (int h = 0; h < HOLD; ++h)
            if (j0 + (long long)h * TY < n) finish<KIND, VEC>(io, j0 + (long long)h * TY, s, w, h);
        }
      }
    }
    if constexpr (Io::kPerRow) {
      if (active && ty == 0)
#pragma unroll
        for (int v = 0; v < VEC; ++v) {
          if (VEC > 1) io.begin(k + v);
          io.finish_row(s[v].stat);
        }
    }
    __syncthreads();  // the merged statistics are read before the next kept block's
  }
}

// The first kernel: a grid-stride loop over blocks of TX x VEC kept indices (every thread
// of a block runs the same iterations, so its barriers are uniform). VEC > 1 needs the
// innermost kept axis (`inner` long) a multiple of VEC, so that a thread's indices are
// consecutive in every tensor: at other sizes the kernel takes one index a thread.
// STAGE_ROWS > 0: columns of up to that length are held in shared memory as StageT
// between the statistics and the output, instead of being read again from global memory.
template <int KIND, int THREADS, int TX, int HOLD, int SPLITS, int STAGE_ROWS, class StageT, int VEC, class Io>
NCDC_DEVICE void run(Io& io, long long kept, long long n, float* partial, long long inner) {
  // the fallback keeps the block's TX x VEC columns, one a thread (coalesced as widely)
  constexpr int WIDE = THREADS % (TX * VEC) == 0 ? TX * VEC : TX;
  if (VEC > 1 && inner % VEC == 0) {
    for (long long kb = blockIdx.x; kb * TX * VEC < kept; kb += gridDim.x)
      run_block<KIND, THREADS, TX, HOLD, SPLITS, STAGE_ROWS, StageT, VEC>(io, kept, n, partial, kb);
  } else {
    for (long long kb = blockIdx.x; kb * WIDE < kept; kb += gridDim.x)
      run_block<KIND, THREADS, WIDE, HOLD, SPLITS, STAGE_ROWS, StageT, 1>(io, kept, n, partial, kb);
  }
}

// The second kernel of SPLITS > 1: one thread per kept index merges its partials in split
// order and writes the per-kept outputs.
template <int KIND, int SPLITS, class Io>
NCDC_DEVICE void merge(Io& io, long long kept, long long n, const float* partial) {
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < kept;
       k += (long long)gridDim.x * blockDim.x) {
    io.begin(k);
    Running all = get(partial + 3 * k);
    for (int g = 1; g < SPLITS; ++g) combine<KIND>(all, get(partial + 3 * ((long long)g * kept + k)));
    io.finish_row(final_stats<KIND>(all, n, Io::kEps).stat);
  }
}

}  // namespace reduce
}  // namespace ncdc

#endif  // NCDC_REDUCE_CUH
