// ncdc CPU emulation of the CUDA execution model (host C++17 only; never seen by NVRTC).
//
// One OS thread runs one block at a time; the block's CUDA threads are fibers on that OS
// thread, switched cooperatively at every collective (__syncthreads, __syncwarp, shuffles,
// ballot, ldmatrix, mma). Blocks of a grid run in parallel on a pool of OS threads
// (NCDC_EMU_THREADS, default: the number of cores). A barrier that some thread can never
// reach (it exited, or waits at a different barrier) is reported as a deadlock that names
// the kernel, the block and the threads, instead of hanging.
//
// Invariants the rest of the headers rely on:
//   * a fiber never migrates between OS threads, so `thread_local` is per block;
//   * a warp collective deposits per-lane inputs in a per-warp scratch slot, the last lane
//     to arrive computes every lane's result (one snapshot, as the hardware does), and the
//     slots alternate by barrier generation so a collective needs only one warp barrier.
//
// Under ThreadSanitizer (sanitize="race") every CUDA thread is also a TSan fiber, switched
// without implied ordering; the CUDA memory model is stated explicitly instead: arriving at
// a barrier releases and leaving it acquires a sync object per barrier generation (per block,
// or per warp for warp collectives), and the blocks run by one OS thread are ordered one
// after the other. The emulator's own bookkeeping, which the fibers of a block share, is
// hidden from TSan (`Untracked`), so the only accesses TSan can report are the kernel's.
#pragma once
#ifndef NCDC_EMU_H
#define NCDC_EMU_H

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define NCDC_ASAN 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__SANITIZE_THREAD__)
#define NCDC_TSAN 1
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
extern "C" void __tsan_read_range(void* addr, unsigned long size);
extern "C" void __tsan_write_range(void* addr, unsigned long size);
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

// ---- CUDA keywords --------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#if defined(NCDC_ASAN) || defined(NCDC_TSAN)
// Sanitized runs use one OS thread; under ASan plain statics get redzones.
#define __shared__ static
#else
// Per OS thread = per block, shared by the block's fibers.
#define __shared__ static thread_local
#endif
#define __constant__ static

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
using uint3 = dim3;

// CUDA vector types (the ones kernels use for vectorised memory access).
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

inline thread_local dim3 threadIdx;
inline thread_local dim3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
constexpr int warpSize = 32;

