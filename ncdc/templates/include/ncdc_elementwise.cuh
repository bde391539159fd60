// Elementwise operations as small device functions, and the vector loads and stores of
// runs of elements that the row-wise and elementwise kernels (and GEMM epilogues) share.
// Math is fp32; storage types are converted on load (exact) and on store (round to nearest
// even, fp8 saturating). max and min propagate NaN, as the reference (NumPy) does.
#pragma once
#ifndef NCDC_ELEMENTWISE_CUH
#define NCDC_ELEMENTWISE_CUH

namespace ncdc {

// ---- unary maps --------------------------------------------------------------------------
NCDC_DEVICE float op_id(float x) { return x; }
NCDC_DEVICE float op_exp(float x) { return expf(x); }
NCDC_DEVICE float op_log(float x) { return logf(x); }
NCDC_DEVICE float op_relu(float x) { return x > 0.0f ? x : (x == x ? 0.0f : x); }
NCDC_DEVICE float op_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
NCDC_DEVICE float op_erf(float x) { return erff(x); }
// gelu(x, approximate=tanh) = 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi)(x + 0.044715 x^3):
// one exp and a divide instead of erff's polynomial; exact to fp32 rounding of that form.
NCDC_DEVICE float op_gelu_tanh(float x) {
  return x / (1.0f + expf(-1.5957691216057308f * (x + 0.044715f * x * x * x)));
}
NCDC_DEVICE float op_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
NCDC_DEVICE float op_silu(float x) { return x / (1.0f + expf(-x)); }
NCDC_DEVICE float op_tanh(float x) { return tanhf(x); }
// m tanh(k x) for a logit (a score functor's soft cap c: k = 1 / c, m = c; c = 50 in Gemma 2), as
// m - 2m / (e^(2kx) + 1) with the GPU's approximate exp2 and reciprocal. Its error is a few
// fp32 ulps of m in absolute terms, what a logit needs (softmax sees differences between
// logits), not relative to a tiny tanh, as tanhf's is; it issues 2 MUFU, an FMUL, an FADD and
// an FFMA where tanhf issues 11 fp32, 2 MUFU and a select. x = +-inf gives +-m, NaN NaN.
NCDC_DEVICE float op_tanh_logit(float x, float k = 1.0f, float m = 1.0f) {
#ifdef NCDC_GPU
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(e) : "f"(x * (2.8853900817779268f * k)));  // e^(2kx)
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(e + 1.0f));
  return m - 2.0f * m * r;
#else
  return m - 2.0f * m / (exp2f(x * (2.8853900817779268f * k)) + 1.0f);
#endif
}
NCDC_DEVICE float op_neg(float x) { return -x; }
NCDC_DEVICE float op_abs(float x) { return fabsf(x); }
NCDC_DEVICE float op_sqrt(float x) { return sqrtf(x); }
NCDC_DEVICE float op_rsqrt(float x) { return rsqrtf(x); }
NCDC_DEVICE float op_recip(float x) { return 1.0f / x; }
NCDC_DEVICE float op_square(float x) { return x * x; }
NCDC_DEVICE float op_floor(float x) { return floorf(x); }
NCDC_DEVICE float op_cos(float x) { return cosf(x); }
NCDC_DEVICE float op_sin(float x) { return sinf(x); }
// Truth values: 0 is false, anything else (NaN included) true; results are 1 or 0.
NCDC_DEVICE float op_not(float x) { return x != 0.0f ? 0.0f : 1.0f; }

