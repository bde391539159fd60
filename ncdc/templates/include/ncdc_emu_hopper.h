// ncdc CPU emulation of the Hopper (sm_90a) asynchronous instructions: mbarrier, TMA tensor
// copies (cp.async.bulk.tensor), wgmma (warpgroup MMA from shared-memory descriptors), named
// barriers and setmaxnreg. Host C++17 only; included at the end of ncdc_emu.h.
//
// Semantics follow the PTX ISA (9.7.13.15 mbarrier, 9.7.9.25 cp.async.bulk.tensor, 9.7.15
// wgmma, 9.7.13.4 bar/barrier, 9.7.19.5 setmaxnreg). What the emulator makes observable:
//   * a TMA load lands when some thread waits on its mbarrier (try_wait/test_wait), never
//     at the issue: a kernel that reads a stage before waiting for it reads stale bytes;
//   * a wgmma.mma_async reads shared memory and writes its accumulators at the
//     wgmma.wait_group that retires it, never earlier: a missing wait leaves the old values;
//   * wgmma.mma_async without a wgmma.fence since the thread last waited is an error;
//   * an mbarrier whose phase can never complete (a wrong parity, a missing arrive, more
//     expected bytes than were copied) is a deadlock report naming the waiting thread;
//   * under ThreadSanitizer an arrive releases and a successful wait acquires a sync object
//     per mbarrier phase parity; a TMA write is marked at its issue, a wgmma read at its
//     issue and again at its wait, so reading a stage before its full barrier, or refilling
//     it before the consumers' empty arrive, is reported.
// Swizzling is computed on address bits (Swizzle<B,4,3>: bits [4,4+B) ^= bits [7,7+B)), for
// TMA and wgmma alike, as the hardware does on shared-window addresses.
#pragma once
#ifndef NCDC_EMU_HOPPER_H
#define NCDC_EMU_HOPPER_H

#include <array>
#include <climits>
#include <cmath>
#include <deque>
#include <map>

#include "ncdc_emu_types.h"

#define __grid_constant__
#define __cluster_dims__(x, y, z)
// Registers kernel `name`'s cluster of `x` blocks with the emulator (on the GPU: nothing; the
// kernel's __cluster_dims__(x, 1, 1) declares it).
#define NCDC_CLUSTER_DIMS(name, x) \
  static const bool ncdc_cluster_##name [[maybe_unused]] = ::ncdc::emu::declare_cluster(#name, x)