namespace ncdc {
namespace emu {

// ---- context switch --------------------------------------------------------------------
#if defined(__x86_64__)
// ncdc_emu_switch(save, load): saves callee-saved registers, MXCSR and the x87 control word
// on the current stack, stores the stack pointer in *save and resumes the stack `load`.
extern "C" void ncdc_emu_switch(void** save, void* load);
__asm__(
    ".text\n"
    ".weak ncdc_emu_switch\n"
    ".hidden ncdc_emu_switch\n"
    ".type ncdc_emu_switch,@function\n"
    "ncdc_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size ncdc_emu_switch, .-ncdc_emu_switch\n");

struct Context {
  void* sp = nullptr;
};
inline void context_init(Context& c, char* stack, size_t size, void (*entry)()) {
  auto top = reinterpret_cast<uintptr_t>(stack + size) & ~uintptr_t(15);
  auto* slot = reinterpret_cast<uint64_t*>(top);
  slot[-1] = 0;  // fake return address of `entry`, which never returns
  slot[-2] = reinterpret_cast<uint64_t>(entry);
  for (int i = 3; i <= 8; ++i) slot[-i] = 0;  // rbp rbx r12 r13 r14 r15
  slot[-9] = 0x1F80ull | (0x037Full << 32);  // MXCSR default, x87 control word default
  c.sp = &slot[-9];
}
inline void context_switch(Context& from, Context& to) { ncdc_emu_switch(&from.sp, to.sp); }
#else
struct Context {
  ucontext_t uc;
};
inline void context_init(Context& c, char* stack, size_t size, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
inline void context_switch(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
#endif

// ---- scheduler state -------------------------------------------------------------------
enum class Wait : uint8_t { kRun, kBlock, kWarp, kDone };

struct CopyOp {  // one pending cp.async
  void* dst;
  const void* src;
  uint32_t size;
  uint32_t src_bytes;
};

// One access a thread made, kept until its warp's accesses are grouped into requests.
struct Access {
  uint64_t addr;
  uint32_t bytes;  // bytes it moves (a zero-filling cp.async may read fewer than its size)
  uint8_t space;   // Space
  uint8_t size;    // the instruction's width in bytes: 1, 2, 4, 8 or 16
};
enum Space : uint8_t { kGlobalLoad, kGlobalStore, kShared, kLdmatrix, kSpaces };

// Warp-wide request counts: global sectors and shared-memory wavefronts, each beside the
// fewest the same bytes could take (see docs/cpu-backend.md, "Access counters").
struct Counters {
  uint64_t load_requests = 0, load_sectors = 0, load_ideal = 0;  // global loads, cp.async reads
  uint64_t store_requests = 0, store_sectors = 0, store_ideal = 0;
  uint64_t shared_requests = 0, shared_wavefronts = 0, shared_ideal = 0;
  static constexpr int kCount = 9;
  uint64_t* begin() { return &load_requests; }
};

struct Fiber {
  Context ctx;
#ifdef NCDC_ASAN
  void* fake_stack = nullptr;
#endif
#ifdef NCDC_TSAN
  void* tsan_fiber = nullptr;
#endif
  char* stack = nullptr;
  Wait wait = Wait::kRun;
  unsigned warp_mask = 0;  // lanes of the warp collective this fiber waits at
  dim3 idx;
  std::vector<CopyOp> copies;         // issued cp.async, oldest first, from copy_head
  std::vector<size_t> group_ends;     // end index in `copies` of each committed group
  size_t copy_head = 0, group_head = 0;
  std::vector<Access> accesses;       // since the warp's last grouping (counting launches)
};

struct WarpSlot {
  alignas(16) unsigned char in[48];
  alignas(16) unsigned char out[16];
};

struct Warp {
  unsigned arrived = 0;
  unsigned exists = 0;  // lanes that exist (a partial last warp has fewer)
  unsigned gen = 0;
  WarpSlot slots[2][32];
  char sync[2];  // TSan sync objects, one per barrier parity (only their addresses matter)
};

using Invoker = void (*)(const void* kernel, void** args);

struct Launch {
  const char* kernel_name;
  const void* kernel;
  Invoker invoke;
  void** args;
  dim3 grid, block;
  size_t dynamic_smem;
  const uint64_t* ranges;  // [begin, end) pairs of the global buffers
  int nranges;
  std::atomic<uint64_t> next_block{0};
  std::atomic<bool> failed{false};
  std::atomic<uint64_t> bytes_read{0}, bytes_written{0};
  bool counting = false;  // record accesses per warp (sectors, wavefronts)
  unsigned entry_regs = 0;  // registers a thread at entry (setmaxnreg's pool), 0: not given
  Counters counters;      // summed over the workers under error_lock
  std::string error;
  std::atomic_flag error_lock = ATOMIC_FLAG_INIT;
  void set_error(const std::string& msg) {
    while (error_lock.test_and_set()) {
    }
    if (!failed.load()) {
      error = msg;
      failed.store(true);
    }
    error_lock.clear();
  }
};

struct Cluster;

struct Worker {
  Launch* launch = nullptr;
  Cluster* cluster = nullptr;  // the cluster this block runs in (null: clusters of one)
  unsigned rank = 0;           // %cluster_ctarank
  void* hopper = nullptr;      // the Hopper state of ncdc_emu_hopper.h (BlockHopper)
  void (*hopper_free)(void*) = nullptr;
  char* tls_anchor = nullptr;  // &tl_anchor of its OS thread: maps static shared to a peer's
  Context sched;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  unsigned nthreads = 0, current = 0, done = 0;
  unsigned block_arrived = 0, block_gen = 0;
  char block_sync[2];                 // TSan sync objects of __syncthreads, per parity
  char block_start = 0, block_end = 0;  // TSan: orders the blocks one OS thread runs
  bool abort = false;
  char* stacks = nullptr;
  size_t stack_size = 0, stacks_bytes = 0;
  unsigned char* dynamic_smem = nullptr;
  uint64_t block_serial = 0;  // unique per block run, across launches (per-block shadows)
  uint64_t bytes_read = 0, bytes_written = 0;
  Counters counters;
#ifdef NCDC_ASAN
  void* fake_stack = nullptr;
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;
#endif
#ifdef NCDC_TSAN
  void* tsan_sched = nullptr;
#endif
};

// ---- happens-before for ThreadSanitizer (no-ops otherwise) ------------------------------
#ifdef NCDC_TSAN
inline void hb_release(void* sync) { __tsan_release(sync); }
inline void hb_acquire(void* sync) { __tsan_acquire(sync); }
// Hides the emulator's bookkeeping (scheduler state shared by the fibers) from TSan.
struct Untracked {
  Untracked() { __tsan_ignore_thread_begin(); }
  ~Untracked() { __tsan_ignore_thread_end(); }
  Untracked(const Untracked&) = delete;
  Untracked& operator=(const Untracked&) = delete;
};
// Kernel code run from inside bookkeeping (a warp collective's computation) is tracked.
struct Tracked {
  Tracked() { __tsan_ignore_thread_end(); }
  ~Tracked() { __tsan_ignore_thread_begin(); }
  Tracked(const Tracked&) = delete;
  Tracked& operator=(const Tracked&) = delete;
};
#else
inline void hb_release(void*) {}
inline void hb_acquire(void*) {}
struct Untracked {
  Untracked() {}  // user-provided, so `Untracked quiet;` raises no unused-variable warning
};
struct Tracked {
  Tracked() {}
};
#endif

inline thread_local Worker* tl_worker = nullptr;
inline thread_local char tl_anchor;  // an OS thread's place in this module's TLS block

inline std::string fmt_dim(const dim3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

// Where the emulator is now, for error reports: "kernel K block (x,y,z) thread (x,y,z)".
inline std::string where() {
  Worker* w = tl_worker;
  if (!w || !w->launch) return "outside any kernel";
  return std::string("kernel ") + w->launch->kernel_name + " block " + fmt_dim(blockIdx) +
         " thread " + fmt_dim(threadIdx);
}

inline void switch_to_scheduler() {
  Worker& w = *tl_worker;
  Fiber& f = w.fibers[w.current];
#ifdef NCDC_TSAN
  __tsan_switch_to_fiber(w.tsan_sched, __tsan_switch_to_fiber_no_sync);
#endif
#ifdef NCDC_ASAN
  __sanitizer_start_switch_fiber(&f.fake_stack, w.sched_bottom, w.sched_size);
  context_switch(f.ctx, w.sched);
  __sanitizer_finish_switch_fiber(f.fake_stack, nullptr, nullptr);
#else
  context_switch(f.ctx, w.sched);
#endif
}

// Stops the block: the scheduler abandons its fibers and the launch reports `msg`.
[[noreturn]] inline void fail(const std::string& msg) {
  Untracked quiet;
  Worker& w = *tl_worker;
  w.launch->set_error(msg + " (" + where() + ")");
  w.abort = true;
  w.fibers[w.current].wait = Wait::kDone;
  switch_to_scheduler();
  std::abort();  // never resumed
}

inline Fiber& self() { return tl_worker->fibers[tl_worker->current]; }
inline unsigned linear_tid() { return tl_worker->current; }
inline unsigned lane_id() { return tl_worker->current & 31u; }
inline Warp& my_warp() { return tl_worker->warps[tl_worker->current >> 5]; }

inline void mark_pending_copies();
inline void count_warp_requests(Worker& w, unsigned warp);
inline void count_block_requests(Worker& w);

// Block barrier (bar.sync 0): released when every thread of the block has arrived.
inline void sync_block() {
  Untracked quiet;
  Worker& w = *tl_worker;
  char* sync = &w.block_sync[w.block_gen & 1u];
  hb_release(sync);
  if (++w.block_arrived == w.nthreads) {
    count_block_requests(w);
    w.block_arrived = 0;
    ++w.block_gen;
    for (auto& f : w.fibers)
      if (f.wait == Wait::kBlock) f.wait = Wait::kRun;
  } else {
    self().wait = Wait::kBlock;
    switch_to_scheduler();
  }
  hb_acquire(sync);
  mark_pending_copies();
}

// Warp barrier over `mask` (restricted to existing lanes). The last lane to arrive runs
// `on_all_arrived(slots)` before releasing the others. Returns the slot parity used.
template <class F>
inline unsigned warp_collective(unsigned mask, const void* in, size_t in_bytes, F&& on_all_arrived) {
  Untracked quiet;
  Worker& w = *tl_worker;
  Warp& warp = my_warp();
  unsigned lane = lane_id();
  mask &= warp.exists;
  if (!(mask >> lane & 1u)) fail("warp collective with a mask that excludes the calling lane");
  unsigned parity = warp.gen & 1u;
  if (in_bytes) std::memcpy(warp.slots[parity][lane].in, in, in_bytes);
  hb_release(&warp.sync[parity]);
  warp.arrived |= 1u << lane;
  if ((warp.arrived & mask) == mask) {
    hb_acquire(&warp.sync[parity]);
    {
      Tracked loads;  // ldmatrix reads the lanes' shared-memory rows here
      on_all_arrived(warp.slots[parity]);
    }
    hb_release(&warp.sync[parity]);
    mark_pending_copies();
    if (w.launch->counting && mask == warp.exists) count_warp_requests(w, w.current >> 5);
    warp.arrived &= ~mask;
    ++warp.gen;
    unsigned base = w.current & ~31u;
    for (unsigned l = 0; l < 32; ++l) {
      if ((mask >> l & 1u) && l != lane) w.fibers[base + l].wait = Wait::kRun;
    }
    return parity;
  }
  Fiber& f = self();
  f.wait = Wait::kWarp;
  f.warp_mask = mask;
  switch_to_scheduler();
  hb_acquire(&warp.sync[parity]);
  mark_pending_copies();
  return parity;
}

inline void sync_warp(unsigned mask) {
  warp_collective(mask, nullptr, 0, [](WarpSlot*) {});
}

// Exchanges one 8-byte value per lane; returns the slots (valid until this lane's next
// collective, by the alternating-parity invariant).
inline const WarpSlot* warp_exchange(unsigned mask, uint64_t value) {
  unsigned parity = warp_collective(mask, &value, sizeof value, [](WarpSlot*) {});
  return my_warp().slots[parity];
}
inline uint64_t slot_u64(const WarpSlot& s) {
  uint64_t v;
  std::memcpy(&v, s.in, sizeof v);
  return v;
}

// ---- global memory accounting -------------------------------------------------------------
inline void count_read(size_t n) {
  Untracked quiet;
  tl_worker->bytes_read += n;
}
inline void count_write(size_t n) {
  Untracked quiet;
  tl_worker->bytes_written += n;
}
// Per-warp access counters (sectors, wavefronts): recorded only when the launch asks.
inline void count_global(const void* p, size_t n, bool write);
inline void count_shared(const void* p, size_t n);
inline bool is_global(const void* p) {
  auto a = reinterpret_cast<uint64_t>(p);
  const Launch* l = tl_worker->launch;
  for (int i = 0; i < l->nranges; ++i)
    if (a >= l->ranges[2 * i] && a < l->ranges[2 * i + 1]) return true;
  return false;
}

// ---- cp.async ------------------------------------------------------------------------------
// A pending copy may land at any moment until its wait, but the emulator copies at the wait.
// For TSan its bytes are accessed at the issue and again after every barrier or warp
// collective it is pending across, so a race with any moment of the flight is reported.
inline void mark_in_flight(const CopyOp& op) {
#ifdef NCDC_TSAN
  Tracked kernel_access;
  __tsan_write_range(op.dst, op.size);
  if (op.src_bytes) __tsan_read_range(const_cast<void*>(op.src), op.src_bytes);
#else
  (void)op;
#endif
}
inline void mark_pending_copies() {
#ifdef NCDC_TSAN
  Fiber& f = self();
  for (size_t i = f.copy_head; i < f.copies.size(); ++i) mark_in_flight(f.copies[i]);
#endif
}

inline void copy_issue(void* dst, const void* src, uint32_t size, uint32_t src_bytes) {
  if (src_bytes > size) fail("cp.async src_bytes larger than the copy size");
  count_read(src_bytes);
  Untracked quiet;
  if (tl_worker->launch->counting) {  // its global read and its shared-memory write
    auto& log = self().accesses;
    if (src_bytes) log.push_back({reinterpret_cast<uint64_t>(src), src_bytes, kGlobalLoad, uint8_t(size)});
    log.push_back({reinterpret_cast<uint64_t>(dst), size, kShared, uint8_t(size)});
  }
  self().copies.push_back({dst, src, size, src_bytes});
  mark_in_flight(self().copies.back());
}
inline void copy_commit() {
  Fiber& f = self();
  f.group_ends.push_back(f.copies.size());
}
inline void copy_perform(const CopyOp& op) {
  if (op.src_bytes) std::memcpy(op.dst, op.src, op.src_bytes);
  if (op.size > op.src_bytes)
    std::memset(static_cast<char*>(op.dst) + op.src_bytes, 0, op.size - op.src_bytes);
}
// cp.async.wait_group n: performs the oldest committed groups until at most n are pending.
inline void copy_wait(unsigned n) {
  Fiber& f = self();
  while (f.group_ends.size() - f.group_head > n) {
    size_t end = f.group_ends[f.group_head++];
    for (; f.copy_head < end; ++f.copy_head) copy_perform(f.copies[f.copy_head]);
  }
  if (f.group_head == f.group_ends.size()) {
    f.group_ends.clear();
    f.group_head = 0;
    f.copies.erase(f.copies.begin(), f.copies.begin() + static_cast<long>(f.copy_head));
    f.copy_head = 0;
  }
}

// ---- access counters ---------------------------------------------------------------------
// A thread's accesses are logged as it runs; when its warp meets (a collective of the whole
// warp, a block barrier, the block's end) the lanes' logs are matched into warp-wide
// requests: the i-th access of a given space and width of each lane is one instruction.
// That is exact for uniform control flow; lanes that skip an access in divergent code are
// matched by order.
inline void record(const void* p, size_t n, Space space) {
  Untracked quiet;
  if (!tl_worker->launch->counting) return;
  self().accesses.push_back({reinterpret_cast<uint64_t>(p), uint32_t(n), space, uint8_t(n)});
}
inline void count_global(const void* p, size_t n, bool write) {
  if (write) count_write(n);
  else count_read(n);
  record(p, n, write ? kGlobalStore : kGlobalLoad);
}
inline void count_shared(const void* p, size_t n) { record(p, n, kShared); }
// One lane's row address of an ldmatrix (16 bytes of one 8x8 matrix).
inline void count_ldmatrix(const void* row) { record(row, 16, kLdmatrix); }

struct LaneAccess {
  unsigned lane;
  uint64_t addr;
  uint32_t bytes;
};

// Bytes of the distinct addresses of a request (lanes that read the same address share it).
inline uint64_t unique_bytes(std::vector<LaneAccess> lanes) {
  std::sort(lanes.begin(), lanes.end(), [](const LaneAccess& a, const LaneAccess& b) { return a.addr < b.addr; });
  uint64_t bytes = 0, end = 0;
  for (const auto& a : lanes) {  // the union of [addr, addr + bytes)
    uint64_t lo = std::max(a.addr, end), hi = a.addr + a.bytes;
    if (hi > lo) bytes += hi - lo;
    end = std::max(end, hi);
  }
  return bytes;
}

// Global memory: the 32-byte sectors one warp-wide instruction touches.
inline void count_global_request(uint64_t* c, const std::vector<LaneAccess>& lanes) {
  std::vector<uint64_t> sectors;
  for (const auto& a : lanes)
    for (uint64_t s = a.addr / 32; a.bytes && s <= (a.addr + a.bytes - 1) / 32; ++s) sectors.push_back(s);
  std::sort(sectors.begin(), sectors.end());
  c[0] += 1;  // requests, sectors, ideal sectors
  c[1] += uint64_t(std::unique(sectors.begin(), sectors.end()) - sectors.begin());
  c[2] += (unique_bytes(lanes) + 31) / 32;
}

// Shared memory: 32 banks of 4 bytes; a request of `size`-byte accesses is processed in
// phases of 128 / size lanes (a whole warp up to 4 bytes, half a warp for 8, a quarter for
// 16: one ldmatrix matrix). A phase takes as many wavefronts as the most distinct 4-byte
// words any one bank holds among its lanes' accesses (the same word is a broadcast).
inline void count_shared_request(Counters& c, const std::vector<LaneAccess>& lanes, unsigned size) {
  const unsigned per_phase = size <= 4 ? 32u : 128u / size;
  c.shared_requests += 1;
  for (unsigned phase = 0; phase < 32 / per_phase; ++phase) {
    std::vector<LaneAccess> mine;
    for (const auto& a : lanes)
      if (a.lane / per_phase == phase) mine.push_back(a);
    if (mine.empty()) continue;
    std::vector<uint64_t> words;
    for (const auto& a : mine)
      for (uint64_t w = a.addr / 4; w <= (a.addr + a.bytes - 1) / 4; ++w) words.push_back(w);
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    unsigned per_bank[32] = {};
    unsigned most = 0;
    for (uint64_t w : words) most = std::max(most, ++per_bank[w % 32]);
    c.shared_wavefronts += most;
    c.shared_ideal += (unique_bytes(mine) + 127) / 128;
  }
}

inline void count_warp_requests(Worker& w, unsigned warp) {
  struct Item {
    unsigned key, ordinal, lane;
    Access a;
  };
  std::vector<Item> items;
  for (unsigned lane = 0; lane < 32; ++lane) {
    unsigned t = warp * 32 + lane;
    if (t >= w.nthreads) break;
    unsigned seen[kSpaces * 32] = {};
    auto& log = w.fibers[t].accesses;
    for (const Access& a : log) {
      unsigned key = a.space * 32u + a.size;
      items.push_back({key, seen[key]++, lane, a});
    }
    log.clear();
  }
  std::sort(items.begin(), items.end(), [](const Item& x, const Item& y) {
    return x.key != y.key ? x.key < y.key : x.ordinal != y.ordinal ? x.ordinal < y.ordinal : x.lane < y.lane;
  });
  std::vector<LaneAccess> lanes;
  for (size_t i = 0; i < items.size();) {
    size_t j = i;
    lanes.clear();
    for (; j < items.size() && items[j].key == items[i].key && items[j].ordinal == items[i].ordinal; ++j)
      lanes.push_back({items[j].lane, items[j].a.addr, items[j].a.bytes});
    const Access& a = items[i].a;
    if (a.space == kGlobalLoad) count_global_request(&w.counters.load_requests, lanes);
    else if (a.space == kGlobalStore) count_global_request(&w.counters.store_requests, lanes);
    else count_shared_request(w.counters, lanes, a.size);
    i = j;
  }
}
inline void count_block_requests(Worker& w) {
  if (!w.launch->counting) return;
  for (unsigned warp = 0; warp < w.warps.size(); ++warp) count_warp_requests(w, warp);
}

// ---- running a launch -------------------------------------------------------------------------
inline void fiber_entry() {
  Worker& w = *tl_worker;
#ifdef NCDC_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &w.sched_bottom, &w.sched_size);
#endif
  hb_acquire(&w.block_start);
  w.launch->invoke(w.launch->kernel, w.launch->args);
  hb_release(&w.block_end);
#ifdef NCDC_TSAN
  __tsan_ignore_thread_begin();  // ended before the switch: the TSan fiber serves the next block
#endif
  Fiber& f = w.fibers[w.current];
  f.wait = Wait::kDone;
  ++w.done;
  f.copies.clear();
  f.group_ends.clear();
  f.copy_head = f.group_head = 0;
#ifdef NCDC_ASAN
  __sanitizer_start_switch_fiber(nullptr, w.sched_bottom, w.sched_size);  // fiber finished
#endif
#ifdef NCDC_TSAN
  __tsan_ignore_thread_end();
  __tsan_switch_to_fiber(w.tsan_sched, __tsan_switch_to_fiber_no_sync);
#endif
  context_switch(f.ctx, w.sched);
  std::abort();  // a finished fiber is never resumed
}

inline const char* wait_name(Wait s) {
  switch (s) {
    case Wait::kBlock: return "waits at __syncthreads";
    case Wait::kWarp: return "waits at a warp collective";
    case Wait::kDone: return "has exited";
    default: return "is running";
  }
}

inline std::string describe_deadlock(Worker& w) {
  auto tid = [&](unsigned i) { return fmt_dim(w.fibers[i].idx); };
  for (unsigned i = 0; i < w.nthreads; ++i) {
    const Fiber& f = w.fibers[i];
    if (f.wait == Wait::kBlock) {
      for (unsigned j = 0; j < w.nthreads; ++j)
        if (w.fibers[j].wait != Wait::kBlock)
          return "thread " + tid(i) + " waits at __syncthreads but thread " + tid(j) + " " +
                 wait_name(w.fibers[j].wait);
    }
    if (f.wait == Wait::kWarp) {
      unsigned base = i & ~31u;
      for (unsigned l = 0; l < 32; ++l) {
        if (!(f.warp_mask >> l & 1u)) continue;
        const Fiber& g = w.fibers[base + l];
        if (g.wait != Wait::kWarp)
          return "thread " + tid(i) + " waits at a warp collective but lane " + std::to_string(l) +
                 " (thread " + tid(base + l) + ") " + wait_name(g.wait);
      }
      return "thread " + tid(i) + " waits at a warp collective whose lanes use different masks";
    }
  }
  return "no thread can make progress";
}

// ---- thread-block clusters ----------------------------------------------------------------------
// A kernel declares its cluster (on the GPU __cluster_dims__, on the CPU also
// NCDC_CLUSTER_DIMS(name, x), which registers it by name when the library loads). The blocks of
// a cluster are consecutive in x and run together: each on its own OS thread (so that its
// `thread_local` state, static shared memory included, is its own), in lockstep, one block's
// fibers at a time, so exactly one fiber of the cluster runs at any moment, as if
// all were fibers of one scheduler; a block runs until each of its threads waits for
// something only a peer can do; a wait that no fiber of the cluster can end is a deadlock.
constexpr unsigned kMaxCluster = 8;  // the portable cluster size (CUDA guide, "Thread Block Clusters")

struct ClusterDecl {
  const char* kernel;
  unsigned x;
};
inline std::vector<ClusterDecl>& cluster_decls() {
  static std::vector<ClusterDecl> decls;
  return decls;
}
inline bool declare_cluster(const char* kernel, unsigned x) {
  cluster_decls().push_back({kernel, x});
  return true;
}
inline unsigned cluster_size_of(const char* kernel) {
  for (const ClusterDecl& d : cluster_decls())
    if (std::strcmp(d.kernel, kernel) == 0) return d.x;
  return 1;
}

struct Cluster {
  unsigned size = 1;
  std::mutex mu;
  std::condition_variable cv;
  Worker* members[kMaxCluster] = {};
  bool exited[kMaxCluster] = {};
  unsigned turn = 0;       // the rank whose round runs now
  bool abort = false;      // a member failed: the others abandon the cluster
  unsigned met = 0;        // members at the rendezvous
  uint64_t meeting = 0;    // rendezvous generation
  uint64_t index = 0;      // the cluster being run
  unsigned bar_arrived = 0;  // barrier.cluster: threads arrived in this generation
  uint64_t bar_gen = 0;
  char bar_sync[2];          // TSan sync objects of barrier.cluster, per parity
};

// Waits until every member arrives; the last one runs `last` first (under the lock).
template <class F>
inline void cluster_meet(Cluster& c, F&& last) {
  std::unique_lock<std::mutex> lock(c.mu);
  uint64_t gen = c.meeting;
  if (++c.met == c.size) {
    last();
    c.met = 0;
    ++c.meeting;
    c.cv.notify_all();
    return;
  }
  c.cv.wait(lock, [&] { return c.meeting != gen; });
}

inline unsigned next_live(const Cluster& c, unsigned rank) {
  for (unsigned i = 1; i <= c.size; ++i) {
    unsigned r = (rank + i) % c.size;
    if (!c.exited[r]) return r;
  }
  return rank;
}

// Waits for this block's round; false when a peer failed.
inline bool cluster_take_turn(Worker& w) {
  Cluster& c = *w.cluster;
  std::unique_lock<std::mutex> lock(c.mu);
  c.cv.wait(lock, [&] { return c.turn == w.rank || c.abort; });
  return !c.abort;
}
inline void cluster_pass_turn(Worker& w) {
  Cluster& c = *w.cluster;
  std::lock_guard<std::mutex> lock(c.mu);
  c.turn = next_live(c, w.rank);
  c.cv.notify_all();
}
// The block is over (finished, failed, or abandoned): its turns go to the others.
inline void cluster_leave(Worker& w) {
  if (!w.cluster) return;
  Cluster& c = *w.cluster;
  std::lock_guard<std::mutex> lock(c.mu);
  c.exited[w.rank] = true;
  if (w.abort) c.abort = true;
  if (c.turn == w.rank) c.turn = next_live(c, w.rank);
  c.cv.notify_all();
}

inline bool block_stuck(Worker& w);  // ncdc_emu_hopper.h: every running thread waits in vain

inline void run_block(Worker& w, const dim3& bidx) {
  static std::atomic<uint64_t> blocks_run{0};
  Launch& l = *w.launch;
  blockIdx = bidx;
  w.block_serial = ++blocks_run;
  w.done = 0;
  w.block_arrived = 0;
  for (auto& warp : w.warps) {
    warp.arrived = 0;
    warp.gen = 0;
  }
  for (unsigned i = 0; i < w.nthreads; ++i) {
    Fiber& f = w.fibers[i];
    f.wait = Wait::kRun;
    f.accesses.clear();
#ifdef NCDC_ASAN
    __asan_unpoison_memory_region(f.stack, w.stack_size);  // frames abandoned by the last block
#endif
    context_init(f.ctx, f.stack, w.stack_size, fiber_entry);
  }
  if (w.dynamic_smem) std::memset(w.dynamic_smem, 0xff, l.dynamic_smem);  // NaN garbage
#ifdef NCDC_TSAN
  for (auto& f : w.fibers) {  // TSan reports name a thread by its fiber's name
    std::string name = "block " + fmt_dim(bidx) + " thread " + fmt_dim(f.idx);
    __tsan_set_fiber_name(f.tsan_fiber, name.c_str());
  }
#endif
  hb_release(&w.block_start);  // after the previous block's threads (block_end)
  if (w.cluster) cluster_meet(*w.cluster, [] {});  // every block of the cluster is set up
  while (w.done < w.nthreads) {
    if (w.cluster && !cluster_take_turn(w)) return cluster_leave(w);
    bool ran = false;
    for (unsigned i = 0; i < w.nthreads; ++i) {
      Fiber& f = w.fibers[i];
      if (f.wait != Wait::kRun) continue;
      w.current = i;
      threadIdx = f.idx;
      ran = true;
#ifdef NCDC_TSAN
      __tsan_switch_to_fiber(f.tsan_fiber, __tsan_switch_to_fiber_no_sync);
#endif
#ifdef NCDC_ASAN
      __sanitizer_start_switch_fiber(&w.fake_stack, f.stack, w.stack_size);
      context_switch(w.sched, f.ctx);
      __sanitizer_finish_switch_fiber(w.fake_stack, nullptr, nullptr);
#else
      context_switch(w.sched, f.ctx);
#endif
      if (w.abort) return cluster_leave(w);
    }
    if (w.done == w.nthreads) count_block_requests(w);
    if (!ran) {
      l.set_error("deadlock in kernel " + std::string(l.kernel_name) + " block " + fmt_dim(bidx) +
                  ": " + describe_deadlock(w));
      w.abort = true;
      return cluster_leave(w);
    }
    // a block runs as far as it can before its peers do: the widest skew the hardware
    // allows, so that a missing barrier.cluster shows
    if (w.cluster && w.done < w.nthreads && block_stuck(w)) cluster_pass_turn(w);
  }
  cluster_leave(w);
  hb_acquire(&w.block_end);  // the next block, and the caller reading outputs, come after
}

inline size_t env_size(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  long long n = std::atoll(v);
  return n > 0 ? static_cast<size_t>(n) : fallback;
}

inline dim3 block_index(const Launch& l, uint64_t b) {
  return dim3(unsigned(b % l.grid.x), unsigned((b / l.grid.x) % l.grid.y),
              unsigned(b / (uint64_t(l.grid.x) * l.grid.y)));
}

// Runs clusters until none is left: the members meet before each one (the last to arrive
// takes the next cluster) and after it, so a block's memory outlives its peers' accesses.
inline void run_clusters(Worker& w, Cluster& c, uint64_t nblocks) {
  Launch& l = *w.launch;
  uint64_t nclusters = nblocks / c.size;
  for (;;) {
    cluster_meet(c, [&] {
      c.index = l.failed.load() ? nclusters : l.next_block.fetch_add(1);
      for (auto& e : c.exited) e = false;
      c.turn = 0;
      c.abort = false;
      c.bar_arrived = 0;
    });
    if (c.index >= nclusters) break;
    // a cluster's blocks are consecutive in x (grid.x is a multiple of the cluster size)
    run_block(w, block_index(l, c.index * c.size + w.rank));
    cluster_meet(c, [] {});
  }
}

#if !defined(NCDC_ASAN) && !defined(NCDC_TSAN)
// A kernel that crashes outside the sanitizers (an access outside any buffer, a fiber stack
// run into its guard page) ends the process with one line naming it and the way to find
// the access, instead of a bare "Segmentation fault". The handler is installed once per
// library and chains to the one before it: a fault while none of this library's kernels
// runs goes to that one (Python's faulthandler, another library's) unchanged. It runs on
// an alternate stack of each worker thread, since a fiber's own stack may be the fault.
inline std::atomic<int> crash_running{0};
inline std::atomic<const char*> crash_kernel{nullptr};
inline struct sigaction crash_previous[2];  // SIGSEGV, SIGBUS
constexpr int kCrashExit = 1;  // what a mismatch exits with: the kernel is wrong

inline size_t crash_append(char* line, size_t n, size_t cap, const char* s) {
  while (*s && n + 1 < cap) line[n++] = *s++;  // no stdio: only async-signal-safe calls
  return n;
}

inline void crash_handler(int sig, siginfo_t* info, void* context) {
  (void)context;
  if (crash_running.load() == 0) {  // not ours: hand it back and let the fault recur
    sigaction(sig, &crash_previous[sig == SIGBUS], nullptr);
    return;
  }
  char line[768], hex[19] = "0x";
  uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (int i = 0; i < 16; ++i) hex[2 + i] = "0123456789abcdef"[(address >> (60 - 4 * i)) & 15];
  hex[18] = 0;
  const char* name = crash_kernel.load();
  size_t n = crash_append(line, 0, sizeof line, "error: kernel ");
  n = crash_append(line, n, sizeof line, name ? name : "?");
  n = crash_append(line, n, sizeof line, sig == SIGBUS ? " crashed (SIGBUS" : " crashed (SIGSEGV");
  n = crash_append(line, n, sizeof line, " at ");
  n = crash_append(line, n, sizeof line, hex);
  n = crash_append(line, n, sizeof line,
                   ") on the CPU emulator: an access outside its buffers, or a stack overflow "
                   "(hint: rerun with --sanitize address to find the access, or raise "
                   "NCDC_EMU_STACK_KIB)\n");
  ssize_t written = write(2, line, n);
  (void)written;
  _exit(kCrashExit);
}

inline void crash_install() {
  static bool installed = [] {
    struct sigaction sa {};
    sa.sa_sigaction = crash_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &crash_previous[0]);
    sigaction(SIGBUS, &sa, &crash_previous[1]);
    return true;
  }();
  (void)installed;
}

// This OS thread's alternate signal stack while it runs blocks; the old one back after.
struct CrashStack {
  stack_t old{};
  void* mem = nullptr;
  static constexpr size_t kBytes = 64 << 10;
  CrashStack() {
    mem = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
      mem = nullptr;
      return;
    }
    stack_t ss{};
    ss.ss_sp = mem;
    ss.ss_size = kBytes;
    sigaltstack(&ss, &old);
  }
  ~CrashStack() {
    if (!mem) return;
    sigaltstack(&old, nullptr);
    munmap(mem, kBytes);
  }
};
#else
struct CrashStack {};  // the sanitizers report crashes themselves
#endif

inline void worker_main(Launch& l, Cluster* cluster = nullptr, unsigned rank = 0) {
  CrashStack crash_stack;
  Untracked quiet;  // the scheduler only touches bookkeeping; the kernel runs in the fibers
  Worker w;
  tl_worker = &w;
  w.launch = &l;
  w.cluster = cluster;
  w.rank = rank;
  w.tls_anchor = &tl_anchor;
  if (cluster) cluster->members[rank] = &w;
  blockDim = l.block;
  gridDim = l.grid;
  w.nthreads = l.block.x * l.block.y * l.block.z;
  w.stack_size = (env_size("NCDC_EMU_STACK_KIB", 128) * 1024 + 4095) & ~size_t(4095);
  size_t page = 4096, per = w.stack_size + page;  // one guard page below each stack
  w.stacks_bytes = per * w.nthreads;
  void* mem = mmap(nullptr, w.stacks_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  if (mem == MAP_FAILED) {
    l.set_error("cannot allocate fiber stacks");
    tl_worker = nullptr;
    return;
  }
  w.stacks = static_cast<char*>(mem);
  w.fibers.resize(w.nthreads);
  w.warps.resize((w.nthreads + 31) / 32);
  for (unsigned i = 0; i < w.nthreads; ++i) {
    Fiber& f = w.fibers[i];
    char* base = w.stacks + i * per;
    mprotect(base, page, PROT_NONE);
    f.stack = base + page;
    f.idx = dim3(i % l.block.x, (i / l.block.x) % l.block.y, i / (l.block.x * l.block.y));
    w.warps[i / 32].exists |= 1u << (i % 32);
#ifdef NCDC_TSAN
    f.tsan_fiber = __tsan_create_fiber(0);
#endif
  }
#ifdef NCDC_TSAN
  w.tsan_sched = __tsan_get_current_fiber();
#endif
  if (l.dynamic_smem) {
    // 2^18-aligned in every block: one offset names the same bytes in each block of a cluster
    // (a GPU gives every block of a kernel the same shared-memory window), and the low 18 bits
    // of an address are its offset, as a GPU's shared-window addresses stay below 2^18 (a
    // wgmma descriptor's 14-bit start field, address bits 4-17, never wraps)
    constexpr size_t kWindow = size_t(1) << 18;
#ifdef NCDC_ASAN
    void* p = nullptr;  // exact redzones: the size as asked
    if (posix_memalign(&p, kWindow, l.dynamic_smem) == 0) w.dynamic_smem = static_cast<unsigned char*>(p);
#else
    w.dynamic_smem = static_cast<unsigned char*>(std::aligned_alloc(kWindow, (l.dynamic_smem + kWindow - 1) & ~(kWindow - 1)));
#endif
  }
  uint64_t nblocks = uint64_t(l.grid.x) * l.grid.y * l.grid.z;
  while (!cluster) {
    if (l.failed.load(std::memory_order_relaxed)) break;
    uint64_t b = l.next_block.fetch_add(1);
    if (b >= nblocks) break;
    run_block(w, block_index(l, b));
    if (w.abort) break;
  }
  if (cluster) run_clusters(w, *cluster, nblocks);
  l.bytes_read += w.bytes_read;
  l.bytes_written += w.bytes_written;
  if (l.counting) {
    while (l.error_lock.test_and_set()) {
    }
    for (int i = 0; i < Counters::kCount; ++i) l.counters.begin()[i] += w.counters.begin()[i];
    l.error_lock.clear();
  }
  std::free(w.dynamic_smem);
  if (w.hopper_free) w.hopper_free(w.hopper);
#ifdef NCDC_ASAN
  for (auto& f : w.fibers) __asan_unpoison_memory_region(f.stack, w.stack_size);
#endif
#ifdef NCDC_TSAN
  for (auto& f : w.fibers) __tsan_destroy_fiber(f.tsan_fiber);
#endif
  munmap(w.stacks, w.stacks_bytes);
  tl_worker = nullptr;
}

#ifdef NCDC_ASAN
// Printed by ASan right before its report: which CUDA thread made the bad access.
inline void asan_report(const char*) {
  std::fprintf(stderr, "NCDC-EMU-WHERE: %s\n", where().c_str());
  std::fflush(stderr);
}
#endif

// traffic (11 values): on entry, traffic[0] != 0 asks for the access counters and traffic[1]
// gives the registers a thread has at entry (0: not given); on return, bytes read and
// written, then the Counters in their order (0 unless asked).
inline int launch(const char* name, const void* kernel, Invoker invoke, const unsigned* grid,
                  const unsigned* block, unsigned long long smem, void** args,
                  const unsigned long long* ranges, int nranges, unsigned long long* traffic,
                  char* err, int errlen) {
#ifdef NCDC_ASAN
  __asan_set_error_report_callback(asan_report);
#else
#ifndef NCDC_TSAN
  crash_install();
  crash_kernel.store(name);
  crash_running.fetch_add(1);
  struct Done {
    ~Done() { crash_running.fetch_sub(1); }
  } done;
#endif
#endif
  Launch l;
  l.kernel_name = name;
  l.kernel = kernel;
  l.invoke = invoke;
  l.args = args;
  l.grid = dim3(grid[0], grid[1], grid[2]);
  l.block = dim3(block[0], block[1], block[2]);
  l.dynamic_smem = smem;
  l.ranges = reinterpret_cast<const uint64_t*>(ranges);
  l.nranges = nranges;
  l.counting = traffic[0] != 0;
  l.entry_regs = unsigned(traffic[1]);
  uint64_t nblocks = uint64_t(l.grid.x) * l.grid.y * l.grid.z;
  uint64_t nthreads = uint64_t(l.block.x) * l.block.y * l.block.z;
  unsigned cluster = cluster_size_of(name);
  if (nblocks == 0 || nthreads == 0 || nthreads > 1024) {
    l.set_error("invalid launch: grid " + fmt_dim(l.grid) + " block " + fmt_dim(l.block) +
                " (a block holds 1 to 1024 threads)");
  } else if (cluster < 1 || cluster > kMaxCluster || l.grid.x % cluster) {
    l.set_error("invalid launch of kernel " + std::string(name) + ": grid " + fmt_dim(l.grid) +
                " with clusters of " + std::to_string(cluster) +
                " blocks (grid x must be a multiple of the cluster size, at most " +
                std::to_string(kMaxCluster) + ")");
  } else if (cluster > 1) {
#if defined(NCDC_ASAN) || defined(NCDC_TSAN)
    size_t groups = 1;  // one cluster at a time, its blocks ordered by the lockstep
#else
    size_t groups = env_size("NCDC_EMU_THREADS", std::max(1u, std::thread::hardware_concurrency())) / cluster;
#endif
    groups = std::max<size_t>(1, std::min<uint64_t>(groups, nblocks / cluster));
    std::vector<Cluster> clusters(groups);
    std::vector<std::thread> pool;
    for (auto& c : clusters) {
      c.size = cluster;
      for (unsigned r = 0; r < cluster; ++r) pool.emplace_back([&l, &c, r] { worker_main(l, &c, r); });
    }
    for (auto& t : pool) t.join();
  } else {
#if defined(NCDC_ASAN) || defined(NCDC_TSAN)
    size_t nworkers = 1;  // deterministic reports; blocks of one OS thread are ordered
#else
    size_t nworkers = env_size("NCDC_EMU_THREADS", std::max(1u, std::thread::hardware_concurrency()));
#endif
    nworkers = std::min<uint64_t>(nworkers, nblocks);
    if (nworkers <= 1) {
      worker_main(l);
    } else {
      std::vector<std::thread> pool;
      for (size_t i = 0; i < nworkers; ++i) pool.emplace_back([&l] { worker_main(l); });
      for (auto& t : pool) t.join();
    }
  }
  traffic[0] = l.bytes_read;
  traffic[1] = l.bytes_written;
  for (int i = 0; i < Counters::kCount; ++i) traffic[2 + i] = l.counters.begin()[i];
  if (l.failed) {
    std::snprintf(err, size_t(errlen), "%s", l.error.c_str());
    return 1;
  }
  return 0;
}

// Unpacks `void** args` into the kernel's parameters, deduced from its pointer type.
template <class... P, size_t... I>
inline void invoke_unpacked(void (*k)(P...), void** args, std::index_sequence<I...>) {
  k(*static_cast<std::remove_cv_t<std::remove_reference_t<P>>*>(args[I])...);
}
template <class... P>
inline void invoke_kernel(const void* kernel, void** args) {
  invoke_unpacked(reinterpret_cast<void (*)(P...)>(const_cast<void*>(kernel)), args,
                  std::index_sequence_for<P...>{});
}
template <class... P>
inline Invoker invoker_for(void (*)(P...)) {
  return &invoke_kernel<P...>;
}

// The parameter list as the Python launcher checks it: "p" for a pointer, "i4"/"u8"/"f4"...
// for a scalar passed by value.
template <class T>
inline std::string param_code() {
  if constexpr (std::is_pointer_v<T>) return "p";
  else if constexpr (std::is_floating_point_v<T>) return "f" + std::to_string(sizeof(T));
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) return "i" + std::to_string(sizeof(T));
  else if constexpr (std::is_integral_v<T>) return "u" + std::to_string(sizeof(T));
  else return "b" + std::to_string(sizeof(T));
}
template <class... P>
inline const char* signature_of(void (*)(P...)) {
  static const std::string s = [] {
    std::string out;
    ((out += (out.empty() ? "" : ",") + param_code<std::remove_cv_t<P>>()), ...);
    return out;
  }();
  return s.c_str();
}

}  // namespace emu
}  // namespace ncdc

#define NCDC_EMU_EXPORT extern "C" __attribute__((visibility("default")))

// Ends a generated source: on CPU, the entry points the Python launcher calls.
#define NCDC_EXPORT_KERNEL(name)                                                             \
  NCDC_EMU_EXPORT const char* ncdc_signature_##name() {                                      \
    return ::ncdc::emu::signature_of(&name);                                                 \
  }                                                                                          \
  NCDC_EMU_EXPORT int ncdc_launch_##name(const unsigned* grid, const unsigned* block,        \
                                         unsigned long long smem, void** args,               \
                                         const unsigned long long* ranges, int nranges,      \
                                         unsigned long long* traffic, char* err, int errlen) { \
    return ::ncdc::emu::launch(#name, reinterpret_cast<const void*>(&name),                  \
                               ::ncdc::emu::invoker_for(&name), grid, block, smem, args,     \
                               ranges, nranges, traffic, err, errlen);                       \
  }                                                                                          \
  static_assert(true, "")

// Device buffers allocated inside the library (sanitized runs: malloc gives them redzones).
NCDC_EMU_EXPORT __attribute__((weak)) void* ncdc_emu_malloc(unsigned long long n) {
  return std::malloc(n ? n : 1);
}
NCDC_EMU_EXPORT __attribute__((weak)) void ncdc_emu_free(void* p) { std::free(p); }

#include "ncdc_emu_hopper.h"

#endif  // NCDC_EMU_H