// ---- binary maps -------------------------------------------------------------------------
NCDC_DEVICE float op_add(float a, float b) { return a + b; }
NCDC_DEVICE float op_sub(float a, float b) { return a - b; }
NCDC_DEVICE float op_mul(float a, float b) { return a * b; }
NCDC_DEVICE float op_div(float a, float b) { return a / b; }
// NaN in either operand gives NaN (fmaxf would drop it and hide a bad value).
NCDC_DEVICE float op_max(float a, float b) { return (a != a || a > b) ? a : b; }
NCDC_DEVICE float op_min(float a, float b) { return (a != a || a < b) ? a : b; }
// Comparisons: 1 where they hold, else 0; NaN compares false (ne: true), as in IEEE 754.
NCDC_DEVICE float op_eq(float a, float b) { return a == b ? 1.0f : 0.0f; }
NCDC_DEVICE float op_ne(float a, float b) { return a != b ? 1.0f : 0.0f; }
NCDC_DEVICE float op_lt(float a, float b) { return a < b ? 1.0f : 0.0f; }
NCDC_DEVICE float op_le(float a, float b) { return a <= b ? 1.0f : 0.0f; }
NCDC_DEVICE float op_gt(float a, float b) { return a > b ? 1.0f : 0.0f; }
NCDC_DEVICE float op_ge(float a, float b) { return a >= b ? 1.0f : 0.0f; }
NCDC_DEVICE float op_and(float a, float b) { return a != 0.0f && b != 0.0f ? 1.0f : 0.0f; }
NCDC_DEVICE float op_or(float a, float b) { return a != 0.0f || b != 0.0f ? 1.0f : 0.0f; }
// where(c, a, b): a where c is true (not 0, NaN included), else b.
NCDC_DEVICE float op_where(float c, float a, float b) { return c != 0.0f ? a : b; }

// ---- casts and masks ---------------------------------------------------------------------
// The value `x` takes when stored as T: round to nearest even, fp8 saturating (satfinite).
template <class T>
NCDC_DEVICE float op_cast(float x) {
  return to_float(from_float<T>(x));
}
NCDC_DEVICE float negative_infinity() { return __int_as_float(0xff800000); }
NCDC_DEVICE float infinity() { return __int_as_float(0x7f800000); }
// Causal mask aligned at the end: key j is hidden from query i when j > i + shift, where
// shift = keys - queries (so a single decode query sees every key).
NCDC_DEVICE float op_causal(float x, long long i, long long j, long long shift) {
  return j > i + shift ? negative_infinity() : x;
}

// ---- gathers ------------------------------------------------------------------------------
// The element at `index` along an axis of n elements `pitch` apart from p, the index rounded
// to the nearest whole number as an int32 stores it (exact: the generator keeps n <= 2^24).
// An index outside [0, n), or NaN, reads nothing there: it gives NaN (from element 0, which
// is in range) and sets *status, which the host reads after the launches and reports
// (ncdc.verify.run.check_indices). Branch-free but for the store, so that an unrolled run of
// gathers keeps its loads in flight.
template <class T>
NCDC_DEVICE float op_gather(const T* p, float index, long long n, long long pitch, int* status) {
  const float k = rintf(index);  // to nearest, ties to even; NaN fails both comparisons
  const bool ok = k >= 0.0f && k < float(n);
  if (!ok) *status = 1;  // every writer writes 1: no atomic needed
  const float x = to_float(ld_global(p + (ok ? (long long)k : 0LL) * pitch));
  return ok ? x : __int_as_float(0x7fc00000);
}

// The value at position k along an axis of n values (pitch elements apart) from p, its
// position 0; 0 outside the axis: a slice or a shift reads past its source's ends as zeros.
template <class T>
NCDC_DEVICE float op_slice(const T* p, long long k, long long n, long long pitch) {
  return (k >= 0 && k < n) ? to_float(ld_global(p + k * pitch)) : 0.0f;
}
// k mod n, from 0 to n - 1 whatever k's sign (a roll's position).
NCDC_DEVICE long long wrap_index(long long k, long long n) {
  const long long r = k % n;
  return r < 0 ? r + n : r;
}

