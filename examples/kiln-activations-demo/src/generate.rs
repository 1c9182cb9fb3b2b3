//! The CUDA C++ generator, shared by the library and its build script
//! (`#[path]`), so that both derive the same keys.

use kiln::cuda::{Arch, KernelRequest, Toolchain};
use kiln::image::Digest;

/// The archs shipped as NVRTC 13 CUBINs (the lowest also as PTX); the same as
/// `kiln-kernels-demo`'s.
pub const TARGETS: &str = "sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120";

/// The archs shipped as NVRTC 12 CUBINs (the lowest also as PTX): CUDA 12
/// drivers on every GPU, and Maxwell to Volta; the same as
/// `kiln-kernels-demo`'s.
pub const TARGETS_CUDA_12: &str = "sm_50,sm_60,sm_70,sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120";

/// Replaces [`TARGETS`] at build time (`KILN_DEMO_ARCHS=sm_90`): one toolchain,
/// whatever NVRTC the machine has.
pub const TARGETS_VARIABLE: &str = "KILN_DEMO_ARCHS";

/// The oldest driver the plan states it serves (`KILN_DEMO_OLDEST_DRIVER=13.5`).
pub const OLDEST_DRIVER_VARIABLE: &str = "KILN_DEMO_OLDEST_DRIVER";

/// Version of the generator below: recorded as the fingerprint of the
/// definition every kernel depends on. Bump it when the generated code changes.
pub const GENERATOR_VERSION: &str = "activations v1";

/// The definition every kernel of this library depends on.
pub const DEFINITION: &str = "kiln-activations-demo::generator";

/// Elementwise activation functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Activation {
    /// `max(x, 0)`
    Relu,
    /// `1 / (1 + e^-x)`
    Sigmoid,
    /// `tanh(x)`
    Tanh,
    /// `x * Φ(x)`, with the exact normal CDF through `erf`.
    Gelu,
}

/// Element types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Float {
    /// `float`
    F32,
    /// `double`
    F64,
}

/// One generated kernel: `y[i] = activation(x[i])` for `i < n`, arguments
/// `(int n, const T* x, T* y)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    /// The function applied.
    pub activation: Activation,
    /// The element type.
    pub float: Float,
}

impl Kernel {
    /// Every activation over `f32` and `f64`: what the library precompiles.
    pub fn all() -> Vec<Kernel> {
        let activations = [
            Activation::Relu,
            Activation::Sigmoid,
            Activation::Tanh,
            Activation::Gelu,
        ];
        let mut all = Vec::new();
        for float in [Float::F32, Float::F64] {
            all.extend(
                activations
                    .iter()
                    .map(|&activation| Kernel { activation, float }),
            );
        }
        all
    }

    /// The kernel's name and entry point: `kiln_relu_f32`.
    pub fn name(&self) -> String {
        let float = match self.float {
            Float::F32 => "f32",
            Float::F64 => "f64",
        };
        format!("kiln_{:?}_{float}", self.activation).to_lowercase()
    }

    /// The generated CUDA C++.
    pub fn source(&self) -> String {
        let t = match self.float {
            Float::F32 => "float",
            Float::F64 => "double",
        };
        let body = match self.activation {
            Activation::Relu => format!("v > ({t})0 ? v : ({t})0"),
            Activation::Sigmoid => format!("({t})1 / (({t})1 + exp(-v))"),
            Activation::Tanh => "tanh(v)".to_owned(),
            Activation::Gelu => {
                format!("({t})0.5 * v * (({t})1 + erf(v * ({t})0.70710678118654752440))")
            }
        };
        format!(
            "extern \"C\" __global__ void {name}(int n, const {t}* __restrict__ x, {t}* __restrict__ y) {{\n\
             \x20   int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
             \x20   if (i < n) {{ {t} v = x[i]; y[i] = {body}; }}\n\
             }}\n",
            name = self.name()
        )
    }

    /// The compile request for `arch`, recording the generator's version as a
    /// dependency.
    pub fn request(&self, arch: Arch) -> KernelRequest {
        KernelRequest::new(self.name(), self.source(), arch)
            .name_expression(self.name())
            .dep(DEFINITION, Digest::of(GENERATOR_VERSION.as_bytes()))
    }
}

/// The compile request of `kernel` for `arch` (the generated code uses no
/// header set, so any toolchain gives the same request).
///
/// # Errors
/// Never fails: it returns a `Result` because that is the request function
/// [`KernelLibrary`](kiln::cuda::KernelLibrary) and
/// [`ShipPlan`](kiln::cuda::ShipPlan) take.
pub fn request(
    kernel: &Kernel,
    _toolchain: &Toolchain,
    arch: Arch,
) -> Result<KernelRequest, kiln::cuda::Error> {
    Ok(kernel.request(arch))
}
