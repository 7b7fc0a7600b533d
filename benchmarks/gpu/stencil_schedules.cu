// The 7-point stencil of examples/stencil.py in hand-written CUDA schedules: the peers of
// benchmarks/gpu/stencil_schedules.py, which compiles this file with nvcc and runs it.
//   naive:       one thread per point, seven scalar loads
//   naive4:      one thread per four points of a row, 16-byte loads (x coarsened by 4)
//   march:       a 2-D block walks ZC planes, each plane through a shared tile (2.5-D blocking),
//                or the in-plane neighbours through the read-only cache, no shared tile
//   march4:      four points of a row a thread (16-byte loads) walking ZC planes: the planes below
//                and above in registers, x +-1 from the next lanes by warp shuffles, y +-1 loaded
// Each result is compared with `naive`'s; times are the best of 5 batches of 20 launches.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <cuda_runtime.h>

__global__ void naive(const float* __restrict__ a, float* __restrict__ b, int nx, int ny, int nz,
                      float c0, float c1) {
  int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
  int k = blockIdx.z;
  if (i > 0 && i < nx - 1 && j > 0 && j < ny - 1 && k > 0 && k < nz - 1) {
    size_t plane = (size_t)nx * ny, at = k * plane + (size_t)j * nx + i;
    b[at] = c1 * (a[at - 1] + a[at + 1] + a[at - nx] + a[at + nx] + a[at - plane] + a[at + plane]) - c0 * a[at];
  }
}

// A TX x TY block walks ZC planes, the planes below and above in registers, the next one loaded a
// plane ahead; SHARED: the plane's in-plane neighbours through a shared tile (2.5-D blocking),
// else through the read-only cache.
template <int TX, int TY, int ZC, bool SHARED>
__global__ void __launch_bounds__(TX * TY) march(const float* __restrict__ a, float* __restrict__ b,
                                                 int nx, int ny, int nz, float c0, float c1) {
  __shared__ float tile[SHARED ? TY + 2 : 1][SHARED ? TX + 2 : 1];
  int tx = threadIdx.x, ty = threadIdx.y;
  int i = blockIdx.x * TX + tx, j = blockIdx.y * TY + ty;
  int k0 = blockIdx.z * ZC + 1, k1 = min(k0 + ZC, nz - 1);
  bool grid = i < nx && j < ny, inside = i > 0 && i < nx - 1 && j > 0 && j < ny - 1;
  size_t plane = (size_t)nx * ny, at = (size_t)(k0 - 1) * plane + (size_t)j * nx + i;
  float below = grid ? a[at] : 0.f, cur = grid ? a[at + plane] : 0.f;
  float above = (grid && k0 + 1 < nz) ? a[at + 2 * plane] : 0.f;
  for (int k = k0; k < k1; ++k) {
    at += plane;
    float next = (grid && k + 2 < nz) ? a[at + 2 * plane] : 0.f;
    float west, east, north, south;
    if constexpr (SHARED) {
      float hl = 0, hr = 0, hu = 0, hd = 0;
      if (tx == 0 && i > 0 && j < ny) hl = a[at - 1];
      if (tx == TX - 1 && i + 1 < nx && j < ny) hr = a[at + 1];
      if (ty == 0 && j > 0 && i < nx) hu = a[at - nx];
      if (ty == TY - 1 && j + 1 < ny && i < nx) hd = a[at + nx];
      __syncthreads();
      tile[ty + 1][tx + 1] = cur;
      if (tx == 0) tile[ty + 1][0] = hl;
      if (tx == TX - 1) tile[ty + 1][TX + 1] = hr;
      if (ty == 0) tile[0][tx + 1] = hu;
      if (ty == TY - 1) tile[TY + 1][tx + 1] = hd;
      __syncthreads();
      west = tile[ty + 1][tx]; east = tile[ty + 1][tx + 2]; north = tile[ty][tx + 1]; south = tile[ty + 2][tx + 1];
    } else if (inside) {
      west = __ldg(a + at - 1); east = __ldg(a + at + 1); north = __ldg(a + at - nx); south = __ldg(a + at + nx);
    }
    if (inside) b[at] = c1 * (west + east + north + south + below + above) - c0 * cur;
    below = cur; cur = above; above = next;
  }
}