namespace ncdc {

// A tensor map (CUtensorMap) as a kernel parameter: 128 opaque bytes. On the CPU the bytes
// hold the fields of cuTensorMapEncodeTiled (ncdc.backends.arguments.encode_emulated_tensor_map).
struct TensorMap {
  unsigned long long opaque[16];
};

namespace emu {

// ---- the emulated tensor map -----------------------------------------------------------------
constexpr uint64_t kTensorMapMagic = 0x50414d54434443ull;  // "NCDCTMAP" without the last byte
constexpr uint64_t kAddressIsArgument = 1ull << 63;        // address holds a parameter index

struct EmuTensorMap {
  uint64_t magic;
  uint64_t address;     // global address, or kAddressIsArgument | parameter index
  uint32_t dtype;       // CUtensorMapDataType
  uint32_t rank;        // 1..5
  uint32_t interleave;  // CUtensorMapInterleave (only NONE is emulated)
  uint32_t swizzle;     // CUtensorMapSwizzle: 0 none, 1 32B, 2 64B, 3 128B
  uint32_t l2;          // CUtensorMapL2promotion (no effect)
  uint32_t oob_fill;    // CUtensorMapFloatOOBfill: 0 zeros, 1 NaN (not emulated)
  uint32_t elem_bytes;
  uint32_t dims[5];
  uint64_t strides[4];  // bytes, of dimensions 1..rank-1
  uint16_t box[5];
  uint8_t elem_strides[5];
};
static_assert(sizeof(EmuTensorMap) <= sizeof(TensorMap), "the emulated tensor map exceeds 128 bytes");

inline void require_aligned(const void* p, unsigned n, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % n)
    fail(std::string(what) + " is not " + std::to_string(n) + "-byte aligned");
}

inline const EmuTensorMap& tensor_map(const TensorMap* m) {
  const auto* t = reinterpret_cast<const EmuTensorMap*>(m);
  if (t->magic != kTensorMapMagic)
    fail("cp.async.bulk.tensor with a tensor map that was not encoded for the CPU backend");
  return *t;
}

inline unsigned char* tensor_base(const EmuTensorMap& t) {
  if (!(t.address & kAddressIsArgument)) return reinterpret_cast<unsigned char*>(t.address);
  auto i = static_cast<size_t>(t.address & ~kAddressIsArgument);
  return *static_cast<unsigned char**>(tl_worker->launch->args[i]);
}

// Swizzle<B,4,3> of CUtensorMapSwizzle / the descriptor's mode, on an address.
inline uintptr_t swizzle_address(uintptr_t a, unsigned bits) {
  uintptr_t mask = (uintptr_t(1) << bits) - 1;
  return a ^ (((a >> 7) & mask) << 4);
}
inline unsigned tma_swizzle_bits(uint32_t swizzle) { return swizzle; }  // 32B:1, 64B:2, 128B:3

// ---- per-block state of the Hopper instructions ----------------------------------------------
struct WgmmaOp {
  uint64_t desc_a, desc_b;
  float* d;
  int n, k;
  int elem;  // Elem of ncdc_mma.cuh: 0 bf16, 1 f16, 2 e4m3, 3 e5m2; 4 s8 (d holds int32 bits)
  int scale_d, neg_a, neg_b, trans_a, trans_b;
  int a_regs = 0;      // A from registers (desc_a unused): the fragments issued as `a_seq`
  uint64_t a_seq = 0;  // this warpgroup's count of register-A wgmmas before this one
};

// The A fragments of one register-A wgmma of a warpgroup, captured as each thread issues it:
// a thread's product needs the rows its quad holds, so it waits at its wait_group until all
// 128 threads have issued (the instruction is .sync.aligned: every one of them must).
struct RegFragments {
  std::array<uint32_t, 4 * 128> regs{};
  unsigned issued = 0, performed = 0;
};

struct FiberHopper {
  bool fenced = false;
  std::vector<WgmmaOp> ops;
  std::vector<size_t> group_ends;
  uint64_t rs_issued = 0;  // register-A wgmmas this thread has issued
  uint64_t spun = 0;  // progress value at this fiber's last failed wait, 0 when not waiting
  bool cluster_pending = false;  // arrived at barrier.cluster, not waited yet
  uint64_t cluster_gen = 0;      // the barrier.cluster generation of that arrival
  std::vector<std::pair<std::vector<unsigned char>, int>> stores;  // TMA stores, by group
  std::vector<size_t> store_group_ends;
};

struct TmaLoad {  // a cp.async.bulk.tensor load not yet landed
  uint64_t* bar;
  unsigned char* dst;
  std::vector<unsigned char> bytes;  // the box as it will land (read at the issue)
};

struct NamedBarrier {
  unsigned arrived = 0, expected = 0, gen = 0;
  char sync[2];
};

struct BlockHopper {
  uint64_t serial = 0;  // Worker::block_serial of the block it describes
  uint64_t progress = 1;  // counts events that can unblock a waiting thread
  std::vector<FiberHopper> fibers;
  std::deque<TmaLoad> loads;
  NamedBarrier bars[16];
  unsigned regs[32] = {};  // setmaxnreg per warpgroup (0: not set)
  std::map<std::pair<unsigned, uint64_t>, RegFragments> fragments;  // by (warpgroup, a_seq)
};

// The state of the block `w` runs now (a fresh one the first time the block uses it); a
// cluster's blocks reach their peers' through Worker::hopper.
inline BlockHopper& hopper_of(Worker& w) {
  if (!w.hopper) {
    w.hopper = new BlockHopper;
    w.hopper_free = [](void* p) { delete static_cast<BlockHopper*>(p); };
  }
  BlockHopper& h = *static_cast<BlockHopper*>(w.hopper);
  if (h.serial != w.block_serial) {
    h.serial = w.block_serial;
    h.progress = 1;
    h.fibers.assign(w.nthreads, FiberHopper{});
    h.loads.clear();
    for (auto& b : h.bars) b = NamedBarrier{};
    for (auto& r : h.regs) r = 0;
    h.fragments.clear();
  }
  return h;
}
inline BlockHopper& hopper() { return hopper_of(*tl_worker); }
inline FiberHopper& my_hopper() { return hopper().fibers[linear_tid()]; }

// ---- the generic and async proxies (PTX ISA 9.7.13.1, "Proxies"; fence.proxy.async) ------
// A thread's shared-memory writes through the generic proxy (st.shared) are seen by the async
// proxy (a TMA store reading its source, wgmma reading a descriptor operand) only after that
// thread's fence.proxy.async and a barrier ordering it before the read. The emulator keeps,
// for every 4-byte word of dynamic shared memory a tracked store (st_shared) wrote, the
// writer and its count of fences at the write (a word another thread wrote and has not
// fenced keeps that writer); an async-proxy read of bytes whose writer has not fenced since
// is an error. (The barrier after the fence is the race sanitizer's to check:
// without it the read races the write.) The shadow lives per OS thread and is reset per
// block by clearing only the words that block wrote.
struct ProxyShadow {
  uint64_t serial = 0;              // Worker::block_serial of the block it describes
  std::vector<uint64_t> granules;   // per word: (writer + 1) << 32 | its fences then; 0: none
  std::vector<uint32_t> dirty;      // words written in this block
  std::vector<uint32_t> fences;     // fence.proxy.async per thread of the block
};
inline thread_local ProxyShadow tl_proxy;

inline ProxyShadow& proxy_shadow() {
  ProxyShadow& s = tl_proxy;
  const Worker& w = *tl_worker;
  if (s.serial != w.block_serial) {
    size_t n = (w.launch->dynamic_smem + 3) / 4;
    if (s.granules.size() != n) s.granules.assign(n, 0);
    else for (uint32_t g : s.dirty) s.granules[g] = 0;
    s.dirty.clear();
    s.fences.assign(w.nthreads, 0);
    s.serial = w.block_serial;
  }
  return s;
}

inline size_t dynamic_offset(const void* p) {
  auto lo = reinterpret_cast<uintptr_t>(tl_worker->dynamic_smem), a = reinterpret_cast<uintptr_t>(p);
  return a >= lo && a < lo + tl_worker->launch->dynamic_smem ? size_t(a - lo) : SIZE_MAX;
}

inline void note_generic_write(const void* p, size_t n) {
  if (!tl_worker->launch->dynamic_smem || n == 0) return;
  size_t off = dynamic_offset(p);
  if (off == SIZE_MAX) return;
  Untracked quiet;
  ProxyShadow& s = proxy_shadow();
  unsigned t = linear_tid();
  uint64_t v = uint64_t(t + 1) << 32 | s.fences[t];
  for (size_t g = off / 4; g <= (off + n - 1) / 4 && g < s.granules.size(); ++g) {
    uint64_t old = s.granules[g];
    if (!old) s.dirty.push_back(uint32_t(g));
    else if (unsigned(old >> 32) - 1 != t && s.fences[unsigned(old >> 32) - 1] == uint32_t(old))
      continue;  // another thread's write there still needs its fence
    s.granules[g] = v;
  }
}

inline void fence_proxy_async() {
  Untracked quiet;
  ++proxy_shadow().fences[linear_tid()];
}

// An async-proxy read of [p, p + n): every generic write to it must be fenced by its writer.
inline void check_async_read(const void* p, size_t n, const char* what) {
  size_t off = dynamic_offset(p);
  if (off == SIZE_MAX || n == 0) return;
  Untracked quiet;
  ProxyShadow& s = proxy_shadow();
  for (size_t g = off / 4; g <= (off + n - 1) / 4 && g < s.granules.size(); ++g) {
    uint64_t v = s.granules[g];
    if (!v) continue;
    unsigned writer = unsigned(v >> 32) - 1;
    if (s.fences[writer] != uint32_t(v)) {
      s.granules[g] = 0;  // fenced since: the async proxy sees it from now on
      continue;
    }
    char at[32];
    std::snprintf(at, sizeof at, "0x%zx", g * 4);
    fail(std::string("missing fence.proxy.async: ") + what + " reads dynamic shared memory at offset " +
         at + ", which thread " + std::to_string(writer) +
         " wrote through the generic proxy with no fence.proxy.async after the write");
  }
}

// The async proxy writes [p, p + n) (a TMA load landing): no generic write is pending there.
inline void note_async_write(const void* p, size_t n) {
  size_t off = dynamic_offset(p);
  if (off == SIZE_MAX || n == 0) return;
  ProxyShadow& s = proxy_shadow();
  for (size_t g = off / 4; g <= (off + n - 1) / 4 && g < s.granules.size(); ++g) s.granules[g] = 0;
}


// Whether every running thread of the block (of the cluster, in one) last failed a wait
// with no event since; a cluster's members run one at a time, so their state is stable here.
inline bool block_stuck(Worker& w) {
  BlockHopper& h = hopper_of(w);
  for (unsigned i = 0; i < w.nthreads; ++i)
    if (w.fibers[i].wait == Wait::kRun && h.fibers[i].spun != h.progress) return false;
  return true;
}
inline bool all_stuck() {
  Worker& w = *tl_worker;
  if (!w.cluster) return block_stuck(w);
  for (unsigned r = 0; r < w.cluster->size; ++r)
    if (!w.cluster->exited[r] && !block_stuck(*w.cluster->members[r])) return false;
  return true;
}

// Yields until `ready()`; a wait that no running thread can end is a deadlock report.
template <class Ready>
inline void spin_until(Ready&& ready, const std::string& what) {
  for (;;) {
    if (ready()) {
      Untracked quiet;
      my_hopper().spun = 0;
      return;
    }
    Untracked quiet;
    Worker& w = *tl_worker;
    hopper().fibers[w.current].spun = hopper().progress;
    if (all_stuck()) {
      fail("deadlock: " + what + " can never complete (every other thread " +
           (w.cluster ? "of the cluster " : "") + "has exited or waits too)");
    }
    switch_to_scheduler();
  }
}

// ---- mbarrier ----------------------------------------------------------------------------------
// The 8 bytes of an mbarrier hold its state: bits 0-19 the expected arrival count, 20-39 the
// pending arrivals, 40-61 the transaction count (signed), 62 the phase parity; bit 63 set
// means "not initialised" (dynamic shared memory starts as 0xff bytes).
struct MbarState {
  uint32_t expected, pending;
  int32_t tx;
  uint32_t phase;
};
constexpr uint32_t kMbarMaxCount = (1u << 20) - 1;

inline MbarState mbar_load(const uint64_t* bar) {
  require_aligned(bar, 8, "mbarrier");
  uint64_t v = *bar;
  if ((v >> 63) || (v & kMbarMaxCount) == 0) fail("mbarrier used before mbarrier.init");
  int32_t tx = static_cast<int32_t>(static_cast<uint32_t>(v >> 40 & 0x3fffff) << 10) >> 10;
  return {uint32_t(v & kMbarMaxCount), uint32_t(v >> 20 & kMbarMaxCount), tx, uint32_t(v >> 62 & 1)};
}
inline void mbar_store(uint64_t* bar, const MbarState& s) {
  *bar = uint64_t(s.expected) | uint64_t(s.pending) << 20 |
         uint64_t(static_cast<uint32_t>(s.tx) & 0x3fffff) << 40 | uint64_t(s.phase) << 62;
}
inline void* mbar_sync(uint64_t* bar, uint32_t parity) { return reinterpret_cast<char*>(bar) + parity; }

inline void mbar_init(uint64_t* bar, uint32_t count) {
  Untracked quiet;
  if (count == 0 || count > kMbarMaxCount) fail("mbarrier.init count must be 1 to 2^20-1");
  BlockHopper& h = hopper();
  require_aligned(bar, 8, "mbarrier");
  for (auto it = h.loads.begin(); it != h.loads.end();)  // a re-initialised barrier forgets them
    it = it->bar == bar ? h.loads.erase(it) : it + 1;
  mbar_store(bar, {count, count, 0, 0});
  ++h.progress;
}

// Completes the current phase when nothing is pending: pending arrivals and transactions.
inline void mbar_settle(uint64_t* bar, MbarState& s, BlockHopper& owner) {
  if (s.pending == 0 && s.tx == 0) {
    s.phase ^= 1u;
    s.pending = s.expected;
  }
  mbar_store(bar, s);
  ++owner.progress;
}
inline void mbar_settle(uint64_t* bar, MbarState& s) { mbar_settle(bar, s, hopper()); }

// mbarrier.arrive[.expect_tx]: adds `tx` expected bytes, then arrives `count` times.
inline void mbar_arrive(uint64_t* bar, uint32_t count, int32_t tx) {
  Untracked quiet;
  MbarState s = mbar_load(bar);
  hb_release(mbar_sync(bar, s.phase));
  if (count > s.pending)
    fail("mbarrier.arrive: " + std::to_string(count) + " arrivals but only " +
         std::to_string(s.pending) + " pending in this phase");
  s.tx += tx;
  s.pending -= count;
  mbar_settle(bar, s);
}
inline void mbar_expect_tx(uint64_t* bar, int32_t tx) {
  Untracked quiet;
  MbarState s = mbar_load(bar);
  s.tx += tx;
  mbar_settle(bar, s);
}

// Lands every pending TMA load of `bar` (their complete_tx), oldest first.
inline void mbar_land(uint64_t* bar) {
  BlockHopper& h = hopper();
  for (auto it = h.loads.begin(); it != h.loads.end();) {
    if (it->bar != bar) {
      ++it;
      continue;
    }
    std::memcpy(it->dst, it->bytes.data(), it->bytes.size());
    note_async_write(it->dst, it->bytes.size());
    MbarState s = mbar_load(bar);
    s.tx -= static_cast<int32_t>(it->bytes.size());
    it = h.loads.erase(it);
    mbar_settle(bar, s);
  }
}

// mbarrier.try_wait.parity / test_wait.parity: true once the phase of parity `parity` has
// completed, i.e. the current phase has the other parity.
inline bool mbar_test_parity(uint64_t* bar, uint32_t parity) {
  bool done;
  {
    Untracked quiet;
    mbar_land(bar);
    done = mbar_load(bar).phase != (parity & 1u);
  }
  if (done) hb_acquire(mbar_sync(bar, parity & 1u));
  return done;
}
inline void mbar_wait_parity(uint64_t* bar, uint32_t parity) {
  spin_until([&] { return mbar_test_parity(bar, parity); },
             "mbarrier wait for the phase of parity " + std::to_string(parity & 1u));
}

// ---- TMA (cp.async.bulk.tensor, tile mode) ------------------------------------------------------
// A box wholly outside the tensor is refused: the PTX ISA (5.5.3.3, "Out of Boundary Access")
// covers a box that crosses the tensor's boundary (its outside elements zero-filled, the
// whole box counted on the mbarrier), and no primary source says what TMA does with a box
// that lies entirely outside it, so ncdc's kernels issue none.
inline void tma_require_overlap(const EmuTensorMap& t, const int32_t* coords) {
  for (unsigned d = 0; d < t.rank; ++d) {
    int64_t c = coords[d];
    if (c + int64_t(t.box[d]) <= 0 || c >= int64_t(t.dims[d])) {
      std::string at;
      for (unsigned e = 0; e < t.rank; ++e) at += (e ? ", " : "") + std::to_string(coords[e]);
      fail("cp.async.bulk.tensor: the box at (" + at + ") lies wholly outside the tensor in dimension " +
           std::to_string(d) + " (" + std::to_string(t.box[d]) + " from " + std::to_string(c) + ", size " +
           std::to_string(t.dims[d]) + "); what TMA does with such a box is not specified");
    }
  }
}

// Visits the box's elements in shared-memory order: f(smem offset before swizzling, global
// address or null when out of bounds).
template <class F>
inline void tma_box(const EmuTensorMap& t, const int32_t* coords, F&& f) {
  if (t.interleave != 0) fail("cp.async.bulk.tensor: interleaved tensor maps are not emulated");
  for (unsigned d = 0; d < t.rank; ++d)
    if (t.elem_strides[d] != 1) fail("cp.async.bulk.tensor: element strides other than 1 are not emulated");
  tma_require_overlap(t, coords);
  unsigned char* base = tensor_base(t);
  size_t total = 1;
  for (unsigned d = 0; d < t.rank; ++d) total *= t.box[d];
  for (size_t e = 0; e < total; ++e) {
    size_t rest = e;
    bool inside = true;
    uint64_t off = 0;
    for (unsigned d = 0; d < t.rank; ++d) {
      int64_t c = int64_t(coords[d]) + int64_t(rest % t.box[d]);
      rest /= t.box[d];
      if (c < 0 || c >= int64_t(t.dims[d])) inside = false;
      off += uint64_t(c) * (d == 0 ? t.elem_bytes : t.strides[d - 1]);
    }
    f(e * t.elem_bytes, inside ? base + off : nullptr);
  }
}

inline size_t tma_box_bytes(const EmuTensorMap& t) {
  size_t total = t.elem_bytes;
  for (unsigned d = 0; d < t.rank; ++d) total *= t.box[d];
  return total;
}

inline void tma_check_smem(const void* smem, const EmuTensorMap& t, const char* what) {
  require_aligned(smem, t.swizzle ? 1024 : 128, what);
}

// The box at `coords` as it will land at `dst` (swizzled), out-of-bounds elements zero.
inline std::vector<unsigned char> tma_image(const EmuTensorMap& t, const unsigned char* dst,
                                            const int32_t* coords) {
  if (t.oob_fill != 0) fail("cp.async.bulk.tensor: the NaN out-of-bounds fill is not emulated");
  std::vector<unsigned char> bytes(tma_box_bytes(t), 0);
  unsigned bits = tma_swizzle_bits(t.swizzle);
  uintptr_t origin = reinterpret_cast<uintptr_t>(dst);
  size_t read = 0;
  tma_box(t, coords, [&](size_t off, const unsigned char* src) {
    if (!src) return;
    uintptr_t at = swizzle_address(origin + off, bits) - origin;
    std::memcpy(bytes.data() + at, src, t.elem_bytes);
    read += t.elem_bytes;
  });
  count_read(read);
  return bytes;
}

// Queues a box to land at `dst` of the block `owner` runs, completing on its mbarrier `bar`.
inline void tma_queue(Worker& owner, unsigned char* dst, uint64_t* bar, std::vector<unsigned char> bytes) {
#ifdef NCDC_TSAN
  __tsan_write_range(dst, bytes.size());  // it may land any time before the phase completes
  {
    Untracked quiet;
    hb_release(mbar_sync(bar, mbar_load(bar).phase));
  }
#endif
  Untracked quiet;
  mbar_load(bar);  // the barrier must exist now
  BlockHopper& h = hopper_of(owner);
  h.loads.push_back(TmaLoad{bar, dst, std::move(bytes)});
  ++h.progress;
}

// cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes: the box at
// `coords` (innermost first) into `smem`, out-of-bounds elements zero; completes its bytes on
// `bar` when it lands.
inline void tma_load(void* smem, const TensorMap* map, uint64_t* bar, const int32_t* coords) {
  const EmuTensorMap& t = tensor_map(map);
  tma_check_smem(smem, t, "cp.async.bulk.tensor shared destination");
  auto* dst = static_cast<unsigned char*>(smem);
  tma_queue(*tl_worker, dst, bar, tma_image(t, dst, coords));
}

// cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group: the box in `smem` to global
// memory at `coords`, skipping out-of-bounds elements. The emulator reads shared memory at the
// issue and writes global memory at cp.async.bulk.wait_group.
inline void tma_store(const TensorMap* map, const void* smem, const int32_t* coords) {
  const EmuTensorMap& t = tensor_map(map);
  tma_check_smem(smem, t, "cp.async.bulk.tensor shared source");
  check_async_read(smem, tma_box_bytes(t), "a TMA store (cp.async.bulk.tensor) from shared memory");
  const auto* src = static_cast<const unsigned char*>(smem);
  unsigned bits = tma_swizzle_bits(t.swizzle);
  uintptr_t origin = reinterpret_cast<uintptr_t>(src);
  std::vector<unsigned char> plan;  // (global address, bytes) records
  tma_box(t, coords, [&](size_t off, const unsigned char* dst) {
    if (!dst) return;
    uintptr_t at = swizzle_address(origin + off, bits) - origin;
    auto addr = reinterpret_cast<uintptr_t>(dst);
    const unsigned char* a = reinterpret_cast<const unsigned char*>(&addr);
    plan.insert(plan.end(), a, a + sizeof addr);
    plan.insert(plan.end(), src + at, src + at + t.elem_bytes);
  });
  Untracked quiet;
  my_hopper().stores.emplace_back(std::move(plan), int(t.elem_bytes));
}
inline void tma_store_commit() {
  Untracked quiet;
  FiberHopper& f = my_hopper();
  f.store_group_ends.push_back(f.stores.size());
}
// cp.async.bulk.wait_group[.read] n: performs the oldest store groups until n are pending.
inline void tma_store_wait(unsigned n) {
  FiberHopper& f = my_hopper();
  size_t groups = f.store_group_ends.size();
  if (groups <= n) return;
  size_t end = f.store_group_ends[groups - n - 1];
  size_t written = 0;
  for (size_t i = 0; i < end; ++i) {
    const auto& [plan, size] = f.stores[i];
    for (size_t p = 0; p < plan.size(); p += sizeof(uintptr_t) + size_t(size)) {
      uintptr_t addr;
      std::memcpy(&addr, plan.data() + p, sizeof addr);
      std::memcpy(reinterpret_cast<void*>(addr), plan.data() + p + sizeof addr, size_t(size));
      written += size_t(size);
    }
  }
  count_write(written);
  Untracked quiet;
  f.stores.erase(f.stores.begin(), f.stores.begin() + long(end));
  f.store_group_ends.erase(f.store_group_ends.begin(), f.store_group_ends.begin() + long(groups - n));
  for (auto& e : f.store_group_ends) e -= end;
}

// ---- named barriers (bar.sync / bar.arrive with an id and a thread count) --------------------
inline NamedBarrier& named_barrier(unsigned id, unsigned count) {
  if (id == 0 || id > 15) fail("named barrier id must be 1 to 15 (0 is __syncthreads)");
  if (count == 0 || count % 32 || count > tl_worker->nthreads)
    fail("named barrier thread count must be a multiple of 32, at most the block's threads");
  NamedBarrier& b = hopper().bars[id];
  if (b.arrived == 0) b.expected = count;
  else if (b.expected != count)
    fail("named barrier " + std::to_string(id) + " used with thread counts " +
         std::to_string(b.expected) + " and " + std::to_string(count));
  return b;
}
inline unsigned named_arrive(unsigned id, unsigned count) {
  Untracked quiet;
  NamedBarrier& b = named_barrier(id, count);
  hb_release(&b.sync[b.gen & 1u]);
  unsigned gen = b.gen;
  if (++b.arrived == b.expected) {
    b.arrived = 0;
    ++b.gen;
  }
  ++hopper().progress;
  return gen;
}
inline void named_sync(unsigned id, unsigned count) {
  unsigned gen = named_arrive(id, count);
  NamedBarrier* b = &hopper().bars[id];
  spin_until([&] { Untracked quiet; return b->gen != gen; },
             "bar.sync " + std::to_string(id) + ", " + std::to_string(count));
  hb_acquire(&b->sync[gen & 1u]);
}

// ---- setmaxnreg ---------------------------------------------------------------------------------
// PTX ISA, setmaxnreg: the block owns a pool of registers, its threads times the per-thread
// count it was launched with (ptxas's count, Launch::entry_regs; without one, the most
// __launch_bounds__(threads, 1) allows), and each warpgroup starts holding the entry count.
// .dec returns what it drops to the pool; .inc waits until the pool holds what it adds,
// forever when the budgets add up to more than the pool (here a deadlock report). The count
// is per thread, a multiple of 8 in [24, 256]; .dec may not raise a warpgroup's count nor
// .inc lower it. Every thread of the warpgroup executes it: the first to pass moves the
// warpgroup's count, the others find it moved.
inline unsigned entry_registers() {
  Worker& w = *tl_worker;
  if (w.launch->entry_regs) return w.launch->entry_regs;
  return std::min(255u, 65536u / w.nthreads) / 8 * 8;
}

inline void setmaxnreg(unsigned regs, bool inc) {
  Untracked quiet;
  const char* op = inc ? "setmaxnreg.inc" : "setmaxnreg.dec";
  if (regs < 24 || regs > 256 || regs % 8)
    fail(std::string(op) + " count must be a multiple of 8 in [24, 256], got " + std::to_string(regs));
  Worker& w = *tl_worker;
  if (w.nthreads % 128) fail(std::string(op) + " in a block of " + std::to_string(w.nthreads) + " threads, not whole warpgroups");
  BlockHopper& h = hopper();
  unsigned wg = linear_tid() / 128, groups = w.nthreads / 128, entry = entry_registers();
  if (groups > 32) fail("setmaxnreg: too many warpgroups");
  auto held = [&](unsigned g) { return h.regs[g] ? h.regs[g] : entry; };
  if (inc ? regs < held(wg) : regs > held(wg))
    fail(std::string(op) + " " + std::to_string(regs) + " from " + std::to_string(held(wg)) +
         " registers a thread (.inc may not lower the count, nor .dec raise it)");
  auto free_registers = [&] {
    unsigned used = 0;
    for (unsigned g = 0; g < groups; ++g) used += 128 * held(g);
    return w.nthreads * entry - used;
  };
  std::string what = std::string(op) + " " + std::to_string(regs) + " of warpgroup " + std::to_string(wg) +
                     " (the block's pool is " + std::to_string(w.nthreads) + " threads x " +
                     std::to_string(entry) + " registers at entry, " + std::to_string(w.nthreads * entry) + ")";
  spin_until([&] { return held(wg) >= regs || free_registers() >= 128 * (regs - held(wg)); }, what);
  if (h.regs[wg] != regs) {
    h.regs[wg] = regs;
    ++h.progress;  // a .dec may let a waiting .inc go on
  }
}

// ---- wgmma --------------------------------------------------------------------------------------
// The shared-memory matrix descriptor (PTX ISA 9.7.15.5.1): bits 0-13 start address >> 4,
// 16-29 leading-dimension byte offset >> 4, 32-45 stride-dimension byte offset >> 4, 49-51
// base offset, 62-63 swizzle (0 none, 1 128B, 2 64B, 3 32B).
struct Descriptor {
  const unsigned char* start;
  uint32_t lbo, sbo;
  unsigned swizzle_bytes;  // 0, 32, 64, 128
};

inline Descriptor decode_descriptor(uint64_t desc) {
  Worker& w = *tl_worker;
  // the block's dynamic shared memory starts a 2^18-aligned window (ncdc_emu.h): the field
  // is the offset in it
  uintptr_t field = uintptr_t(desc & 0x3fff) << 4;
  auto lo = reinterpret_cast<uintptr_t>(w.dynamic_smem), hi = lo + w.launch->dynamic_smem;
  uintptr_t at = lo + field;
  if (!w.dynamic_smem || at >= hi)
    fail("wgmma descriptor start address is not in the block's dynamic shared memory");
  if (desc >> 49 & 7) fail("wgmma descriptor base offset other than 0 is not emulated");
  if (desc >> 14 & 3)  // a start address advanced out of its 14-bit field carries into them
    fail("wgmma descriptor with reserved bits 14-15 set (a start address past the shared window)");
  static constexpr unsigned kSwizzle[4] = {0, 128, 64, 32};
  return {reinterpret_cast<const unsigned char*>(at), uint32_t(desc >> 16 & 0x3fff) << 4,
          uint32_t(desc >> 32 & 0x3fff) << 4, kSwizzle[desc >> 62 & 3]};
}

// The address of element (mn, k) of a descriptor's matrix, by the canonical layouts of the
// PTX ISA ("Shared Memory Matrix Layout"), with CuTe's reading of LBO and SBO:
//   K-major, no swizzle: 8x16-byte core matrices; k chunks at LBO, 8-row groups at SBO;
//   K-major, swizzle W:  rows of W bytes, 8-row groups at SBO (LBO unused);
//   MN-major, no swizzle: 16-byte mn chunks at SBO, 8-k groups at LBO, k rows 16 bytes apart;
//   MN-major, swizzle W:  W-byte mn blocks at LBO, k rows W bytes apart, 8-k groups at SBO.
inline const unsigned char* operand_address(const Descriptor& d, int mn, int k, int esize, bool mn_major) {
  uintptr_t off;
  if (!mn_major) {
    uint32_t kb = uint32_t(k * esize);
    if (d.swizzle_bytes == 0) off = (mn % 8) * 16 + (mn / 8) * d.sbo + kb % 16 + (kb / 16) * d.lbo;
    else off = (mn % 8) * d.swizzle_bytes + (mn / 8) * d.sbo + kb;
  } else {
    uint32_t mb = uint32_t(mn * esize);
    if (d.swizzle_bytes == 0) off = mb % 16 + (mb / 16) * d.sbo + (k % 8) * 16 + (k / 8) * d.lbo;
    else off = mb % d.swizzle_bytes + (mb / d.swizzle_bytes) * d.lbo + (k % 8) * d.swizzle_bytes + (k / 8) * d.sbo;
  }
  uintptr_t a = reinterpret_cast<uintptr_t>(d.start) + off;
  unsigned bits = d.swizzle_bytes == 128 ? 3 : d.swizzle_bytes == 64 ? 2 : d.swizzle_bytes == 32 ? 1 : 0;
  return reinterpret_cast<const unsigned char*>(swizzle_address(a, bits));
}

inline float wgmma_elem(const unsigned char* p, int elem) {
  switch (elem) {
    case 0: { uint16_t b; std::memcpy(&b, p, 2); return bits_float(uint32_t(b) << 16); }
    case 1: { uint16_t b; std::memcpy(&b, p, 2); return decode(b, kHalf); }
    case 2: return decode(*p, kE4m3);
    case 3: return decode(*p, kE5m2);
    default: return float(int8_t(*p));  // s8: exact
  }
}

// One output of one s8 wgmma: the k products and C summed exactly in 32-bit two's
// complement (the .s32 accumulator wraps; no .satfinite), held as the bits of `c`.
inline float integer_dot(const float* a, const float* b, int k, float c, bool keep_c) {
  int32_t cv;
  std::memcpy(&cv, &c, 4);
  int64_t sum = keep_c ? cv : 0;
  for (int i = 0; i < k; ++i) sum += int64_t(a[i]) * int64_t(b[i]);
  const int32_t wrapped = int32_t(uint32_t(uint64_t(sum)));
  float out;
  std::memcpy(&out, &wrapped, 4);
  return out;
}

// One output of one wgmma as Hopper's tensor cores compute it: the k products (k = 16 for
// bf16 and fp16, 32 for fp8) and the accumulator C summed in one step. Each product keeps the
// exponent sum of its operands (not renormalised; an operand below its format's smallest
// normal exponent counts at that exponent); every term, C included, is cut toward zero below
// 2^(Emax - F), Emax the largest exponent among the nonzero terms; the cut terms add exactly;
// the sum is cut toward zero to 24 significant bits (an fp32) for bf16 and fp16, F = 25, and to
// 14 (e8m13: the low 10 bits of the fp32 zero) for fp8, F = 13. This is the bit-accurate model
// of H100/H200 tensor cores fitted to measurements by Khattak and Mikaitis, "Accurate Models of
// NVIDIA Tensor Cores", arXiv:2512.07004 (their models/H100TC.m: fma 32 for fp8, 13 kept
// fraction bits, truncation, no sticky bit), and the same in Xie et al.'s MMA-Sim
// (arXiv:2511.10909); DeepSeek-V3 (arXiv:2412.19437, sec. 3.3.2) measured the fp8 loss on H800.
// Seen on an H200 (2026-12-04): attention_fp8 at 2x16x512x512 was 2.2% off the float64
// reference, as this model gives, where a plain fp32 sum gives 0.04%.
inline float tensor_core_dot(const float* a, const float* b, int k, float c, int elem) {
  static const int kMinExponent[4] = {-126, -14, -6, -14};  // bf16, fp16, e4m3, e5m2
  const bool fp8 = elem >= 2;
  const int fraction_bits = fp8 ? 13 : 25, kept_bits = fp8 ? 14 : 24;
  double terms[33];
  int exps[33], n = 0, emax = INT_MIN;
  bool special = !std::isfinite(c);
  for (int i = 0; i < k; ++i) special |= !std::isfinite(a[i]) || !std::isfinite(b[i]);
  if (special) {  // NaN and inf as IEEE arithmetic gives them (inf - inf and inf * 0: NaN)
    double sum = c;
    for (int i = 0; i < k; ++i) sum += double(a[i]) * double(b[i]);
    return float(sum);
  }
  auto exponent = [&](float x) { return std::max(std::ilogb(x), kMinExponent[elem]); };
  for (int i = 0; i < k; ++i) {
    double p = double(a[i]) * double(b[i]);  // exact: 8- or 11-bit significands
    if (p == 0.0) continue;
    terms[n] = p;
    exps[n] = exponent(a[i]) + exponent(b[i]);
    emax = std::max(emax, exps[n++]);
  }
  if (c != 0.0f) {
    terms[n] = c;
    exps[n] = std::max(std::ilogb(c), -126);
    emax = std::max(emax, exps[n++]);
  }
  if (n == 0) return 0.0f;
  if (!fp8) emax = std::max(emax, -133);
  double sum = 0.0;  // whole multiples of 2^(emax - F): exact in a double
  for (int i = 0; i < n; ++i) sum += std::trunc(std::ldexp(terms[i], fraction_bits - emax));
  double v = std::ldexp(sum, emax - fraction_bits);
  if (v == 0.0) return 0.0f;
  int e = std::ilogb(v);
  double cut = std::ldexp(std::trunc(std::ldexp(v, kept_bits - 1 - e)), e - (kept_bits - 1));
  return float(cut);
}

// One thread's share of an m64nNkK wgmma: its accumulators, by the D fragment layout of
// "Matrix Fragments for wgmma .m64nNk16" (and k32): with w = warp of the warpgroup, g = lane/4,
// t = lane%4, element i is row 16w + g + 8*((i/2)%2), column 8*(i/4) + 2t + i%2.
// A from registers: element (row 16w + g + 8h, column k) is the half k % 2 of register
// h + 2 * (k / 8) of lane 4g + (k % 8) / 2 (PTX ISA 9.7.15.5.1, the m64nNk16 A fragment);
// for 8-bit types (k32) the byte k % 4 of register h + 2 * (k / 16) of lane 4g + (k % 16) / 4.
// `probe`: the race sanitizer's read at the issue, which needs only B (A reads as zeros).
inline void wgmma_perform(const WgmmaOp& op, unsigned tid_in_group, bool probe = false) {
  Descriptor db = decode_descriptor(op.desc_b);
  int esize = op.elem >= 2 ? 1 : 2;
  unsigned w = tid_in_group / 32, lane = tid_in_group % 32, g = lane / 4, t = lane % 4;
  float a[2][32] = {};
  if (op.a_regs && !probe) {
    BlockHopper& hb = hopper();
    auto key = std::make_pair(linear_tid() / 128, op.a_seq);
    spin_until([&] { Untracked quiet; return hb.fragments[key].issued == 128; },
               "wgmma.wait_group for a register-A wgmma not issued by the whole warpgroup");
    Untracked quiet;
    RegFragments& f = hb.fragments[key];
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < op.k; ++k) {
        if (esize == 1) {  // k32: byte k % 4 of register h + 2 (k / 16) of lane 4g + (k % 16) / 4
          uint32_t r = f.regs[(32 * w + 4 * g + (k % 16) / 4) * 4 + h + 2 * (k / 16)];
          const unsigned char b1 = (unsigned char)(r >> (8 * (k % 4)));
          a[h][k] = wgmma_elem(&b1, op.elem);
          continue;
        }
        uint32_t r = f.regs[(32 * w + 4 * g + (k % 8) / 2) * 4 + h + 2 * (k / 8)];
        uint16_t bits = uint16_t(k % 2 ? r >> 16 : r & 0xffff);
        unsigned char b2[2];
        std::memcpy(b2, &bits, 2);
        a[h][k] = wgmma_elem(b2, op.elem);
      }
    if (++f.performed == 128) hb.fragments.erase(key);
  } else if (!op.a_regs) {
    Descriptor da = decode_descriptor(op.desc_a);
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < op.k; ++k) {
        float v = wgmma_elem(operand_address(da, int(16 * w + g + 8 * h), k, esize, op.trans_a), op.elem);
        a[h][k] = op.neg_a ? -v : v;
      }
  }
  float b[32];
  for (int i = 0; i < op.n / 2; ++i) {
    int h = (i / 2) % 2, col = 8 * (i / 4) + 2 * int(t) + i % 2;
    for (int k = 0; k < op.k; ++k) {
      float v = wgmma_elem(operand_address(db, col, k, esize, op.trans_b), op.elem);
      b[k] = op.neg_b ? -v : v;
    }
    op.d[i] = op.elem == 4 ? integer_dot(a[h], b, op.k, op.d[i], op.scale_d != 0)
                           : tensor_core_dot(a[h], b, op.k, op.scale_d ? op.d[i] : 0.0f, op.elem);
  }
}

