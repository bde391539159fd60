// ldmatrix and mma.sync fragments, loaded the way the PTX ISA tables describe them, one warp.
// g = lane / 4 (groupID), t = lane % 4 (threadID_in_group); A is 16 x K row major, B is
// K x 8 row major (element (k, n) at B[k * 8 + n]), C and D are 16 x 8 row major.
#include "ncdc_runtime.cuh"

template <class E>
__device__ uint32_t pack(const E* p, int stride, int count) {  // count elements, low first
  uint32_t r = 0;
  for (int e = 0; e < count; ++e) r |= uint32_t(p[e * stride]) << (32 / count * e);
  return r;
}

__device__ void load_c(const float* C, float* c) {
  int g = threadIdx.x / 4, t = threadIdx.x % 4;
  c[0] = C[g * 8 + 2 * t];
  c[1] = C[g * 8 + 2 * t + 1];
  c[2] = C[(g + 8) * 8 + 2 * t];
  c[3] = C[(g + 8) * 8 + 2 * t + 1];
}
__device__ void store_d(float* D, const float* d) {
  int g = threadIdx.x / 4, t = threadIdx.x % 4;
  D[g * 8 + 2 * t] = d[0];
  D[g * 8 + 2 * t + 1] = d[1];
  D[(g + 8) * 8 + 2 * t] = d[2];
  D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

#define MMA_K16(NAME, FN)                                                                      \
  extern "C" __global__ void NAME(const unsigned short* A, const unsigned short* B,            \
                                  const float* C, float* D) {                                  \
    int g = threadIdx.x / 4, t = threadIdx.x % 4;                                              \
    uint32_t a[4] = {pack(A + g * 16 + 2 * t, 1, 2), pack(A + (g + 8) * 16 + 2 * t, 1, 2),     \
                     pack(A + g * 16 + 2 * t + 8, 1, 2),                                       \
                     pack(A + (g + 8) * 16 + 2 * t + 8, 1, 2)};                                \
    uint32_t b[2] = {pack(B + (2 * t) * 8 + g, 8, 2), pack(B + (2 * t + 8) * 8 + g, 8, 2)};    \
    float c[4], d[4];                                                                          \
    load_c(C, c);                                                                              \
    ncdc::FN(d, a, b, c);                                                                      \
    store_d(D, d);                                                                             \
  }                                                                                            \
  NCDC_EXPORT_KERNEL(NAME)
MMA_K16(mma_k16_bf16, mma_m16n8k16_bf16);
MMA_K16(mma_k16_f16, mma_m16n8k16_f16);

extern "C" __global__ void mma_k8_bf16(const unsigned short* A, const unsigned short* B,
                                       const float* C, float* D) {
  int g = threadIdx.x / 4, t = threadIdx.x % 4;
  uint32_t a[2] = {pack(A + g * 8 + 2 * t, 1, 2), pack(A + (g + 8) * 8 + 2 * t, 1, 2)};
  uint32_t b[1] = {pack(B + (2 * t) * 8 + g, 8, 2)};
  float c[4], d[4];
  load_c(C, c);
  ncdc::mma_m16n8k8_bf16(d, a, b, c);
  store_d(D, d);
}
NCDC_EXPORT_KERNEL(mma_k8_bf16);

extern "C" __global__ void mma_k8_tf32(const unsigned* A, const unsigned* B, const float* C, float* D) {
  int g = threadIdx.x / 4, t = threadIdx.x % 4;
  uint32_t a[4] = {A[g * 8 + t], A[(g + 8) * 8 + t], A[g * 8 + t + 4], A[(g + 8) * 8 + t + 4]};
  uint32_t b[2] = {B[t * 8 + g], B[(t + 4) * 8 + g]};
  float c[4], d[4];
  load_c(C, c);
  ncdc::mma_m16n8k8_tf32(d, a, b, c);
  store_d(D, d);
}
NCDC_EXPORT_KERNEL(mma_k8_tf32);

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890
#define MMA_K32(NAME, FN)                                                                      \
  extern "C" __global__ void NAME(const unsigned char* A, const unsigned char* B,              \
                                  const float* C, float* D) {                                  \
    int g = threadIdx.x / 4, t = threadIdx.x % 4;                                              \
    uint32_t a[4] = {pack(A + g * 32 + 4 * t, 1, 4), pack(A + (g + 8) * 32 + 4 * t, 1, 4),     \
                     pack(A + g * 32 + 4 * t + 16, 1, 4),                                      \
                     pack(A + (g + 8) * 32 + 4 * t + 16, 1, 4)};                               \
    uint32_t b[2] = {pack(B + (4 * t) * 8 + g, 8, 4), pack(B + (4 * t + 16) * 8 + g, 8, 4)};   \
    float c[4], d[4];                                                                          \
    load_c(C, c);                                                                              \
    ncdc::FN(d, a, b, c);                                                                      \
    store_d(D, d);                                                                             \
  }                                                                                            \
  NCDC_EXPORT_KERNEL(NAME)
MMA_K32(mma_k32_e4m3, mma_m16n8k32_e4m3);
MMA_K32(mma_k32_e5m2, mma_m16n8k32_e5m2);
#endif

// The same bf16 m16n8k16 product with fragments from ldmatrix: A (16 x 16) by x4, B from its
// n x k copy Bt by x2, and from its k x n copy by x2.trans. D from Bt, D2 from B.
extern "C" __global__ void mma_k16_bf16_ldmatrix(const unsigned short* A, const unsigned short* Bt,
                                                 const unsigned short* B, const float* C,
                                                 float* D, float* D2) {
  __shared__ __align__(16) unsigned short sa[16][16], sbt[8][16], sb[16][8];
  unsigned l = threadIdx.x;
  for (int i = l; i < 256; i += 32) sa[i / 16][i % 16] = A[i];
  for (int i = l; i < 128; i += 32) {
    sbt[i / 16][i % 16] = Bt[i];
    sb[i / 8][i % 8] = B[i];
  }
  __syncwarp();
  uint32_t a[4], b[2], b2[2];
  ncdc::ldmatrix_x4(a, &sa[l % 16][8 * (l / 16)]);
  ncdc::ldmatrix_x2(b, &sbt[l % 8][8 * ((l / 8) % 2)]);
  ncdc::ldmatrix_x2_trans(b2, &sb[l % 16][0]);
  float c[4], d[4], d2[4];
  load_c(C, c);
  ncdc::mma_m16n8k16_bf16(d, a, b, c);
  ncdc::mma_m16n8k16_bf16(d2, a, b2, c);
  store_d(D, d);
  store_d(D2, d2);
}
NCDC_EXPORT_KERNEL(mma_k16_bf16_ldmatrix);

// Every ldmatrix variant over four 8x8 matrices M[j][r][c]; lane l addresses row l % 8 of
// matrix l / 8. out[variant][lane][4]: x1, x2, x4, x1.trans, x2.trans, x4.trans.
extern "C" __global__ void ldmatrix_layouts(const unsigned short* M, unsigned* out) {
  __shared__ __align__(16) unsigned short s[4][8][8];
  unsigned l = threadIdx.x;
  for (int i = l; i < 256; i += 32) s[i / 64][(i / 8) % 8][i % 8] = M[i];
  __syncwarp();
  const void* p = &s[l / 8][l % 8][0];
  uint32_t r[6][4] = {};
  ncdc::ldmatrix_x1(r[0], p);
  ncdc::ldmatrix_x2(r[1], p);
  ncdc::ldmatrix_x4(r[2], p);
  ncdc::ldmatrix_x1_trans(r[3], p);
  ncdc::ldmatrix_x2_trans(r[4], p);
  ncdc::ldmatrix_x4_trans(r[5], p);
  for (int v = 0; v < 6; ++v)
    for (int j = 0; j < 4; ++j) out[(v * 32 + l) * 4 + j] = r[v][j];
}
NCDC_EXPORT_KERNEL(ldmatrix_layouts);
