// Shared-memory races for the ThreadSanitizer build (sanitize="race"), and their fixed forms.
#include "ncdc_runtime.cuh"

// Each thread writes its slot, then reads its neighbour's: the barrier between is missing.
// Thread 0 runs first and reads slot 1 before thread 1 has written it.
extern "C" __global__ void neighbour_no_barrier(float* out) {
  __shared__ float tile[64];
  tile[threadIdx.x] = float(threadIdx.x);
  ncdc::st_global(out + blockIdx.x * blockDim.x + threadIdx.x, tile[(threadIdx.x + 1) % blockDim.x]);
}
NCDC_EXPORT_KERNEL(neighbour_no_barrier);

extern "C" __global__ void neighbour_barrier(float* out) {
  __shared__ float tile[64];
  tile[threadIdx.x] = float(threadIdx.x);
  __syncthreads();
  ncdc::st_global(out + blockIdx.x * blockDim.x + threadIdx.x, tile[(threadIdx.x + 1) % blockDim.x]);
}
NCDC_EXPORT_KERNEL(neighbour_barrier);

// Two phases over the same tile: the second write needs a barrier after the reads of the
// first phase (write-after-read). Under the fiber order only one output is wrong (thread 63,
// last at the barrier, runs on first and overwrites slot 63 before thread 62 reads it).
template <bool kSecondBarrier>
__device__ void two_phases(float* out) {
  __shared__ float tile[64];
  int t = threadIdx.x, n = blockDim.x;
  tile[t] = float(t);
  __syncthreads();
  float a = tile[(t + 1) % n];
  if (kSecondBarrier) __syncthreads();
  tile[t] = 2.0f * a;
  __syncthreads();
  ncdc::st_global(out + t, tile[(t + 1) % n]);
}
extern "C" __global__ void reuse_no_barrier(float* out) { two_phases<false>(out); }
NCDC_EXPORT_KERNEL(reuse_no_barrier);
extern "C" __global__ void reuse_barrier(float* out) { two_phases<true>(out); }
NCDC_EXPORT_KERNEL(reuse_barrier);

// Block sum: per-warp shuffle reduction, warp totals through shared memory, then warp 0.
extern "C" __global__ void block_sum(const float* x, float* out, int n) {
  __shared__ float partial[32];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? ncdc::ld_global(x + i) : 0.0f;
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x / 32) ? partial[lane] : 0.0f;
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) ncdc::st_global(out + blockIdx.x, v);
  }
}
NCDC_EXPORT_KERNEL(block_sum);

// Lane 0 of each warp publishes a value in shared memory for its own warp: __syncwarp orders it.
extern "C" __global__ void warp_broadcast(float* out) {
  __shared__ float slot[8];
  int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) slot[warp] = float(warp + 1);
  __syncwarp();
  ncdc::st_global(out + threadIdx.x, slot[warp]);
}
NCDC_EXPORT_KERNEL(warp_broadcast);

// Thread t reads its neighbour's slot, then refills its own slot with cp.async. The copy may
// land as soon as it is issued, so a barrier must separate the neighbour's read from the
// issue. The emulator copies at the wait, so a result check sees at most one wrong output.
template <bool kBarrier>
__device__ void refill(const float* x, float* out) {
  __shared__ __align__(16) float tile[64];
  int t = threadIdx.x, n = blockDim.x;
  tile[t] = ncdc::ld_global(x + t);
  __syncthreads();
  float a = tile[(t + 1) % n];
  if (kBarrier) __syncthreads();
  ncdc::cp_async_4(tile + t, x + n + t);
  ncdc::cp_async_wait_all();
  __syncthreads();
  ncdc::st_global(out + t, a + tile[(t + 1) % n]);
}
extern "C" __global__ void refill_no_barrier(const float* x, float* out) { refill<false>(x, out); }
NCDC_EXPORT_KERNEL(refill_no_barrier);
extern "C" __global__ void refill_barrier(const float* x, float* out) { refill<true>(x, out); }
NCDC_EXPORT_KERNEL(refill_barrier);
