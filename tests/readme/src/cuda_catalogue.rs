//! The shared module of the CUDA library of the library author's guide
//! (`docs/library-author.md`): the specializations and the request of each,
//! used by the build script (and, in the guide, by the library).

use kiln::cuda::{Arch, KernelRequest, Toolchain};
use kiln::image::Digest;

/// One specialization of the library's kernel.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Spec {
    /// The element type, a C++ type name.
    pub dtype: &'static str,
}

/// What the build script ships.
pub fn common() -> Vec<Spec> {
    vec![Spec { dtype: "float" }, Spec { dtype: "double" }]
}

/// The request of `spec` for `arch` under `toolchain`.
///
/// # Errors
/// When `toolchain` has no CCCL headers: a local toolchain that finds none,
/// or a recorded one whose build recorded none.
pub fn request(
    spec: &Spec,
    toolchain: &Toolchain,
    arch: Arch,
) -> Result<KernelRequest, kiln::cuda::Error> {
    Ok(
        KernelRequest::new(format!("reduce_{}", spec.dtype), SOURCE, arch)
            .name_expression(format!("reduce<{}>", spec.dtype))
            .include_dir(toolchain.cccl()?) // CUB: the recorded digest, or this machine's tree
            .dep("my-cuda-kernels::reduce", Digest::of(SOURCE.as_bytes())),
    )
}

const SOURCE: &str = r#"
        #include <cub/block/block_reduce.cuh>
        template <typename T>
        __global__ void reduce(const T* in, T* out) {
            using Reduce = cub::BlockReduce<T, 128>;
            __shared__ typename Reduce::TempStorage scratch;
            T sum = Reduce(scratch).Sum(in[blockIdx.x * 128 + threadIdx.x]);
            if (threadIdx.x == 0) out[blockIdx.x] = sum;
        }
    "#;
