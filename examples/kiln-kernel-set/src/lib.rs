//! A realistic kernel set for tests, examples and benchmarks: `axpy`/`axpby` over
//! `f32` and `f64`, a CUB block reduction over several (dtype, op) pairs and a CUB
//! block scan, each with the name expression of its specialization, its launch
//! geometry and a CPU reference.
//!
//! The examples, the benches and the CUDA backend's own tests (in this crate's
//! `tests/`) use it; it is not part of Kiln's libraries.
//!
//! ```
//! use kiln_kernel_set::{Dtype, KernelSpec, ReduceOp};
//! let spec = KernelSpec::BlockReduce { dtype: Dtype::F32, op: ReduceOp::Max, block: 256 };
//! assert_eq!(spec.name_expression(), "kiln_block_reduce<float, 256, kiln_op_max>");
//! assert_eq!(spec.launch(1000).grid, 4);
//! assert!(spec.needs_cccl());
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

use std::sync::OnceLock;

use kiln_cuda::{
    Arch, Error, IncludeDir, KernelRequest, Toolchain, ToolchainError,
    toolchain::CCCL,
    toolchain::{SearchConfig, locate_cccl},
};

/// Element types of the kernel set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// `float`
    F32,
    /// `double`
    F64,
    /// `int`
    I32,
    /// `unsigned int`
    U32,
}

impl Dtype {
    /// The CUDA C++ type name.
    pub fn c_name(self) -> &'static str {
        match self {
            Dtype::F32 => "float",
            Dtype::F64 => "double",
            Dtype::I32 => "int",
            Dtype::U32 => "unsigned int",
        }
    }

    /// The short name used in parameters and entry names (`f32`).
    pub fn short_name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F64 => "f64",
            Dtype::I32 => "i32",
            Dtype::U32 => "u32",
        }
    }
}

/// Binary operators of the reduction and scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// `a + b`
    Sum,
    /// `max(a, b)`
    Max,
    /// `min(a, b)`
    Min,
}

impl ReduceOp {
    /// The functor's name in the kernel source.
    pub fn functor(self) -> &'static str {
        match self {
            ReduceOp::Sum => "kiln_op_sum",
            ReduceOp::Max => "kiln_op_max",
            ReduceOp::Min => "kiln_op_min",
        }
    }
}

/// Grid and block sizes for `n` elements (one-dimensional, no dynamic shared memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchGeometry {
    /// Blocks in the grid.
    pub grid: u32,
    /// Threads per block.
    pub block: u32,
}

/// One kernel of the set, fully specialized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelSpec {
    /// `y[i] = a * x[i] + y[i]`; arguments `(int n, T a, const T* x, T* y)`.
    Axpy {
        /// `F32` (saxpy) or `F64` (daxpy).
        dtype: Dtype,
    },
    /// `y[i] = a * x[i] + b * y[i]`; arguments `(int n, T a, const T* x, T b, T* y)`.
    Axpby {
        /// `F32` or `F64`.
        dtype: Dtype,
    },
    /// `out[blk] = op(in[blk * block .. min(n, (blk + 1) * block)])` with
    /// `cub::BlockReduce`; arguments `(const T* in, T* out, int n)`.
    BlockReduce {
        /// Element type.
        dtype: Dtype,
        /// Operator.
        op: ReduceOp,
        /// Threads per block (one element each).
        block: u32,
    },
    /// Inclusive scan of each block's elements with `cub::BlockScan`:
    /// `out[i] = op(in[blk * block ..= i])`; arguments `(const T* in, T* out, int n)`.
    BlockScan {
        /// Element type.
        dtype: Dtype,
        /// Operator.
        op: ReduceOp,
        /// Threads per block (one element each).
        block: u32,
    },
}

const AXPY_SOURCE: &str = r#"
template <typename T>
__global__ void kiln_axpy(int n, T a, const T* __restrict__ x, T* __restrict__ y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

template <typename T>
__global__ void kiln_axpby(int n, T a, const T* __restrict__ x, T b, T* __restrict__ y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b * y[i];
}
"#;

const OPS_SOURCE: &str = r#"#pragma once
struct kiln_op_sum {
    template <typename T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return a + b; }
};
struct kiln_op_max {
    template <typename T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};
