// C (fp32, M x N) = A (bf16, M x K, row major) * B (bf16, K x N, row major): 64 x 64 x 32
// tiles, 4 warps of 32 x 32, a two-stage cp.async pipeline, ldmatrix (x4, x4.trans) and
// mma.sync m16n8k16. M and N multiples of 64, K a multiple of 32.
#include "ncdc_runtime.cuh"

#define BM 64
#define BN 64
#define BK 32

__device__ __forceinline__ void load_tile(__nv_bfloat16 (*as)[BK], __nv_bfloat16 (*bs)[BN],
                                          const __nv_bfloat16* A, const __nv_bfloat16* B,
                                          int N, int K, int bm, int bn, int k0) {
  for (int i = 0; i < 2; ++i) {
    int c = threadIdx.x + i * 128;
    int ar = c / 4, ac = (c % 4) * 8;
    ncdc::cp_async_16(&as[ar][ac], A + (size_t)(bm + ar) * K + k0 + ac);
    int br = c / 8, bc = (c % 8) * 8;
    ncdc::cp_async_16(&bs[br][bc], B + (size_t)(k0 + br) * N + bn + bc);
  }
  ncdc::cp_async_commit();
}

extern "C" __global__ void __launch_bounds__(128)
gemm_bf16(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
          float* __restrict__ C, int M, int N, int K) {
  __shared__ __align__(128) __nv_bfloat16 As[2][BM][BK];
  __shared__ __align__(128) __nv_bfloat16 Bs[2][BK][BN];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int wm = warp / 2, wn = warp % 2;
  int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
  float acc[2][4][4] = {};
  int nk = K / BK;
  load_tile(As[0], Bs[0], A, B, N, K, bm, bn, 0);
  for (int kt = 0; kt < nk; ++kt) {
    if (kt + 1 < nk) {
      load_tile(As[(kt + 1) & 1], Bs[(kt + 1) & 1], A, B, N, K, bm, bn, (kt + 1) * BK);
      ncdc::cp_async_wait<1>();
    } else {
      ncdc::cp_async_wait<0>();
    }
    __syncthreads();
    int s = kt & 1;
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t a[2][4], b[4][2];
      for (int mi = 0; mi < 2; ++mi)
        ncdc::ldmatrix_x4(a[mi], &As[s][wm * 32 + mi * 16 + lane % 16][kk + 8 * (lane / 16)]);
      for (int p = 0; p < 2; ++p) {
        uint32_t r[4];
        ncdc::ldmatrix_x4_trans(r, &Bs[s][kk + lane % 16][wn * 32 + p * 16 + 8 * (lane / 16)]);
        b[2 * p][0] = r[0];
        b[2 * p][1] = r[1];
        b[2 * p + 1][0] = r[2];
        b[2 * p + 1][1] = r[3];
      }
      for (int mi = 0; mi < 2; ++mi)
        for (int ni = 0; ni < 4; ++ni) ncdc::mma_m16n8k16_bf16(acc[mi][ni], a[mi], b[ni], acc[mi][ni]);
    }
    __syncthreads();
  }
  for (int mi = 0; mi < 2; ++mi)
    for (int ni = 0; ni < 4; ++ni) {
      int row = bm + wm * 32 + mi * 16 + lane / 4, col = bn + wn * 32 + ni * 8 + 2 * (lane % 4);
      ncdc::st_global(C + (size_t)row * N + col, acc[mi][ni][0]);
      ncdc::st_global(C + (size_t)row * N + col + 1, acc[mi][ni][1]);
      ncdc::st_global(C + (size_t)(row + 8) * N + col, acc[mi][ni][2]);
      ncdc::st_global(C + (size_t)(row + 8) * N + col + 1, acc[mi][ni][3]);
    }
}
NCDC_EXPORT_KERNEL(gemm_bf16);
