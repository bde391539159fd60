// Global memory access and cp.async, on GPU and CPU. Kernels touch global memory only
// through these helpers, so the emulator counts every byte the kernel issues.
#pragma once
#ifndef NCDC_MEMORY_CUH
#define NCDC_MEMORY_CUH

namespace ncdc {

#ifndef NCDC_GPU
namespace emu {
inline void check_aligned(const void* p, unsigned n, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % n)
    fail(std::string("misaligned address in ") + what + " (needs " + std::to_string(n) + " bytes)");
}
}  // namespace emu
#endif

template <class T>
NCDC_DEVICE T ld_global(const T* p) {
#ifndef NCDC_GPU
  emu::count_global(p, sizeof(T), false);
#endif
  return *p;
}
template <class T>
NCDC_DEVICE void st_global(T* p, T v) {
#ifndef NCDC_GPU
  emu::count_global(p, sizeof(T), true);
#endif
  *p = v;
}

// Vectorised forms: N = 4, 8 or 16 bytes, p aligned to N (as the hardware requires).
template <int N>
struct Vec;
template <>
struct Vec<4> { using type = uint32_t; };
template <>
struct Vec<8> { using type = uint2; };
template <>
struct Vec<16> { using type = uint4; };

template <int N>
NCDC_DEVICE typename Vec<N>::type ld_global_vec(const void* p) {
#ifndef NCDC_GPU
  emu::check_aligned(p, N, "ld_global_vec");
  emu::count_global(p, N, false);
#endif
  return *reinterpret_cast<const typename Vec<N>::type*>(p);
}
template <int N>
NCDC_DEVICE void st_global_vec(void* p, typename Vec<N>::type v) {
#ifndef NCDC_GPU
  emu::check_aligned(p, N, "st_global_vec");
  emu::count_global(p, N, true);
#endif
  *reinterpret_cast<typename Vec<N>::type*>(p) = v;
}
NCDC_DEVICE uint32_t ld_global_v4(const void* p) { return ld_global_vec<4>(p); }
NCDC_DEVICE uint2 ld_global_v8(const void* p) { return ld_global_vec<8>(p); }
NCDC_DEVICE uint4 ld_global_v16(const void* p) { return ld_global_vec<16>(p); }
NCDC_DEVICE void st_global_v4(void* p, uint32_t v) { st_global_vec<4>(p, v); }
NCDC_DEVICE void st_global_v8(void* p, uint2 v) { st_global_vec<8>(p, v); }
NCDC_DEVICE void st_global_v16(void* p, uint4 v) { st_global_vec<16>(p, v); }

// Shared memory through these helpers (and ldmatrix, cp.async) is what the emulator's
// bank-conflict counter sees; a plain dereference is not counted.
template <class T>
NCDC_DEVICE T ld_shared(const T* p) {
#ifndef NCDC_GPU
  emu::count_shared(p, sizeof(T));
#endif
  return *p;
}
template <class T>
NCDC_DEVICE void st_shared(T* p, T v) {
#ifndef NCDC_GPU
  emu::count_shared(p, sizeof(T));
  emu::note_generic_write(p, sizeof(T));  // for the async proxy's reads (ncdc_emu_hopper.h)
#endif
  *p = v;
}
NCDC_DEVICE uint4 ld_shared_v16(const void* p) {
#ifndef NCDC_GPU
  emu::check_aligned(p, 16, "ld_shared_v16");
  emu::count_shared(p, 16);
#endif
  return *reinterpret_cast<const uint4*>(p);
}
NCDC_DEVICE void st_shared_v16(void* p, uint4 v) {
#ifndef NCDC_GPU
  emu::check_aligned(p, 16, "st_shared_v16");
  emu::count_shared(p, 16);
  emu::note_generic_write(p, 16);
#endif
  *reinterpret_cast<uint4*>(p) = v;
}

// cp.async: copy N bytes global -> shared, asynchronously; src_bytes < N zero-fills the tail
// and src_bytes == 0 reads nothing. The copy lands only when its group is waited for.
template <int N>
NCDC_DEVICE void cp_async_zfill(void* smem_dst, const void* gmem_src, int src_bytes) {
#ifdef NCDC_GPU
  unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  if constexpr (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src),
                 "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(gmem_src),
                 "n"(N), "r"(src_bytes));
  }
#else
  static_assert(N == 4 || N == 8 || N == 16, "cp.async copies 4, 8 or 16 bytes");
  emu::check_aligned(smem_dst, N, "cp_async (shared destination)");
  if (src_bytes) emu::check_aligned(gmem_src, N, "cp_async (global source)");
  if (src_bytes < 0) emu::fail("cp_async with negative src_bytes");
  emu::copy_issue(smem_dst, gmem_src, N, unsigned(src_bytes));
#endif
}
template <int N>
NCDC_DEVICE void cp_async(void* smem_dst, const void* gmem_src) {
  cp_async_zfill<N>(smem_dst, gmem_src, N);
}
NCDC_DEVICE void cp_async_4(void* d, const void* s) { cp_async<4>(d, s); }
NCDC_DEVICE void cp_async_8(void* d, const void* s) { cp_async<8>(d, s); }
NCDC_DEVICE void cp_async_16(void* d, const void* s) { cp_async<16>(d, s); }
NCDC_DEVICE void cp_async_4_zfill(void* d, const void* s, int n) { cp_async_zfill<4>(d, s, n); }
NCDC_DEVICE void cp_async_8_zfill(void* d, const void* s, int n) { cp_async_zfill<8>(d, s, n); }
NCDC_DEVICE void cp_async_16_zfill(void* d, const void* s, int n) { cp_async_zfill<16>(d, s, n); }

// Closes the group of cp.async issued by this thread since the last commit.
NCDC_DEVICE void cp_async_commit() {
#ifdef NCDC_GPU
  asm volatile("cp.async.commit_group;\n" ::);
#else
  emu::copy_commit();
#endif
}
// Waits until at most N of this thread's committed groups are pending.
template <int N>
NCDC_DEVICE void cp_async_wait() {
#ifdef NCDC_GPU
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#else
  emu::copy_wait(N);
#endif
}
NCDC_DEVICE void cp_async_wait_all() {
  cp_async_commit();
  cp_async_wait<0>();
}

// Dynamic shared memory of the launch (its size is the launch's dynamic_smem), 128-aligned.
#ifdef NCDC_GPU
extern __shared__ __align__(128) unsigned char ncdc_dynamic_smem[];
template <class T>
NCDC_DEVICE T* dynamic_smem() { return reinterpret_cast<T*>(ncdc_dynamic_smem); }
#else
template <class T>
inline T* dynamic_smem() { return reinterpret_cast<T*>(emu::tl_worker->dynamic_smem); }
#endif

}  // namespace ncdc

#endif  // NCDC_MEMORY_CUH