struct kiln_op_min {
    template <typename T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return b < a ? b : a; }
};
"#;

const REDUCE_SOURCE: &str = r#"
#include <cub/block/block_reduce.cuh>
#include "kiln_ops.cuh"

template <typename T, int BLOCK, typename Op>
__global__ void __launch_bounds__(BLOCK) kiln_block_reduce(const T* __restrict__ in, T* __restrict__ out, int n) {
    using Reduce = cub::BlockReduce<T, BLOCK>;
    __shared__ typename Reduce::TempStorage temp;
    int base = blockIdx.x * BLOCK;
    int i = base + threadIdx.x;
    int valid = n - base < BLOCK ? n - base : BLOCK;
    T value = i < n ? in[i] : T();
    T total = Reduce(temp).Reduce(value, Op(), valid);
    if (threadIdx.x == 0) out[blockIdx.x] = total;
}
"#;

const SCAN_SOURCE: &str = r#"
#include <cub/block/block_scan.cuh>
#include "kiln_ops.cuh"

template <typename T, int BLOCK, typename Op>
__global__ void __launch_bounds__(BLOCK) kiln_block_scan(const T* __restrict__ in, T* __restrict__ out, int n) {
    using Scan = cub::BlockScan<T, BLOCK>;
    __shared__ typename Scan::TempStorage temp;
    int i = blockIdx.x * BLOCK + threadIdx.x;
    // Lanes past the end hold any value: an inclusive scan never reads later lanes.
    T value = i < n ? in[i] : T();
    Scan(temp).InclusiveScan(value, value, Op());
    if (i < n) out[i] = value;
}
"#;

impl KernelSpec {
    /// The whole set used by tests and benchmarks: axpy and axpby over `f32` and
    /// `f64`, and block reductions and scans over several (dtype, op) pairs with 256
    /// threads per block.
    pub fn all() -> Vec<KernelSpec> {
        let mut all = Vec::new();
        for dtype in [Dtype::F32, Dtype::F64] {
            all.push(KernelSpec::Axpy { dtype });
            all.push(KernelSpec::Axpby { dtype });
        }
        for (dtype, op) in [
            (Dtype::F32, ReduceOp::Sum),
            (Dtype::F64, ReduceOp::Sum),
            (Dtype::F32, ReduceOp::Max),
            (Dtype::I32, ReduceOp::Min),
            (Dtype::U32, ReduceOp::Sum),
        ] {
            all.push(KernelSpec::BlockReduce {
                dtype,
                op,
                block: 256,
            });
        }
        for (dtype, op) in [(Dtype::F32, ReduceOp::Sum), (Dtype::I32, ReduceOp::Max)] {
            all.push(KernelSpec::BlockScan {
                dtype,
                op,
                block: 256,
            });
        }
        all
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        match *self {
            KernelSpec::Axpy { dtype }
            | KernelSpec::Axpby { dtype }
            | KernelSpec::BlockReduce { dtype, .. }
            | KernelSpec::BlockScan { dtype, .. } => dtype,
        }
    }

    /// A human name for the specialization: `block_reduce_f32_max_256`.
    pub fn name(&self) -> String {
        match *self {
            KernelSpec::Axpy { dtype } => format!("axpy_{}", dtype.short_name()),
            KernelSpec::Axpby { dtype } => format!("axpby_{}", dtype.short_name()),
            KernelSpec::BlockReduce { dtype, op, block } => {
                format!("block_reduce_{}_{op:?}_{block}", dtype.short_name()).to_lowercase()
            }
            KernelSpec::BlockScan { dtype, op, block } => {
                format!("block_scan_{}_{op:?}_{block}", dtype.short_name()).to_lowercase()
            }
        }
    }

