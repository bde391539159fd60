// Row-wise kernels: softmax, log-softmax, layernorm, rmsnorm and sum/max/mean/logsumexp over
// the last axis, with elementwise ops before and after, in one kernel.
//
// A block holds ROWS row groups of TPR threads (TPR a multiple of 32); a group owns one row
// at a time (grid-stride over rows). A thread holds VPT runs of V elements of the row: on
// the vector path run k is the V contiguous columns starting at (k * TPR + t) * V (16-byte
// loads, coalesced across the warp), shifted to the row's first V-aligned column, with the
// columns before it and after the last whole run as two short runs (see Layout); on the
// scalar path (a row shorter than V, or an unaligned pointer) element j of run k is column
// (k * V + j) * TPR + t (still coalesced).
// Statistics are reduced with warp shuffles, then across the group's warps through shared
// memory. Math is fp32.
//
// A row of up to TPR * VPT runs is read from global memory once and stays in
// registers between its statistics and its output (layernorm's variance is then a second
// pass over the registers, around the exact mean). A longer row does not fit: it is read
// twice from global memory, once for the statistics (an online max and sum for softmax,
// per-thread Welford for layernorm) and once for the output.
//
// The `Io` class comes from the template: it knows the tensors, computes the row's input
// value (`source`, after any elementwise ops), and from the row op's result the outputs
// (`finish` per element, `finish_row` per row for reductions), and stores them.
#pragma once
#ifndef NCDC_ROWWISE_CUH
#define NCDC_ROWWISE_CUH

namespace ncdc {
namespace rowwise {

enum Kind { kSoftmax, kLayernorm, kRmsnorm, kSum, kMax, kMean, kLogSoftmax, kLogsumexp };

// The kinds whose statistics are a row's max and sum of exp(x - max).
template <int KIND>
constexpr bool kExpSum = KIND == kSoftmax || KIND == kLogSoftmax || KIND == kLogsumexp;

// Reciprocals of row lengths, counts and sums: correctly rounded, once per row.
NCDC_DEVICE float fast_rcp(float x) { return __frcp_rn(x); }

struct Sum {
  static NCDC_DEVICE float apply(float a, float b) { return a + b; }
};
struct Max {  // ignores NaN: softmax's max; a NaN reaches the output through the sum instead
  static NCDC_DEVICE float apply(float a, float b) { return fmaxf(a, b); }
};
struct MaxNan {  // propagates NaN: the `max` reduction
  static NCDC_DEVICE float apply(float a, float b) { return op_max(a, b); }
};

// Reduce `v` over the TPR threads of this row group. With several warps per row, partials
// go through shared memory; the two buffers alternate (`parity`) so that one barrier per
// reduction suffices: a buffer is rewritten only after the next reduction's barrier, which
// every thread reaches after reading it.
template <class F, int ROWS, int TPR>
NCDC_DEVICE float reduce_row(float v, int& parity) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = F::apply(v, __shfl_xor_sync(0xffffffffu, v, o));
  if constexpr (TPR > 32) {
    constexpr int W = TPR / 32;
    __shared__ float partial[2][ROWS * W];
    const int warp = int(threadIdx.x) / 32;
    if (threadIdx.x % 32 == 0) partial[parity][warp] = v;
    __syncthreads();
    const int first = (int(threadIdx.x) / TPR) * W;
    v = partial[parity][first];
#pragma unroll
    for (int w = 1; w < W; ++w) v = F::apply(v, partial[parity][first + w]);
    parity ^= 1;
  }
  return v;
}

template <int ROWS, int TPR, int VPT, int V>
struct Layout {
  static constexpr long long kRuns = (long long)TPR * VPT;  // runs per pass of a group
  static constexpr long long kChunk = kRuns * V;            // columns per pass of a group
  int t;                                                    // thread within the row group
  bool vec;                                                 // the vector path
  long long n;                                              // row length
  int head = 0;        // vector path: columns before the first V-aligned one of this row
  long long body = 0;  // vector path: whole runs of V from column `head` on

  // The vector path aligns each row's runs to the row's own offset r * n: a tensor over
  // [rows..., row] then loads whole vectors even when n is not a multiple of V, and the
  // columns before the first aligned one (head) and after the last whole run (tail) are
  // two short runs of their own, right after the whole ones.
  NCDC_DEVICE void start_row(long long r) {
    if (!vec) return;
    head = int((V - (r * n) % V) % V);
    body = (n - head) / V;
  }
  // Every run of every row whole or empty: the vector path with n a multiple of V (then the
  // head is empty and each row starts V-aligned), which `run` takes with split loads.
  NCDC_DEVICE bool whole() const { return vec && n % V == 0; }
  // Run k of a pass when whole(): V columns from `c0`, or none past the row's end.
  NCDC_DEVICE Cols whole_cols(long long chunk, int k) const {
    const long long q = chunk * kRuns + (long long)k * TPR + t;
    return Cols{q * V, 1, q < n / V ? V : 0, q < n / V};
  }
  // Runs of one row: whole ones, then the head and the tail when n is not a multiple of V.
  NCDC_DEVICE long long runs() const { return vec ? n / V + (n % V ? 2 : 0) : (n + V - 1) / V; }
  NCDC_DEVICE bool resident() const { return runs() <= kRuns; }
  NCDC_DEVICE long long chunks() const { return (runs() + kRuns - 1) / kRuns; }

