// Hopper (sm_90a) device API: mbarriers, TMA tensor copies, wgmma from shared-memory
// descriptors, named barriers and setmaxnreg; inline PTX on a GPU, the emulation of
// ncdc_emu_hopper.h on a CPU. Include after ncdc_runtime.cuh. See docs/cpu-backend.md.
//
// The wgmma wrappers below the line "generated" are written out for n = 32, 64, 128 and 256 (the
// operand lists of inline PTX cannot be built by the preprocessor), in the PTX ISA syntax:
//   wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 d, a-desc, b-desc, scale-d,
//       imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b;
#pragma once
#ifndef NCDC_HOPPER_CUH
#define NCDC_HOPPER_CUH

namespace ncdc {

#ifdef NCDC_GPU
// CUtensorMap of the driver API (cuda.h is a host header NVRTC does not have): 128 opaque
// bytes, 64-byte aligned, passed as a `const __grid_constant__` kernel parameter.
struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};
#endif

// The 32-bit shared-window address of a shared-memory pointer (on the CPU: the pointer's low
// bits, which is all the swizzle and the descriptor's 14-bit field use).
NCDC_DEVICE unsigned smem_address(const void* p) {
#ifdef NCDC_GPU
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
#else
  return static_cast<unsigned>(reinterpret_cast<uintptr_t>(p));
#endif
}

// ---- mbarrier (PTX ISA 9.7.13.15) ----------------------------------------------------------
NCDC_DEVICE void mbar_init(unsigned long long* bar, unsigned count) {
#ifdef NCDC_GPU
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(count));
#else
  emu::mbar_init(reinterpret_cast<uint64_t*>(bar), count);
#endif
}

// Makes initialised mbarriers visible to the async proxy and the other threads (then
// __syncthreads). On the CPU: nothing to order.
NCDC_DEVICE void fence_barrier_init() {
#ifdef NCDC_GPU
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// fence.proxy.async.shared::cta: orders this thread's generic-proxy shared-memory accesses
// with later async-proxy ones (TMA, wgmma). On the CPU: an async-proxy read of shared bytes
// a thread wrote (st_shared) without this fence after the write is an error (see docs).
NCDC_DEVICE void fence_proxy_async() {
#ifdef NCDC_GPU
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  emu::fence_proxy_async();
#endif
}

NCDC_DEVICE void mbar_arrive(unsigned long long* bar) {
#ifdef NCDC_GPU
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
#else
  emu::mbar_arrive(reinterpret_cast<uint64_t*>(bar), 1, 0);
#endif
}

// mbarrier.arrive.expect_tx: expects `bytes` more transaction bytes, then arrives.
NCDC_DEVICE void mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
#ifdef NCDC_GPU
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)),
               "r"(bytes) : "memory");
#else
  emu::mbar_arrive(reinterpret_cast<uint64_t*>(bar), 1, static_cast<int32_t>(bytes));
#endif
}

NCDC_DEVICE void mbar_expect_tx(unsigned long long* bar, unsigned bytes) {
#ifdef NCDC_GPU
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)),
               "r"(bytes) : "memory");
#else
  emu::mbar_expect_tx(reinterpret_cast<uint64_t*>(bar), static_cast<int32_t>(bytes));
#endif
}

// mbarrier.try_wait.parity: true once the phase of parity `parity` has completed.
NCDC_DEVICE bool mbar_try_wait(unsigned long long* bar, unsigned parity) {
#ifdef NCDC_GPU
  unsigned done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done) : "r"(smem_address(bar)), "r"(parity) : "memory");
  return done != 0;
#else
  return emu::mbar_test_parity(reinterpret_cast<uint64_t*>(bar), parity);
#endif
}

// Waits until the phase of parity `parity` has completed.
NCDC_DEVICE void mbar_wait(unsigned long long* bar, unsigned parity) {
#ifdef NCDC_GPU
  while (!mbar_try_wait(bar, parity)) {
  }
#else
  emu::mbar_wait_parity(reinterpret_cast<uint64_t*>(bar), parity);
#endif
}

// ---- TMA: cp.async.bulk.tensor, tile mode (PTX ISA 9.7.9.25) ---------------------------------
// The box at (c0, c1[, c2]) (innermost first) into `smem`; its bytes complete on `bar`.
NCDC_DEVICE void tma_load_2d(void* smem, const TensorMap* map, unsigned long long* bar, int c0, int c1) {
#ifdef NCDC_GPU
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n"
      ::"r"(smem_address(smem)), "l"(reinterpret_cast<unsigned long long>(map)),
      "r"(smem_address(bar)), "r"(c0), "r"(c1) : "memory");
#else
  int32_t c[2] = {c0, c1};
  emu::tma_load(smem, map, reinterpret_cast<uint64_t*>(bar), c);
#endif
}

NCDC_DEVICE void tma_load_3d(void* smem, const TensorMap* map, unsigned long long* bar, int c0, int c1,
                             int c2) {
#ifdef NCDC_GPU
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n"
      ::"r"(smem_address(smem)), "l"(reinterpret_cast<unsigned long long>(map)),
      "r"(smem_address(bar)), "r"(c0), "r"(c1), "r"(c2) : "memory");
#else
  int32_t c[3] = {c0, c1, c2};
  emu::tma_load(smem, map, reinterpret_cast<uint64_t*>(bar), c);
#endif
}

// A box of a 5-D map into `smem`, as tma_load_3d: coordinates innermost first.
NCDC_DEVICE void tma_load_5d(void* smem, const TensorMap* map, unsigned long long* bar, int c0, int c1,
                             int c2, int c3, int c4) {
#ifdef NCDC_GPU
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\n"
      ::"r"(smem_address(smem)), "l"(reinterpret_cast<unsigned long long>(map)),
      "r"(smem_address(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4) : "memory");
#else
  int32_t c[5] = {c0, c1, c2, c3, c4};
  emu::tma_load(smem, map, reinterpret_cast<uint64_t*>(bar), c);
#endif
}

// The box in `smem` to global memory at (c0, c1); out-of-bounds elements are not written.
// Shared writes before it need fence_proxy_async(); complete with tma_store_commit/wait.
NCDC_DEVICE void tma_store_2d(const TensorMap* map, const void* smem, int c0, int c1) {
#ifdef NCDC_GPU
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];\n"
               ::"l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_address(smem)), "r"(c0),
               "r"(c1) : "memory");
#else
  int32_t c[2] = {c0, c1};
  emu::tma_store(map, smem, c);
#endif
}

NCDC_DEVICE void tma_store_3d(const TensorMap* map, const void* smem, int c0, int c1, int c2) {
#ifdef NCDC_GPU
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n"
               ::"l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_address(smem)), "r"(c0),
               "r"(c1), "r"(c2) : "memory");
#else
  int32_t c[3] = {c0, c1, c2};
  emu::tma_store(map, smem, c);
#endif
}

NCDC_DEVICE void tma_store_5d(const TensorMap* map, const void* smem, int c0, int c1, int c2, int c3,
                              int c4) {
#ifdef NCDC_GPU
  asm volatile(
      "cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];\n"
      ::"l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_address(smem)), "r"(c0), "r"(c1),
      "r"(c2), "r"(c3), "r"(c4) : "memory");
#else
  int32_t c[5] = {c0, c1, c2, c3, c4};
  emu::tma_store(map, smem, c);
#endif
}

NCDC_DEVICE void tma_store_commit() {
#ifdef NCDC_GPU
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#else
  emu::tma_store_commit();
#endif
}

// cp.async.bulk.wait_group N: at most N store groups of this thread stay pending.
template <int N>
NCDC_DEVICE void tma_store_wait() {
#ifdef NCDC_GPU
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#else
  emu::tma_store_wait(N);
#endif
}

