//! Every kernel the application asks for, from both libraries.

use kiln::cache::Cache;
use kiln::cuda::Device;
use kiln::cuda::Served;
use kiln_activations_demo::Kernel as Activation;
use kiln_kernel_set::Dtype;
use kiln_kernels_demo::KernelSpec;

/// One kernel the application uses.
#[derive(Clone, Copy, Debug)]
pub enum Wanted {
    /// From `kiln-kernels-demo`.
    Demo(KernelSpec),
    /// From `kiln-activations-demo`.
    Activation(Activation),
}

impl Wanted {
    /// Everything the application uses: all of both libraries' common kernels;
    /// with `uncatalogued`, also `axpy_i32`, which `kiln-kernels-demo` does not
    /// precompile (so it is in no image and must be compiled).
    pub fn all(uncatalogued: bool) -> Vec<Wanted> {
        let demo = kiln_kernels_demo::catalogue::common()
            .into_iter()
            .map(Wanted::Demo);
        let activations = Activation::all().into_iter().map(Wanted::Activation);
        let mut all: Vec<Wanted> = demo.chain(activations).collect();
        if uncatalogued {
            all.push(Wanted::Demo(KernelSpec::Axpy { dtype: Dtype::I32 }));
        }
        all
    }

    /// A few specializations of `kiln-kernels-demo` that its precompile
    /// block does not ship (other dtypes and block sizes): what an
    /// application's own workload adds, compiled on first use unless an
    /// image of the application's holds them (`--extra`).
    pub fn extras() -> Vec<Wanted> {
        use kiln_kernel_set::ReduceOp;
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

    /// The kernel for `device`, from `cache` (shipped) or compiled now.
    pub fn get<'c>(
        &self,
        cache: &'c Cache,
        device: &Device,
    ) -> Result<Served<'c>, kiln::cuda::ServeError> {
        match self {
            Wanted::Demo(spec) => kiln_kernels_demo::get(cache, device, spec),
            Wanted::Activation(kernel) => kiln_activations_demo::get(cache, device, kernel),
        }
    }
}