inline void wgmma_fence() {
  Untracked quiet;
  my_hopper().fenced = true;
}

// The shared-memory operands of a wgmma are read by the async proxy: each byte they cover
// must have had its generic writes fenced (check_async_read); once per warpgroup's issue.
inline void check_wgmma_operands(const WgmmaOp& op) {
  int esize = op.elem >= 2 ? 1 : 2;
  // K-major: 16 contiguous bytes of k per row (a swizzle moves whole 16-byte chunks);
  // MN-major: every element
  auto check = [&](uint64_t desc, int rows, bool mn_major, const char* what) {
    Descriptor d = decode_descriptor(desc);
    for (int mn = 0; mn < rows; ++mn)
      for (int k = 0; k < op.k; k += mn_major ? 1 : 16 / esize)
        check_async_read(operand_address(d, mn, k, esize, mn_major), mn_major ? esize : 16, what);
  };
  if (!op.a_regs) check(op.desc_a, 64, op.trans_a, "a wgmma (its A descriptor)");
  check(op.desc_b, op.n, op.trans_b, "a wgmma (its B descriptor)");
}

// wgmma.mma_async: queued; shared memory is read and `d` written at the retiring wait_group.
inline void wgmma_issue(const WgmmaOp& op) {
  if (tl_worker->nthreads % 128)
    fail("wgmma.mma_async needs whole warpgroups: the block has " + std::to_string(tl_worker->nthreads) + " threads");
  {
    Untracked quiet;
    if (!my_hopper().fenced)
      fail("wgmma.mma_async without a wgmma.fence before it (since the thread last waited)");
  }
  if (linear_tid() % 128 == 0) check_wgmma_operands(op);
#ifdef NCDC_TSAN
  {
    WgmmaOp probe = op;  // reads the operands now: the instruction may read them any time
    std::vector<float> scratch(size_t(op.n / 2), 0.0f);
    probe.d = scratch.data();
    wgmma_perform(probe, linear_tid() % 128, true);
  }
#endif
  Untracked quiet;
  my_hopper().ops.push_back(op);
}
// wgmma.mma_async with A from registers: the thread's four A registers are read now, at the
// issue (the hardware may read them any time before the wait; a kernel must not change them
// before wgmma.wait_group either, which the emulator does not check).
inline void wgmma_issue_rs(WgmmaOp op, const unsigned* a) {
  {
    Untracked quiet;
    FiberHopper& f = my_hopper();
    BlockHopper& h = hopper();
    op.a_regs = 1;
    op.a_seq = f.rs_issued++;
    RegFragments& frag = h.fragments[std::make_pair(linear_tid() / 128, op.a_seq)];
    for (int i = 0; i < 4; ++i) frag.regs[(linear_tid() % 128) * 4 + i] = a[i];
    ++frag.issued;
    ++h.progress;
  }
  wgmma_issue(op);
}
inline void wgmma_commit() {
  Untracked quiet;
  FiberHopper& f = my_hopper();
  f.group_ends.push_back(f.ops.size());
}
// wgmma.wait_group n: retires the oldest groups until at most n are pending.
inline void wgmma_wait(unsigned n) {
  FiberHopper& f = my_hopper();
  size_t groups = f.group_ends.size();
  if (groups > n) {
    size_t end = f.group_ends[groups - n - 1];
    for (size_t i = 0; i < end; ++i) wgmma_perform(f.ops[i], linear_tid() % 128);
    Untracked quiet;
    f.ops.erase(f.ops.begin(), f.ops.begin() + long(end));
    f.group_ends.erase(f.group_ends.begin(), f.group_ends.begin() + long(groups - n));
    for (auto& e : f.group_ends) e -= end;
  }
  Untracked quiet;
  f.fenced = false;
}

