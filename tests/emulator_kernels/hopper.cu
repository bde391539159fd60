// Hopper instructions one at a time: wgmma from descriptors over a shared-memory image the
// test lays out itself (by the PTX ISA's canonical layouts), TMA boxes copied out verbatim,
// an mbarrier ring between a producer and a consumer warp, named barriers, and the planted
// faults (a missing wait, a missing fence, a wrong parity, too many expected bytes).
#include "ncdc_runtime.cuh"
#include "ncdc_hopper.cuh"

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900  // the instructions need sm_90a

// Dynamic shared memory rounded up to 1024 bytes (the 128-byte swizzle's repeat); launches
// ask for 1024 bytes more than they use.
__device__ unsigned char* smem_1024() {
  unsigned char* p = ncdc::dynamic_smem<unsigned char>();
  return p + ((1024 - ncdc::smem_address(p) % 1024) % 1024);
}

// Copies `bytes` of `image` into dynamic shared memory (1024-aligned), runs one m64nNk16 (or
// k32) wgmma over descriptors at offsets 0 and `off_b`, and writes D (64 x N, row major) by
// the documented accumulator layout. fault: 1 reads D before the wait, 2 skips the fence.
// `C` (64 x N, row major, or null for zeros): the accumulators before the wgmma.
template <int ELEM, int N, int TB>
__device__ void wgmma_one(const unsigned char* image, int bytes, unsigned lbo_a, unsigned sbo_a,
                          int sw_a, int off_b, unsigned lbo_b, unsigned sbo_b, int sw_b, int fault,
                          float* D, const float* C = nullptr) {
  unsigned char* smem = smem_1024();
  for (int i = threadIdx.x; i < bytes; i += blockDim.x) smem[i] = image[i];
  __syncthreads();
  int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) {
    int row = 16 * w + g + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * t + i % 2;
    d[i] = C ? C[row * N + col] : 0.0f;
  }
  auto da = ncdc::smem_desc(smem, lbo_a, sbo_a, ncdc::SmemSwizzle(sw_a));
  auto db = ncdc::smem_desc(smem + off_b, lbo_b, sbo_b, ncdc::SmemSwizzle(sw_b));
  if (fault != 2) ncdc::wgmma_fence();
  if constexpr (ELEM == 0) ncdc::wgmma_m64k16_bf16<N, 0, TB>(d, da, db, 1);
  else if constexpr (ELEM == 1) ncdc::wgmma_m64k16_f16<N, 0, TB>(d, da, db, 1);
  else if constexpr (ELEM == 2) ncdc::wgmma_m64k32_e4m3<N>(d, da, db, 1);
  else ncdc::wgmma_m64k32_e5m2<N>(d, da, db, 1);
  ncdc::wgmma_commit();
  float early[N / 2];
  for (int i = 0; i < N / 2; ++i) early[i] = d[i];
  ncdc::wgmma_wait<0>();
  for (int i = 0; i < N / 2; ++i) {
    int row = 16 * w + g + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * t + i % 2;
    D[row * N + col] = fault == 1 ? early[i] : d[i];
  }
}

#define WGMMA_KERNEL(NAME, ELEM, N, TB)                                                          \
  extern "C" __global__ void NAME(const unsigned char* image, int bytes, unsigned lbo_a,         \
                                  unsigned sbo_a, int sw_a, int off_b, unsigned lbo_b,           \
                                  unsigned sbo_b, int sw_b, int fault, float* D) {               \
    wgmma_one<ELEM, N, TB>(image, bytes, lbo_a, sbo_a, sw_a, off_b, lbo_b, sbo_b, sw_b, fault, D); \
  }                                                                                              \
  NCDC_EXPORT_KERNEL(NAME)
WGMMA_KERNEL(wgmma_bf16_kmajor, 0, 64, 0);
WGMMA_KERNEL(wgmma_bf16_nmajor, 0, 64, 1);
WGMMA_KERNEL(wgmma_f16_nmajor, 1, 64, 1);
WGMMA_KERNEL(wgmma_e4m3, 2, 64, 0);
WGMMA_KERNEL(wgmma_e5m2, 3, 64, 0);

// The same with the accumulators given: D = A B + C, as the tensor cores round it.
#define WGMMA_C_KERNEL(NAME, ELEM)                                                               \
  extern "C" __global__ void NAME(const unsigned char* image, int bytes, unsigned lbo_a,         \
                                  unsigned sbo_a, int sw_a, int off_b, unsigned lbo_b,           \
                                  unsigned sbo_b, int sw_b, const float* C, float* D) {          \
    wgmma_one<ELEM, 64, 0>(image, bytes, lbo_a, sbo_a, sw_a, off_b, lbo_b, sbo_b, sw_b, 0, D, C); \
  }                                                                                              \
  NCDC_EXPORT_KERNEL(NAME)