// x coarsened by 4 with float4: each thread 4 consecutive points of a row, per point (z in grid)
__global__ void naive4(const float* __restrict__ a, float* __restrict__ b, int nx, int ny, int nz, float c0, float c1) {
  int i4 = (blockIdx.x * blockDim.x + threadIdx.x) * 4, j = blockIdx.y * blockDim.y + threadIdx.y;
  int k = blockIdx.z;
  if (i4 >= nx || j <= 0 || j >= ny - 1 || k <= 0 || k >= nz - 1) return;
  size_t plane = (size_t)nx * ny, at = k * plane + (size_t)j * nx + i4;
  float4 c = *(const float4*)(a + at), up = *(const float4*)(a + at - nx), dn = *(const float4*)(a + at + nx);
  float4 lo = *(const float4*)(a + at - plane), hi = *(const float4*)(a + at + plane);
  float l = i4 > 0 ? __ldg(a + at - 1) : 0.f, r = i4 + 4 < nx ? __ldg(a + at + 4) : 0.f;
  float v[4] = {c.x, c.y, c.z, c.w}, u[4] = {up.x, up.y, up.z, up.w}, d[4] = {dn.x, dn.y, dn.z, dn.w};
  float zl[4] = {lo.x, lo.y, lo.z, lo.w}, zh[4] = {hi.x, hi.y, hi.z, hi.w};
  float out[4];
  for (int q = 0; q < 4; ++q) {
    float left = q == 0 ? l : v[q - 1], right = q == 3 ? r : v[q + 1];
    out[q] = c1 * (left + right + u[q] + d[q] + zl[q] + zh[q]) - c0 * v[q];
  }
  for (int q = 0; q < 4; ++q) {
    int i = i4 + q;
    if (i > 0 && i < nx - 1) b[at + q] = out[q];
  }
}

// Four points of a row a thread, walking ZC planes: z +-1 in registers (one 16-byte load a plane),
// x +-1 from the neighbouring lanes' registers (shuffles; the warp's end lanes load theirs), y +-1
// two 16-byte loads. A warp spans 128 points of one row: BX is a multiple of 32, nx of 4 * BX.
__device__ __forceinline__ float4 ld4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }

template <int BX, int BY, int ZC>
__global__ void __launch_bounds__(BX * BY) march4(const float* __restrict__ a, float* __restrict__ b,
                                                  int nx, int ny, int nz, float c0, float c1) {
  int i4 = (blockIdx.x * BX + threadIdx.x) * 4, j = blockIdx.y * BY + threadIdx.y, lane = threadIdx.x & 31;
  int k0 = blockIdx.z * ZC + 1, k1 = min(k0 + ZC, nz - 1);
  bool row = j > 0 && j < ny - 1;  // the same on every lane of a warp
  size_t plane = (size_t)nx * ny, at = (size_t)(k0 - 1) * plane + (size_t)j * nx + i4;
  float4 below = ld4(a + at), cur = ld4(a + at + plane), above = ld4(a + at + 2 * plane);
  for (int k = k0; k < k1; ++k) {
    at += plane;
    float4 next = k + 2 < nz ? ld4(a + at + 2 * plane) : make_float4(0.f, 0.f, 0.f, 0.f);
    float l = __shfl_up_sync(0xffffffffu, cur.w, 1), r = __shfl_down_sync(0xffffffffu, cur.x, 1);
    if (row) {
      if (lane == 0) l = i4 > 0 ? __ldg(a + at - 1) : 0.f;
      if (lane == 31) r = i4 + 4 < nx ? __ldg(a + at + 4) : 0.f;
      float4 up = ld4(a + at - nx), dn = ld4(a + at + nx), o;
      o.x = c1 * (l + cur.y + up.x + dn.x + below.x + above.x) - c0 * cur.x;
      o.y = c1 * (cur.x + cur.z + up.y + dn.y + below.y + above.y) - c0 * cur.y;
      o.z = c1 * (cur.y + cur.w + up.z + dn.z + below.z + above.z) - c0 * cur.z;
      o.w = c1 * (cur.z + r + up.w + dn.w + below.w + above.w) - c0 * cur.w;
      if (i4 > 0 && i4 + 4 < nx) {
        *reinterpret_cast<float4*>(b + at) = o;
      } else {
        float v[4] = {o.x, o.y, o.z, o.w};
        for (int q = 0; q < 4; ++q)
          if (i4 + q > 0 && i4 + q < nx - 1) b[at + q] = v[q];
      }
    }
    below = cur; cur = above; above = next;
  }
}

static float ms_of(void (*launch)(const float*, float*), const float* a, float* b) {
  cudaEvent_t s, e; cudaEventCreate(&s); cudaEventCreate(&e);
  for (int w = 0; w < 5; ++w) launch(a, b);
  float best = 1e9;
  for (int r = 0; r < 5; ++r) {
    cudaEventRecord(s);
    for (int it = 0; it < 20; ++it) launch(a, b);
    cudaEventRecord(e); cudaEventSynchronize(e);
    float t; cudaEventElapsedTime(&t, s, e); best = fminf(best, t / 20);
  }
  return best;
}

static int NX = 512, NY = 512, NZ = 256;  // argv[1..3]
static const float C0 = 1.f / 6, C1 = 1.f / 36;
static float *A, *B, *REF;
static size_t N;

