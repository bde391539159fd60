// ncdc calibrate's microbenchmarks (ncdc/measure/microbench.py compiles this file as it is):
// each kernel stresses one unit the cost model prices, as independently of the others as it
// can. Every result is summed into `sink` so that the compiler keeps the work; the host
// divides bytes or operations by CUDA-event time.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define ITERS_UNROLL 8

// Reads `n` float4 values `passes` times over, grid-stride: HBM reads for a buffer
// several times L2, L2 reads for one that fits.
extern "C" __global__ void read_passes(const float4* __restrict__ p, long long n, int passes,
                                       float* sink) {
  float acc = 0.f;
  long long stride = (long long)gridDim.x * blockDim.x;
  for (int r = 0; r < passes; ++r)
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride) {
      float4 v = __ldcg(p + i);  // through L2, not L1
      acc += v.x + v.y + v.z + v.w;
    }
  if (acc == 1.234567f) sink[0] = acc;  // never true for the buffers given; keeps the loads
}

// Writes `n` float4 values: HBM writes alone.
extern "C" __global__ void write_only(float4* __restrict__ p, long long n, float value) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride)
    __stcg(p + i, make_float4(value, value, value, value));
}

// Copies `n` float4 values: one read and one write each.
extern "C" __global__ void copy(const float4* __restrict__ src, float4* __restrict__ dst,
                                long long n) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = __ldcg(src + i);
}

// Nothing: what a launch costs by itself.
extern "C" __global__ void empty() {}

// Shared-memory reads: each thread reads 16 bytes per step from conflict-free addresses
// (consecutive threads, consecutive 16-byte chunks), `iters` x ITERS_UNROLL steps.
extern "C" __global__ void smem_reads(int iters, float* sink) {
  __shared__ float4 buf[1024];
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) buf[i] = make_float4(i, 1.f, 2.f, 3.f);
  __syncthreads();
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  int at = threadIdx.x % 1024;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int u = 0; u < ITERS_UNROLL; ++u) {
      float4 v = buf[(at + u * 32 + i) % 1024];  // moves with i: no load is loop-invariant
      acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
  }
  if (acc.x + acc.y + acc.z + acc.w == 1.234567f) sink[0] = acc.x;
}

// The SFU's exp2: four independent chains per thread, `iters` x ITERS_UNROLL x 4 ex2 each.
extern "C" __global__ void sfu_exp2(int iters, float* sink) {
  float a = threadIdx.x * 1e-6f, b = a + 1e-3f, c = a + 2e-3f, d = a + 3e-3f;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int u = 0; u < ITERS_UNROLL; ++u) {
      asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(a));
      asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(b));
      asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(c));
      asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(d));
    }
  }
  if (a + b + c + d == 1.234567f) sink[0] = a;
}

// mma.sync m16n8k16 (bf16 or fp16 inputs, fp32 accumulate) or m16n8k32 (fp8 e4m3; on
// sm_90 ptxas builds it from conversions and fp16 HMMAs, so its rate is that): four
// independent accumulators per warp, `iters` x ITERS_UNROLL x 4 instructions per warp.
// Thread 0 of each block records clock64 and %globaltimer (ns) at its start and end in
// `clocks` (4 values per block): the SM clock under tensor load.
template <int KIND>
__device__ void mma_step(float (&acc)[4][4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if constexpr (KIND == 0)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%0,%1,%2,%3};"
          : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else if constexpr (KIND == 1)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%0,%1,%2,%3};"
          : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
      asm volatile(
          "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%0,%1,%2,%3};"
          : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

__device__ long long global_ns() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <int KIND>
__device__ void mma_loop(int iters, float* sink, long long* clocks) {
  long long c0 = clock64(), t0 = global_ns();
  unsigned a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = 0x3c003c00u ^ (threadIdx.x << i);  // small finite values
  for (int i = 0; i < 2; ++i) b[i] = 0x3c003c00u ^ (threadIdx.x << (i + 4));
  float acc[4][4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int u = 0; u < ITERS_UNROLL; ++u) mma_step<KIND>(acc, a, b);
  }
  float s = 0.f;
  for (int j = 0; j < 4; ++j) s += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
  if (s == 1.234567f) sink[0] = s;
  if (threadIdx.x == 0) {
    long long* mine = clocks + 4 * blockIdx.x;
    mine[0] = c0;
    mine[1] = clock64();
    mine[2] = t0;
    mine[3] = global_ns();
  }
}

extern "C" __global__ void mma_bf16(int iters, float* sink, long long* clocks) {
  mma_loop<0>(iters, sink, clocks);
}
extern "C" __global__ void mma_fp16(int iters, float* sink, long long* clocks) {
  mma_loop<1>(iters, sink, clocks);
}
// fp8 mma.sync exists from sm_89 on; elsewhere the kernel does nothing (and is not run).
extern "C" __global__ void mma_fp8_e4m3(int iters, float* sink, long long* clocks) {
#if __CUDA_ARCH__ >= 890
  mma_loop<2>(iters, sink, clocks);
#endif
}