WGMMA_C_KERNEL(wgmma_bf16_c, 0);
WGMMA_C_KERNEL(wgmma_f16_c, 1);
WGMMA_C_KERNEL(wgmma_e4m3_c, 2);
WGMMA_C_KERNEL(wgmma_e5m2_c, 3);

// One wgmma with A from registers, m64nNk16 for 16-bit types, k32 for 8-bit ones: `A` is
// the 64 x 32-byte matrix (row major), and each thread packs its fragment by the documented
// layout, the same in bytes for both widths (PTX ISA 9.7.15.5.1; CuTe's ALayout_64x16 and
// ALayout_64x32): register r holds the 4 bytes at 16 (r / 2) + 4t of row 16w + g + 8 (r % 2),
// the lowest column in the lowest bits. B is the image's descriptor at offset 0 (8-bit:
// K-major); D as above. fault: 1 reads D before the wait, 3 overwrites the A registers after
// the issue (the product must not change: they are read at the issue), 4 (8-bit) packs the
// accumulator's order instead (columns 8j + 2t and + 1 of the groups j = 2 (r / 2) and + 1:
// what attention holds before it permutes P).
template <int ELEM, int N, int TB>
__device__ void wgmma_rs_one(const unsigned char* A, const unsigned char* image, int bytes,
                             unsigned lbo_b, unsigned sbo_b, int sw_b, int fault, float* D) {
  unsigned char* smem = smem_1024();
  for (int i = threadIdx.x; i < bytes; i += blockDim.x) smem[i] = image[i];
  __syncthreads();
  int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  unsigned a[4];
  for (int r = 0; r < 4; ++r) {
    int row = 16 * w + g + 8 * (r % 2);
    a[r] = 0u;
    for (int i = 0; i < 4; ++i) {
      int at = fault == 4 ? 8 * (2 * (r / 2) + i / 2) + 2 * t + i % 2 : 16 * (r / 2) + 4 * t + i;
      a[r] |= unsigned(A[row * 32 + at]) << (8 * i);
    }
  }
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
  auto db = ncdc::smem_desc(smem, lbo_b, sbo_b, ncdc::SmemSwizzle(sw_b));
  ncdc::wgmma_fence();
  if constexpr (ELEM == 0) ncdc::wgmma_m64k16_bf16_rs<N, TB>(d, a, db, 1);
  else if constexpr (ELEM == 1) ncdc::wgmma_m64k16_f16_rs<N, TB>(d, a, db, 1);
  else if constexpr (ELEM == 2) ncdc::wgmma_m64k32_e4m3_rs<N>(d, a, db, 1);
  else ncdc::wgmma_m64k32_e5m2_rs<N>(d, a, db, 1);
  ncdc::wgmma_commit();
  if (fault == 3)
    for (int r = 0; r < 4; ++r) a[r] = 0u;
  float early[N / 2];
  for (int i = 0; i < N / 2; ++i) early[i] = d[i];
  ncdc::wgmma_wait<0>();
  for (int i = 0; i < N / 2; ++i) {
    int row = 16 * w + g + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * t + i % 2;
    D[row * N + col] = fault == 1 ? early[i] : d[i];
  }
}

#define WGMMA_RS_KERNEL(NAME, ELEM, N, TB)                                                      \
  extern "C" __global__ void NAME(const unsigned char* A, const unsigned char* image, int bytes,  \
                                  unsigned lbo_b, unsigned sbo_b, int sw_b, int fault, float* D) { \
    wgmma_rs_one<ELEM, N, TB>(A, image, bytes, lbo_b, sbo_b, sw_b, fault, D);                    \
  }                                                                                              \
  NCDC_EXPORT_KERNEL(NAME)
WGMMA_RS_KERNEL(wgmma_rs_bf16_n64_kmajor, 0, 64, 0);
WGMMA_RS_KERNEL(wgmma_rs_bf16_n64_nmajor, 0, 64, 1);
WGMMA_RS_KERNEL(wgmma_rs_bf16_n128_kmajor, 0, 128, 0);
WGMMA_RS_KERNEL(wgmma_rs_bf16_n128_nmajor, 0, 128, 1);
WGMMA_RS_KERNEL(wgmma_rs_bf16_n256_kmajor, 0, 256, 0);
WGMMA_RS_KERNEL(wgmma_rs_bf16_n256_nmajor, 0, 256, 1);
WGMMA_RS_KERNEL(wgmma_rs_f16_n64_kmajor, 1, 64, 0);
WGMMA_RS_KERNEL(wgmma_rs_f16_n64_nmajor, 1, 64, 1);
WGMMA_RS_KERNEL(wgmma_rs_f16_n128_kmajor, 1, 128, 0);
WGMMA_RS_KERNEL(wgmma_rs_f16_n128_nmajor, 1, 128, 1);
WGMMA_RS_KERNEL(wgmma_rs_f16_n256_kmajor, 1, 256, 0);
WGMMA_RS_KERNEL(wgmma_rs_f16_n256_nmajor, 1, 256, 1);
WGMMA_RS_KERNEL(wgmma_rs_e4m3_n64_kmajor, 2, 64, 0);
WGMMA_RS_KERNEL(wgmma_rs_e4m3_n128_kmajor, 2, 128, 0);
WGMMA_RS_KERNEL(wgmma_rs_e4m3_n256_kmajor, 2, 256, 0);
WGMMA_RS_KERNEL(wgmma_rs_e5m2_n64_kmajor, 3, 64, 0);
WGMMA_RS_KERNEL(wgmma_rs_e5m2_n128_kmajor, 3, 128, 0);
WGMMA_RS_KERNEL(wgmma_rs_e5m2_n256_kmajor, 3, 256, 0);