// ---- thread-block clusters (PTX ISA 9.7.13.3 barrier.cluster, 9.7.9.21 mapa) ---------------
// A kernel declares its cluster at compile time: `__cluster_dims__(X, 1, 1)` in its declaration
// (the launch needs nothing else; grid x must be a multiple of X) and, for the CPU emulation,
// NCDC_CLUSTER_DIMS(name, X) after it. A cluster's blocks are consecutive in x.
#ifdef NCDC_GPU
#define NCDC_CLUSTER_DIMS(name, x) static_assert(true, "")
#endif

// %cluster_ctarank: this block's rank in its cluster.
NCDC_DEVICE unsigned cluster_ctarank() {
#ifdef NCDC_GPU
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
#else
  return emu::cluster_rank();
#endif
}

// barrier.cluster.arrive.release: this thread's arrival (its prior writes, to any CTA's shared
// memory, are released to the threads that wait). Not .aligned: callers may come from
// warp-divergent code (a producer thread's loop).
NCDC_DEVICE void cluster_arrive() {
#ifdef NCDC_GPU
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
#else
  emu::cluster_arrive();
#endif
}

// barrier.cluster.wait.acquire: until every thread of the cluster has arrived.
NCDC_DEVICE void cluster_wait() {
#ifdef NCDC_GPU
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
#else
  emu::cluster_wait();
#endif
}

NCDC_DEVICE void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

// One arrival on the mbarrier of CTA `rank` at the offset of this block's `bar`: mapa, then
// mbarrier.arrive.shared::cluster.b64 with the ISA's default semantics, a release at CTA
// scope (PTX ISA, mbarrier.arrive: `.sem` defaults to `.release`, `.scope` to `.cta`), as
// CUTLASS's ClusterBarrier::arrive(cta_id) issues it. It orders this thread's completed
// reads before whatever the peer does after its wait (a consumer's release of a stage its
// wgmmas have retired, before the peer's multicast refills it), and it compiles to the
// arrive alone; the `.release.cluster` form costs a MEMBAR.ALL.GPU per arrive, and is
// needed only to publish this thread's writes to the peer, which no kernel here does.
NCDC_DEVICE void mbar_arrive_cluster(unsigned long long* bar, unsigned rank) {
#ifdef NCDC_GPU
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
      ::"r"(smem_address(bar)), "r"(rank) : "memory");
#else
  emu::mbar_arrive_cluster(reinterpret_cast<uint64_t*>(bar), rank);
#endif
}

// TMA with .multicast::cluster: the box lands at the offset of `smem` in every CTA of `mask`
// (bit r: rank r) and completes its bytes on each one's mbarrier at the offset of `bar`.
NCDC_DEVICE void tma_load_2d_multicast(void* smem, const TensorMap* map, unsigned long long* bar,
                                       unsigned short mask, int c0, int c1) {
#ifdef NCDC_GPU
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%4, %5}], [%2], %3;\n"
      ::"r"(smem_address(smem)), "l"(reinterpret_cast<unsigned long long>(map)),
      "r"(smem_address(bar)), "h"(mask), "r"(c0), "r"(c1) : "memory");
#else
  int32_t c[2] = {c0, c1};
  emu::tma_load_multicast(smem, map, reinterpret_cast<uint64_t*>(bar), c, mask);
#endif
}

NCDC_DEVICE void tma_load_3d_multicast(void* smem, const TensorMap* map, unsigned long long* bar,
                                       unsigned short mask, int c0, int c1, int c2) {
#ifdef NCDC_GPU
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%4, %5, %6}], [%2], %3;\n"
      ::"r"(smem_address(smem)), "l"(reinterpret_cast<unsigned long long>(map)),
      "r"(smem_address(bar)), "h"(mask), "r"(c0), "r"(c1), "r"(c2) : "memory");
#else
  int32_t c[3] = {c0, c1, c2};
  emu::tma_load_multicast(smem, map, reinterpret_cast<uint64_t*>(bar), c, mask);
#endif
}

// ---- named barriers (bar.sync / bar.arrive a, b) --------------------------------------------
// `count` threads (a multiple of 32) arrive at barrier `id` (1 to 15; 0 is __syncthreads).
NCDC_DEVICE void named_bar_sync(unsigned id, unsigned count) {
#ifdef NCDC_GPU
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
#else
  emu::named_sync(id, count);
#endif
}

NCDC_DEVICE void named_bar_arrive(unsigned id, unsigned count) {
#ifdef NCDC_GPU
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
#else
  emu::named_arrive(id, count);
#endif
}

// ---- setmaxnreg (warpgroup-wide register budget) ---------------------------------------------
template <int REGS>
NCDC_DEVICE void setmaxnreg_inc() {
#ifdef NCDC_GPU
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
#else
  emu::setmaxnreg(REGS, true);
#endif
}

template <int REGS>
NCDC_DEVICE void setmaxnreg_dec() {
#ifdef NCDC_GPU
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
#else
  emu::setmaxnreg(REGS, false);
#endif
}

// ---- wgmma (PTX ISA 9.7.15) -------------------------------------------------------------------
enum SmemSwizzle : unsigned { kSwizzleNone = 0, kSwizzle128 = 1, kSwizzle64 = 2, kSwizzle32 = 3 };

// The shared-memory matrix descriptor: start address, leading and stride byte offsets, swizzle.
NCDC_DEVICE unsigned long long smem_desc(const void* start, unsigned lbo, unsigned sbo, SmemSwizzle swizzle) {
  return (static_cast<unsigned long long>((smem_address(start) & 0x3ffff) >> 4)) |
         (static_cast<unsigned long long>((lbo >> 4) & 0x3fff) << 16) |
         (static_cast<unsigned long long>((sbo >> 4) & 0x3fff) << 32) |
         (static_cast<unsigned long long>(swizzle) << 62);
}

// A descriptor of the same layout `bytes` further on (a multiple of 16): its start field,
// address bits 4-17, grows by bytes / 16 in the low word alone. A shared-window address stays
// below 2^18 (the CPU backend's shared memory is 2^18-aligned, so its offsets do too), so an
// in-bounds start never carries out of the field; the emulator rejects a descriptor whose
// reserved bits 14-15 are set.
NCDC_DEVICE unsigned long long desc_advance(unsigned long long desc, unsigned bytes) {
  unsigned lo = static_cast<unsigned>(desc) + (bytes >> 4);
  return (desc & 0xffffffff00000000ull) | lo;
}

// wgmma.fence: before the first wgmma.mma_async, and after touching its registers.
NCDC_DEVICE void wgmma_fence() {
#ifdef NCDC_GPU
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  emu::wgmma_fence();
#endif
}

NCDC_DEVICE void wgmma_commit() {
#ifdef NCDC_GPU
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  emu::wgmma_commit();
#endif
}

// wgmma.wait_group N: at most N of this warpgroup's committed groups stay in flight.
template <int N>
NCDC_DEVICE void wgmma_wait() {
#ifdef NCDC_GPU
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
  emu::wgmma_wait(N);
#endif
}

// Keeps the compiler from moving accumulator accesses across the asynchronous wgmma.
template <int COUNT>
NCDC_DEVICE void wgmma_fence_operands(float* d) {
#ifdef NCDC_GPU
#pragma unroll
  for (int i = 0; i < COUNT; ++i) asm volatile("" : "+f"(d[i])::"memory");
#else
  (void)d;
#endif
}
template <int COUNT>
NCDC_DEVICE void wgmma_fence_operands(int* d) {  // s32 accumulators (s8 wgmma)
#ifdef NCDC_GPU
#pragma unroll
  for (int i = 0; i < COUNT; ++i) asm volatile("" : "+r"(d[i])::"memory");
#else
  (void)d;
#endif
}

