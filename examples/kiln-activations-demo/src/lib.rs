//! A second example kernel library: it generates its own CUDA C++ (elementwise
//! activations over `f32` and `f64`) and ships them precompiled in its own
//! embedded image. A program that links it and `kiln-kernels-demo` gets both
//! images merged into the one global cache.
//!
//! ```no_run
//! use kiln::cuda::{Arch, Device};
//! use kiln_activations_demo::{Activation, Float, Kernel};
//!
//! let device = Device::new("sm_90".parse::<Arch>()?);
//! let relu = Kernel { activation: Activation::Relu, float: Float::F32 };
//! let served = kiln_activations_demo::get(kiln::global(), &device, &relu)?;
//! assert_eq!(served.hit().name(), "kiln_relu_f32");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod generate;

pub use generate::{
    Activation, DEFINITION, Float, GENERATOR_VERSION, Kernel, OLDEST_DRIVER_VARIABLE, TARGETS,
    TARGETS_CUDA_12, TARGETS_VARIABLE,
};

use kiln::cache::Cache;
use kiln::cuda::{Device, KernelLibrary, Served};

kiln::include_image!("kiln-activations-demo.kimg");

/// The library's kernels, shipped under the toolchain its build recorded.
static ACTIVATIONS: KernelLibrary<Kernel> =
    KernelLibrary::new(env!("KILN_CUDA_BUILD"), generate::request);

/// The library's [`KernelLibrary`]: its build record and selection counts.
pub fn library() -> &'static KernelLibrary<Kernel> {
    &ACTIVATIONS
}

/// The compiled `kernel` for `device`: shipped, or compiled now.
///
/// # Errors
/// When the kernel is not shipped for this device and cannot be compiled
/// here, or does not compile.
pub fn get<'c>(
    cache: &'c Cache,
    device: &Device,
    kernel: &Kernel,
) -> Result<Served<'c>, kiln::cuda::ServeError> {
    ACTIVATIONS.get(cache, device, kernel)
}

/// CPU references of the activations, for checking GPU results.
pub mod reference {
    use super::Activation;

    /// `activation(x)` in `f64`.
    pub fn apply(activation: Activation, x: f64) -> f64 {
        match activation {
            Activation::Relu => x.max(0.0),
            Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Activation::Tanh => x.tanh(),
            Activation::Gelu => 0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2)),
        }
    }

    /// `erf` to about 1e-7 (Abramowitz and Stegun 7.1.26), enough to check a GPU result.
    fn erf(x: f64) -> f64 {
        let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
        let poly = t
            * (0.254_829_592
                + t * (-0.284_496_736
                    + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
        let y = 1.0 - poly * (-x * x).exp();
        if x < 0.0 { -y } else { y }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_computes_each_activation() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        assert_eq!(reference::apply(Activation::Relu, -2.0), 0.0);
        assert_eq!(reference::apply(Activation::Relu, 3.0), 3.0);
        assert!(close(reference::apply(Activation::Sigmoid, 0.0), 0.5));
        assert!(close(
            reference::apply(Activation::Tanh, 1.0),
            0.761_594_155_955_764_9
        ));
        // x * Φ(x) at 1 and -1.
        assert!(close(
            reference::apply(Activation::Gelu, 1.0),
            0.841_344_746_068_542_9
        ));
        assert!(close(
            reference::apply(Activation::Gelu, -1.0),
            -0.158_655_253_931_457_05
        ));
    }

    #[test]
    fn every_kernel_has_its_own_entry_point_in_its_source() {
        let all = Kernel::all();
        assert_eq!(all.len(), 8);
        let mut names: Vec<String> = all.iter().map(Kernel::name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 8);
        for kernel in all {
            let source = kernel.source();
            assert!(
                source.contains(&format!("extern \"C\" __global__ void {}(", kernel.name())),
                "{source}"
            );
        }
        let relu = Kernel {
            activation: Activation::Relu,
            float: Float::F64,
        };
        assert!(relu.source().contains("const double* __restrict__ x"));
    }
}
