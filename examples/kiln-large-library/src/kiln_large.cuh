// Shared helpers of every program of kiln-large-library (given to NVRTC by
// content, as a framework's `*_utils.cuh` is): the accumulator type of each
// element type, conversions, strided indexing and block reductions.
#pragma once
#include <stdint.h>
#include <math.h>
#include "cuda_fp16.h"

// Accumulate halves in float, everything else in its own type.
template <typename T> struct kl_acc { typedef T type; };
template <> struct kl_acc<__half> { typedef float type; };

template <typename T>
__device__ __forceinline__ typename kl_acc<T>::type kl_up(T x) {
    return (typename kl_acc<T>::type)x;
}
template <>
__device__ __forceinline__ float kl_up<__half>(__half x) { return __half2float(x); }

template <typename T> struct kl_to {
    template <typename A> __device__ __forceinline__ static T from(A x) { return (T)x; }
};
template <> struct kl_to<__half> {
    template <typename A> __device__ __forceinline__ static __half from(A x) {
        return __float2half((float)x);
    }
};

template <typename T> struct kl_limits;
template <> struct kl_limits<float> {
    __device__ static float lowest() { return -INFINITY; }
    __device__ static float highest() { return INFINITY; }
};
template <> struct kl_limits<double> {
    __device__ static double lowest() { return -INFINITY; }
    __device__ static double highest() { return INFINITY; }
};
template <> struct kl_limits<uint8_t> {
    __device__ static uint8_t lowest() { return 0; }
    __device__ static uint8_t highest() { return 255; }
};
template <> struct kl_limits<uint32_t> {
    __device__ static uint32_t lowest() { return 0; }
    __device__ static uint32_t highest() { return 4294967295u; }
};
template <> struct kl_limits<int16_t> {
    __device__ static int16_t lowest() { return -32768; }
    __device__ static int16_t highest() { return 32767; }
};
template <> struct kl_limits<int32_t> {
    __device__ static int32_t lowest() { return INT32_MIN; }
    __device__ static int32_t highest() { return INT32_MAX; }
};
template <> struct kl_limits<int64_t> {
    __device__ static int64_t lowest() { return INT64_MIN; }
    __device__ static int64_t highest() { return INT64_MAX; }
};

// `info` holds `num_dims` dims then `num_dims` strides (a null `info`: contiguous).
__device__ __noinline__ bool kl_contiguous(unsigned num_dims, const unsigned* dims,
                                              const unsigned* strides) {
    unsigned acc = 1;
    for (unsigned d = 0; d < num_dims; ++d) {
        unsigned i = num_dims - d - 1;
        if (dims[i] > 1 && acc != strides[i]) return false;
        acc *= dims[i];
    }
    return true;
}

__device__ __noinline__ unsigned kl_strided(unsigned idx, unsigned num_dims, const unsigned* dims,
                                             const unsigned* strides) {
    unsigned offset = 0;
    for (unsigned d = 0; d < num_dims; ++d) {
        unsigned i = num_dims - d - 1;
        offset += (idx % dims[i]) * strides[i];
        idx /= dims[i];
    }
    return offset;
}

#define KL_FOR_EACH(i, n)                                                       \
    for (unsigned i = blockIdx.x * (unsigned)blockDim.x + threadIdx.x; i < (n);    \
         i += (unsigned)blockDim.x * gridDim.x)

// Block-wide sum of `v` over the block's threads (blockDim.x <= KL_BLOCK).
#define KL_BLOCK 256
template <typename A>
__device__ __forceinline__ A kl_block_sum(A v, A* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    A total = shared[0];
    __syncthreads();
    return total;
}