// ---- generated: wgmma.mma_async for n = 32, 64, 128, 256 -------------------------------------
// D (+)= A * B, m64nNk16, bf16 from descriptors; TA/TB: 1 = the operand is MN-major.
template <int N, int TA, int TB>
NCDC_DEVICE void wgmma_m64k16_bf16(float* d, unsigned long long desc_a, unsigned long long desc_b, int scale_d) {
  static_assert(N == 32 || N == 64 || N == 128 || N == 256, "wgmma wrappers exist for n = 32, 64, 128, 256");
#ifdef NCDC_GPU
  if constexpr (N == 32) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %19, %20;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
  }
  if constexpr (N == 64) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
  }
  if constexpr (N == 128) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
  }
  if constexpr (N == 256) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, %131, %132;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
  }
#else
  emu::wgmma_issue({desc_a, desc_b, d, N, 16, 0, scale_d, 0, 0, TA, TB});
#endif
}

// D (+)= A * B, m64nNk16, f16 from descriptors; TA/TB: 1 = the operand is MN-major.
template <int N, int TA, int TB>
NCDC_DEVICE void wgmma_m64k16_f16(float* d, unsigned long long desc_a, unsigned long long desc_b, int scale_d) {
  static_assert(N == 32 || N == 64 || N == 128 || N == 256, "wgmma wrappers exist for n = 32, 64, 128, 256");
#ifdef NCDC_GPU
  if constexpr (N == 32) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %19, %20;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
  }
  if constexpr (N == 64) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
  }
  if constexpr (N == 128) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
  }
  if constexpr (N == 256) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, %131, %132;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
  }
#else
  emu::wgmma_issue({desc_a, desc_b, d, N, 16, 1, scale_d, 0, 0, TA, TB});
#endif
}

// D (+)= A * B, m64nNk32, e4m3 from descriptors; both operands K-major.
template <int N>
NCDC_DEVICE void wgmma_m64k32_e4m3(float* d, unsigned long long desc_a, unsigned long long desc_b, int scale_d) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma wrappers exist for n = 64, 128, 256");
#ifdef NCDC_GPU
  if constexpr (N == 64) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
  if constexpr (N == 128) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
  if constexpr (N == 256) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
#else
  emu::wgmma_issue({desc_a, desc_b, d, N, 32, 2, scale_d, 0, 0, 0, 0});
#endif
}

// D (+)= A * B, m64nNk32, s8 x s8 summed exactly in s32 (wrapping), from descriptors; both
// operands K-major (8-bit wgmma operands exist only so).
template <int N>
NCDC_DEVICE void wgmma_m64k32_s8(int* d, unsigned long long desc_a, unsigned long long desc_b, int scale_d) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma wrappers exist for n = 64, 128, 256");
#ifdef NCDC_GPU
  if constexpr (N == 64) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
  if constexpr (N == 128) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
  if constexpr (N == 256) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]), "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]), "+r"(d[72]), "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]), "+r"(d[78]), "+r"(d[79]), "+r"(d[80]), "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]), "+r"(d[88]), "+r"(d[89]), "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]), "+r"(d[96]), "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]), "+r"(d[104]), "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]), "+r"(d[112]), "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]), "+r"(d[120]), "+r"(d[121]), "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
#else
  emu::wgmma_issue({desc_a, desc_b, reinterpret_cast<float*>(d), N, 32, 4, scale_d, 0, 0, 0, 0});
#endif
}

// D (+)= A * B, m64nNk32, e5m2 from descriptors; both operands K-major.
template <int N>
NCDC_DEVICE void wgmma_m64k32_e5m2(float* d, unsigned long long desc_a, unsigned long long desc_b, int scale_d) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma wrappers exist for n = 64, 128, 256");
#ifdef NCDC_GPU
  if constexpr (N == 64) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e5m2.e5m2 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
  if constexpr (N == 128) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e5m2.e5m2 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
  if constexpr (N == 256) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k32.f32.e5m2.e5m2 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
#else
  emu::wgmma_issue({desc_a, desc_b, d, N, 32, 3, scale_d, 0, 0, 0, 0});
#endif
}


// ---- generated: wgmma.mma_async with A from registers, n = 32, 64, 128, 256 -----------------
// D (+)= A * B, m64nNk16, bf16: A from registers, 4 x .b32 a thread (two values each, the lower
// column in the low half) by the A fragment layout of PTX ISA 9.7.15.5.1 ("Register Fragments
// and Shared Memory Matrix Layouts", m64nNk16): warp w of the warpgroup holds rows 16w..16w+15;
// with g = lane / 4, t = lane % 4, register r holds row 16w + g + 8 * (r % 2), columns
// 8 * (r / 2) + 2t and + 1 (the mma.m16n8k16 A fragment). B from a descriptor; TB: 1 = MN-major.
template <int N, int TB>
NCDC_DEVICE void wgmma_m64k16_bf16_rs(float* d, const unsigned* a, unsigned long long desc_b, int scale_d) {
  static_assert(N == 32 || N == 64 || N == 128 || N == 256, "wgmma wrappers exist for n = 32, 64, 128, 256");
#ifdef NCDC_GPU
  if constexpr (N == 32) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
  if constexpr (N == 64) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
  if constexpr (N == 128) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
  if constexpr (N == 256) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
#else
  emu::wgmma_issue_rs({0, desc_b, d, N, 16, 0, scale_d, 0, 0, 0, TB}, a);
#endif
}

// D (+)= A * B, m64nNk16, f16: A from registers, 4 x .b32 a thread (two values each, the lower
// column in the low half) by the A fragment layout of PTX ISA 9.7.15.5.1 ("Register Fragments
// and Shared Memory Matrix Layouts", m64nNk16): warp w of the warpgroup holds rows 16w..16w+15;
// with g = lane / 4, t = lane % 4, register r holds row 16w + g + 8 * (r % 2), columns
// 8 * (r / 2) + 2t and + 1 (the mma.m16n8k16 A fragment). B from a descriptor; TB: 1 = MN-major.
template <int N, int TB>
NCDC_DEVICE void wgmma_m64k16_f16_rs(float* d, const unsigned* a, unsigned long long desc_b, int scale_d) {
  static_assert(N == 32 || N == 64 || N == 128 || N == 256, "wgmma wrappers exist for n = 32, 64, 128, 256");
#ifdef NCDC_GPU
  if constexpr (N == 32) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
  if constexpr (N == 64) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
  if constexpr (N == 128) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
  if constexpr (N == 256) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
#else
  emu::wgmma_issue_rs({0, desc_b, d, N, 16, 1, scale_d, 0, 0, 0, TB}, a);
#endif
}

// D (+)= A * B, m64nNk32, e4m3: A from registers, 4 x .b32 a thread (four values each, the
// lowest column in the lowest byte) by the 8-bit A fragment layout of PTX ISA 9.7.15.5.1
// (m64nNk32; CuTe's ALayout_64x32): warp w of the warpgroup holds rows 16w..16w+15; with
// g = lane / 4, t = lane % 4, register r holds row 16w + g + 8 * (r % 2), columns
// 16 * (r / 2) + 4t to + 3. Not the accumulator's order (two columns a thread in each group
// of eight): attention permutes P before it (ncdc_attention_hopper.cuh, pack_p8). B from a
// descriptor, K-major (8-bit operands have no transpose).
template <int N>
NCDC_DEVICE void wgmma_m64k32_e4m3_rs(float* d, const unsigned* a, unsigned long long desc_b, int scale_d) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma wrappers exist for n = 64, 128, 256");
#ifdef NCDC_GPU
  if constexpr (N == 64) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }
  if constexpr (N == 128) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }
  if constexpr (N == 256) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }
#else
  emu::wgmma_issue_rs({0, desc_b, d, N, 32, 2, scale_d, 0, 0, 0, 0}, a);
#endif
}

