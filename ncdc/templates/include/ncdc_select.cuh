// The k best values of a row and their positions (argmax, argmin, topk): each thread keeps
// a sorted list of its k best in registers, a warp merges its lanes' lists in k rounds of a
// shuffle reduction, and the warps of a row merge theirs through shared memory.
// Best first: a NaN before any number (NaN is the extreme either way, as NumPy's argmax and
// argmin have it), then the largest (smallest) value, equal values by position; an empty
// slot (position INT_MAX) after everything.
#pragma once
#ifndef NCDC_SELECT_CUH
#define NCDC_SELECT_CUH

namespace ncdc {

constexpr int kNoPosition = 0x7fffffff;

// Whether (a, i) comes before (b, j).
template <bool Largest>
NCDC_DEVICE bool before(float a, int i, float b, int j) {
  const bool an = a != a, bn = b != b;
  if (an || bn) return an && (!bn || i < j);
  if (a != b) return Largest ? a > b : a < b;
  return i < j;
}

template <int K, bool Largest>
struct Picks {
  float v[K];
  int i[K];

  NCDC_DEVICE void clear() {
#pragma unroll
    for (int s = 0; s < K; ++s) {
      v[s] = Largest ? -infinity() : infinity();
      i[s] = kNoPosition;
    }
  }

  // (x, at) into the sorted list, when it beats the last: one compare for most values.
  NCDC_DEVICE void offer(float x, int at) {
    if (!before<Largest>(x, at, v[K - 1], i[K - 1])) return;
    v[K - 1] = x;
    i[K - 1] = at;
#pragma unroll
    for (int s = K - 1; s > 0; --s) {
      if (before<Largest>(v[s], i[s], v[s - 1], i[s - 1])) {
        const float tv = v[s];
        const int ti = i[s];
        v[s] = v[s - 1];
        i[s] = i[s - 1];
        v[s - 1] = tv;
        i[s - 1] = ti;
      }
    }
  }

  // The warp's k best of all its lanes' lists, in every lane: k rounds, each the best head
  // by a shuffle reduction, popped from the lane that held it (positions are unique).
  NCDC_DEVICE void merge_warp() {
    Picks out;
#pragma unroll
    for (int r = 0; r < K; ++r) {
      float bv = v[0];
      int bi = i[0];
#pragma unroll
      for (int o = 16; o > 0; o /= 2) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (before<Largest>(ov, oi, bv, bi)) {
          bv = ov;
          bi = oi;
        }
      }
      out.v[r] = bv;
      out.i[r] = bi;
      if (i[0] == bi) {  // this lane's head was taken: shift its list up
#pragma unroll
        for (int s = 0; s + 1 < K; ++s) {
          v[s] = v[s + 1];
          i[s] = i[s + 1];
        }
        v[K - 1] = Largest ? -infinity() : infinity();
        i[K - 1] = kNoPosition;
      }
    }
    *this = out;
  }
};

}  // namespace ncdc

#endif  // NCDC_SELECT_CUH
