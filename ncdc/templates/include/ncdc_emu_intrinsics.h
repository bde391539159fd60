// ncdc CPU emulation of the CUDA intrinsics kernels call by their standard names: barriers,
// warp collectives, atomics, bit casts and fast math (host C++17 only; never seen by NVRTC).
#pragma once
#ifndef NCDC_EMU_INTRINSICS_H
#define NCDC_EMU_INTRINSICS_H

#include <math.h>

#include "ncdc_emu.h"
#include "ncdc_emu_types.h"

inline void __syncthreads() { ncdc::emu::sync_block(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ncdc::emu::sync_warp(mask); }
inline unsigned __activemask() { return ncdc::emu::my_warp().exists; }
[[noreturn]] inline void __trap() { ncdc::emu::fail("__trap() called"); }

namespace ncdc {
namespace emu {
template <class T>
inline T shfl_from(unsigned mask, T var, int lane_of(unsigned lane, int seg, int width, int arg),
                   int arg, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of a type over 8 bytes");
  uint64_t v = 0;
  std::memcpy(&v, &var, sizeof(T));
  const WarpSlot* s = warp_exchange(mask, v);
  unsigned lane = lane_id();
  int seg = int(lane) & ~(width - 1);
  int src = lane_of(lane, seg, width, arg);
  uint64_t r = slot_u64(s[src]);
  T out;
  std::memcpy(&out, &r, sizeof(T));
  return out;
}
inline int lane_idx(unsigned, int seg, int width, int src) { return seg + (src & (width - 1)); }
inline int lane_xor(unsigned lane, int seg, int width, int m) {
  int s = int(lane) ^ m;
  return s >= seg + width ? int(lane) : s;
}
inline int lane_down(unsigned lane, int seg, int width, int d) {
  int s = int(lane) + d;
  return s >= seg + width ? int(lane) : s;
}
inline int lane_up(unsigned lane, int seg, int, int d) {
  int s = int(lane) - d;
  return s < seg ? int(lane) : s;
}
}  // namespace emu
}  // namespace ncdc

template <class T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32) {
  return ncdc::emu::shfl_from(mask, var, ncdc::emu::lane_idx, src_lane, width);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
  return ncdc::emu::shfl_from(mask, var, ncdc::emu::lane_xor, lane_mask, width);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return ncdc::emu::shfl_from(mask, var, ncdc::emu::lane_down, int(delta), width);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return ncdc::emu::shfl_from(mask, var, ncdc::emu::lane_up, int(delta), width);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  const ncdc::emu::WarpSlot* s = ncdc::emu::warp_exchange(mask, pred != 0);
  unsigned live = mask & ncdc::emu::my_warp().exists, out = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((live >> l & 1u) && ncdc::emu::slot_u64(s[l])) out |= 1u << l;
  return out;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  return __ballot_sync(mask, pred) == (mask & ncdc::emu::my_warp().exists);
}

// ---- atomics: real atomics, since blocks run on several OS threads ------------------------
namespace ncdc {
namespace emu {
template <class T>
inline void count_atomic(const T* p) {
  if (is_global(p)) {
    count_read(sizeof(T));
    count_write(sizeof(T));
  }
}
template <class T, class F>
inline T atomic_update(T* p, F&& f) {  // compare-and-swap loop for operations with no builtin
  count_atomic(p);
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(p, &old, f(old), true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}
}  // namespace emu
}  // namespace ncdc

#define NCDC_EMU_ATOMIC_INT(T)                                                                   \
  inline T atomicAdd(T* p, T v) { ncdc::emu::count_atomic(p); return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); } \
  inline T atomicSub(T* p, T v) { ncdc::emu::count_atomic(p); return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); } \
  inline T atomicExch(T* p, T v) { ncdc::emu::count_atomic(p); return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); } \
  inline T atomicMax(T* p, T v) { return ncdc::emu::atomic_update(p, [v](T o) { return o > v ? o : v; }); } \
  inline T atomicMin(T* p, T v) { return ncdc::emu::atomic_update(p, [v](T o) { return o < v ? o : v; }); } \
  inline T atomicCAS(T* p, T cmp, T v) {                                                        \
    ncdc::emu::count_atomic(p);                                                                  \
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);         \
    return cmp;                                                                                  \
  }
NCDC_EMU_ATOMIC_INT(int)
NCDC_EMU_ATOMIC_INT(unsigned)
NCDC_EMU_ATOMIC_INT(unsigned long long)
#undef NCDC_EMU_ATOMIC_INT

inline float atomicAdd(float* p, float v) {
  auto* u = reinterpret_cast<uint32_t*>(p);
  uint32_t old = ncdc::emu::atomic_update(u, [v](uint32_t o) {
    return ncdc::emu::float_bits(ncdc::emu::bits_float(o) + v);
  });
  return ncdc::emu::bits_float(old);
}
inline float atomicExch(float* p, float v) {
  auto* u = reinterpret_cast<uint32_t*>(p);
  ncdc::emu::count_atomic(p);
  return ncdc::emu::bits_float(__atomic_exchange_n(u, ncdc::emu::float_bits(v), __ATOMIC_RELAXED));
}

// ---- bit casts and fast math ------------------------------------------------------------------
inline int __float_as_int(float f) { return int(ncdc::emu::float_bits(f)); }
inline unsigned __float_as_uint(float f) { return ncdc::emu::float_bits(f); }
inline float __int_as_float(int i) { return ncdc::emu::bits_float(uint32_t(i)); }
inline float __uint_as_float(unsigned u) { return ncdc::emu::bits_float(u); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x == x ? x : 0.0f)); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
// cvt.rni.s32.f32: to nearest even, saturating to the int range, NaN to 0.
inline int __float2int_rn(float x) {
  if (x != x) return 0;
  if (x <= -2147483648.0f) return int(0x80000000u);
  if (x >= 2147483648.0f) return 0x7fffffff;
  return int(nearbyintf(x));
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x ? __builtin_clz(unsigned(x)) : 32; }
inline int __ffs(int x) { return __builtin_ffs(x); }
template <class T>
inline T __ldg(const T* p) {
  ncdc::emu::count_read(sizeof(T));
  return *p;
}

#endif  // NCDC_EMU_INTRINSICS_H
