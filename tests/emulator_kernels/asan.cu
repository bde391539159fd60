// Planted out-of-bounds accesses for the AddressSanitizer build.
#include "ncdc_runtime.cuh"

// Block 1, thread 5 writes one element past the end of x.
extern "C" __global__ void oob_global(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) ncdc::st_global(x + i, 1.0f);
  if (blockIdx.x == 1 && threadIdx.x == 5) ncdc::st_global(x + n, 2.0f);
}
NCDC_EXPORT_KERNEL(oob_global);

// Thread 31 writes s[32], one past the static shared array.
extern "C" __global__ void oob_shared(float* x) {
  __shared__ float s[32];
  s[threadIdx.x] = 0.0f;
  __syncthreads();
  volatile float* vs = s;
  vs[threadIdx.x + 1] = 1.0f;
  __syncthreads();
  ncdc::st_global(x + threadIdx.x, s[threadIdx.x % 32]);
}
NCDC_EXPORT_KERNEL(oob_shared);

extern "C" __global__ void in_bounds(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) ncdc::st_global(x + i, ncdc::ld_global(x + i) * 2.0f);
}
NCDC_EXPORT_KERNEL(in_bounds);