template <int TX, int TY, int ZC, bool SHARED> void l_march(const float* a, float* b) {
  dim3 g((NX + TX - 1) / TX, (NY + TY - 1) / TY, (NZ - 2 + ZC - 1) / ZC);
  march<TX, TY, ZC, SHARED><<<g, dim3(TX, TY)>>>(a, b, NX, NY, NZ, C0, C1);
}
template <int BX, int BY> void l_naive(const float* a, float* b) {
  naive<<<dim3(NX / BX, NY / BY, NZ), dim3(BX, BY)>>>(a, b, NX, NY, NZ, C0, C1);
}
template <int BX, int BY> void l_naive4(const float* a, float* b) {
  naive4<<<dim3(NX / 4 / BX, NY / BY, NZ), dim3(BX, BY)>>>(a, b, NX, NY, NZ, C0, C1);
}
template <int BX, int BY, int ZC> void l_march4(const float* a, float* b) {
  dim3 g(NX / 4 / BX, NY / BY, (NZ - 2 + ZC - 1) / ZC);
  march4<BX, BY, ZC><<<g, dim3(BX, BY)>>>(a, b, NX, NY, NZ, C0, C1);
}
static void l_copy(const float* a, float* b) { cudaMemcpyAsync(b, a, N * 4, cudaMemcpyDeviceToDevice); }

static double copy_ms;
static void run(const char* name, void (*launch)(const float*, float*)) {
  cudaMemcpy(B, A, N * 4, cudaMemcpyDeviceToDevice);
  launch(A, B); cudaDeviceSynchronize();
  std::vector<float> h(N), r(N);
  cudaMemcpy(h.data(), B, N * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(r.data(), REF, N * 4, cudaMemcpyDeviceToHost);
  double err = 0; for (size_t x = 0; x < N; ++x) err = fmax(err, fabs(h[x] - r[x]));
  float ms = ms_of(launch, A, B);
  cudaError_t e = cudaGetLastError();
  printf("%-28s %.4f ms %6.0f GB/s  of copy %.3f  maxerr %.2e %s\n", name, ms, 8.0 * N / ms / 1e6,
         copy_ms / ms, err, e == cudaSuccess ? "" : cudaGetErrorString(e));
}

int main(int argc, char** argv) {
  if (argc == 4) { NX = atoi(argv[1]); NY = atoi(argv[2]); NZ = atoi(argv[3]); }
  if (NX % 256 || NY % 8) { fprintf(stderr, "nx must be a multiple of 256 and ny of 8\n"); return 2; }
  N = (size_t)NX * NY * NZ;
  cudaMalloc(&A, N * 4); cudaMalloc(&B, N * 4); cudaMalloc(&REF, N * 4);
  std::vector<float> h(N); srand(1); for (auto& v : h) v = rand() / (float)RAND_MAX;
  cudaMemcpy(A, h.data(), N * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(REF, A, N * 4, cudaMemcpyDeviceToDevice);
  l_naive<32, 8>(A, REF); cudaDeviceSynchronize();
  copy_ms = ms_of(l_copy, A, B);
  printf("copy %.4f ms %.0f GB/s\n", copy_ms, 8.0 * N / copy_ms / 1e6);
  run("naive 64x4", l_naive<64, 4>);
  run("naive4 32x8", l_naive4<32, 8>); run("naive4 64x4", l_naive4<64, 4>);
  run("march shared 32x8 z32", l_march<32, 8, 32, true>); run("march shared 64x4 z32", l_march<64, 4, 32, true>);
  run("march ldg 32x8 z32", l_march<32, 8, 32, false>); run("march ldg 64x4 z32", l_march<64, 4, 32, false>);
  if (NX % 512 == 0) {
    run("march4 32x4 z16", l_march4<32, 4, 16>); run("march4 32x8 z16", l_march4<32, 8, 16>);
    run("march4 32x4 z32", l_march4<32, 4, 32>); run("march4 32x8 z32", l_march4<32, 8, 32>);
    run("march4 64x2 z32", l_march4<64, 2, 32>); run("march4 64x4 z32", l_march4<64, 4, 32>);
    run("march4 128x1 z32", l_march4<128, 1, 32>); run("march4 128x2 z64", l_march4<128, 2, 64>);
    run("march4 32x8 z64", l_march4<32, 8, 64>); run("march4 32x4 z8", l_march4<32, 4, 8>);
    run("march4 32x2 z8", l_march4<32, 2, 8>); run("march4 32x8 z128", l_march4<32, 8, 128>);
    run("march4 32x4 z4", l_march4<32, 4, 4>); run("march4 32x8 z4", l_march4<32, 8, 4>);
    run("march4 32x8 z8", l_march4<32, 8, 8>); run("march4 64x4 z8", l_march4<64, 4, 8>);
    run("march4 32x1 z8", l_march4<32, 1, 8>); run("march4 32x4 z6", l_march4<32, 4, 6>);
    run("march4 32x16 z8", l_march4<32, 16, 8>); run("march4 32x4 z12", l_march4<32, 4, 12>);
  }
  return 0;
}