// ---- storage bits ------------------------------------------------------------------------
// A storage element <-> its raw bits (in the low bits of a 32-bit word), for unpacking and
// packing vector registers without type punning.
template <class T>
struct Bits;
template <>
struct Bits<float> {
  static NCDC_DEVICE float get(uint32_t w) { return __uint_as_float(w); }
  static NCDC_DEVICE uint32_t put(float x) { return __float_as_uint(x); }
};
template <>
struct Bits<__nv_bfloat16> {
  static NCDC_DEVICE float get(uint32_t w) { return __bfloat162float(__ushort_as_bfloat16((unsigned short)w)); }
  static NCDC_DEVICE uint32_t put(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};
template <>
struct Bits<__half> {
  static NCDC_DEVICE float get(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)w)); }
  static NCDC_DEVICE uint32_t put(float x) { return __half_as_ushort(__float2half_rn(x)); }
};
template <>
struct Bits<__nv_fp8_e4m3> {
  static NCDC_DEVICE float get(uint32_t w) {
    __nv_fp8_e4m3 v;
    v.__x = (unsigned char)w;
    return to_float(v);
  }
  static NCDC_DEVICE uint32_t put(float x) { return from_float<__nv_fp8_e4m3>(x).__x; }
};
template <>
struct Bits<__nv_fp8_e5m2> {
  static NCDC_DEVICE float get(uint32_t w) {
    __nv_fp8_e5m2 v;
    v.__x = (unsigned char)w;
    return to_float(v);
  }
  static NCDC_DEVICE uint32_t put(float x) { return from_float<__nv_fp8_e5m2>(x).__x; }
};
template <>
struct Bits<signed char> {
  static NCDC_DEVICE float get(uint32_t w) { return float((signed char)(w & 0xffu)); }
  static NCDC_DEVICE uint32_t put(float x) { return uint8_t(from_float<signed char>(x)); }
};
template <>
struct Bits<int> {
  static NCDC_DEVICE float get(uint32_t w) { return float(int(w)); }
  static NCDC_DEVICE uint32_t put(float x) { return uint32_t(from_float<int>(x)); }
};

// ---- runs of elements --------------------------------------------------------------------
// Load V consecutive elements of T at p (p aligned to V * sizeof(T), or to 16 bytes when
// that is more) as floats, with the widest loads that fit: 16-byte vectors, else 8 or 4.
template <int V, class T>
NCDC_DEVICE void load_vec(const T* p, float (&v)[V]) {
  constexpr int kSize = int(sizeof(T));
  constexpr int kBytes = V * kSize;
  constexpr uint32_t kMask = kSize == 4 ? 0xffffffffu : (1u << (8 * kSize)) - 1u;
  if constexpr (kBytes % 16 == 0) {
    constexpr int kPer = 16 / kSize;
#pragma unroll
    for (int q = 0; q < kBytes / 16; ++q) {
      const uint4 u = ld_global_v16(p + q * kPer);
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int e = 0; e < kPer; ++e)
        v[q * kPer + e] = Bits<T>::get(w[e * kSize / 4] >> (8 * (e * kSize % 4)) & kMask);
    }
  } else if constexpr (kBytes == 8) {
    const uint2 u = ld_global_v8(p);
    const uint32_t w[2] = {u.x, u.y};
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = Bits<T>::get(w[e * kSize / 4] >> (8 * (e * kSize % 4)) & kMask);
  } else if constexpr (kBytes == 4) {
    const uint32_t w = ld_global_v4(p);
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = Bits<T>::get(w >> (8 * (e * kSize % 4)) & kMask);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = to_float(ld_global(p + e));
  }
}

// The raw bits of V consecutive elements of T (V * sizeof(T) a multiple of 16 bytes): what
// a vector load leaves in registers before any value is converted. Split loads (fetch_vec
// now, unpack later) let a thread issue every 16-byte load of its row before the first
// use, so they are in flight together instead of one round trip each.
template <int V, class T>
struct Packed {
  static constexpr int kVectors = V * int(sizeof(T)) / 16;
  static_assert(V * int(sizeof(T)) % 16 == 0, "Packed holds whole 16-byte vectors");
  uint4 q[kVectors];
};
template <int V, class T>
NCDC_DEVICE void fetch_vec(const T* p, Packed<V, T>& r) {
#pragma unroll
  for (int i = 0; i < Packed<V, T>::kVectors; ++i) r.q[i] = ld_global_v16(p + i * (16 / int(sizeof(T))));
}
// fetch_vec from shared memory (p 16-byte aligned there).
template <int V, class T>
NCDC_DEVICE void fetch_shared(const T* p, Packed<V, T>& r) {
#pragma unroll
  for (int i = 0; i < Packed<V, T>::kVectors; ++i) r.q[i] = ld_shared_v16(p + i * (16 / int(sizeof(T))));
}
template <int V, class T>
NCDC_DEVICE void unpack(const Packed<V, T>& r, float (&v)[V]) {
  constexpr int kSize = int(sizeof(T));
  constexpr int kPer = 16 / kSize;
  constexpr uint32_t kMask = kSize == 4 ? 0xffffffffu : (1u << (8 * kSize)) - 1u;
#pragma unroll
  for (int i = 0; i < Packed<V, T>::kVectors; ++i) {
    const uint32_t w[4] = {r.q[i].x, r.q[i].y, r.q[i].z, r.q[i].w};
#pragma unroll
    for (int e = 0; e < kPer; ++e) v[i * kPer + e] = Bits<T>::get(w[e * kSize / 4] >> (8 * (e * kSize % 4)) & kMask);
  }
}

