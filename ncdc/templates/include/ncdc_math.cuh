// Conversions between float and the storage types, and float helpers, on GPU and CPU.
#pragma once
#ifndef NCDC_MATH_CUH
#define NCDC_MATH_CUH

namespace ncdc {

// to_float(x): the exact value of a storage element as float.
NCDC_DEVICE float to_float(float x) { return x; }
NCDC_DEVICE float to_float(__half x) { return __half2float(x); }
NCDC_DEVICE float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
NCDC_DEVICE float to_float(__nv_fp8_e4m3 x) { return static_cast<float>(x); }
NCDC_DEVICE float to_float(__nv_fp8_e5m2 x) { return static_cast<float>(x); }
NCDC_DEVICE float to_float(signed char x) { return float(x); }
NCDC_DEVICE float to_float(int x) { return float(x); }  // exact below 2^24, then to nearest even

// from_float<T>(x): round to nearest even; fp8 saturates to the largest finite value; the
// integers saturate to their range and take NaN to 0 (cvt.rni.s32.f32 saturates by default).
template <class T>
NCDC_DEVICE T from_float(float x);
template <>
NCDC_DEVICE float from_float<float>(float x) { return x; }
template <>
NCDC_DEVICE __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
NCDC_DEVICE __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
NCDC_DEVICE __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float x) { return __nv_fp8_e4m3(x); }
template <>
NCDC_DEVICE __nv_fp8_e5m2 from_float<__nv_fp8_e5m2>(float x) { return __nv_fp8_e5m2(x); }
template <>
NCDC_DEVICE int from_float<int>(float x) { return __float2int_rn(x); }
template <>
NCDC_DEVICE signed char from_float<signed char>(float x) {
  const int v = __float2int_rn(x);
  return (signed char)(v < -128 ? -128 : (v > 127 ? 127 : v));
}

// Two floats packed as one 32-bit b16x2 register (low half = a), as mma fragments hold them.
NCDC_DEVICE uint32_t pack_bf16x2(float a, float b) {
  union {
    __nv_bfloat162 v;
    uint32_t u;
  } x;
  x.v = __floats2bfloat162_rn(a, b);
  return x.u;
}
NCDC_DEVICE uint32_t pack_f16x2(float a, float b) {
  union {
    __half2 v;
    uint32_t u;
  } x;
  x.v = __floats2half2_rn(a, b);
  return x.u;
}

// Atomic max of a float in global or shared memory, by its bit pattern: non-negative floats
// order like signed ints, negative ones like unsigned ints in reverse. Not for NaN.
NCDC_DEVICE float atomic_max_float(float* addr, float v) {
  if (v >= 0.0f) return __int_as_float(atomicMax(reinterpret_cast<int*>(addr), __float_as_int(v)));
  return __uint_as_float(atomicMin(reinterpret_cast<unsigned*>(addr), __float_as_uint(v)));
}

}  // namespace ncdc

#endif  // NCDC_MATH_CUH