  NCDC_DEVICE Cols cols(long long chunk, int k) const {
    Cols c;
    if (vec) {
      const long long q = chunk * kRuns + (long long)k * TPR + t;
      c.step = 1;
      if (q < body) {
        c.c0 = head + q * V;
        c.count = V;
      } else if (q == body) {
        c.c0 = 0;
        c.count = head;
      } else if (q == body + 1) {
        c.c0 = head + body * V;
        c.count = int(n - c.c0);
      } else {
        c.c0 = 0;
        c.count = 0;
      }
      c.vec = q < body;
    } else {
      c.c0 = chunk * kChunk + (long long)k * V * TPR + t;
      c.step = TPR;
      const long long left = n - c.c0;
      c.count = left <= 0 ? 0 : (left >= (long long)(V - 1) * TPR + 1 ? V : int((left + TPR - 1) / TPR));
      c.vec = false;
    }
    return c;
  }
};

// load_cols from a block's copy in shared memory (p: column 0 of the row there).
template <int V, class T>
NCDC_DEVICE void load_cols_shared(const T* p, const Cols& c, float (&v)[V]) {
#pragma unroll
  for (int j = 0; j < V; ++j) v[j] = j < c.count ? to_float(ld_shared(p + c.c0 + j * c.step)) : 0.0f;
}

// A block's copy of n elements (a weight over the row axis) into shared memory: 16-byte
// vectors, four in flight per thread, when the source is aligned; a scalar tail after them.
template <int THREADS, class T>
NCDC_DEVICE void stage_copy(T* dst, const T* src, long long n) {
  constexpr int kPer = 16 / int(sizeof(T));
  long long done = 0;
  if (aligned16(src)) {
    const long long vectors = n / kPer;
#pragma unroll 4
    for (long long i = threadIdx.x; i < vectors; i += THREADS)
      st_shared_v16(dst + i * kPer, ld_global_v16(src + i * kPer));
    done = vectors * kPer;
  }
  for (long long c = done + threadIdx.x; c < n; c += THREADS) st_shared(dst + c, ld_global(src + c));
}

// Statistics of one row, and the row op's value of an element from them.
struct Stats {
  float a = 0.0f;  // softmax, log-softmax: max (0 for an all -inf row); norms: mean (0 for rmsnorm)
  float b = 0.0f;  // softmax: 1 / sum (0 for an all -inf row); log-softmax: log(sum);
                   // norms: 1 / sqrt(var + eps)
  float stat = 0.0f;  // reductions: the result
};

template <int KIND>
NCDC_DEVICE float finish_value(const Stats& s, float x) {
  if constexpr (KIND == kSoftmax) return expf(x - s.a) * s.b;
  else if constexpr (KIND == kLogSoftmax) return x - s.a - s.b;
  else if constexpr (KIND == kLayernorm) return (x - s.a) * s.b;
  else if constexpr (KIND == kRmsnorm) return x * s.b;
  else return x;
}

NCDC_DEVICE float softmax_inverse(float sum) { return sum == 0.0f ? 0.0f : fast_rcp(sum); }

// One row whose values fit in registers: x holds the row's source values on entry and the
// row op's result on exit (softmax, norms); reductions leave x as it was.
template <int KIND, int ROWS, int TPR, int VPT, int V>
NCDC_DEVICE Stats stats_resident(float (&x)[VPT][V], const int (&count)[VPT], long long n, float eps,
                                 int& parity) {
  Stats s;
  if constexpr (kExpSum<KIND>) {
    float m = negative_infinity();
#pragma unroll
    for (int k = 0; k < VPT; ++k)
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (j < count[k]) m = fmaxf(m, x[k][j]);
    m = reduce_row<Max, ROWS, TPR>(m, parity);
    s.a = m == negative_infinity() ? 0.0f : m;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k)
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float e = j < count[k] ? expf(x[k][j] - s.a) : 0.0f;
        if constexpr (KIND == kSoftmax) x[k][j] = e;
        sum += e;
      }
    const float total = reduce_row<Sum, ROWS, TPR>(sum, parity);
    if constexpr (KIND == kSoftmax) {
      s.b = softmax_inverse(total);
#pragma unroll
      for (int k = 0; k < VPT; ++k)
#pragma unroll
        for (int j = 0; j < V; ++j) x[k][j] *= s.b;
    } else if constexpr (KIND == kLogSoftmax) {
      s.b = logf(total);
#pragma unroll
      for (int k = 0; k < VPT; ++k)
#pragma unroll
        for (int j = 0; j < V; ++j) x[k][j] = x[k][j] - s.a - s.b;
    } else {
      s.stat = s.a + logf(total);
    }
  } else if constexpr (KIND == kLayernorm || KIND == kRmsnorm) {
    if constexpr (KIND == kLayernorm) {
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < VPT; ++k)
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (j < count[k]) sum += x[k][j];
      s.a = reduce_row<Sum, ROWS, TPR>(sum, parity) * fast_rcp(float(n));
    }
    float sq = 0.0f;  // around the exact mean: no cancellation
