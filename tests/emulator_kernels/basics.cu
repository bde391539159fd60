// Barriers, warp collectives, atomics, global traffic and deadlocks on the CPU backend.
#include "ncdc_runtime.cuh"

// Two rounds of "write my slot, barrier, read my mirror": wrong unless every thread of the
// block really waits at __syncthreads for all the others.
extern "C" __global__ void barrier_mirror(const int* in, int* out) {
  __shared__ int s[256];
  unsigned t = threadIdx.x, n = blockDim.x;
  s[t] = ncdc::ld_global(in + blockIdx.x * n + t);
  __syncthreads();
  int v = s[n - 1 - t];
  __syncthreads();
  s[t] = v * 3 + 1;
  __syncthreads();
  ncdc::st_global(out + blockIdx.x * n + t, s[(t + 1) % n]);
}
NCDC_EXPORT_KERNEL(barrier_mirror);

// Every shuffle variant, at full width and at width 8; one row of 32 results per variant.
extern "C" __global__ void shuffles(int* out, float* fout, unsigned* ballots) {
  unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int v = int(lane * 10 + warp * 1000);
  int* o = out + warp * 8 * 32;
  const unsigned full = 0xffffffffu;
  o[0 * 32 + lane] = __shfl_sync(full, v, (lane * 7 + 3) % 32);
  o[1 * 32 + lane] = __shfl_xor_sync(full, v, 5);
  o[2 * 32 + lane] = __shfl_down_sync(full, v, 3);
  o[3 * 32 + lane] = __shfl_up_sync(full, v, 3);
  o[4 * 32 + lane] = __shfl_sync(full, v, 2, 8);
  o[5 * 32 + lane] = __shfl_xor_sync(full, v, 9, 8);
  o[6 * 32 + lane] = __shfl_down_sync(full, v, 3, 8);
  o[7 * 32 + lane] = __shfl_up_sync(full, v, 3, 8);
  float f = float(lane) + 0.5f;
  for (int m = 16; m > 0; m /= 2) f += __shfl_xor_sync(full, f, m);
  fout[warp * 32 + lane] = f;
  unsigned u = __shfl_sync(full, lane * 3u, 31 - lane);
  ballots[warp * 32 + lane] = u;
  if (lane == 0) {
    ballots[64 + warp * 4 + 0] = 0;
  }
  unsigned b = __ballot_sync(full, lane % 3 == 0);
  int any = __any_sync(full, lane == 17), all = __all_sync(full, lane < 31), all2 = __all_sync(full, 1);
  __syncwarp();
  if (lane == 0) {
    ballots[64 + warp * 4 + 0] = b;
    ballots[64 + warp * 4 + 1] = unsigned(any);
    ballots[64 + warp * 4 + 2] = unsigned(all);
    ballots[64 + warp * 4 + 3] = unsigned(all2);
  }
}
NCDC_EXPORT_KERNEL(shuffles);

extern "C" __global__ void copy_f32(const float* __restrict__ src, float* __restrict__ dst, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    ncdc::st_global(dst + i, ncdc::ld_global(src + i));
}
NCDC_EXPORT_KERNEL(copy_f32);

// 16-byte vector copy of n floats (n a multiple of 4).
extern "C" __global__ void copy_v16(const float* src, float* dst, int n) {
  int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (i < n) ncdc::st_global_v16(dst + i, ncdc::ld_global_v16(src + i));
}
NCDC_EXPORT_KERNEL(copy_v16);

extern "C" __global__ void atomics(const float* vals, float* fsum, int* isum, unsigned* usum,
                                   int* imax, float* fmax, float* fmin_neg) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = ncdc::ld_global(vals + i);
  atomicAdd(fsum, 1.0f);
  atomicAdd(isum, i);
  atomicAdd(usum, 2u);
  atomicMax(imax, i * 7 % 1001);
  ncdc::atomic_max_float(fmax, v);
  ncdc::atomic_max_float(fmin_neg, -1000.0f - v);
  __shared__ int block_count;
  if (threadIdx.x == 0) block_count = 0;
  __syncthreads();
  atomicAdd(&block_count, 1);  // shared: not global traffic
  __syncthreads();
  if (threadIdx.x == 0 && block_count != int(blockDim.x)) atomicAdd(isum, 1 << 30);
}
NCDC_EXPORT_KERNEL(atomics);

extern "C" __global__ void early_exit_then_barrier(int* x) {
  if (threadIdx.x == 3) return;
  __syncthreads();
  x[threadIdx.x] = 1;
}
NCDC_EXPORT_KERNEL(early_exit_then_barrier);

extern "C" __global__ void diverged_shuffle(int* x) {
  int v = int(threadIdx.x);
  if (threadIdx.x % 32 < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
  x[threadIdx.x] = v;
}
NCDC_EXPORT_KERNEL(diverged_shuffle);

// Dynamic shared memory: reverse a block's slice through it.
extern "C" __global__ void dyn_reverse(const float* in, float* out) {
  float* s = ncdc::dynamic_smem<float>();
  unsigned t = threadIdx.x, n = blockDim.x;
  s[t] = ncdc::ld_global(in + blockIdx.x * n + t);
  __syncthreads();
  ncdc::st_global(out + blockIdx.x * n + t, s[n - 1 - t]);
}
NCDC_EXPORT_KERNEL(dyn_reverse);

// Scalars of every width by value.
extern "C" __global__ void scalars(double* out, int a, long long b, float c, double d, unsigned char e) {
  if (threadIdx.x == 0) {
    out[0] = a;
    out[1] = double(b);
    out[2] = c;
    out[3] = d;
    out[4] = e;
  }
}
NCDC_EXPORT_KERNEL(scalars);