// ---- thread-block clusters (PTX ISA 9.7.13.3 barrier.cluster, 9.7.9.21 mapa) -----------------
// The blocks of a cluster run together (ncdc_emu.h, "thread-block clusters"). A shared-memory
// address maps to the same offset in a peer block: dynamic shared memory to the peer's, and
// static shared memory (`thread_local` per OS thread, one per block of a cluster) to the
// peer's copy at the same offset from the module's thread-local block.

inline unsigned cluster_rank() { return tl_worker->rank; }
inline unsigned cluster_size() { return tl_worker->cluster ? tl_worker->cluster->size : 1; }

inline Worker& cluster_peer(unsigned rank, const char* what) {
  Worker& w = *tl_worker;
  if (rank >= cluster_size())
    fail(std::string(what) + ": CTA " + std::to_string(rank) + " is outside the cluster of " +
         std::to_string(cluster_size()) + " (declare the kernel's cluster with __cluster_dims__ and "
         "NCDC_CLUSTER_DIMS)");
  if (!w.cluster) return w;
  Untracked quiet;
  if (w.cluster->exited[rank] && rank != w.rank)
    fail(std::string(what) + ": CTA " + std::to_string(rank) +
         " of the cluster has exited (a barrier.cluster before exit keeps its shared memory alive)");
  return *w.cluster->members[rank];
}

