//! Every kernel the application asks for, from both libraries.

use std::time::{Duration, Instant};

use kiln::cuda::{Arch, KernelRequest};
use kiln::{Cache, Hit};
use kiln_activations_demo::{Activations, Kernel as Activation};
use kiln_kernels_demo::{KernelSpec, Kernels};

/// The two kernel libraries, set up for one arch.
pub struct Libraries {
    pub kernels: Kernels,
    pub activations: Activations,
}

/// What setting the libraries up cost.
pub struct SetupTimes {
    /// Loading NVRTC to learn its exact version (part of every owner).
    pub nvrtc: Duration,
    /// Fingerprinting the CUB headers (part of the CUB kernels' keys).
    pub cub_headers: Duration,
}

impl Libraries {
    /// Both libraries for `arch`.
    pub fn new(arch: Arch) -> Result<(Libraries, SetupTimes), kiln::cuda::Error> {
        let started = Instant::now();
        let libraries = Libraries {
            kernels: Kernels::new(arch)?,
            activations: Activations::new(arch)?,
        };
        let nvrtc = started.elapsed();
        let started = Instant::now();
        kiln_kernel_set::cccl_include_dir()?;
        let cub_headers = started.elapsed();
        Ok((libraries, SetupTimes { nvrtc, cub_headers }))
    }
}

/// One kernel the application uses.
#[derive(Clone, Copy, Debug)]
pub enum Wanted {
    /// From `kiln-kernels-demo`.
    Demo(KernelSpec),
    /// From `kiln-activations-demo`.
    Activation(Activation),
}

impl Wanted {
    /// Everything the application uses: all of both libraries' common kernels.
    pub fn all() -> Vec<Wanted> {
        let demo = kiln_kernels_demo::catalogue::common()
            .into_iter()
            .map(Wanted::Demo);
        let activations = Activation::all().into_iter().map(Wanted::Activation);
        demo.chain(activations).collect()
    }

    /// A few specializations of `kiln-kernels-demo` that its precompile
    /// block does not ship (other dtypes and block sizes): what an
    /// application's own workload adds, compiled on first use unless an
    /// image of the application's holds them (`--extra`).
    pub fn extras() -> Vec<Wanted> {
        use kiln_kernels_demo::{Dtype, ReduceOp};
        [
            KernelSpec::Axpy { dtype: Dtype::I32 },
            KernelSpec::Axpby { dtype: Dtype::U32 },
            KernelSpec::BlockReduce {
                dtype: Dtype::F32,
                op: ReduceOp::Min,
                block: 128,
            },
        ]
        .into_iter()
        .map(Wanted::Demo)
        .collect()
    }

    /// The library the kernel comes from.
    pub fn library(&self) -> &'static str {
        match self {
            Wanted::Demo(_) => "kiln-kernels-demo",
            Wanted::Activation(_) => "kiln-activations-demo",
        }
    }

    /// The kernel's name.
    pub fn name(&self) -> String {
        match self {
            Wanted::Demo(spec) => spec.name(),
            Wanted::Activation(kernel) => kernel.name(),
        }
    }

    /// The kernel's compile request.
    pub fn request(&self, libraries: &Libraries) -> Result<KernelRequest, kiln::cuda::Error> {
        match self {
            Wanted::Demo(spec) => libraries.kernels.request(spec),
            Wanted::Activation(kernel) => Ok(libraries.activations.request(kernel)),
        }
    }

    /// The compiled kernel, from `cache` or compiled now.
    pub fn get<'c>(
        &self,
        libraries: &Libraries,
        cache: &'c Cache,
    ) -> Result<Hit<'c>, kiln::cuda::Error> {
        match self {
            Wanted::Demo(spec) => libraries.kernels.get(cache, spec),
            Wanted::Activation(kernel) => libraries.activations.get(cache, kernel),
        }
    }
}
