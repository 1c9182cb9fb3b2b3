// The AOT floor of the GPU comparison (bench/gpu/compare.py): kiln_axpy<float>
// compiled into the binary by nvcc for the device's exact arch, and the same
// first launch as `kiln-bench gpu --path cubin` and `cudarc-alone`: 1M
// elements copied in, one launch, copied back, checked. Built on the GPU
// machine by bench/gpu/run.sh:
//   nvcc -O2 -gencode arch=compute_90,code=sm_90 -o floor floor.cu
#include <chrono>
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

// The kernel set's source (examples/kiln-kernel-set), unchanged.
template <typename T>
__global__ void kiln_axpy(int n, T a, const T* __restrict__ x, T* __restrict__ y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

#define CHECK(call)                                                              \
    do {                                                                         \
        cudaError_t status = (call);                                             \
        if (status != cudaSuccess) {                                             \
            std::fprintf(stderr, "floor: %s: %s\n", #call, cudaGetErrorString(status)); \
            return 1;                                                            \
        }                                                                        \
    } while (0)

int main() {
    auto started = std::chrono::steady_clock::now();
    const int n = 1 << 20;
    const float a = 2.0f;
    std::vector<float> x(n), y(n), got(n);
    for (int i = 0; i < n; ++i) {
        x[i] = float(i % 17);
        y[i] = float(i % 5);
    }
    float *dx = nullptr, *dy = nullptr;
    CHECK(cudaMalloc(&dx, n * sizeof(float)));
    CHECK(cudaMalloc(&dy, n * sizeof(float)));
    CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    kiln_axpy<float><<<(n + 255) / 256, 256>>>(n, a, dx, dy);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    auto total = std::chrono::steady_clock::now() - started;
    for (int i = 0; i < n; ++i) {
        if (got[i] != a * x[i] + y[i]) {
            std::fprintf(stderr, "floor: element %d is %f, expected %f\n", i, got[i], a * x[i] + y[i]);
            return 1;
        }
    }
    std::printf("{\"total_ns\":%lld}\n",
                (long long)std::chrono::duration_cast<std::chrono::nanoseconds>(total).count());
    return 0;
}