// mapa.shared::cluster: the address in CTA `rank` of this block's shared address `p`.
inline void* map_shared(const void* p, unsigned rank, const char* what) {
  Worker& w = *tl_worker;
  Worker& peer = cluster_peer(rank, what);
  auto a = reinterpret_cast<uintptr_t>(p);
  size_t off = dynamic_offset(p);
  if (off != SIZE_MAX) return peer.dynamic_smem + off;
  return reinterpret_cast<void*>(a - reinterpret_cast<uintptr_t>(w.tls_anchor) +
                                 reinterpret_cast<uintptr_t>(peer.tls_anchor));
}

// mbarrier.arrive.shared::cluster.b64 _, [mapa(bar, rank)]: one arrival on CTA `rank`'s barrier
// at the offset of `bar`, a release at CTA scope (the ISA's default `.release.cta`). Its
// memory-ordering effect on a peer's threads is the one the emulated instructions can
// observe: a peer reaches this block's shared memory only by its multicast (the emulator has
// no ld.shared::cluster), so what such an arrive orders is this thread's reads before the
// peer's refill after its wait, and under ThreadSanitizer that edge is the release below. A
// kernel that published its writes to a peer would need `.release.cluster`; none does.
inline void mbar_arrive_cluster(uint64_t* bar, unsigned rank) {
  Untracked quiet;
  Worker& peer = cluster_peer(rank, "mbarrier.arrive.shared::cluster");
  auto* remote = static_cast<uint64_t*>(map_shared(bar, rank, "mbarrier.arrive.shared::cluster"));
  MbarState s = mbar_load(remote);
  hb_release(mbar_sync(remote, s.phase));
  if (s.pending == 0) fail("mbarrier.arrive.shared::cluster: no arrival pending in this phase");
  s.pending -= 1;
  mbar_settle(remote, s, hopper_of(peer));
}

