//! The NVRTC backend as the cache sees it: a [`KernelRequest`] in, a [`Compiled`]
//! entry (CUBIN for the exact arch plus PTX as the fallback) out, under the request's
//! [`Owner`] and [`Key`].

use crate::{Artifact, ArtifactKind, Cache, Compiled, Hit, Key, Owner};

use super::nvrtc::{CompileInput, Nvrtc, NvrtcVersion};
use super::{Error, KernelRequest, SearchConfig};

/// The output of one NVRTC compile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledKernel {
    /// The CUBIN for the request's exact arch (an ELF file).
    pub cubin: Vec<u8>,
    /// The PTX for the arch's virtual arch (text, no trailing NUL).
    pub ptx: Vec<u8>,
    /// The lowered name of each name expression, in the request's order.
    pub entry_points: Vec<String>,
}

impl CompiledKernel {
    /// The cache entry: the CUBIN first, then the PTX, both with the lowered entry
    /// points.
    pub fn into_compiled(self, name: impl Into<String>) -> Compiled {
        let Self {
            cubin,
            ptx,
            entry_points,
        } = self;
        Compiled::new(name)
            .artifact(Artifact {
                kind: ArtifactKind::Cubin,
                entry_points: entry_points.clone(),
                bytes: cubin,
            })
            .artifact(Artifact {
                kind: ArtifactKind::Ptx,
                entry_points,
                bytes: ptx,
            })
    }
}

/// Compiles [`KernelRequest`]s with the process's NVRTC.
///
/// ```no_run
/// use kiln_core::Cache;
/// use kiln_core::cuda::{Arch, Compiler, KernelRequest};
///
/// let compiler = Compiler::new()?; // finds NVRTC (KILN_NVRTC, toolkit, loader path, wheel)
/// let cache = Cache::new();
/// let request = KernelRequest::new(
///     "saxpy",
///     "extern \"C\" __global__ void saxpy(int n, float a, const float* x, float* y) {\n\
///        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }",
///     "sm_90a".parse::<Arch>()?,
/// )
/// .name_expression("saxpy");
/// let hit = compiler.compile_cached(&cache, &request)?; // compiles
/// let again = compiler.compile_cached(&cache, &request)?; // a hit: no compile
/// assert_eq!(hit.key(), again.key());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Compiler {
    nvrtc: &'static Nvrtc,
}

impl Compiler {
    /// A compiler on the process's NVRTC, located from the environment on first use.
    pub fn new() -> Result<Self, Error> {
        Ok(Self {
            nvrtc: Nvrtc::get()?,
        })
    }

    /// A compiler on the NVRTC `config` locates (when this process has not loaded
    /// one already: cudarc binds a single NVRTC per process).
    pub fn with_config(config: &SearchConfig) -> Result<Self, Error> {
        Ok(Self {
            nvrtc: Nvrtc::load(config)?,
        })
    }

    /// The NVRTC in use.
    pub fn nvrtc(&self) -> &'static Nvrtc {
        self.nvrtc
    }

    /// NVRTC's exact version.
    pub fn version(&self) -> &NvrtcVersion {
        self.nvrtc.version()
    }

    /// The owner of `request`'s entries: NVRTC's version, the arch and the canonical
    /// options.
    pub fn owner(&self, request: &KernelRequest) -> Result<Owner, crate::Error> {
        request.owner(self.nvrtc.version())
    }

    /// Compiles `request` to CUBIN and PTX, without the cache.
    pub fn compile(&self, request: &KernelRequest) -> Result<CompiledKernel, Error> {
        let headers: Vec<(String, String)> = request
            .headers()
            .iter()
            .map(|h| (h.name.clone(), h.content.clone()))
            .collect();
        let options = request.nvrtc_options();
        let program_name = format!("{}.cu", request.name());
        let output = self.nvrtc.compile(&CompileInput {
            program_name: &program_name,
            source: request.source(),
            headers: &headers,
            name_expressions: request.name_expressions(),
            options: &options,
            arch_label: request.arch().to_string(),
            want_cubin: true,
        })?;
        Ok(CompiledKernel {
            cubin: output.cubin,
            ptx: output.ptx,
            entry_points: output.lowered,
        })
    }

    /// The cached entry of `request`: looked up under its owner and key, compiled
    /// (once, even with concurrent callers) when missing.
    pub fn compile_cached<'c>(
        &self,
        cache: &'c Cache,
        request: &KernelRequest,
    ) -> Result<Hit<'c>, crate::Error> {
        let owner = self.owner(request)?;
        let key: Key = request.key()?;
        cache.get_or_compile(&owner, &key, || {
            self.compile(request)
                .map(|kernel| kernel.into_compiled(request.name()))
        })
    }
}