// One TMA box at (c0, c1) into 1024-aligned shared memory, copied out byte for byte. fault: 1
// reads before the wait, 2 waits for the wrong parity, 3 expects 16 bytes more than arrive.
extern "C" __global__ void tma_box(const __grid_constant__ ncdc::TensorMap map, const void* src,
                                   int c0, int c1, int box_bytes, int fault, unsigned char* out) {
  (void)src;  // the map's buffer: passed so that the map can name it by parameter index
  __shared__ unsigned long long bar;
  unsigned char* smem = smem_1024();
  if (threadIdx.x == 0) {
    ncdc::mbar_init(&bar, 1);
    ncdc::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    ncdc::mbar_arrive_expect_tx(&bar, box_bytes + (fault == 3 ? 16 : 0));
    ncdc::tma_load_2d(smem, &map, &bar, c0, c1);
  }
  if (fault != 1) ncdc::mbar_wait(&bar, fault == 2 ? 1 : 0);
  for (int i = threadIdx.x; i < box_bytes; i += blockDim.x) out[i] = smem[i];
  __syncthreads();
  if (fault == 1) ncdc::mbar_wait(&bar, 0);
}
NCDC_EXPORT_KERNEL(tma_box);

// The box in `image` (as TMA lays it out in shared memory) stored to `dst` at (c0, c1).
extern "C" __global__ void tma_store_box(const __grid_constant__ ncdc::TensorMap map, void* dst,
                                         int c0, int c1, const unsigned char* image, int box_bytes) {
  (void)dst;  // the map's buffer
  unsigned char* smem = smem_1024();
  for (int i = threadIdx.x; i < box_bytes; i += blockDim.x) smem[i] = image[i];
  ncdc::fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    ncdc::tma_store_2d(&map, smem, c0, c1);
    ncdc::tma_store_commit();
    ncdc::tma_store_wait<0>();
  }
}
NCDC_EXPORT_KERNEL(tma_store_box);

// Generic-proxy writes read by the async proxy: the 128 threads store 16 KiB of shared memory
// (st_shared), each fences them (fence.proxy.async) but thread `skip` (-1: none), and after
// a barrier thread 0 stores the first 8 x 128 bytes with TMA (`wgmma` 0) or the warpgroup
// runs one wgmma m64n64k16 from K-major 128-byte-swizzled A (offset 0) and B (8192).
extern "C" __global__ void proxy_fence(const __grid_constant__ ncdc::TensorMap map, void* dst,
                                       int wgmma, int skip, float* D) {
  (void)dst;  // the map's buffer
  unsigned char* smem = smem_1024();
  auto* words = reinterpret_cast<unsigned*>(smem);
  for (int i = threadIdx.x; i < 4096; i += blockDim.x) ncdc::st_shared(words + i, 0u);
  if (int(threadIdx.x) != skip) ncdc::fence_proxy_async();
  __syncthreads();
  if (!wgmma) {
    if (threadIdx.x == 0) {
      ncdc::tma_store_2d(&map, smem, 0, 0);
      ncdc::tma_store_commit();
      ncdc::tma_store_wait<0>();
    }
    return;
  }
  float d[32];
  auto da = ncdc::smem_desc(smem, 16, 1024, ncdc::kSwizzle128);
  auto db = ncdc::smem_desc(smem + 8192, 16, 1024, ncdc::kSwizzle128);
  ncdc::wgmma_fence();
  ncdc::wgmma_m64k16_bf16<64, 0, 0>(d, da, db, 0);
  ncdc::wgmma_commit();
  ncdc::wgmma_wait<0>();
  D[threadIdx.x] = d[0];
}
NCDC_EXPORT_KERNEL(proxy_fence);

