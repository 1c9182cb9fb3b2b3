// Casts between dtypes, written for nvcc: cuda.h's version macro, stdint.h,
// the half, bf16 and fp8 types; bf16 casts from sm_80, fp8 ones from sm_89.
#include <cuda.h>
#include <stdint.h>
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include "cuda_fp8.h"

#if CUDA_VERSION < 12000
#error "these kernels need CUDA 12 or newer"
#endif

#define CAST_OP(SRC, DST, FN_NAME, CONVERT)                                         \
    extern "C" __global__ void FN_NAME(const size_t numel, const SRC *inp,          \
                                       DST *out) {                                  \
        for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < numel;           \
             i += (size_t)blockDim.x * gridDim.x) {                                 \
            SRC x = inp[i];                                                         \
            out[i] = CONVERT;                                                       \
        }                                                                           \
    }

CAST_OP(float, __half, cast_f32_f16, __float2half(x))
CAST_OP(__half, float, cast_f16_f32, __half2float(x))
CAST_OP(uint8_t, float, cast_u8_f32, (float)x)
CAST_OP(float, uint32_t, cast_f32_u32, x <= 0.0f ? 0u : (x >= (float)UINT32_MAX ? UINT32_MAX : (uint32_t)x))

#if __CUDA_ARCH__ >= 800
CAST_OP(float, __nv_bfloat16, cast_f32_bf16, __float2bfloat16(x))
CAST_OP(__nv_bfloat16, float, cast_bf16_f32, __bfloat162float(x))
#endif

#if __CUDA_ARCH__ >= 890
CAST_OP(float, __nv_fp8_e4m3, cast_f32_f8e4m3, __nv_fp8_e4m3(x))
CAST_OP(__nv_fp8_e4m3, float, cast_f8e4m3_f32, (float)x)
#endif