// D (+)= A * B, m64nNk32, e5m2: A from registers, 4 x .b32 a thread (four values each, the
// lowest column in the lowest byte) by the 8-bit A fragment layout of PTX ISA 9.7.15.5.1
// (m64nNk32; CuTe's ALayout_64x32): warp w of the warpgroup holds rows 16w..16w+15; with
// g = lane / 4, t = lane % 4, register r holds row 16w + g + 8 * (r % 2), columns
// 16 * (r / 2) + 4t to + 3. Not the accumulator's order (two columns a thread in each group
// of eight): attention permutes P before it (ncdc_attention_hopper.cuh, pack_p8). B from a
// descriptor, K-major (8-bit operands have no transpose).
template <int N>
NCDC_DEVICE void wgmma_m64k32_e5m2_rs(float* d, const unsigned* a, unsigned long long desc_b, int scale_d) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma wrappers exist for n = 64, 128, 256");
#ifdef NCDC_GPU
  if constexpr (N == 64) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e5m2.e5m2 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }
  if constexpr (N == 128) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e5m2.e5m2 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }
  if constexpr (N == 256) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k32.f32.e5m2.e5m2 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }
#else
  emu::wgmma_issue_rs({0, desc_b, d, N, 32, 3, scale_d, 0, 0, 0, 0}, a);
#endif
}