    /// The CUDA C++ source of the kernel's family (shared by its specializations).
    pub fn source(&self) -> &'static str {
        match self {
            KernelSpec::Axpy { .. } | KernelSpec::Axpby { .. } => AXPY_SOURCE,
            KernelSpec::BlockReduce { .. } => REDUCE_SOURCE,
            KernelSpec::BlockScan { .. } => SCAN_SOURCE,
        }
    }

    /// The name expression of the specialization; its lowered name is the entry point.
    pub fn name_expression(&self) -> String {
        match *self {
            KernelSpec::Axpy { dtype } => format!("kiln_axpy<{}>", dtype.c_name()),
            KernelSpec::Axpby { dtype } => format!("kiln_axpby<{}>", dtype.c_name()),
            KernelSpec::BlockReduce { dtype, op, block } => format!(
                "kiln_block_reduce<{}, {block}, {}>",
                dtype.c_name(),
                op.functor()
            ),
            KernelSpec::BlockScan { dtype, op, block } => format!(
                "kiln_block_scan<{}, {block}, {}>",
                dtype.c_name(),
                op.functor()
            ),
        }
    }

    /// Whether the kernel includes CUB (and so needs the CCCL headers).
    pub fn needs_cccl(&self) -> bool {
        matches!(
            self,
            KernelSpec::BlockReduce { .. } | KernelSpec::BlockScan { .. }
        )
    }

    /// Threads per block.
    pub fn block(&self) -> u32 {
        match *self {
            KernelSpec::Axpy { .. } | KernelSpec::Axpby { .. } => 256,
            KernelSpec::BlockReduce { block, .. } | KernelSpec::BlockScan { block, .. } => block,
        }
    }

    /// The launch geometry for `n` elements: one thread per element.
    pub fn launch(&self, n: usize) -> LaunchGeometry {
        let block = self.block();
        let grid = n.div_ceil(block as usize).max(1);
        LaunchGeometry {
            grid: u32::try_from(grid).unwrap_or(u32::MAX),
            block,
        }
    }

    /// The compile request for `arch`, with this machine's CCCL headers (located
    /// once per process, see [`cccl_include_dir`]) when the kernel uses CUB.
    ///
    /// # Errors
    /// When the CCCL headers a CUB kernel needs cannot be found or read.
    pub fn request(&self, arch: Arch) -> Result<KernelRequest, Error> {
        self.build_request(arch, || Ok(cccl_include_dir()?))
    }

    /// The compile request for `arch` under `toolchain`: its CCCL header set when the
    /// kernel uses CUB (for a recorded toolchain, the recorded digest: no file read).
    ///
    /// # Errors
    /// The error of [`Toolchain::cccl`] when the kernel uses CUB: the local
    /// toolchain's headers cannot be found or read, or the recorded toolchain
    /// recorded none.
    pub fn request_with(&self, toolchain: &Toolchain, arch: Arch) -> Result<KernelRequest, Error> {
        self.build_request(arch, || Ok(toolchain.cccl()?))
    }

    fn build_request(
        &self,
        arch: Arch,
        cccl: impl FnOnce() -> Result<IncludeDir, Error>,
    ) -> Result<KernelRequest, Error> {
        let mut request = KernelRequest::new(self.name(), self.source(), arch)
            .name_expression(self.name_expression())
            .param("dtype", self.dtype().short_name())
            .param("block", self.block());
        if let KernelSpec::BlockReduce { op, .. } | KernelSpec::BlockScan { op, .. } = *self {
            request = request
                .param("op", format!("{op:?}"))
                .header("kiln_ops.cuh", OPS_SOURCE);
        }
        if self.needs_cccl() {
            request = request.include_dir(cccl()?);
        }
        Ok(request)
    }
}

/// The CCCL include folder (holding `cub/`) as the header set [`CCCL`], located from
/// the environment and fingerprinted once per process: from its identity memo when no
/// file changed since an earlier process hashed it (a stat walk), else by hashing
/// every file (see [`IncludeDir`]).
///
/// # Errors
/// [`ToolchainError::CcclNotFound`] when no CCCL headers are found;
/// [`ToolchainError::Io`] when they cannot be read.
pub fn cccl_include_dir() -> Result<IncludeDir, ToolchainError> {
    static FOUND: OnceLock<IncludeDir> = OnceLock::new();
    if let Some(dir) = FOUND.get() {
        return Ok(dir.clone());
    }
    let dir = IncludeDir::new(locate_cccl(&SearchConfig::from_env())?)?.named(CCCL);
    Ok(FOUND.get_or_init(|| dir).clone())
}

