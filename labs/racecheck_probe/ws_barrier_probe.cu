// Does compute-sanitizer racecheck report hazards for a warp-specialized kernel's barrier protocol alone?
//
// fused_adamw_ws_kernel's shared-memory layout (a ring of dY/X stages in a union with the fp32 staging tile) and
// its __syncthreads around the staging tile, over several tiles per CTA; plain loads and stores instead of global
// loads and WMMA. The variants hand the stages over differently:
//   1: a 3-stage ring with named barriers FULL (producers bar.arrive, consumers bar.sync) and EMPTY (consumers
//      bar.arrive, producers bar.sync), the protocol the kernels used first;
//   2: one stage at a time with __syncthreads alone (no named barrier), the same accesses in the same order;
//   3: t4::ws::produce / consume of kernels/common.cuh, the kernels' protocol now (2-stage ring, FULL waited on
//      by both sides with the unaligned barrier.sync);
//   4: variant 1 with the unaligned barrier.arrive / barrier.sync in place of bar.arrive / bar.sync.
// Each thread checks what it reads, so a real race would also show up as a wrong value (printed count).
//   nvcc -arch=sm_75 -I kernels -o probe ws_barrier_probe.cu && compute-sanitizer --tool racecheck ./probe 3
#include <cstdio>
#include <cstdlib>

#include "common.cuh"

constexpr int kConsumers = 128, kProducers = 64, kThreads = kConsumers + kProducers;
constexpr int kStages = 3, kBT = 32, kLd = 72, kLdC = 68, kBM = 64;

struct Smem {
  union {
    struct { short a[kBT][kLd]; short b[kBT][kLd]; } ring[kStages];
    float c[kBM][kLdC];
  };
};

__device__ __forceinline__ void named_sync(bool aligned, int id, int n) {
  if (aligned) asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
  else asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_arrive(bool aligned, int id, int n) {
  if (aligned) asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
  else asm volatile("barrier.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}

struct ProbeRegs {
  int it;
};

__global__ void __launch_bounds__(kThreads) probe(int tiles, int n_iters, int variant, int* bad) {
  __shared__ __align__(128) Smem sm;
  const bool producer = threadIdx.x >= kConsumers;
  int wrong = 0;
  for (int tile = 0; tile < tiles; ++tile) {
    float acc = 0.f;
    if (variant == 3) {
      if (producer) {
        const int pt = threadIdx.x - kConsumers;
        auto load = [&](ProbeRegs& r, int it) { r.it = it; };
        auto store = [&](const ProbeRegs& r, int s) {
          for (int i = pt; i < kBT * kLd; i += kProducers) {
            sm.ring[s].a[i / kLd][i % kLd] = (short)(tile + r.it);
            sm.ring[s].b[i / kLd][i % kLd] = (short)(tile - r.it);
          }
        };
        t4::ws::produce<kThreads, ProbeRegs>(n_iters, load, store);
      } else {
        int it = 0;
        t4::ws::consume<kThreads>(n_iters, [&](int s) {
          for (int i = threadIdx.x; i < kBT * kLd; i += kConsumers) {
            const int a = sm.ring[s].a[i / kLd][i % kLd], b = sm.ring[s].b[i / kLd][i % kLd];
            wrong += (a != tile + it) + (b != tile - it);
            acc += a + b;
          }
          ++it;
        });
      }
    } else if (variant == 2) {  // one stage at a time, __syncthreads only
      for (int it = 0; it < n_iters; ++it) {
        const int s = it % kStages;
        if (producer)
          for (int i = threadIdx.x - kConsumers; i < kBT * kLd; i += kProducers) {
            sm.ring[s].a[i / kLd][i % kLd] = (short)(tile + it);
            sm.ring[s].b[i / kLd][i % kLd] = (short)(tile - it);
          }
        __syncthreads();
        if (!producer)
          for (int i = threadIdx.x; i < kBT * kLd; i += kConsumers) {
            const int a = sm.ring[s].a[i / kLd][i % kLd], b = sm.ring[s].b[i / kLd][i % kLd];
            wrong += (a != tile + it) + (b != tile - it);
            acc += a + b;
          }
        __syncthreads();
      }
    } else if (producer) {
      const int pt = threadIdx.x - kConsumers;
      for (int it = 0; it < n_iters; ++it) {
        const int s = it % kStages;
        if (it >= kStages) named_sync(variant == 1, 1 + kStages + s, kThreads);
        for (int i = pt; i < kBT * kLd; i += kProducers) {
          sm.ring[s].a[i / kLd][i % kLd] = (short)(tile + it);
          sm.ring[s].b[i / kLd][i % kLd] = (short)(tile - it);
        }
        named_arrive(variant == 1, 1 + s, kThreads);
      }
    } else {
      for (int it = 0; it < n_iters; ++it) {
        const int s = it % kStages;
        named_sync(variant == 1, 1 + s, kThreads);
        for (int i = threadIdx.x; i < kBT * kLd; i += kConsumers) {
          const int a = sm.ring[s].a[i / kLd][i % kLd], b = sm.ring[s].b[i / kLd][i % kLd];
          wrong += (a != tile + it) + (b != tile - it);
          acc += a + b;
        }
        if (it + kStages < n_iters) named_arrive(variant == 1, 1 + kStages + s, kThreads);
      }
    }
    __syncthreads();  // every stage consumed: the ring is dead
    if (!producer)
      for (int i = threadIdx.x; i < kBM * kLdC; i += kConsumers) sm.c[i / kLdC][i % kLdC] = (float)(tile * 1000 + i);
    __syncthreads();
    for (int i = threadIdx.x; i < kBM * kLdC; i += kThreads) wrong += sm.c[i / kLdC][i % kLdC] != (float)(tile * 1000 + i);
    __syncthreads();
    if (acc < -1e30f) wrong += 1;  // keep acc alive
  }
  atomicAdd(bad, wrong);
}

int main(int argc, char** argv) {
  const int variant = argc > 1 ? atoi(argv[1]) : 1;
  int* bad;
  cudaMalloc(&bad, sizeof(int));
  cudaMemset(bad, 0, sizeof(int));
  probe<<<8, kThreads>>>(4, 64, variant, bad);
  int h = -1;
  cudaMemcpy(&h, bad, sizeof(int), cudaMemcpyDeviceToHost);
  const char* what[] = {"", "bar.arrive ring", "__syncthreads only", "t4::ws barrier.sync ring",
                        "barrier.arrive ring"};
  printf("variant %d (%s): wrong values read: %d, %s\n", variant, what[variant],
         h, cudaGetErrorString(cudaGetLastError()));
  return 0;
}