// Store V floats as consecutive elements of T at p (aligned as for load_vec).
template <int V, class T>
NCDC_DEVICE void store_vec(T* p, const float (&v)[V]) {
  constexpr int kSize = int(sizeof(T));
  constexpr int kBytes = V * kSize;
  constexpr uint32_t kMask = kSize == 4 ? 0xffffffffu : (1u << (8 * kSize)) - 1u;
  if constexpr (kBytes % 16 == 0 || kBytes == 8 || kBytes == 4) {
    constexpr int kWords = kBytes / 4;
    uint32_t w[kWords];
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = 0;
#pragma unroll
    for (int e = 0; e < V; ++e) w[e * kSize / 4] |= (Bits<T>::put(v[e]) & kMask) << (8 * (e * kSize % 4));
    if constexpr (kBytes == 4) {
      st_global_v4(p, w[0]);
    } else if constexpr (kBytes == 8) {
      st_global_v8(p, make_uint2(w[0], w[1]));
    } else {
#pragma unroll
      for (int q = 0; q < kBytes / 16; ++q)
        st_global_v16(p + q * (16 / kSize), make_uint4(w[4 * q], w[4 * q + 1], w[4 * q + 2], w[4 * q + 3]));
    }
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) st_global(p + e, from_float<T>(v[e]));
  }
}

// V floats as consecutive elements of T in shared memory at p, and back (V * sizeof(T) a
// multiple of 16 and p aligned to 16: whole 16-byte accesses).
template <int V, class T>
NCDC_DEVICE void store_shared_vec(T* p, const float (&v)[V]) {
  constexpr int kSize = int(sizeof(T));
  constexpr uint32_t kMask = kSize == 4 ? 0xffffffffu : (1u << (8 * kSize)) - 1u;
  static_assert(V * kSize % 16 == 0, "whole 16-byte stores");
  uint32_t w[V * kSize / 4];
#pragma unroll
  for (int i = 0; i < V * kSize / 4; ++i) w[i] = 0;
#pragma unroll
  for (int e = 0; e < V; ++e) w[e * kSize / 4] |= (Bits<T>::put(v[e]) & kMask) << (8 * (e * kSize % 4));
#pragma unroll
  for (int q = 0; q < V * kSize / 16; ++q)
    st_shared_v16(p + q * (16 / kSize), make_uint4(w[4 * q], w[4 * q + 1], w[4 * q + 2], w[4 * q + 3]));
}
template <int V, class T>
NCDC_DEVICE void load_shared_vec(const T* p, float (&v)[V]) {
  Packed<V, T> r;
  fetch_shared(p, r);
  unpack(r, v);
}

