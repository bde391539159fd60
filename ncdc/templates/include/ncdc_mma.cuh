// Tensor-core fragments: ldmatrix and mma.sync with the per-lane layouts of the PTX ISA, on
// GPU (inline PTX) and CPU (warp collectives computing in fp32).
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k*"), with g = lane / 4 and
// t = lane % 4, and p the elements per 32-bit register (2 for b16, 4 for fp8, 1 for tf32):
//   A (16 x K, row major): register i holds row g + 8*(i%2), columns t*p + (K/2)*(i/2) + 0..p-1
//   B (K x 8, column):     register j holds rows t*p + (K/2)*j + 0..p-1, column g
//   C, D (16 x 8, fp32):   element i is row g + 8*(i/2), column 2*t + i%2
// Lower elements sit in the lower bits of a register. int8 (m16n8k32 .s8.s8.s32, sm_80 on)
// has the fp8 layouts, p = 4, with int32 C and D.
#pragma once
#ifndef NCDC_MMA_CUH
#define NCDC_MMA_CUH

namespace ncdc {

#ifndef NCDC_GPU
namespace emu {

// ldmatrix .m8n8 .b16 with `nmat` matrices: lane l supplies the row address for row l%8 of
// matrix l/8; lane l receives for matrix j the word of row l/4 holding columns 2*(l%4), +1
// (trans: column l/4, rows 2*(l%4) and +1).
template <int NMAT, bool TRANS>
inline void ldmatrix(uint32_t* regs, const void* row_ptr) {
  if (lane_id() < 8 * NMAT) {
    check_aligned(row_ptr, 16, "ldmatrix row address");
    count_ldmatrix(row_ptr);
  }
  uint64_t addr = reinterpret_cast<uint64_t>(row_ptr);
  unsigned parity = warp_collective(0xffffffffu, &addr, sizeof addr, [](WarpSlot* s) {
    const uint16_t* rows[32];
    for (int l = 0; l < 32; ++l) {
      uint64_t a;
      std::memcpy(&a, s[l].in, sizeof a);
      rows[l] = reinterpret_cast<const uint16_t*>(a);
    }
    for (int l = 0; l < 32; ++l) {
      uint32_t out[4];
      for (int j = 0; j < NMAT; ++j) {
        const uint16_t* const* m = rows + 8 * j;
        uint32_t lo, hi;
        if (TRANS) {
          lo = m[2 * (l % 4)][l / 4];
          hi = m[2 * (l % 4) + 1][l / 4];
        } else {
          lo = m[l / 4][2 * (l % 4)];
          hi = m[l / 4][2 * (l % 4) + 1];
        }
        out[j] = lo | hi << 16;
      }
      std::memcpy(s[l].out, out, sizeof(uint32_t) * NMAT);
    }
  });
  std::memcpy(regs, my_warp().slots[parity][lane_id()].out, sizeof(uint32_t) * NMAT);
}

enum class Elem { kBf16, kF16, kE4m3, kE5m2, kTf32, kS8 };

// What the emulated mma computes in: float, or for int8 a 64-bit integer wrapped to int32 at
// the end (the PTX ISA's .s32 accumulation is exact modulo 2^32 without .satfinite).
template <Elem E>
using MmaNum = std::conditional_t<E == Elem::kS8, long long, float>;

template <Elem E>
inline MmaNum<E> decode_elem(uint32_t reg, int e) {
  if constexpr (E == Elem::kS8) return (long long)(int8_t)(uint8_t)(reg >> (8 * e) & 0xffu);
  else if constexpr (E == Elem::kBf16) return bits_float((reg >> (16 * e) & 0xffffu) << 16);
  else if constexpr (E == Elem::kF16) return decode(reg >> (16 * e) & 0xffffu, kHalf);
  else if constexpr (E == Elem::kE4m3) return decode(reg >> (8 * e) & 0xffu, kE4m3);
  else if constexpr (E == Elem::kE5m2) return decode(reg >> (8 * e) & 0xffu, kE5m2);
  else return bits_float(reg & 0xffffe000u);  // tf32 keeps the top 19 bits
}

template <class Acc>
struct MmaIn {
  uint32_t a[4];
  uint32_t b[2];
  Acc c[4];
};

// D = A * B + C for one m16n8kK tile: products are exact in fp32, sums in fp32 over k; for
// int8, exact integer sums wrapped to int32.
template <Elem E, int K, class Acc>
inline void mma_sync(Acc* d, const uint32_t* a, const uint32_t* b, const Acc* c) {
  using Num = MmaNum<E>;
  constexpr int P = (E == Elem::kE4m3 || E == Elem::kE5m2 || E == Elem::kS8) ? 4 : (E == Elem::kTf32 ? 1 : 2);
  constexpr int NA = 16 * K / (32 * P), NB = 8 * K / (32 * P);
  using In = MmaIn<Acc>;
  In in{};
  std::memcpy(in.a, a, sizeof(uint32_t) * NA);
  std::memcpy(in.b, b, sizeof(uint32_t) * NB);
  std::memcpy(in.c, c, sizeof in.c);
  static_assert(sizeof(In) <= sizeof(WarpSlot::in), "mma fragments exceed the warp slot");
  unsigned parity = warp_collective(0xffffffffu, &in, sizeof in, [](WarpSlot* s) {
    Num A[16][K], B[K][8];
    Acc C[16][8];
    for (int l = 0; l < 32; ++l) {
      In x;
      std::memcpy(&x, s[l].in, sizeof x);
      int g = l / 4, t = l % 4;
      for (int i = 0; i < NA; ++i)
        for (int e = 0; e < P; ++e) A[g + 8 * (i % 2)][t * P + (K / 2) * (i / 2) + e] = decode_elem<E>(x.a[i], e);
      for (int j = 0; j < NB; ++j)
        for (int e = 0; e < P; ++e) B[t * P + (K / 2) * j + e][g] = decode_elem<E>(x.b[j], e);
      for (int i = 0; i < 4; ++i) C[g + 8 * (i / 2)][2 * t + i % 2] = x.c[i];
    }
    for (int l = 0; l < 32; ++l) {
      int g = l / 4, t = l % 4;
      Acc out[4];
      for (int i = 0; i < 4; ++i) {
        int r = g + 8 * (i / 2), col = 2 * t + i % 2;
        Num acc = 0;
        for (int k = 0; k < K; ++k) acc += A[r][k] * B[k][col];
        if constexpr (E == Elem::kS8) out[i] = Acc(uint32_t(uint64_t(acc + C[r][col])));
        else out[i] = acc + C[r][col];
      }
      std::memcpy(s[l].out, out, sizeof out);
    }
  });
  std::memcpy(d, my_warp().slots[parity][lane_id()].out, 4 * sizeof(Acc));
}

}  // namespace emu
#endif

#ifdef NCDC_GPU
#define NCDC_LDMATRIX(N, TRANS, ...) \
  asm volatile("ldmatrix.sync.aligned.m8n8.x" #N TRANS ".shared.b16 " __VA_ARGS__)
#endif

// ---- ldmatrix: warp-collective loads of 8x8 b16 matrices from shared memory ---------------
NCDC_DEVICE void ldmatrix_x1(uint32_t* r, const void* p) {
#ifdef NCDC_GPU
  unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  NCDC_LDMATRIX(1, "", "{%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
#else
  emu::ldmatrix<1, false>(r, p);
#endif
}
NCDC_DEVICE void ldmatrix_x2(uint32_t* r, const void* p) {
#ifdef NCDC_GPU
  unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  NCDC_LDMATRIX(2, "", "{%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
#else
  emu::ldmatrix<2, false>(r, p);
#endif
}
NCDC_DEVICE void ldmatrix_x4(uint32_t* r, const void* p) {
#ifdef NCDC_GPU
  unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  NCDC_LDMATRIX(4, "", "{%0, %1, %2, %3}, [%4];\n"
                : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#else
  emu::ldmatrix<4, false>(r, p);
#endif
}
NCDC_DEVICE void ldmatrix_x1_trans(uint32_t* r, const void* p) {
#ifdef NCDC_GPU
  unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  NCDC_LDMATRIX(1, ".trans", "{%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
#else
  emu::ldmatrix<1, true>(r, p);
#endif
}
NCDC_DEVICE void ldmatrix_x2_trans(uint32_t* r, const void* p) {
#ifdef NCDC_GPU
  unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  NCDC_LDMATRIX(2, ".trans", "{%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
#else
  emu::ldmatrix<2, true>(r, p);
#endif
}
NCDC_DEVICE void ldmatrix_x4_trans(uint32_t* r, const void* p) {
#ifdef NCDC_GPU
  unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  NCDC_LDMATRIX(4, ".trans", "{%0, %1, %2, %3}, [%4];\n"
                : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#else
  emu::ldmatrix<4, true>(r, p);
#endif
}

// ---- mma.sync: D (fp32) = A * B + C, A row major, B column major ----------------------------
#ifdef NCDC_GPU
#define NCDC_MMA_K16(TYPES)                                                                     \
  asm volatile("mma.sync.aligned." TYPES " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "     \
               "{%10, %11, %12, %13};\n"                                                        \
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                 \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),   \
                 "f"(c[1]), "f"(c[2]), "f"(c[3]))
#endif

NCDC_DEVICE void mma_m16n8k16_bf16(float* d, const uint32_t* a, const uint32_t* b, const float* c) {
#ifdef NCDC_GPU
  NCDC_MMA_K16("m16n8k16.row.col.f32.bf16.bf16.f32");
#else
  emu::mma_sync<emu::Elem::kBf16, 16>(d, a, b, c);
#endif
}
NCDC_DEVICE void mma_m16n8k16_f16(float* d, const uint32_t* a, const uint32_t* b, const float* c) {
#ifdef NCDC_GPU
  NCDC_MMA_K16("m16n8k16.row.col.f32.f16.f16.f32");
#else
  emu::mma_sync<emu::Elem::kF16, 16>(d, a, b, c);
#endif
}
NCDC_DEVICE void mma_m16n8k8_tf32(float* d, const uint32_t* a, const uint32_t* b, const float* c) {
#ifdef NCDC_GPU
  NCDC_MMA_K16("m16n8k8.row.col.f32.tf32.tf32.f32");
#else
  emu::mma_sync<emu::Elem::kTf32, 8>(d, a, b, c);
#endif
}
NCDC_DEVICE void mma_m16n8k8_bf16(float* d, const uint32_t* a, const uint32_t* b, const float* c) {
#ifdef NCDC_GPU
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
      "{%7, %8, %9, %10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
  emu::mma_sync<emu::Elem::kBf16, 8>(d, a, b, c);
#endif
}
// int8 tensor cores (m16n8k32 with int32 accumulators) exist from sm_80.
NCDC_DEVICE void mma_m16n8k32_s8(int* d, const uint32_t* a, const uint32_t* b, const int* c) {
#ifdef NCDC_GPU
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
               "{%8, %9}, {%10, %11, %12, %13};\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]),
                 "r"(c[1]), "r"(c[2]), "r"(c[3]));
#else
  emu::mma_sync<emu::Elem::kS8, 32>(d, a, b, c);
#endif
}
// fp8 tensor cores exist from sm_89: on an older target these are not declared, so a kernel
// that calls them fails to compile rather than at run time.
#if !defined(NCDC_GPU) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890)
NCDC_DEVICE void mma_m16n8k32_e4m3(float* d, const uint32_t* a, const uint32_t* b, const float* c) {
#ifdef NCDC_GPU
  NCDC_MMA_K16("m16n8k32.row.col.f32.e4m3.e4m3.f32");
#else
  emu::mma_sync<emu::Elem::kE4m3, 32>(d, a, b, c);
#endif
}
NCDC_DEVICE void mma_m16n8k32_e5m2(float* d, const uint32_t* a, const uint32_t* b, const float* c) {
#ifdef NCDC_GPU
  NCDC_MMA_K16("m16n8k32.row.col.f32.e5m2.e5m2.f32");
#else
  emu::mma_sync<emu::Elem::kE5m2, 32>(d, a, b, c);
#endif
}
#endif

}  // namespace ncdc

#endif  // NCDC_MMA_CUH
