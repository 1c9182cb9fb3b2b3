//! What a run asks for: the realistic kernel set (through the example kernel
//! library, whose image is embedded) or the synthetic one (embedded by this
//! crate's build script).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kiln::cuda::{Arch, Toolchain};
use kiln::registry::EmbeddedImage;
use kiln::{ArtifactKind, Compiled, Key, Owner};
use kiln_kernels_demo::{KernelSpec, catalogue};

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
    /// NVRTC for [`REAL_ARCH`] (one of `kiln-kernels-demo`'s targets).
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
    /// The example library's specialization (the real set only).
    pub spec: Option<KernelSpec>,
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
    /// first lookup. For the real set, from the toolchain `kiln-kernels-demo`'s
    /// build recorded (NVRTC's exact release, the CCCL digest): nothing is
    /// located, loaded or read.
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
    /// Learning NVRTC's exact release: reading the build record (0 for the
    /// synthetic set).
    pub nvrtc: Duration,
    /// The CCCL headers' digest: recorded too, so nothing to do (0).
    pub headers: Duration,
}

/// The arch the real set is asked for: Hopper (H100, H200).
pub const REAL_ARCH: &str = "sm_90";

/// This machine's toolchain, for the compiles of the cold mode and the
/// fixtures: located on the first compile, once per process.
fn local_toolchain() -> Result<&'static Toolchain, kiln::cuda::Error> {
    static LOCAL: OnceLock<Toolchain> = OnceLock::new();
    if let Some(local) = LOCAL.get() {
        return Ok(local);
    }
    let local = Toolchain::local()?;
    Ok(LOCAL.get_or_init(|| local))
}

fn real_kernels() -> Result<KernelSet, BenchError> {
    let clock = Instant::now();
    let record = kiln_kernels_demo::library().record()?;
    let recorded = Toolchain::recorded(record).ok_or_else(|| BenchError::Missing {
        mode: "real".to_owned(),
        kernel: "every kernel: kiln-kernels-demo was built without NVRTC".to_owned(),
    })?;
    let nvrtc = clock.elapsed();
    let arch: Arch = REAL_ARCH.parse().map_err(kiln::cuda::Error::from)?;
    let mut kernels = Vec::new();
    for spec in catalogue::common() {
        let request = catalogue::request(&spec, &recorded, arch)?;
        let owner = request.owner(recorded.nvrtc())?;
        let key = request.key()?;
        kernels.push(Kernel {
            name: spec.name(),
            owner,
            key,
            spec: Some(spec),
            compile: Box::new(move || {
                let local = local_toolchain()?;
                let request = catalogue::request(&spec, local, arch)?;
                let compiler = local.compiler().copied().ok_or_else(|| {
                    kiln::cuda::ToolchainError::NoNvrtc {
                        version: local.nvrtc().release.clone(),
                    }
                })?;
                let kernel = compiler.compile(&request)?;
                Ok(compiler.entry(kernel, &request))
            }),
        });
    }
    Ok(KernelSet {
        kernels,
        nvrtc,
        headers: Duration::ZERO,
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
                spec: None,
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
