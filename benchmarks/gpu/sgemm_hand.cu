// Hand-written fp32 SGEMM (C = A B, row-major, FMA only): the peers that bound what a register-
// blocked lowering of the Parboil sgemm leaf could reach (issue 25, item 4), next to cuBLAS.
// benchmarks/gpu/sgemm_ceiling.py builds this file into a shared library and times it.
//
//   tiled<BK, BLOCKS>:  a 128 x 128 tile of C a block of 256 threads, each thread 8 x 8 of it as four
//               4 x 4 quarters 64 rows / columns apart (16-byte shared loads without bank
//               conflicts), A and B staged through shared memory in double-buffered BK slices
//               (A k-major), the next slice loaded into registers while this one is used;
//               BLOCKS: the blocks an SM should hold (registers a thread: 65536 / 256 / BLOCKS).
// M and N must be multiples of 128 and K of BK (the driver checks).
#include <cuda_runtime.h>

template <int BK, int BLOCKS>
__global__ void __launch_bounds__(256, BLOCKS) tiled(const float* __restrict__ A, const float* __restrict__ B,
                                                float* __restrict__ C, int M, int N, int K) {
  constexpr int BM = 128, BN = 128, LOADS = BK / 8;  // 16-byte loads of A (and of B) a thread
  __shared__ __align__(16) float as[2][BK][BM];
  __shared__ __align__(16) float bs[2][BK][BN];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const float* a = A + (size_t)blockIdx.y * BM * K;
  const float* b = B + (size_t)blockIdx.x * BN;
  float4 ra[LOADS], rb[LOADS];
  auto fetch = [&](int k0) {
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
      int f = tid + l * 256;
      ra[l] = *reinterpret_cast<const float4*>(a + (size_t)(f / (BK / 4)) * K + k0 + (f % (BK / 4)) * 4);
      rb[l] = *reinterpret_cast<const float4*>(b + (size_t)(k0 + f / (BN / 4)) * N + (f % (BN / 4)) * 4);
    }
  };
  auto stage = [&](int s) {
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
      int f = tid + l * 256, r = f / (BK / 4), c = (f % (BK / 4)) * 4;
      as[s][c][r] = ra[l].x; as[s][c + 1][r] = ra[l].y; as[s][c + 2][r] = ra[l].z; as[s][c + 3][r] = ra[l].w;
      *reinterpret_cast<float4*>(&bs[s][f / (BN / 4)][(f % (BN / 4)) * 4]) = rb[l];
    }
  };
  float acc[8][8] = {};
  fetch(0);
  stage(0);
  __syncthreads();
  int s = 0;
  for (int k0 = 0; k0 < K; k0 += BK) {
    const bool more = k0 + BK < K;
    if (more) fetch(k0 + BK);
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float4 a0 = *reinterpret_cast<const float4*>(&as[s][kk][ty * 4]);
      float4 a1 = *reinterpret_cast<const float4*>(&as[s][kk][ty * 4 + 64]);
      float4 b0 = *reinterpret_cast<const float4*>(&bs[s][kk][tx * 4]);
      float4 b1 = *reinterpret_cast<const float4*>(&bs[s][kk][tx * 4 + 64]);
      const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    if (more) {  // the other buffer was last read before the previous barrier
      stage(s ^ 1);
      __syncthreads();
      s ^= 1;
    }
  }
  float* c = C + (size_t)blockIdx.y * BM * N + (size_t)blockIdx.x * BN;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    size_t row = (size_t)(i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4) * N;
    *reinterpret_cast<float4*>(c + row + tx * 4) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    *reinterpret_cast<float4*>(c + row + 64 + tx * 4) = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
  }
}

// variant 0: tiled<8, 2>, 1: tiled<16, 2>, 2: tiled<16, 1>; 0 on success, else a CUDA error code
// (-1: a size that is not a multiple of the tile, -2: no such variant)
extern "C" int sgemm_hand(int variant, const float* A, const float* B, float* C, int M, int N, int K) {
  if (variant < 0 || variant > 2) return -2;
  if (M % 128 || N % 128 || K % (variant == 0 ? 8 : 16)) return -1;
  dim3 grid(N / 128, M / 128);
  if (variant == 0) tiled<8, 2><<<grid, 256>>>(A, B, C, M, N, K);
  else if (variant == 1) tiled<16, 2><<<grid, 256>>>(A, B, C, M, N, K);
  else tiled<16, 1><<<grid, 256>>>(A, B, C, M, N, K);
  return (int)cudaGetLastError();
}