// ---- the warp-specialised GEMM (templates/gemm_wgmma.cu.j2) ----------------------------------
// 384 threads: warpgroup 0 produces (one thread issues the TMA loads of each stage into a
// ring of STAGES slots), warpgroups 1 and 2 consume (each 64 rows of the BM = 128 block tile,
// wgmma m64nBNk16 from 128-byte-swizzled descriptors). A skinny GEMM (m of 64 or less, a
// decode step's) runs one consumer: 256 threads, BM = 64, no register rebalancing (a
// thread's 255 registers hold any accumulator tile). Full barriers count one arrival plus
// the stage's bytes; empty barriers one arrival per consumer warp. Tiles are persistent:
// block b runs tiles b, b + gridDim.x, ..., rasterised GROUP_M tile rows at a time.
namespace wgmma_gemm {

constexpr int kProducerRegs = 40, kConsumerRegs = 232;  // 128 * (40 + 2 * 232) <= 65536

// Acc: the accumulator type (fp32; int32 for s8, summed exactly).
template <class T>
struct Mma;
template <>
struct Mma<__nv_bfloat16> {
  using Acc = float;
  template <int N, int TB>
  static NCDC_DEVICE void run(float* d, unsigned long long a, unsigned long long b, int scale_d) {
    wgmma_m64k16_bf16<N, 0, TB>(d, a, b, scale_d);
  }
};
template <>
struct Mma<__half> {
  using Acc = float;
  template <int N, int TB>
  static NCDC_DEVICE void run(float* d, unsigned long long a, unsigned long long b, int scale_d) {
    wgmma_m64k16_f16<N, 0, TB>(d, a, b, scale_d);
  }
};

template <>
struct Mma<__nv_fp8_e4m3> {
  using Acc = float;
  template <int N, int TB>
  static NCDC_DEVICE void run(float* d, unsigned long long a, unsigned long long b, int scale_d) {
    static_assert(TB == 0, "8-bit wgmma operands are K-major");
    wgmma_m64k32_e4m3<N>(d, a, b, scale_d);
  }
};
template <>
struct Mma<__nv_fp8_e5m2> {
  using Acc = float;
  template <int N, int TB>
  static NCDC_DEVICE void run(float* d, unsigned long long a, unsigned long long b, int scale_d) {
    static_assert(TB == 0, "8-bit wgmma operands are K-major");
    wgmma_m64k32_e5m2<N>(d, a, b, scale_d);
  }
};
template <>
struct Mma<signed char> {
  using Acc = int;
  template <int N, int TB>
  static NCDC_DEVICE void run(int* d, unsigned long long a, unsigned long long b, int scale_d) {
    static_assert(TB == 0, "8-bit wgmma operands are K-major");
    wgmma_m64k32_s8<N>(d, a, b, scale_d);
  }
};

template <class T, int BN_, int BK_, int STAGES_, bool B_K_, int C_SIZE_, int CLUSTER_ = 1,
          int CONSUMERS_ = 2>
struct Config {
  static constexpr int CONSUMERS = CONSUMERS_;  // consumer warpgroups, 64 rows each
  static_assert(CONSUMERS == 1 || CONSUMERS == 2, "one or two consumer warpgroups");
  static constexpr int BM = 64 * CONSUMERS, BN = BN_, BK = BK_, STAGES = STAGES_;
  // CLUSTER: CTAs along m sharing each B tile; each loads 1 / CLUSTER of it and multicasts
  // it to all (a K-major B by n rows, an MN-major one by k rows of each column block)
  static constexpr int CLUSTER = CLUSTER_;
  static_assert(CLUSTER == 1 || CLUSTER == 2, "clusters of 1 or 2 CTAs along m");
  // C_SIZE: bytes of a C value when the epilogue stores C through shared memory and TMA
  // (each consumer's 64 x BN tile as 64-row boxes of 128 bytes, 128-byte swizzle), else 0
  static constexpr int C_SIZE = C_SIZE_;
  static constexpr int C_COLS = C_SIZE ? 128 / C_SIZE : 1;  // C values per box row
  static constexpr int C_BOXES = C_SIZE ? BN / C_COLS : 0;  // boxes per consumer tile
  static constexpr int C_TILE_BYTES = 64 * BN * C_SIZE;     // one consumer's C tile
  static constexpr bool B_K = B_K_;  // B's contiguous axis is k (else n)
  static constexpr int ES = sizeof(T);
  // 8-bit wgmma reads only K-major operands: an N-major fp8 B tile lands in a staging slot
  // and the producer warpgroup's warps 1-3 transpose it into the K-major slot
  static constexpr bool TRANSPOSE_B = !B_K && ES == 1;
  static constexpr bool B_KMAJOR = B_K || TRANSPOSE_B;  // the layout wgmma reads
  static constexpr int KSTEP = 32 / ES;                 // wgmma k: 16 (16-bit), 32 (fp8)
  static constexpr int SPAN = 128;                      // swizzle span: one row of the box
  static constexpr int ROW = SPAN / ES;                 // values per 128-byte row
  static constexpr int A_BYTES = BM * BK * ES, B_BYTES = BN * BK * ES;
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES * (TRANSPOSE_B ? 2 : 1);
  static constexpr int SMEM_BYTES = 1024 + STAGES * STAGE_BYTES + CONSUMERS * C_TILE_BYTES;
  static_assert(BK * ES == SPAN, "a k tile is one 128-byte swizzle row");
  static_assert(B_K || BN % ROW == 0, "an MN-major B tile is whole 128-byte blocks");
  static_assert(!TRANSPOSE_B || BN % 64 == 0, "the transpose moves 64 x 64-byte regions");
  static_assert(C_SIZE == 0 || C_SIZE == 2, "the TMA-store epilogue stores 16-bit C");
  static_assert((B_K ? BN : BK) % (8 * CLUSTER) == 0, "a B share is whole 8-row swizzle atoms");
};

constexpr int kTransposeWarps = 3;  // warps 1-3 of the producer warpgroup

struct Problem {
  long long m, n, k, batches;
  int group_m;
  // an operand without the batch axes (the same A, or B, for every batch): a 2-D map
  bool a_flat = false, b_flat = false;
  // an operand over some of the batch axes only: its batch is the flat index's digits
  // z / div % mod (batch_index); mod 0: z itself
  long long a_div = 1, a_mod = 0, b_div = 1, b_mod = 0;
};

// The batch an operand loads for the flat batch index z (Problem: a_div, a_mod, ...).
NCDC_DEVICE int batch_index(long long z, long long div, long long mod) {
  return mod ? int(z / div % mod) : int(z);
}

// The persistent sequence of a block: units of CLUSTER tiles stacked along m (one per CTA
// of a cluster; a unit past the last m tile leaves its CTA a tile it loads no A for and does
// not store), unit first, first + step, ... below `units`.
// Counts are 32-bit (a tensor map's coordinates are): fewer registers held across the loops.
template <class Cfg>
struct Schedule {
  int tiles_m, tiles_n, units_m, units, k_tiles, first, step;
  int rank;
  NCDC_DEVICE explicit Schedule(const Problem& p) {
    tiles_m = int((p.m + Cfg::BM - 1) / Cfg::BM);
    tiles_n = int((p.n + Cfg::BN - 1) / Cfg::BN);
    units_m = (tiles_m + Cfg::CLUSTER - 1) / Cfg::CLUSTER;
    units = units_m * tiles_n * int(p.batches);
    k_tiles = int((p.k + Cfg::BK - 1) / Cfg::BK);
    first = int(blockIdx.x) / Cfg::CLUSTER;
    step = int(gridDim.x) / Cfg::CLUSTER;
    rank = Cfg::CLUSTER > 1 ? int(cluster_ctarank()) : 0;
  }
};

// Tile `t` of the persistent sequence: batch z, tile row tm, tile column tn, rasterised in
// groups of `group_m` tile rows so that consecutive blocks share A and B tiles in L2.
NCDC_DEVICE void tile_of(long long t, long long tiles_m, long long tiles_n, int group_m,
                         long long& z, long long& tm, long long& tn) {
  long long per_batch = tiles_m * tiles_n;
  z = t / per_batch;
  long long r = t % per_batch, width = group_m * tiles_n;
  long long first = r / width * group_m;
  long long rows = tiles_m - first < group_m ? tiles_m - first : group_m;
  tm = first + (r % width) % rows;
  tn = (r % width) / rows;
}

// Unit `u` of `s`: batch z, this CTA's tile row tm and tile column tn.
template <class Cfg>
NCDC_DEVICE void tile_at(const Schedule<Cfg>& s, long long u, const Problem& p, long long& z,
                         long long& tm, long long& tn) {
  int group = p.group_m / Cfg::CLUSTER > 0 ? p.group_m / Cfg::CLUSTER : 1;
  tile_of(u, s.units_m, s.tiles_n, group, z, tm, tn);
  tm = tm * Cfg::CLUSTER + s.rank;
}

NCDC_DEVICE unsigned char* aligned_smem() {
  unsigned char* p = dynamic_smem<unsigned char>();
  return p + ((1024 - smem_address(p) % 1024) % 1024);
}

// No TMA box lies wholly outside its tensor: for a box that crosses the boundary the PTX
// ISA (5.5.3.3) zero-fills the outside and the whole box counts on the mbarrier, but no
// primary source says what TMA does with one entirely outside. A box that would be is not
// issued, nor its bytes expected; its shared memory keeps stale values that reach only
// accumulators of rows past m or columns past n, which are never stored (a k share past k
// would reach every output: the plan runs no cluster whose last k tile is that short).
//
// The boxes of a B tile: CLUSTER shares (one loaded by each rank) of B_BLOCKS column
// blocks; box (r, j) starts along n at n0 + r * BN / CLUSTER (K-major) or n0 + j * ROW
// (MN-major), and along k at k0 (K-major) or k0 + r * BK / CLUSTER (MN-major).
template <class Cfg>
struct BBoxes {
  static constexpr int BLOCKS = Cfg::B_K ? 1 : Cfg::BN / Cfg::ROW;
  static constexpr int BYTES = Cfg::B_BYTES / (Cfg::CLUSTER * BLOCKS);  // one box
  NCDC_DEVICE static int n_at(int r, int j, int n0) {
    return Cfg::B_K ? n0 + r * (Cfg::BN / Cfg::CLUSTER) : n0 + j * Cfg::ROW;
  }
  NCDC_DEVICE static int k_at(int r, int k0) { return Cfg::B_K ? k0 : k0 + r * (Cfg::BK / Cfg::CLUSTER); }
  NCDC_DEVICE static bool live(int r, int j, int n0, int k0, const Problem& p) {
    return n_at(r, j, n0) < p.n && k_at(r, k0) < p.k;
  }
  // The bytes of every rank's live boxes: each lands in every CTA of the cluster.
  NCDC_DEVICE static unsigned live_bytes(int n0, int k0, const Problem& p) {
    unsigned bytes = 0;
    for (int r = 0; r < Cfg::CLUSTER; ++r)
      for (int j = 0; j < BLOCKS; ++j)
        if (live(r, j, n0, k0, p)) bytes += BYTES;
    return bytes;
  }
};

// This CTA's share of a B tile, multicast to every CTA of the cluster: a K-major B's n rows
// rank * BN / CLUSTER on (its map's box is BK x BN / CLUSTER), or an MN-major one's k rows
// rank * BK / CLUSTER on of each 128-byte column block (box ROW x BK / CLUSTER); rows of
// 128 bytes, so a share starts on a 1024-byte swizzle atom and lands where the whole tile's
// load would have put it. Live boxes only (BBoxes).
template <class Cfg>
NCDC_DEVICE void load_b_share(unsigned char* b, const TensorMap* map_b, unsigned long long* bar,
                              int rank, int k0, int n0, int zi, const Problem& p, bool batched) {
  using Boxes = BBoxes<Cfg>;
  constexpr auto kAll = static_cast<unsigned short>((1u << Cfg::CLUSTER) - 1);
  if constexpr (Cfg::B_K) {
    constexpr int ROWS = Cfg::BN / Cfg::CLUSTER;
    unsigned char* at = b + rank * ROWS * Cfg::SPAN;
    if (!Boxes::live(rank, 0, n0, k0, p)) return;
    if (batched) tma_load_3d_multicast(at, map_b, bar, kAll, k0, n0 + rank * ROWS, zi);
    else tma_load_2d_multicast(at, map_b, bar, kAll, k0, n0 + rank * ROWS);
  } else {
    constexpr int ROWS = Cfg::BK / Cfg::CLUSTER;
    for (int j = 0; j < Boxes::BLOCKS; ++j) {
      if (!Boxes::live(rank, j, n0, k0, p)) continue;
      unsigned char* at = b + j * Cfg::BK * Cfg::SPAN + rank * ROWS * Cfg::SPAN;
      int c0 = n0 + j * Cfg::ROW, c1 = k0 + rank * ROWS;
      if (batched) tma_load_3d_multicast(at, map_b, bar, kAll, c0, c1, zi);
      else tma_load_2d_multicast(at, map_b, bar, kAll, c0, c1);
    }
  }
}

template <class Cfg>
NCDC_DEVICE void produce(const TensorMap* map_a, const TensorMap* map_b, unsigned char* smem,
                         unsigned long long* full, unsigned long long* empty,
                         unsigned long long* staged, const Problem& p, bool batched) {
  const Schedule<Cfg> s(p);
  int stage = 0;
  unsigned phase = 0;
  for (int u = s.first; u < s.units; u += s.step) {
    long long z, tm, tn;
    tile_at<Cfg>(s, u, p, z, tm, tn);
    const int m0 = int(tm * Cfg::BM), n0 = int(tn * Cfg::BN);
    const int za = batch_index(z, p.a_div, p.a_mod), zb = batch_index(z, p.b_div, p.b_mod);
    for (int kt = 0; kt < s.k_tiles; ++kt) {
      // the consumers released this slot (in a cluster: those of every CTA, whose slots
      // this CTA's multicast fills too)
      mbar_wait(&empty[stage], phase ^ 1u);
      unsigned char* a = smem + stage * Cfg::STAGE_BYTES;
      unsigned char* b = a + Cfg::A_BYTES;
      int k0 = int(kt * Cfg::BK);
      // a transposed B lands in the staging slot after the K-major one, on its own barrier
      unsigned long long* b_bar = Cfg::TRANSPOSE_B ? &staged[stage] : &full[stage];
      // a CTA of a cluster whose tile row lies past m loads no A (BBoxes)
      const bool a_live = m0 < p.m;
      const unsigned a_bytes = a_live ? Cfg::A_BYTES : 0, b_bytes = BBoxes<Cfg>::live_bytes(n0, k0, p);
      if constexpr (Cfg::TRANSPOSE_B) {
        b += Cfg::B_BYTES;
        mbar_arrive_expect_tx(&full[stage], a_bytes);
        mbar_arrive_expect_tx(b_bar, b_bytes);
      } else {
        mbar_arrive_expect_tx(&full[stage], a_bytes + b_bytes);
      }
      if (a_live) {
        if (batched && !p.a_flat) tma_load_3d(a, map_a, &full[stage], k0, m0, za);
        else tma_load_2d(a, map_a, &full[stage], k0, m0);
      }
      if constexpr (Cfg::CLUSTER > 1) {
        load_b_share<Cfg>(b, map_b, b_bar, s.rank, k0, n0, zb, p, batched && !p.b_flat);
      } else if constexpr (Cfg::B_K) {
        if (batched && !p.b_flat) tma_load_3d(b, map_b, b_bar, k0, n0, zb);
        else tma_load_2d(b, map_b, b_bar, k0, n0);
      } else {
        for (int j = 0; j < Cfg::BN / Cfg::ROW; ++j) {  // 128-byte column blocks of B
          if (!BBoxes<Cfg>::live(0, j, n0, k0, p)) break;
          unsigned char* bj = b + j * Cfg::BK * Cfg::SPAN;
          if (batched && !p.b_flat) tma_load_3d(bj, map_b, b_bar, n0 + j * Cfg::ROW, k0, zb);
          else tma_load_2d(bj, map_b, b_bar, n0 + j * Cfg::ROW, k0);
        }
      }
      if (++stage == Cfg::STAGES) {
        stage = 0;
        phase ^= 1u;
      }
    }
  }
}

// __byte_perm: byte i of the result is byte (s >> 4i) & 7 of the 8 bytes y:x.
NCDC_DEVICE unsigned byte_perm(unsigned x, unsigned y, unsigned s) {
#ifdef NCDC_GPU
  return __byte_perm(x, y, s);
#else
  unsigned long long v = (static_cast<unsigned long long>(y) << 32) | x, r = 0;
  for (int i = 0; i < 4; ++i) r |= ((v >> (8 * ((s >> (4 * i)) & 7))) & 0xffull) << (8 * i);
  return static_cast<unsigned>(r);
#endif
}

// Transpose worker `worker` (of kTransposeWarps) of one stage's B: from `staged`, the N-major
// tile as TMA lands it (BN / 128 column blocks of BK k rows of 128 n-bytes, 128-byte
// swizzle), to `b`, K-major (BN n rows of 128 k-bytes, 128-byte swizzle). A lane moves a
// 4 x 4-byte block: 4 words from k rows 4kb..4kb+3, 8 byte permutes, 4 words to n rows
// 4nb..4nb+3. Within a pass the 32 lanes' (nb, kb) are, with lane = 16c + 4q + r,
// nb = 4((2c + q/2) ^ s) + r and kb = 4((2c + r/2) ^ t) + q: under both swizzles each of
// the 8 loads and stores touches 32 distinct banks, and 8 passes (s in 0..3, t in 0..1)
// cover a 64 x 64-byte region exactly once.
template <class Cfg>
NCDC_DEVICE void transpose_b(const unsigned char* staged, unsigned char* b, int worker) {
  constexpr int REGIONS_N = Cfg::BN / 64, REGIONS_K = Cfg::BK / 64, PASSES = 8 * REGIONS_N * REGIONS_K;
  int lane = threadIdx.x % 32, r = lane & 3, q = (lane >> 2) & 3, c = lane >> 4;
  int pn = 2 * c + (q >> 1), pk = 2 * c + (r >> 1);
  for (int pass = worker; pass < PASSES; pass += kTransposeWarps) {
    int region = pass / 8, rn = region % REGIONS_N, rk = region / REGIONS_N;
    int nb = 16 * rn + 4 * (pn ^ ((pass >> 1) & 3)) + r;
    int kb = 16 * rk + 4 * (pk ^ (pass & 1)) + q;
    const unsigned char* column = staged + (nb / 32) * Cfg::BK * Cfg::SPAN;
    int w = nb % 32;
    unsigned v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      int k = 4 * kb + i;
      v[i] = ld_shared(reinterpret_cast<const unsigned*>(column + k * Cfg::SPAN + (((w / 4) ^ (k % 8)) * 16) + (w % 4) * 4));
    }
    unsigned lo01 = byte_perm(v[0], v[1], 0x5140), hi01 = byte_perm(v[0], v[1], 0x7362);
    unsigned lo23 = byte_perm(v[2], v[3], 0x5140), hi23 = byte_perm(v[2], v[3], 0x7362);
    unsigned out[4] = {byte_perm(lo01, lo23, 0x5410), byte_perm(lo01, lo23, 0x7632),
                       byte_perm(hi01, hi23, 0x5410), byte_perm(hi01, hi23, 0x7632)};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      int n = 4 * nb + j;
      st_shared(reinterpret_cast<unsigned*>(b + n * Cfg::SPAN + (((kb / 4) ^ (n % 8)) * 16) + (kb % 4) * 4), out[j]);
    }
  }
}