#pragma unroll
    for (int k = 0; k < VPT; ++k)
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (j < count[k]) sq += (x[k][j] - s.a) * (x[k][j] - s.a);
    s.b = rsqrtf(reduce_row<Sum, ROWS, TPR>(sq, parity) * fast_rcp(float(n)) + eps);
#pragma unroll
    for (int k = 0; k < VPT; ++k)
#pragma unroll
      for (int j = 0; j < V; ++j) x[k][j] = (x[k][j] - s.a) * s.b;
  } else if constexpr (KIND == kMax) {
    float m = negative_infinity();
#pragma unroll
    for (int k = 0; k < VPT; ++k)
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (j < count[k]) m = op_max(m, x[k][j]);
    s.stat = reduce_row<MaxNan, ROWS, TPR>(m, parity);
  } else {
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k)
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (j < count[k]) sum += x[k][j];
    s.stat = reduce_row<Sum, ROWS, TPR>(sum, parity);
    if constexpr (KIND == kMean) s.stat *= fast_rcp(float(n));
  }
  return s;
}

// Per-thread running statistics of a long row, updated one run at a time.
struct Running {
  float m;  // softmax: running max; layernorm: running mean; max: running max
  float s;  // softmax: sum of exp(x - m); layernorm: sum of squared deviations; sums
  float c;  // layernorm: count
};

template <int KIND, int V>
NCDC_DEVICE void accumulate(Running& r, const float (&x)[V], int count) {
  if constexpr (kExpSum<KIND>) {
    float m = r.m;
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (j < count) m = fmaxf(m, x[j]);
    const float base = m == negative_infinity() ? 0.0f : m;
    float s = r.s * expf(r.m - base);  // r.s is 0 while r.m is -inf
    // a select, not a branch: every exponential is computed and the ones past `count`
    // dropped, so a chunk's values take no branch each
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float e = expf(x[j] - base);
      s += j < count ? e : 0.0f;
    }
    r.m = m;
    r.s = s;
  } else if constexpr (KIND == kLayernorm) {
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (j < count) {  // Welford
        r.c += 1.0f;
        const float d = x[j] - r.m;
        r.m += d * fast_rcp(r.c);
        r.s += d * (x[j] - r.m);
      }
  } else if constexpr (KIND == kRmsnorm) {
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (j < count) r.s += x[j] * x[j];
  } else if constexpr (KIND == kMax) {
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (j < count) r.m = op_max(r.m, x[j]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (j < count) r.s += x[j];
  }
}

template <int KIND, int ROWS, int TPR>
NCDC_DEVICE Stats merge(const Running& r, long long n, float eps, int& parity) {
  Stats s;
  if constexpr (kExpSum<KIND>) {
    const float m = reduce_row<Max, ROWS, TPR>(r.m, parity);
    s.a = m == negative_infinity() ? 0.0f : m;
    const float total = reduce_row<Sum, ROWS, TPR>(r.s * expf(r.m - s.a), parity);
    if constexpr (KIND == kSoftmax) s.b = softmax_inverse(total);
    else if constexpr (KIND == kLogSoftmax) s.b = logf(total);
    else s.stat = s.a + logf(total);
  } else if constexpr (KIND == kLayernorm) {
    // Chan et al.: M2 = sum over threads of (M2_t + n_t (mean_t - mean)^2), exactly.
    s.a = reduce_row<Sum, ROWS, TPR>(r.c * r.m, parity) * fast_rcp(float(n));
    const float d = r.m - s.a;
    const float m2 = reduce_row<Sum, ROWS, TPR>(r.s + r.c * d * d, parity);
    s.b = rsqrtf(m2 * fast_rcp(float(n)) + eps);
  } else if constexpr (KIND == kRmsnorm) {
    s.b = rsqrtf(reduce_row<Sum, ROWS, TPR>(r.s, parity) * fast_rcp(float(n)) + eps);
  } else if constexpr (KIND == kMax) {
    s.stat = reduce_row<MaxNan, ROWS, TPR>(r.m, parity);
  } else {
    s.stat = reduce_row<Sum, ROWS, TPR>(r.s, parity);
    if constexpr (KIND == kMean) s.stat *= fast_rcp(float(n));
  }
  return s;
}