// The .multicast::cluster form: the box lands at the offset of `smem` in every CTA of `mask`
// and completes its bytes on each one's mbarrier at the offset of `bar`.
inline void tma_load_multicast(void* smem, const TensorMap* map, uint64_t* bar, const int32_t* coords,
                               uint16_t mask) {
  const EmuTensorMap& t = tensor_map(map);
  tma_check_smem(smem, t, "cp.async.bulk.tensor shared destination");
  if (mask == 0) fail("cp.async.bulk.tensor.multicast::cluster with an empty CTA mask");
  auto* dst = static_cast<unsigned char*>(smem);
  std::vector<unsigned char> bytes = tma_image(t, dst, coords);
  for (unsigned r = 0; r < 16; ++r) {
    if (!(mask >> r & 1u)) continue;
    const char* what = "cp.async.bulk.tensor.multicast::cluster";
    Worker& peer = cluster_peer(r, what);
    tma_queue(peer, static_cast<unsigned char*>(map_shared(dst, r, what)),
              static_cast<uint64_t*>(map_shared(bar, r, what)), bytes);
  }
}

// barrier.cluster.arrive.release / barrier.cluster.wait.acquire: every thread of the cluster
// arrives; a wait returns once all have arrived in the generation of this thread's arrival.
inline void cluster_arrive() {
  Untracked quiet;
  FiberHopper& f = my_hopper();
  if (f.cluster_pending) fail("barrier.cluster.arrive twice without a barrier.cluster.wait");
  f.cluster_pending = true;
  Worker& w = *tl_worker;
  if (!w.cluster) {
    f.cluster_gen = 0;
    return;
  }
  Cluster& c = *w.cluster;
  f.cluster_gen = c.bar_gen;
  hb_release(&c.bar_sync[c.bar_gen & 1]);
  if (++c.bar_arrived == c.size * w.nthreads) {
    c.bar_arrived = 0;
    ++c.bar_gen;
    for (unsigned r = 0; r < c.size; ++r) ++hopper_of(*c.members[r]).progress;
  }
}
inline void cluster_wait() {
  uint64_t gen;
  {
    Untracked quiet;
    FiberHopper& f = my_hopper();
    if (!f.cluster_pending) fail("barrier.cluster.wait without a barrier.cluster.arrive");
    f.cluster_pending = false;
    gen = f.cluster_gen;
  }
  Worker& w = *tl_worker;
  if (!w.cluster) return;
  Cluster& c = *w.cluster;
  spin_until([&] { Untracked quiet; return c.bar_gen != gen; }, "barrier.cluster.wait");
  hb_acquire(&c.bar_sync[gen & 1]);
}

}  // namespace emu
}  // namespace ncdc

#endif  // NCDC_EMU_HOPPER_H