// Warps 1-3 of the producer warpgroup when B is transposed: per stage, wait for the staged
// tile, transpose it, order the generic-proxy writes before wgmma's async-proxy reads
// (fence.proxy.async), then one arrival per warp on the full barrier. The K-major slot is
// free again once the staged tile has landed: the producer issued that load after the
// consumers released the stage.
template <class Cfg>
NCDC_DEVICE void transpose_stages(unsigned char* smem, unsigned long long* full,
                                  unsigned long long* staged, const Problem& p, int worker) {
  const Schedule<Cfg> s(p);
  int stage = 0;
  unsigned phase = 0;
  for (int u = s.first; u < s.units; u += s.step) {
    for (int kt = 0; kt < s.k_tiles; ++kt) {
      mbar_wait(&staged[stage], phase);
      unsigned char* b = smem + stage * Cfg::STAGE_BYTES + Cfg::A_BYTES;
      transpose_b<Cfg>(b + Cfg::B_BYTES, b, worker);
      fence_proxy_async();
      __syncwarp();
      if (threadIdx.x % 32 == 0) mbar_arrive(&full[stage]);
      if (++stage == Cfg::STAGES) {
        stage = 0;
        phase ^= 1u;
      }
    }
  }
}

// A consumer's descriptors of k step 0 of stage 0, built once: A K-major (rows of 128 bytes,
// 8-row groups 1024 apart, this consumer's 64 rows); B K-major the same, or MN-major (k rows
// of 128 bytes, 8-k groups 1024 apart, 128-byte column blocks BK * 128 apart). Every other
// stage and k step has the same layout further on: the main loop advances these
// (`desc_advance`, one add per descriptor) rather than rebuilding them from addresses.
template <class Cfg>
NCDC_DEVICE void first_descriptors(unsigned char* smem, int consumer, unsigned long long& da,
                                   unsigned long long& db) {
  da = smem_desc(smem + consumer * 64 * Cfg::SPAN, 16, 1024, kSwizzle128);
  if constexpr (Cfg::B_KMAJOR) db = smem_desc(smem + Cfg::A_BYTES, 16, 1024, kSwizzle128);
  else db = smem_desc(smem + Cfg::A_BYTES, Cfg::BK * Cfg::SPAN, 1024, kSwizzle128);
#ifdef NCDC_GPU
  asm volatile("" : "+l"(da), "+l"(db));  // kept in registers, not rebuilt in the loop by ptxas
#endif
}

// Bytes from one k step to the next: KSTEP values along a K-major row (A, and a K-major B),
// or KSTEP 128-byte k rows of an MN-major B.
template <class Cfg>
constexpr unsigned kStepBytesA = Cfg::KSTEP * Cfg::ES;
template <class Cfg>
constexpr unsigned kStepBytesB = Cfg::B_KMAJOR ? Cfg::KSTEP * Cfg::ES : Cfg::KSTEP * Cfg::SPAN;