/// Element types the CPU references compute over.
pub trait Element: Copy + PartialOrd + std::fmt::Debug {
    /// The kernel set's type for `Self`.
    const DTYPE: Dtype;
    /// `a + b` (wrapping for integers, as the GPU computes).
    fn add(self, other: Self) -> Self;
    /// `a * b` (wrapping for integers).
    fn mul(self, other: Self) -> Self;
    /// Applies a reduction operator.
    fn apply(op: ReduceOp, a: Self, b: Self) -> Self {
        match op {
            ReduceOp::Sum => a.add(b),
            ReduceOp::Max => {
                if a < b {
                    b
                } else {
                    a
                }
            }
            ReduceOp::Min => {
                if b < a {
                    b
                } else {
                    a
                }
            }
        }
    }
}

macro_rules! float_element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: Dtype = $d;
            fn add(self, other: Self) -> Self {
                self + other
            }
            fn mul(self, other: Self) -> Self {
                self * other
            }
        }
    };
}

macro_rules! int_element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: Dtype = $d;
            fn add(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            fn mul(self, other: Self) -> Self {
                self.wrapping_mul(other)
            }
        }
    };
}

float_element!(f32, Dtype::F32);
float_element!(f64, Dtype::F64);
int_element!(i32, Dtype::I32);
int_element!(u32, Dtype::U32);

/// CPU references of the kernel set.
pub mod reference {
    use super::{Element, ReduceOp};

    /// `y[i] = a * x[i] + y[i]`.
    pub fn axpy<T: Element>(a: T, x: &[T], y: &mut [T]) {
        for (y, &x) in y.iter_mut().zip(x) {
            *y = a.mul(x).add(*y);
        }
    }

    /// `y[i] = a * x[i] + b * y[i]`.
    pub fn axpby<T: Element>(a: T, x: &[T], b: T, y: &mut [T]) {
        for (y, &x) in y.iter_mut().zip(x) {
            *y = a.mul(x).add(b.mul(*y));
        }
    }

    /// One result per block of `block` elements (the last block may be partial).
    pub fn block_reduce<T: Element>(input: &[T], block: usize, op: ReduceOp) -> Vec<T> {
        input
            .chunks(block.max(1))
            .filter_map(|chunk| chunk.iter().copied().reduce(|a, b| T::apply(op, a, b)))
            .collect()
    }

    /// The inclusive scan of each block of `block` elements.
    pub fn block_scan<T: Element>(input: &[T], block: usize, op: ReduceOp) -> Vec<T> {
        let mut out = Vec::with_capacity(input.len());
        for chunk in input.chunks(block.max(1)) {
            let mut acc: Option<T> = None;
            for &x in chunk {
                let next = acc.map_or(x, |a| T::apply(op, a, x));
                out.push(next);
                acc = Some(next);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::reference::*;
    use super::*;

    #[test]
    fn references_compute_what_they_say() {
        let mut y = vec![1.0f32, 2.0, 3.0];
        axpy(2.0, &[1.0, 1.0, 1.0], &mut y);
        assert_eq!(y, [3.0, 4.0, 5.0]);
        axpby(1.0, &[1.0, 1.0, 1.0], -1.0, &mut y);
        assert_eq!(y, [-2.0, -3.0, -4.0]);
        assert_eq!(block_reduce(&[1, 5, 2, 7, 3], 2, ReduceOp::Max), [5, 7, 3]);
        assert_eq!(block_reduce(&[1u32, 5, 2, 7, 3], 4, ReduceOp::Sum), [15, 3]);
        assert_eq!(
            block_scan(&[3, 1, 2, 4, 0], 3, ReduceOp::Min),
            [3, 1, 1, 4, 0]
        );
    }

    #[test]
    fn every_spec_names_its_specialization() {
        let all = KernelSpec::all();
        let mut names: Vec<String> = all.iter().map(KernelSpec::name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
        for spec in all {
            assert!(
                spec.source()
                    .contains(spec.name_expression().split('<').next().unwrap())
            );
        }
    }
}
