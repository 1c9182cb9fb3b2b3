//! A kernel library of real size in one PTX entry: what the driver's JIT costs
//! a process that is served PTX, and what Kiln's JIT cache saves.
//!
//! One request, one compile unit, [`KERNELS`] kernels (CUB block reductions,
//! scans and radix sorts over several types, operators and block sizes, plus
//! element-wise maps), as a framework's kernel file is. It is shipped for
//! `sm_80` only (a CUBIN that no Hopper GPU runs, and PTX), so on an H100 the
//! library serves the PTX and the driver JIT-compiles it.
//!
//! `kiln-bench large-fixture --out DIR` (needs NVRTC and the CCCL headers)
//! writes `large.kimg` and the library's build record `large.record` there;
//! `kiln-bench jit` (on a GPU) serves them.

use std::fmt::Write as _;
use std::path::Path;

use kiln::cuda::toolchain::BuildRecord;
use kiln::cuda::{Arch, KernelLibrary, KernelRequest, ShipPlan, Toolchain};

use crate::error::BenchError;

/// The one specialization of the library: the whole module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Large;

/// The build record beside it.
pub const RECORD: &str = "large.record";
/// The target the fixture ships (no CUBIN of it runs on Hopper).
pub const TARGET: &str = "sm_80";

/// The kernel every measurement launches and checks.
pub const AXPY: &str = "large_axpy<float>";

const DTYPES: [&str; 4] = ["float", "double", "int", "unsigned int"];
const OPS: [&str; 3] = ["large_sum", "large_max", "large_min"];
const BLOCKS: [u32; 4] = [64, 128, 256, 512];
const SORT_TYPES: [&str; 2] = ["float", "unsigned int"];
const SORT_SHAPES: [(u32, u32); 4] = [(128, 4), (128, 8), (256, 4), (256, 8)];
const MAP_TYPES: [&str; 2] = ["float", "double"];
const MAP_DEGREES: u32 = 32;

/// How many kernels the module holds.
pub const KERNELS: usize = 2
    + 2 * DTYPES.len() * OPS.len() * BLOCKS.len()
    + SORT_TYPES.len() * SORT_SHAPES.len()
    + MAP_TYPES.len() * MAP_DEGREES as usize;

const SOURCE: &str = r#"
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_radix_sort.cuh>

template <typename T> struct large_sum {
    __device__ __forceinline__ T operator()(const T& a, const T& b) const { return a + b; }
};
template <typename T> struct large_max {
    __device__ __forceinline__ T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};
template <typename T> struct large_min {
    __device__ __forceinline__ T operator()(const T& a, const T& b) const { return b < a ? b : a; }
};