// The TMA-store epilogue of one consumer's 64 x BN tile: wait until the previous tile's
// stores have read `ctile`, write each in-bounds value (`out.value`, cast to C) into its
// 128-byte-swizzled box (row r of box j at j * 8192 + r * 128, 16-byte chunk ^= r % 8: the
// 8 rows g of a store land in 8 distinct chunks, so a warp's 32 stores hit 32 banks), order
// those generic-proxy writes before the TMA's async-proxy reads (fence.proxy.async, then
// the warpgroup's named barrier), and one thread stores the boxes; TMA writes nothing
// outside C, so the tails need no test beyond skipping their values.
template <class Cfg, class Out, class Acc>
NCDC_DEVICE void store_tile(const TensorMap* map_c, bool batched, unsigned char* ctile, const Acc* acc,
                            const Problem& p, long long z, long long tm, long long tn, int consumer,
                            long long row0, long long col0, const Out& out) {
  using C = typename Out::ncdc_C;
  int tid = threadIdx.x % 128;
  unsigned bar = 1 + consumer, count = 128;  // named barriers 1 and 2: one per consumer
  if (tid == 0) tma_store_wait<0>();
  named_bar_sync(bar, count);
  long long r0 = row0 - tm * Cfg::BM - consumer * 64;
#pragma unroll
  for (int i = 0; i < Cfg::BN / 2; ++i) {
    long long row = row0 + 8 * ((i / 2) % 2), col = col0 + 8 * (i / 4) + i % 2;
    if (row < p.m && col < p.n) {
      int r = int(r0) + 8 * ((i / 2) % 2), c = int(col - tn * Cfg::BN);
      int byte = (c % Cfg::C_COLS) * Cfg::C_SIZE;
      unsigned char* at = ctile + (c / Cfg::C_COLS) * 64 * 128 + r * 128 + (((byte / 16) ^ (r % 8)) * 16) + byte % 16;
      st_shared(reinterpret_cast<C*>(at), from_float<C>(out.value(z, row, col, float(acc[i]))));
    }
  }
  fence_proxy_async();
  named_bar_sync(bar, count);
  if (tid == 0) {
    int m0 = int(tm * Cfg::BM) + consumer * 64, n0 = int(tn * Cfg::BN), zi = int(z);
    for (int j = 0; j < Cfg::C_BOXES; ++j) {
      if (m0 >= p.m || n0 + j * Cfg::C_COLS >= p.n) break;  // a box wholly outside C
      if (batched) tma_store_3d(map_c, ctile + j * 64 * 128, n0 + j * Cfg::C_COLS, m0, zi);
      else tma_store_2d(map_c, ctile + j * 64 * 128, n0 + j * Cfg::C_COLS, m0);
    }
    tma_store_commit();
  }
}

// A consumer warp's release of a stage: one arrival on its empty barrier in every CTA of the
// cluster (each CTA's producer multicasts into this CTA's slot).
template <class Cfg>
NCDC_DEVICE void release(unsigned long long* empty) {
  if constexpr (Cfg::CLUSTER > 1) {
    for (int r = 0; r < Cfg::CLUSTER; ++r) mbar_arrive_cluster(empty, unsigned(r));
  } else {
    mbar_arrive(empty);
  }
}

// k tiles per scale block of a block-scaled contraction: Out::BLOCK_TILES, 0 without one.
template <class Out, class = void>
struct BlockTiles {
  static constexpr int value = 0;
};
template <class Out>
struct BlockTiles<Out, decltype(void(Out::BLOCK_TILES))> {
  static constexpr int value = Out::BLOCK_TILES;
};

// A block-scaled contraction's scales for one block, read while its wgmmas run: this
// thread's two rows' and one column of the tile's (thread t reads column t). Rows and
// columns past m or n read nothing and weigh 0. Where the thread reads them is fixed for a
// tile (`ScaleSite`); the block moves along the scales' block axis. Offsets are 32-bit:
// the planner takes scale tensors of fewer than 2^31 values.
struct ScaleSite {
  int z, rows[2], col;
  bool row_in[2], col_in;
};
struct BlockScales {
  float rows[2], col;
};
template <class Cfg>
NCDC_DEVICE ScaleSite scale_site(long long z, long long row0, long long tn, const Problem& p) {
  ScaleSite at;
  at.z = int(z);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    at.rows[h] = int(row0) + 8 * h;
    at.row_in[h] = row0 + 8 * h < p.m;
  }
  int t = int(threadIdx.x % 128);
  at.col = int(tn * Cfg::BN) + t;
  at.col_in = t < Cfg::BN && tn * Cfg::BN + t < p.n;
  return at;
}
template <class Out>
NCDC_DEVICE BlockScales read_scales(const Out& out, const ScaleSite& at, int kb) {
  BlockScales sc;
#pragma unroll
  for (int h = 0; h < 2; ++h) sc.rows[h] = at.row_in[h] ? out.row_scale(at.z, at.rows[h], kb) : 0.0f;
  sc.col = Out::COL_SCALES && at.col_in ? out.col_scale(at.z, at.col, kb) : 0.0f;
  return sc;
}

// A scale over rows and columns together (and the block), read per value: 1 without one,
// and past m or n.
template <class Out>
NCDC_DEVICE float pair_factor(const Out& out, long long z, long long row, long long col, int kb,
                              const Problem& p) {
  if constexpr (Out::PAIR_SCALES) {
    if (row < p.m && col < p.n) return out.pair_scale(int(z), int(row), int(col), kb);
  }
  return 1.0f;
}

// Bytes of shared memory past the pipeline and C tiles that a block-scaled contraction's
// column scales take, where it has them: two blocks' worth per consumer (one being read,
// one written).
template <class Cfg>
constexpr int kScaleBytes = 2 * Cfg::CONSUMERS * Cfg::BN * 4;

// The promotion, as DeepSeek-V3's fp8 GEMMs do it: block `kb`'s partial sums (the wgmma
// accumulators, summed over the block's k alone) join the fp32 total times their row's and
// column's scales. The warpgroup shares its column scales through shared memory (`cols`,
// this consumer's two buffers, taken in turn: `turn` counts the consumer's promotions over
// all its tiles), so each thread reads its 2 x BN / 8 columns as pairs.
template <class Cfg, class Out, class Acc>
NCDC_DEVICE void promote(const Out& out, const Acc* part, float* total, const BlockScales& sc,
                         float* cols, unsigned turn, int consumer, long long z, long long row0,
                         long long col0, int kb, const Problem& p) {
  if constexpr (!Out::COL_SCALES) {
    // one scale a row: the block's partial sums join the total with one FFMA each
#pragma unroll
    for (int i = 0; i < Cfg::BN / 2; ++i) {
      float f = sc.rows[(i / 2) % 2];
      f *= pair_factor(out, z, row0 + 8 * ((i / 2) % 2), col0 + 8 * (i / 4) + i % 2, kb, p);
      total[i] = fmaf(float(part[i]), f, total[i]);
    }
  } else {
    int t = int(threadIdx.x % 128), q = t % 4;
    // two buffers: a thread writes the next promotion's only after every thread has passed
    // this one's barrier, so after it read the previous one's (of this tile or the last)
    float* buf = cols + (turn % 2) * Cfg::BN;
    if (t < Cfg::BN) st_shared(buf + t, sc.col);
    named_bar_sync(3 + unsigned(consumer), 128);  // barriers 1 and 2 are the C tiles'
    const float* read = buf + 2 * q;
#pragma unroll
    for (int j = 0; j < Cfg::BN / 8; ++j) {
      float2 cs = ld_shared(reinterpret_cast<const float2*>(read + 8 * j));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          int i = 4 * j + 2 * h + e;  // the accumulator of row row0 + 8h, column col0 + 8j + e
          float f = sc.rows[h] * (e ? cs.y : cs.x);
          f *= pair_factor(out, z, row0 + 8 * h, col0 + 8 * j + e, kb, p);
          total[i] = fmaf(float(part[i]), f, total[i]);
        }
      }
    }
  }
}