// load_vec and store_vec where `p` may not be aligned as they need (a broadcast operand
// whose run starts mid-vector when the innermost size is not a multiple of V): one element
// at a time then.
template <int V, class T>
NCDC_DEVICE bool run_aligned(const T* p) {
  constexpr int kBytes = V * int(sizeof(T));
  constexpr unsigned kAlign = kBytes % 16 == 0 ? 16u : (kBytes == 8 || kBytes == 4 ? unsigned(kBytes) : 1u);
  return (reinterpret_cast<unsigned long long>(p) & (kAlign - 1u)) == 0;
}
template <int V, class T>
NCDC_DEVICE void load_run(const T* p, float (&v)[V]) {
  if (run_aligned<V>(p)) {
    load_vec<V>(p, v);
    return;
  }
#pragma unroll
  for (int e = 0; e < V; ++e) v[e] = to_float(ld_global(p + e));
}
template <int V, class T>
NCDC_DEVICE void store_run(T* p, const float (&v)[V]) {
  if (run_aligned<V>(p)) {
    store_vec<V>(p, v);
    return;
  }
#pragma unroll
  for (int e = 0; e < V; ++e) st_global(p + e, from_float<T>(v[e]));
}

// The elements one thread handles of a run: element j sits at c0 + j * step, and only the
// first `count` exist. `vec`: they are contiguous and all V exist; a tensor whose run
// there is vector-aligned loads and stores it whole, any other one element at a time.
struct Cols {
  long long c0;
  long long step;
  int count;
  bool vec;
};

template <int V, class T>
NCDC_DEVICE void load_cols(const T* p, const Cols& c, float (&v)[V]) {
  if (c.vec) {
    load_run<V>(p + c.c0, v);
    return;
  }
#pragma unroll
  for (int j = 0; j < V; ++j) v[j] = j < c.count ? to_float(ld_global(p + c.c0 + j * c.step)) : 0.0f;
}

template <int V, class T>
NCDC_DEVICE void store_cols(T* p, const Cols& c, const float (&v)[V]) {
  if (c.vec) {
    store_run<V>(p + c.c0, v);
    return;
  }
#pragma unroll
  for (int j = 0; j < V; ++j)
    if (j < c.count) st_global(p + c.c0 + j * c.step, from_float<T>(v[j]));
}

// Scalar load and store of one element as float.
template <class T>
NCDC_DEVICE float load_one(const T* p) {
  return to_float(ld_global(p));
}
template <class T>
NCDC_DEVICE void store_one(T* p, float v) {
  st_global(p, from_float<T>(v));
}

NCDC_DEVICE bool aligned16(const void* p) { return (reinterpret_cast<unsigned long long>(p) & 15u) == 0; }

namespace elementwise {

// Grid-stride loop over the output. `Io::apply<W>(e)` computes and stores the W elements
// from flat index e on (innermost axis fastest), all in one row of the innermost axis.
// With aligned pointers the output goes in runs of V (a 16-byte vector of the narrowest
// tensor) from multiples of V; when the innermost size is not a multiple of V, the runs
// that cross the end of a row (at most one per row) go one element at a time and every
// other run stays a vector, so broadcast operands are still one value per run.
// A thread's VPT runs of one pass go in split form (every 16-byte load first, then the
// math and the stores), so its loads are in flight together rather than one round trip
// per run; the scalar and row-crossing tails stay as they were.
template <int THREADS, int V, int VPT, class Io>
NCDC_DEVICE void run(const Io& io, long long total, long long inner) {
  const long long stride = (long long)gridDim.x * THREADS;
  const long long first = (long long)blockIdx.x * THREADS + threadIdx.x;
  if (!io.aligned() || inner < V) {
    for (long long e = first; e < total; e += stride) io.template apply<1>(e);
  } else if (inner % V == 0) {
    const long long vectors = total / V;
    for (long long v = first; v < vectors; v += stride * VPT) {
      typename Io::template Raw<V> raw[VPT];
#pragma unroll
      for (int u = 0; u < VPT; ++u)
        if (v + u * stride < vectors) io.fetch((v + u * stride) * V, raw[u]);
#pragma unroll
      for (int u = 0; u < VPT; ++u)
        if (v + u * stride < vectors) io.apply_raw((v + u * stride) * V, raw[u]);
    }
  } else {
    for (long long v = first; v < (total + V - 1) / V; v += stride) {
      const long long e = v * V;
      if (e % inner + V <= inner) {
        io.template apply<V>(e);
      } else {
        for (long long x = e; x < e + V && x < total; ++x) io.template apply<1>(x);
      }
    }
  }
}

}  // namespace elementwise
}  // namespace ncdc

#endif  // NCDC_ELEMENTWISE_CUH
