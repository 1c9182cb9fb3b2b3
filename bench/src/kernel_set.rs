//! What a run asks for: the realistic kernel set (through the example kernel
//! library, whose image is embedded) or the synthetic one (embedded by this
//! crate's build script).

use std::time::{Duration, Instant};

use kiln::cuda::Compiler;
use kiln::registry::EmbeddedImage;
use kiln::{ArtifactKind, Compiled, Key, Owner};
use kiln_kernels_demo::{Kernels, catalogue};

use crate::error::BenchError;
use crate::synthetic;

kiln::include_image!("kiln-bench-synthetic.kimg");

/// The artifact every mode must have in hand for each kernel: the one a launch
/// loads.
pub const IN_HAND: ArtifactKind = ArtifactKind::Cubin;

/// Which kernels a run asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// `KernelSpec::all()`: axpy/axpby and CUB block reduce/scan, compiled by
    /// NVRTC for the arch of `kiln-kernels-demo`'s image.
    Real,
    /// The synthetic entries of this crate's embedded image (no NVRTC).
    Synthetic,
}

/// A compile, as `Cache::get_or_compile` runs it on a miss.
type CompileFn = Box<dyn Fn() -> Result<Compiled, kiln::cuda::Error>>;

/// One kernel of a workload: its owner and key, and how to compile it.
pub struct Kernel {
    /// Human name.
    pub name: String,
    /// The compiler configuration.
    pub owner: Owner,
    /// The kernel's identity.
    pub key: Key,
    compile: CompileFn,
}

impl Kernel {
    /// Compiles the kernel (NVRTC for the real set).
    pub fn compile(&self) -> Result<Compiled, kiln::cuda::Error> {
        (self.compile)()
    }
}

impl Workload {
    /// The name in output and file names.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Real => "real",
            Workload::Synthetic => "synthetic",
        }
    }

    /// The crate whose embedded image holds this workload.
    pub fn image_crate(self) -> &'static str {
        match self {
            Workload::Real => "kiln-kernels-demo",
            Workload::Synthetic => env!("CARGO_PKG_NAME"),
        }
    }

    /// The embedded image holding this workload's entries.
    pub fn embedded(self) -> Result<&'static EmbeddedImage, BenchError> {
        let crate_name = self.image_crate();
        kiln::registry::embedded_images()
            .into_iter()
            .find(|image| image.crate_name() == crate_name)
            .ok_or(BenchError::NoEmbedded { crate_name })
    }

    /// Every kernel with its owner and key: what a program derives before its
    /// first lookup. For the real set this learns NVRTC's exact version (in every
    /// owner) and fingerprints the CCCL headers (part of the CUB kernels' keys).
    pub fn kernels(self) -> Result<KernelSet, BenchError> {
        match self {
            Workload::Real => real_kernels(),
            Workload::Synthetic => synthetic_kernels(),
        }
    }
}

/// A workload's kernels, and what deriving their owners and keys cost.
pub struct KernelSet {
    /// The kernels, in the order they are asked for.
    pub kernels: Vec<Kernel>,
    /// `Compiler::new()`: learning NVRTC's exact version (0 for the synthetic set).
    pub nvrtc: Duration,
    /// Locating and fingerprinting the CCCL headers (0 for the synthetic set).
    pub headers: Duration,
}

fn real_kernels() -> Result<KernelSet, BenchError> {
    let clock = Instant::now();
    let compiler = Compiler::new()?;
    let nvrtc = clock.elapsed();
    let clock = Instant::now();
    kiln_kernel_set::cccl_include_dir()?;
    let headers = clock.elapsed();
    let arch = Kernels::precompiled_arch()?;
    let mut kernels = Vec::new();
    for spec in catalogue::common() {
        let request = spec.request(arch)?;
        let owner = compiler.owner(&request)?;
        let key = request.key()?;
        let (definition, fingerprint) = catalogue::definition(&spec);
        let name = spec.name();
        let entry_name = name.clone();
        kernels.push(Kernel {
            name,
            owner,
            key,
            compile: Box::new(move || {
                let kernel = compiler.compile(&request)?;
                Ok(kernel
                    .into_compiled(entry_name.clone())
                    .dep(definition.clone(), fingerprint))
            }),
        });
    }
    Ok(KernelSet {
        kernels,
        nvrtc,
        headers,
    })
}

fn synthetic_kernels() -> Result<KernelSet, BenchError> {
    let owner = synthetic::owner()?;
    let kernels = (0..synthetic::EMBEDDED_ENTRIES as u64)
        .map(|index| {
            Ok(Kernel {
                name: synthetic::name(index),
                owner: owner.clone(),
                key: synthetic::key(index)?,
                compile: Box::new(move || {
                    Ok(Compiled::new(synthetic::name(index))
                        .artifact(synthetic::artifact(index, synthetic::EMBEDDED_PAYLOAD)))
                }),
            })
        })
        .collect::<Result<_, BenchError>>()?;
    Ok(KernelSet {
        kernels,
        nvrtc: Duration::ZERO,
        headers: Duration::ZERO,
    })
}