// A consumer warpgroup: waits for each stage, issues its wgmmas, keeps one k tile in
// flight, releases the previous stage, and hands every accumulator to `out(z, row, col, v)`
// (or, with a TMA-store epilogue, `out.value` into its C tile in shared memory). A
// block-scaled contraction's wgmmas sum one block at a time; at each block's end the
// warpgroup waits for them and promotes the block into its fp32 total.
template <class T, class Cfg, class Out>
NCDC_DEVICE void consume(unsigned char* smem, unsigned long long* full, unsigned long long* empty,
                         const Problem& p, int consumer, const TensorMap* map_c, bool batched,
                         const Out& out) {
  unsigned char* ctile = smem + Cfg::STAGES * Cfg::STAGE_BYTES + consumer * Cfg::C_TILE_BYTES;
  (void)ctile;
  const Schedule<Cfg> s(p);
  int tid = threadIdx.x % 128, w = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  int stage = 0, held = -1;
  unsigned phase = 0;
  // fp32 accumulators; int32 for s8, converted to fp32 for the epilogue (exact below 2^24)
  typename Mma<T>::Acc acc[Cfg::BN / 2];
  // a block-scaled contraction's total: acc then holds one block's partial sums
  constexpr int BT = BlockTiles<Out>::value, BLOCK = BT > 0 ? BT : 1;
  float total[BT ? Cfg::BN / 2 : 1];
  float* cols = reinterpret_cast<float*>(smem + Cfg::SMEM_BYTES - 1024) + consumer * 2 * Cfg::BN;
  unsigned turn = 0;  // the consumer's promotions so far: which buffer of `cols` is next
  (void)cols, (void)turn;
  unsigned long long da0, db0;
  first_descriptors<Cfg>(smem, consumer, da0, db0);
  for (int u = s.first; u < s.units; u += s.step) {
    long long z, tm, tn;
    tile_at<Cfg>(s, u, p, z, tm, tn);
    long long row0 = tm * Cfg::BM + consumer * 64 + 16 * w + g, col0 = tn * Cfg::BN + 2 * q;
    BlockScales scales{};
    ScaleSite site{};
    if constexpr (BT > 0) site = scale_site<Cfg>(z, row0, tn, p);
    if constexpr (BT > 0) {
#pragma unroll
      for (int i = 0; i < Cfg::BN / 2; ++i) total[i] = 0.0f;
    }
    // a block-scaled contraction's k tiles a block at a time (k_tiles is whole blocks), the
    // block's tiles unrolled so that the loop is one block; else BLOCK is 1
    for (int kb = 0; kb < s.k_tiles / BLOCK; ++kb) {
      if constexpr (BT > 0) scales = read_scales(out, site, kb);
#pragma unroll
      for (int j = 0; j < BLOCK; ++j) {
        mbar_wait(&full[stage], phase);
        unsigned long long da = desc_advance(da0, unsigned(stage) * Cfg::STAGE_BYTES);
        unsigned long long db = desc_advance(db0, unsigned(stage) * Cfg::STAGE_BYTES);
        wgmma_fence_operands<Cfg::BN / 2>(acc);
        wgmma_fence();
        // the first k step of a tile (of a block) overwrites the accumulators
        bool carry = BT > 0 ? j > 0 : kb > 0;
#pragma unroll
        for (int kk = 0; kk < Cfg::BK / Cfg::KSTEP; ++kk) {
          Mma<T>::template run<Cfg::BN, Cfg::B_KMAJOR ? 0 : 1>(
              acc, desc_advance(da, kk * kStepBytesA<Cfg>), desc_advance(db, kk * kStepBytesB<Cfg>),
              (carry || kk > 0) ? 1 : 0);
        }
        wgmma_commit();
        if (BT > 0 && j == BLOCK - 1) {
          wgmma_wait<0>();  // the block is summed: release its stages, add it to the total
          wgmma_fence_operands<Cfg::BN / 2>(acc);
          __syncwarp();
          if (lane == 0) {
            if (held >= 0) release<Cfg>(&empty[held]);
            release<Cfg>(&empty[stage]);
          }
          held = -1;
          if constexpr (BT > 0) {
            promote<Cfg>(out, acc, total, scales, cols, turn++, consumer, z, row0, col0, kb, p);
          }
        } else {
          wgmma_wait<1>();  // the previous k tile's wgmmas are done: release its stage
          wgmma_fence_operands<Cfg::BN / 2>(acc);
          if (held >= 0) {
            __syncwarp();
            if (lane == 0) release<Cfg>(&empty[held]);
          }
          held = stage;
        }
        if (++stage == Cfg::STAGES) {
          stage = 0;
          phase ^= 1u;
        }
      }
    }
    wgmma_wait<0>();
    wgmma_fence_operands<Cfg::BN / 2>(acc);
    __syncwarp();
    if (held >= 0 && lane == 0) release<Cfg>(&empty[held]);
    held = -1;
    const auto* sums = [&] {
      if constexpr (BT > 0) return static_cast<const float*>(total);
      else return static_cast<const typename Mma<T>::Acc*>(acc);
    }();
    if constexpr (Cfg::C_SIZE) {
      store_tile<Cfg>(map_c, batched, ctile, sums, p, z, tm, tn, consumer, row0, col0, out);
    } else {
#pragma unroll
      for (int i = 0; i < Cfg::BN / 2; ++i) {
        long long row = row0 + 8 * ((i / 2) % 2), col = col0 + 8 * (i / 4) + i % 2;
        if (row < p.m && col < p.n) out(z, row, col, float(sums[i]));
      }
    }
  }
  if constexpr (Cfg::C_SIZE) {
    if (tid == 0) tma_store_wait<0>();  // the last tile's stores have read shared memory
  }
}

// The whole kernel body: barriers, the warp split and the register budgets.
template <class T, class Cfg, class Out>
NCDC_DEVICE void run(const TensorMap* map_a, const TensorMap* map_b, const TensorMap* map_c,
                     const Problem& p, bool batched, const Out& out) {
  __shared__ unsigned long long full[Cfg::STAGES], empty[Cfg::STAGES], staged[Cfg::STAGES];
  unsigned char* smem = aligned_smem();
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::STAGES; ++s) {
      // the producer's arrival, plus one per transposing warp
      mbar_init(&full[s], Cfg::TRANSPOSE_B ? 1 + kTransposeWarps : 1);
      mbar_init(&empty[s], 4 * Cfg::CONSUMERS * Cfg::CLUSTER);  // per consumer warp of each CTA
      mbar_init(&staged[s], 1);
    }
    fence_barrier_init();
  }
  // a peer's multicast and releases reach these barriers only once they exist
  if constexpr (Cfg::CLUSTER > 1) cluster_sync();
  else __syncthreads();
  // the warpgroup's index, broadcast from lane 0 so the compiler keeps it (and the
  // consumer's descriptors built from it) in uniform registers, as CUTLASS's
  // canonical_warp_group_idx does
  int group = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);
  if (group == 0) {
    if constexpr (Cfg::CONSUMERS == 2) setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) produce<Cfg>(map_a, map_b, smem, full, empty, staged, p, batched);
    if constexpr (Cfg::TRANSPOSE_B) {
      if (threadIdx.x >= 32) transpose_stages<Cfg>(smem, full, staged, p, threadIdx.x / 32 - 1);
    }
  } else {
    if constexpr (Cfg::CONSUMERS == 2) setmaxnreg_inc<kConsumerRegs>();
    consume<T, Cfg>(smem, full, empty, p, group - 1, map_c, batched, out);
  }
  // no CTA exits while a peer may still multicast into it or arrive on its barriers
  if constexpr (Cfg::CLUSTER > 1) cluster_sync();
}

}  // namespace wgmma_gemm

}  // namespace ncdc

#endif  // NCDC_HOPPER_CUH
