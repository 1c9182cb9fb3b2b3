//! The CUDA C++ generator, shared by the library and its build script
//! (`#[path]`), so that both derive the same keys.

use kiln::Hit;
use kiln::cache::Cache;
use kiln::cuda::{Arch, Compiler, KernelRequest};
use kiln::image::Digest;

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

    /// The compile request for `arch`.
    pub fn request(&self, arch: Arch) -> KernelRequest {
        KernelRequest::new(self.name(), self.source(), arch).name_expression(self.name())
    }
}

/// The cached kernel of `request` (an instance of `kernel`): from the cache
/// when there, else compiled with NVRTC and recorded.
pub fn fetch<'c>(
    compiler: &Compiler,
    cache: &'c Cache,
    kernel: &Kernel,
    request: &KernelRequest,
) -> Result<Hit<'c>, kiln::cuda::Error> {
    let owner = compiler.owner(request)?;
    let key = request.key()?;
    Ok(cache.get_or_compile(&owner, &key, || {
        Ok(compiler
            .compile(request)?
            .into_compiled(kernel.name())
            .dep(DEFINITION, Digest::of(GENERATOR_VERSION.as_bytes())))
    })?)
}