// A producer warp and a consumer warp through a ring of `stages` slots of 32 floats, with
// full and empty mbarriers: the consumer sums every slot. fault: 1 the producer waits for the
// wrong empty parity (overwrites a slot not yet read), 2 the consumer skips the full wait.
extern "C" __global__ void ring(const float* in, int rounds, int stages, int fault, float* out) {
  __shared__ unsigned long long full[4], empty[4];
  __shared__ float slot[4][32];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      ncdc::mbar_init(&full[s], 32);
      ncdc::mbar_init(&empty[s], 32);
    }
  }
  __syncthreads();
  float acc = 0.0f;
  for (int r = 0; r < rounds; ++r) {
    int s = r % stages;
    unsigned phase = (r / stages) & 1;
    if (warp == 0) {
      ncdc::mbar_wait(&empty[s], fault == 1 ? phase : phase ^ 1);
      slot[s][lane] = in[r * 32 + lane];
      ncdc::mbar_arrive(&full[s]);
    } else {
      if (fault != 2) ncdc::mbar_wait(&full[s], phase);
      acc += slot[s][lane];
      ncdc::mbar_arrive(&empty[s]);
    }
  }
  if (warp == 1) out[lane] = acc;
}
NCDC_EXPORT_KERNEL(ring);

// Warp 0 writes, arrives at named barrier 1 of 64 threads; warp 1 syncs there and reads.
// count_b: the thread count warp 1 passes (a mismatch is an error).
extern "C" __global__ void named(const float* in, int count_b, float* out) {
  __shared__ float buf[32];
  int lane = threadIdx.x % 32;
  if (threadIdx.x < 32) {
    buf[lane] = in[lane] * 2.0f;
    ncdc::named_bar_arrive(1, 64);
  } else {
    ncdc::named_bar_sync(1, count_b);
    out[lane] = buf[31 - lane];
  }
}
NCDC_EXPORT_KERNEL(named);

// setmaxnreg by warpgroup: warpgroup 0 down to `lo`, the others up to `hi`.
extern "C" __global__ void maxnreg(int lo, int hi, int* out) {
  if (threadIdx.x < 128) {
    if (lo == 40) ncdc::setmaxnreg_dec<40>();
    else ncdc::setmaxnreg_dec<24>();
  } else {
    if (hi == 232) ncdc::setmaxnreg_inc<232>();
    else ncdc::setmaxnreg_inc<256>();
  }
  out[threadIdx.x] = 1;
}
NCDC_EXPORT_KERNEL(maxnreg);

// A cluster of two CTAs: CTA r loads rows 8r..8r+7 of its cluster's 16 x 64 bf16 slab and
// multicasts them to both CTAs (each CTA's full barrier expects the whole 2048 bytes), copies
// the slab out, then arrives on its peer's barrier (remote arrive) and waits for its own.
// fault: 1 no cluster barrier between mbarrier.init and the multicast, 2 a mask of only this
// CTA, 3 no remote arrive.
extern "C" __global__ void __cluster_dims__(2, 1, 1) cluster_multicast(
    const __grid_constant__ ncdc::TensorMap map, const void* src, int fault, unsigned char* out,
    unsigned* ranks) {
  (void)src;  // the map's buffer
  unsigned char* smem = smem_1024();
  auto* bars = reinterpret_cast<unsigned long long*>(smem + 2048);  // full, peer_done
  unsigned rank = ncdc::cluster_ctarank();
  if (threadIdx.x == 0) {
    ncdc::mbar_init(&bars[0], 1);
    ncdc::mbar_init(&bars[1], 1);
    ncdc::fence_barrier_init();
  }
  if (fault == 1) __syncthreads();
  else ncdc::cluster_sync();  // the peer's barriers exist before a multicast completes on them
  if (threadIdx.x == 0) {
    ncdc::mbar_arrive_expect_tx(&bars[0], 2048);
    auto mask = static_cast<unsigned short>(fault == 2 ? 1u << rank : 3u);
    ncdc::tma_load_2d_multicast(smem + rank * 1024, &map, &bars[0], mask, 0, int(blockIdx.x / 2 * 16 + rank * 8));
  }
  ncdc::mbar_wait(&bars[0], 0);
  for (int i = threadIdx.x; i < 2048; i += blockDim.x) out[blockIdx.x * 2048 + i] = smem[i];
  if (threadIdx.x == 0) {
    ranks[blockIdx.x] = rank;
    if (fault != 3) ncdc::mbar_arrive_cluster(&bars[1], rank ^ 1u);
  }
  ncdc::mbar_wait(&bars[1], 0);
  ncdc::cluster_sync();  // neither CTA exits while its peer may still reach its shared memory
}
NCDC_CLUSTER_DIMS(cluster_multicast, 2);
NCDC_EXPORT_KERNEL(cluster_multicast);

#endif
