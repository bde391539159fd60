// Access patterns with known sector and wavefront counts, one warp each (tests/
// test_access_counters.py works out every expected number).
#include "ncdc_runtime.cuh"
#include "ncdc_mma.cuh"

// Global loads of 4 bytes, lane l at element l * stride; the sum goes to out[l].
extern "C" __global__ void load_strided(const float* in, float* out, int stride) {
  out[threadIdx.x] = ncdc::ld_global(in + threadIdx.x * stride);
}

// 16-byte global loads and stores, lane l at vector l (fully coalesced).
extern "C" __global__ void copy_v16(const uint4* in, uint4* out) {
  ncdc::st_global_v16(out + threadIdx.x, ncdc::ld_global_v16(in + threadIdx.x));
}

// Shared-memory accesses of `bytes` (4, 8 or 16) per lane, lane l at byte offset l * pitch.
extern "C" __global__ void shared_pitch(float* out, int bytes, int pitch) {
  __shared__ __align__(16) unsigned char buf[32 * 512 + 16];
  unsigned char* p = buf + threadIdx.x * pitch;
  float v = 0.0f;
  if (bytes == 4) v = __uint_as_float(ncdc::ld_shared(reinterpret_cast<const uint32_t*>(p)));
  if (bytes == 8) v = __uint_as_float(ncdc::ld_shared(reinterpret_cast<const uint2*>(p)).x);
  if (bytes == 16) v = __uint_as_float(ncdc::ld_shared_v16(p).x);
  out[threadIdx.x] = v * 0.0f;
}

// ldmatrix.x4 from rows `pitch` bytes apart (matrix j's row r at row 8 j + r).
extern "C" __global__ void ldmatrix_pitch(float* out, int pitch) {
  __shared__ __align__(16) unsigned char buf[32 * 512];
  uint32_t r[4];
  ncdc::ldmatrix_x4(r, buf + threadIdx.x * pitch);
  out[threadIdx.x] = 0.0f * float(r[0] & 1u);
}

// cp.async of 16 bytes per lane: global vector l into shared memory at l * pitch.
extern "C" __global__ void cp_async_pitch(const uint4* in, float* out, int pitch) {
  __shared__ __align__(16) unsigned char buf[32 * 512];
  ncdc::cp_async_16(buf + threadIdx.x * pitch, in + threadIdx.x);
  ncdc::cp_async_wait_all();
  out[threadIdx.x] = 0.0f;
}

NCDC_EXPORT_KERNEL(load_strided);
NCDC_EXPORT_KERNEL(copy_v16);
NCDC_EXPORT_KERNEL(shared_pitch);
NCDC_EXPORT_KERNEL(ldmatrix_pitch);
NCDC_EXPORT_KERNEL(cp_async_pitch);
