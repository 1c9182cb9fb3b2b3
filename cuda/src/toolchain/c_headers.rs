//! The C and C++ library headers NVRTC lacks, written for Kiln, so that a `.cu`
//! file written for nvcc compiles through NVRTC unchanged.
//!
//! nvcc compiles device code with the host compiler's C library on its include
//! path; NVRTC has none: `#include <stdint.h>` fails with "cannot open source
//! file". NVRTC does declare, built in, what device code can call (the math
//! functions `sinf`, `sqrt`, `isnan`..., `printf`, `malloc`, `memcpy`, `assert`),
//! so what a kernel misses are the types, the limits and the macros. These
//! headers provide them, and nothing NVRTC already has:
//!
//! | header | what it provides |
//! | --- | --- |
//! | `stdint.h`, `cstdint` | `int8_t` ... `uint64_t`, the `least`/`fast` types, `intptr_t`, `intmax_t`, their limits (`INT64_MAX`, `SIZE_MAX`...) and `INT64_C`-style macros; `cstdint` also in `std` |
//! | `stddef.h`, `cstddef` | `ptrdiff_t`, `nullptr_t`, `max_align_t`, `NULL`, `offsetof` (NVRTC declares `size_t`) |
//! | `limits.h`, `climits` | `CHAR_BIT`, `INT_MAX`, `LLONG_MIN`... (`char` signed, `long` 64 bits) |
//! | `float.h`, `cfloat` | `FLT_MAX`, `DBL_EPSILON`, `FLT_MIN`... |
//! | `math.h`, `cmath` | `INFINITY`, `NAN`, `HUGE_VAL(F)`, `FP_*`, the `M_*` constants (`M_PI`, `M_SQRT1_2`, `M_2_SQRTPI`...); `cmath` also puts NVRTC's math functions in `std` (`std::sqrt`, `std::isnan`...) |
//! | `cuda.h` | `CUDA_VERSION` (from NVRTC's `__CUDACC_VER_MAJOR__`/`__CUDACC_VER_MINOR__`), nothing of the driver API |
//! | `assert.h`, `cassert`, `stdio.h`, `cstdio`, `stdlib.h`, `cstdlib`, `string.h`, `cstring` | nothing NVRTC lacks but the file (and, for the `c` forms, the `std::` names of `printf`, `malloc`, `free`, `abs`, `memcpy`, `memset`) |
//!
//! Their types are those CCCL's `cuda/std` headers declare under NVRTC
//! (`int64_t` is `long long`), so a program may include both; CCCL then
//! redefines some macros to the same values, which NVRTC only warns about.
//! `offsetof` is not usable in a constant expression (NVRTC has no
//! `__builtin_offsetof`).
//!
//! They are not copies of a C library's or of NVIDIA's headers: NVIDIA's
//! licence does not allow redistributing the CUDA toolkit's headers, so the
//! CUDA ones (`cuda_fp16.h`, `cuda_bf16.h`, `cuda_fp8.h`) are a located
//! header set instead ([`CUDA_RUNTIME`](crate::toolchain::CUDA_RUNTIME)), of
//! which only the digest travels with shipped kernels.
//!
//! A request takes them with
//! [`KernelRequest::c_headers`](crate::KernelRequest::c_headers), by content:
//! they are part of its key, so a new Kiln whose headers changed compiles
//! again. Headers given by content come before every include directory, so
//! Kiln's `cuda.h` is the one found even when the CUDA runtime headers (which
//! hold the driver API's `cuda.h`, which NVRTC cannot compile) are on the
//! include path.
//!
//! ```
//! use kiln_cuda::toolchain::c_headers;
//! let stdint = c_headers::HEADERS.iter().find(|(name, _)| *name == "stdint.h");
//! assert!(stdint.is_some_and(|(_, text)| text.contains("typedef long long int64_t;")));
//! ```

/// Every header, as (include name, text), sorted by name.
pub const HEADERS: &[(&str, &str)] = &[
    ("assert.h", include_str!("c_headers/assert.h")),
    ("cassert", include_str!("c_headers/cassert")),
    ("cfloat", include_str!("c_headers/cfloat")),
    ("climits", include_str!("c_headers/climits")),
    ("cmath", include_str!("c_headers/cmath")),
    ("cstddef", include_str!("c_headers/cstddef")),
    ("cstdint", include_str!("c_headers/cstdint")),
    ("cstdio", include_str!("c_headers/cstdio")),
    ("cstdlib", include_str!("c_headers/cstdlib")),
    ("cstring", include_str!("c_headers/cstring")),
    ("cuda.h", include_str!("c_headers/cuda.h")),
    ("float.h", include_str!("c_headers/float.h")),
    ("limits.h", include_str!("c_headers/limits.h")),
    ("math.h", include_str!("c_headers/math.h")),
    ("stddef.h", include_str!("c_headers/stddef.h")),
    ("stdint.h", include_str!("c_headers/stdint.h")),
    ("stdio.h", include_str!("c_headers/stdio.h")),
    ("stdlib.h", include_str!("c_headers/stdlib.h")),
    ("string.h", include_str!("c_headers/string.h")),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_headers_are_sorted_unique_and_kilns_own() {
        let names: Vec<&str> = HEADERS.iter().map(|(name, _)| *name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted);
        for (name, text) in HEADERS {
            assert!(text.contains("Written for Kiln"), "{name}");
            assert!(!text.contains('\0'), "{name}");
        }
    }
}
