// ncdc CPU emulation of the CUDA low-precision types (host C++17 only; never seen by NVRTC).
//
// Bit-exact with the hardware conversions: float -> bf16/fp16 round to nearest even with
// overflow to infinity (cvt.rn), float -> fp8 round to nearest even with saturation to the
// largest finite value (cvt.rn.satfinite: e4m3 448, e5m2 57344; infinity saturates too),
// NaN stays NaN (canonical 0x7fff for 16-bit types, 0x7f for fp8).
#pragma once
#ifndef NCDC_EMU_TYPES_H
#define NCDC_EMU_TYPES_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ncdc {
namespace emu {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A binary floating-point format narrower than fp32.
struct Format {
  int exp_bits, man_bits, bias;
  float max_finite;
  bool has_inf;    // exponent all ones is inf/NaN (IEEE); e4m3 uses it for normals
  bool satfinite;  // conversion saturates instead of overflowing to inf
};
constexpr Format kHalf{5, 10, 15, 65504.0f, true, false};
constexpr Format kBf16{8, 7, 127, 3.38953139e38f, true, false};
constexpr Format kE4m3{4, 3, 7, 448.0f, false, true};
constexpr Format kE5m2{5, 2, 15, 57344.0f, true, true};

// float -> format bits, round to nearest even.
inline uint32_t encode(float x, const Format& f) {
  uint32_t sign = float_bits(x) >> 31 << (f.exp_bits + f.man_bits);
  uint32_t exp_ones = (1u << f.exp_bits) - 1;
  if (std::isnan(x)) return f.has_inf ? (exp_ones << f.man_bits) | ((1u << f.man_bits) - 1) : 0x7f;
  float a = std::fabs(x);
  int emin = 1 - f.bias;
  float r;
  if (std::isinf(a)) {
    r = a;
  } else {
    int e;
    std::frexp(a, &e);  // a = m * 2^e with m in [0.5, 1)
    int ex = e - 1 < emin ? emin : e - 1;
    float q = std::ldexp(1.0f, ex - f.man_bits);  // spacing of the format around a
    r = std::nearbyint(a / q) * q;                // exact scaling, ties to even
  }
  if (r > f.max_finite) {
    if (f.satfinite || !f.has_inf) r = f.max_finite;
    else return sign | (exp_ones << f.man_bits);
  }
  if (r == 0.0f) return sign;
  int e;
  std::frexp(r, &e);
  int ex = e - 1;
  if (ex < emin) return sign | uint32_t(std::ldexp(r, f.man_bits - emin));  // subnormal
  uint32_t man = uint32_t(std::ldexp(r, f.man_bits - ex)) - (1u << f.man_bits);
  return sign | (uint32_t(ex + f.bias) << f.man_bits) | man;
}

inline float decode(uint32_t bits, const Format& f) {
  uint32_t man_mask = (1u << f.man_bits) - 1, exp_ones = (1u << f.exp_bits) - 1;
  bool neg = bits >> (f.exp_bits + f.man_bits) & 1u;
  uint32_t e = bits >> f.man_bits & exp_ones, m = bits & man_mask;
  float v;
  if (e == exp_ones && f.has_inf) {
    v = m ? NAN : INFINITY;
  } else if (e == exp_ones && m == man_mask && !f.has_inf) {
    v = NAN;  // e4m3: S.1111.111 is the only NaN
  } else if (e == 0) {
    v = std::ldexp(float(m), 1 - f.bias - f.man_bits);
  } else {
    v = std::ldexp(float(m | (1u << f.man_bits)), int(e) - f.bias - f.man_bits);
  }
  return neg ? -v : v;
}

inline uint16_t float_to_bf16_bits(float x) {
  uint32_t u = float_bits(x);
  if (std::isnan(x)) return 0x7fff;
  u += 0x7fffu + (u >> 16 & 1u);  // round to nearest even; overflow carries into inf
  return uint16_t(u >> 16);
}

}  // namespace emu
}  // namespace ncdc

struct __half {
  unsigned short __x;
  __half() = default;
  __half(float f) : __x(uint16_t(ncdc::emu::encode(f, ncdc::emu::kHalf))) {}
  __half(double f) : __half(float(f)) {}
  __half(int i) : __half(float(i)) {}
  operator float() const { return ncdc::emu::decode(__x, ncdc::emu::kHalf); }
};
struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : __x(ncdc::emu::float_to_bf16_bits(f)) {}
  __nv_bfloat16(double f) : __nv_bfloat16(float(f)) {}
  __nv_bfloat16(int i) : __nv_bfloat16(float(i)) {}
  operator float() const { return ncdc::emu::bits_float(uint32_t(__x) << 16); }
};
struct __nv_fp8_e4m3 {
  unsigned char __x;
  __nv_fp8_e4m3() = default;
  explicit __nv_fp8_e4m3(float f) : __x(uint8_t(ncdc::emu::encode(f, ncdc::emu::kE4m3))) {}
  explicit __nv_fp8_e4m3(double f) : __nv_fp8_e4m3(float(f)) {}
  explicit operator float() const { return ncdc::emu::decode(__x, ncdc::emu::kE4m3); }
};
struct __nv_fp8_e5m2 {
  unsigned char __x;
  __nv_fp8_e5m2() = default;
  explicit __nv_fp8_e5m2(float f) : __x(uint8_t(ncdc::emu::encode(f, ncdc::emu::kE5m2))) {}
  explicit __nv_fp8_e5m2(double f) : __nv_fp8_e5m2(float(f)) {}
  explicit operator float() const { return ncdc::emu::decode(__x, ncdc::emu::kE5m2); }
};
struct alignas(4) __half2 {
  __half x, y;
};
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
using nv_bfloat16 = __nv_bfloat16;
using nv_bfloat162 = __nv_bfloat162;
using half = __half;
using half2 = __half2;

#define NCDC_EMU_ARITH(T)                                                     \
  inline T operator+(T a, T b) { return T(float(a) + float(b)); }             \
  inline T operator-(T a, T b) { return T(float(a) - float(b)); }             \
  inline T operator*(T a, T b) { return T(float(a) * float(b)); }             \
  inline T operator/(T a, T b) { return T(float(a) / float(b)); }             \
  inline T operator-(T a) { T r = a; r.__x ^= 0x8000; return r; }            \
  inline T& operator+=(T& a, T b) { return a = a + b; }                       \
  inline T& operator*=(T& a, T b) { return a = a * b; }                       \
  inline bool operator<(T a, T b) { return float(a) < float(b); }             \
  inline bool operator>(T a, T b) { return float(a) > float(b); }             \
  inline bool operator==(T a, T b) { return float(a) == float(b); }
NCDC_EMU_ARITH(__half)
NCDC_EMU_ARITH(__nv_bfloat16)
#undef NCDC_EMU_ARITH

inline __half __float2half_rn(float f) { return __half(f); }
inline __half __float2half(float f) { return __half(f); }
inline float __half2float(__half h) { return float(h); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return float(h); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }
inline float __low2float(__half2 h) { return float(h.x); }
inline float __high2float(__half2 h) { return float(h.y); }
inline float __low2float(__nv_bfloat162 h) { return float(h.x); }
inline float __high2float(__nv_bfloat162 h) { return float(h.y); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __half __ushort_as_half(unsigned short u) { __half h; h.__x = u; return h; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 h; h.__x = u; return h; }

#endif  // NCDC_EMU_TYPES_H
