/* Kiln's <cuda.h> for NVRTC: the version macros a kernel tests, and nothing
 * of the driver API (which device code cannot call). NVRTC defines
 * __CUDACC_VER_MAJOR__ and __CUDACC_VER_MINOR__ for the release compiling.
 * Written for Kiln (MIT OR Apache-2.0). */
#ifndef KILN_NVRTC_CUDA_H
#define KILN_NVRTC_CUDA_H
#ifndef CUDA_VERSION
#define CUDA_VERSION (__CUDACC_VER_MAJOR__ * 1000 + __CUDACC_VER_MINOR__ * 10)
#endif
#endif