template <typename T>
__global__ void large_axpy(int n, T a, const T* x, T* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

template <typename T, int B, typename Op>
__global__ void __launch_bounds__(B) large_reduce(const T* in, T* out, int n) {
    using Reduce = cub::BlockReduce<T, B>;
    __shared__ typename Reduce::TempStorage storage;
    int i = blockIdx.x * B + threadIdx.x;
    T value = in[i < n ? i : n - 1];
    int valid = n - blockIdx.x * B;
    T total = Reduce(storage).Reduce(value, Op(), valid < B ? valid : B);
    if (threadIdx.x == 0) out[blockIdx.x] = total;
}

template <typename T, int B, typename Op>
__global__ void __launch_bounds__(B) large_scan(const T* in, T* out, int n) {
    using Scan = cub::BlockScan<T, B>;
    __shared__ typename Scan::TempStorage storage;
    int i = blockIdx.x * B + threadIdx.x;
    T value = in[i < n ? i : n - 1];
    Scan(storage).InclusiveScan(value, value, Op());
    if (i < n) out[i] = value;
}

template <typename T, int B, int ITEMS>
__global__ void __launch_bounds__(B) large_sort(T* keys) {
    using Sort = cub::BlockRadixSort<T, B, ITEMS>;
    __shared__ typename Sort::TempStorage storage;
    T items[ITEMS];
    int base = (blockIdx.x * B + threadIdx.x) * ITEMS;
    for (int j = 0; j < ITEMS; ++j) items[j] = keys[base + j];
    Sort(storage).Sort(items);
    for (int j = 0; j < ITEMS; ++j) keys[base + j] = items[j];
}

template <typename T, int K>
__global__ void large_map(int n, const T* x, T* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    T v = x[i], acc = T(0);
#pragma unroll
    for (int j = 0; j < K; ++j) acc = acc * v + T(j + 1) / T(K);
    y[i] = tanh(acc) + sin(v * T(K));
}
"#;

/// The name expressions of every kernel, [`AXPY`] first.
pub fn name_expressions() -> Vec<String> {
    let mut names = vec![AXPY.to_owned(), "large_axpy<double>".to_owned()];
    for kernel in ["large_reduce", "large_scan"] {
        for dtype in DTYPES {
            for op in OPS {
                for block in BLOCKS {
                    names.push(format!("{kernel}<{dtype}, {block}, {op}<{dtype}> >"));
                }
            }
        }
    }
    for dtype in SORT_TYPES {
        for (block, items) in SORT_SHAPES {
            names.push(format!("large_sort<{dtype}, {block}, {items}>"));
        }
    }
    for dtype in MAP_TYPES {
        for degree in 1..=MAP_DEGREES {
            names.push(format!("large_map<{dtype}, {degree}>"));
        }
    }
    names
}

/// The library's request function: the whole module for `arch`.
///
/// # Errors
/// When the toolchain has no CCCL headers.
pub fn request(
    _: &Large,
    toolchain: &Toolchain,
    arch: Arch,
) -> Result<KernelRequest, kiln::cuda::Error> {
    let mut request = KernelRequest::new("large_library", SOURCE, arch)
        .include_dir(toolchain.cccl()?)
        .param("kernels", KERNELS as u64);
    for name in name_expressions() {
        request = request.name_expression(name);
    }
    Ok(request)
}

/// The library, from the record the fixture wrote.
///
/// # Errors
/// When the record cannot be read or does not parse.
pub fn library(dir: &Path) -> Result<KernelLibrary<Large>, BenchError> {
    let path = dir.join(RECORD);
    let text = std::fs::read_to_string(&path).map_err(BenchError::io(&path))?;
    let record: BuildRecord = text.trim().parse()?;
    Ok(KernelLibrary::with_record(record, request))
}

/// Compiles the library for [`TARGET`] into `dir` (its image and its record);
/// returns a line saying what was written.
///
/// # Errors
/// When NVRTC or the CCCL headers are missing, or the compile fails.
pub fn write_fixture(dir: &Path) -> Result<String, BenchError> {
    std::fs::create_dir_all(dir).map_err(BenchError::io(dir))?;
    let mut plan = ShipPlan::parse(TARGET)?;
    let started = std::time::Instant::now();
    let report = kiln::build::Precompile::new("large")
        .out_dir(dir)
        .output(std::io::sink())
        .run(|session| Ok(plan.precompile(session, &[Large], request)?))?;
    if !report.failed.is_empty() {
        return Err(BenchError::Gpu {
            what: "compiling the large library".to_owned(),
            reason: format!("{:?}", report.failed),
        });
    }
    let record = dir.join(RECORD);
    std::fs::write(&record, plan.record().to_string()).map_err(BenchError::io(&record))?;
    let image = kiln::image::Image::open(&report.path, kiln::image::Verification::Full)?;
    let mut line = format!(
        "{} kernels compiled for {TARGET} in {:.1} s into {}",
        KERNELS,
        started.elapsed().as_secs_f64(),
        report.path.display()
    );
    for entry in image.entries() {
        for artifact in entry?.artifacts() {
            let _ = write!(line, "; {:?} {} bytes", artifact.kind(), artifact.len());
        }
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_names_every_kernel_once_the_launched_one_first() {
        let names = name_expressions();
        assert_eq!(names.len(), KERNELS);
        assert_eq!(names[0], AXPY);
        let unique: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), KERNELS);
        for name in &names {
            let kernel = name.split('<').next().unwrap_or_default();
            assert!(
                SOURCE.contains(&format!("void {kernel}("))
                    || SOURCE.contains(&format!(") {kernel}(")),
                "{name}"
            );
        }
    }
}