// The kernel body. Every thread of the block runs the same number of row iterations (the
// loop is over the block's first row), so barriers inside reductions are uniform; a group
// past the last row computes on nothing and stores nothing.
// STREAMED: the plan's rows are longer than a group holds, and the kernel has only the
// two-pass path (the register-resident one would cost registers it never uses).
// WHOLE: the plan's row length is a multiple of V, and the resident path is the one with
// split loads (Layout::whole); a row of another length at run time takes the two-pass path
// then. Compiling both resident paths into one kernel costs it registers (ptxas allocates
// for the union).
template <int KIND, int ROWS, int TPR, int VPT, int V, bool STREAMED, bool WHOLE, class Io>
NCDC_DEVICE void run(Io& io, long long rows, long long n) {
  using L = Layout<ROWS, TPR, VPT, V>;
  L layout{int(threadIdx.x) % TPR, n >= V && io.aligned(), n};
  const int group = int(threadIdx.x) / TPR;
  int parity = 0;
  for (long long first = (long long)blockIdx.x * ROWS; first < rows; first += (long long)gridDim.x * ROWS) {
    const long long r = first + group;
    const bool active = r < rows;
    io.begin_row(active ? r : 0);
    layout.start_row(active ? r : 0);
    Stats s;
    if (!STREAMED && WHOLE && layout.resident() && layout.whole()) {
      // Every 16-byte load of the row (and of the weights) first, then their values.
      float x[VPT][V];
      int count[VPT];
      typename Io::template Raw<V> raw[VPT];
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        count[k] = active ? layout.whole_cols(0, k).count : 0;
        if (count[k] > 0) io.fetch(layout.whole_cols(0, k).c0, raw[k]);
      }
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        if (count[k] > 0) io.source_raw(layout.whole_cols(0, k), raw[k], x[k]);
        else
#pragma unroll
          for (int j = 0; j < V; ++j) x[k][j] = 0.0f;
      }
      s = stats_resident<KIND, ROWS, TPR, VPT, V>(x, count, n, Io::kEps, parity);
      if constexpr (Io::kPerElement) {
#pragma unroll
        for (int k = 0; k < VPT; ++k)
          if (count[k] > 0) io.finish_raw(layout.whole_cols(0, k), raw[k], x[k], s.stat);
      }
    } else if (!STREAMED && !WHOLE && layout.resident()) {
      float x[VPT][V];
      int count[VPT];  // columns by recomputation below: holding the Cols would cost registers
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const Cols c = layout.cols(0, k);
        count[k] = active ? c.count : 0;
        if (count[k] > 0) io.source(c, x[k]);
        else
#pragma unroll
          for (int j = 0; j < V; ++j) x[k][j] = 0.0f;
      }
      s = stats_resident<KIND, ROWS, TPR, VPT, V>(x, count, n, Io::kEps, parity);
      if constexpr (Io::kPerElement) {
#pragma unroll
        for (int k = 0; k < VPT; ++k)
          if (count[k] > 0) io.finish(layout.cols(0, k), x[k], s.stat);
      }
    } else {
      // Too long for registers: a second read of the row from global memory.
      Running run{KIND == kMax || kExpSum<KIND> ? negative_infinity() : 0.0f, 0.0f, 0.0f};
      const long long chunks = layout.chunks();
      for (long long chunk = 0; chunk < chunks && active; ++chunk) {
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
          const Cols c = layout.cols(chunk, k);
          if (c.count == 0) continue;
          float x[V];
          io.source(c, x);
          accumulate<KIND, V>(run, x, c.count);
        }
      }
      s = merge<KIND, ROWS, TPR>(run, n, Io::kEps, parity);
      if constexpr (Io::kPerElement) {
        for (long long chunk = 0; chunk < chunks && active; ++chunk) {
#pragma unroll
          for (int k = 0; k < VPT; ++k) {
            const Cols c = layout.cols(chunk, k);
            if (c.count == 0) continue;
            float x[V];
            io.source(c, x);
#pragma unroll
            for (int j = 0; j < V; ++j) x[j] = finish_value<KIND>(s, x[j]);
            io.finish(c, x, s.stat);
          }
        }
      }
    }
    if constexpr (Io::kPerRow) {
      if (active && layout.t == 0) io.finish_row(s.stat);
    }
  }
}

}  // namespace rowwise
}  // namespace ncdc

#endif  // NCDC_ROWWISE_CUH
