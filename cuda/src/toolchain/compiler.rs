//! The NVRTC backend as the cache sees it: a [`KernelRequest`] in, a [`Compiled`]
//! entry (CUBIN for the exact arch plus PTX as the fallback) out, under the request's
//! [`Owner`] and [`Key`].

use kiln_core::{Artifact, ArtifactKind, Cache, Compiled, Hit, Key, Owner};

use super::error::{CompileError, ToolchainError};
use super::identity::{NvrtcIdentity, intern};
use super::memo::MemoDir;
use super::nvrtc::{CompileInput, Nvrtc, NvrtcVersion, banner_release};
use super::{KernelRequest, SearchConfig};

/// The output of one NVRTC compile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledKernel {
    /// The CUBIN for the request's exact arch (an ELF file).
    pub cubin: Vec<u8>,
    /// The PTX for the arch's virtual arch (text, no trailing NUL).
    pub ptx: Vec<u8>,
    /// The lowered name of each name expression, in the request's order; then,
    /// for a request of [`KernelRequest::every_kernel`], every other `extern "C"`
    /// kernel of the program, in the PTX's order.
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

/// The `extern "C"` kernels PTX defines, in order: the names of its `.entry`
/// directives that are not C++-mangled (`_Z...`).
///
/// ```text
/// .visible .entry add_f32(      -> add_f32
/// .visible .entry _Z4scalePf(   -> (C++: left out)
/// ```
pub(crate) fn extern_c_kernels(ptx: &str) -> impl Iterator<Item = &str> {
    ptx.lines().filter_map(|line| {
        let line = line.split("//").next()?;
        let mut words = line.split_whitespace();
        words.find(|w| *w == ".entry")?;
        let name = words.next()?;
        let name = name.split('(').next()?;
        (!name.is_empty() && !name.starts_with("_Z")).then_some(name)
    })
}

/// Compiles [`KernelRequest`]s with the process's NVRTC.
///
/// Creating one is cheap: it learns which NVRTC the owners name
/// ([`NvrtcIdentity`]), from a memo when an earlier process already read it, and loads
/// the library only for the first compile. So a process whose kernels are all found
/// in images never loads NVRTC.
///
/// ```no_run
/// use kiln_core::Cache;
/// use kiln_cuda::{Arch, Compiler, KernelRequest};
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
    identity: &'static NvrtcIdentity,
}

impl Compiler {
    /// A compiler on the process's NVRTC (located from the environment, its
    /// version from the memo when possible), loaded on the first compile.
    ///
    /// # Errors
    /// [`ToolchainError::NvrtcNotFound`] when no NVRTC library is found, or the error
    /// of learning its version.
    pub fn new() -> Result<Self, ToolchainError> {
        Ok(Self {
            identity: NvrtcIdentity::get()?,
        })
    }

    /// A compiler on the NVRTC `config` locates (several releases can compile in
    /// one process: each compiler calls its own library).
    ///
    /// # Errors
    /// [`ToolchainError::NvrtcNotFound`] when `config` locates no NVRTC library, or the
    /// error of learning its version.
    pub fn with_config(config: &SearchConfig) -> Result<Self, ToolchainError> {
        let identity = NvrtcIdentity::resolve(config, MemoDir::process())?;
        Ok(Self::with_identity(identity))
    }

    /// A compiler on the NVRTC `config` locates, its release read from `memo` when
    /// that holds the release of exactly the library files found (else the library
    /// is loaded to read it, and `memo` learns it). [`Compiler::with_config`] uses
    /// the process's memo directory.
    ///
    /// # Errors
    /// As [`Compiler::with_config`].
    pub fn with_memo(config: &SearchConfig, memo: &MemoDir) -> Result<Self, ToolchainError> {
        Ok(Self::with_identity(NvrtcIdentity::resolve(config, memo)?))
    }

    /// A compiler whose owners name `identity`.
    pub(crate) fn with_identity(identity: NvrtcIdentity) -> Self {
        Self {
            identity: intern(identity),
        }
    }

    /// A compiler for a process without NVRTC: owners name the recorded release
    /// `version` (the one the images were built with), lookups hit the images' entries
    /// of exactly that compiler, and a compile fails with [`ToolchainError::NoNvrtc`].
    pub fn recorded(version: NvrtcVersion) -> Self {
        Self::with_identity(NvrtcIdentity::recorded(version))
    }

    /// The process's NVRTC ([`Compiler::new`]) when one is installed, else
    /// [`Compiler::recorded`]. With NVRTC installed the owners name it, not the
    /// recorded release: entries built by another release are then compiled again
    /// rather than passed off as its own.
    ///
    /// A kernel library rather uses [`KernelLibrary`](crate::KernelLibrary), which
    /// looks its shipped entries up under the recorded release and header digests
    /// without locating anything, and finds NVRTC only on a miss.
    ///
    /// # Errors
    /// The error of [`Compiler::new`] other than [`ToolchainError::NvrtcNotFound`].
    pub fn new_or_recorded(version: NvrtcVersion) -> Result<Self, ToolchainError> {
        match Self::new() {
            Err(ToolchainError::NvrtcNotFound { .. }) => Ok(Self::recorded(version)),
            other => other,
        }
    }

    /// The NVRTC the owners name.
    pub fn identity(&self) -> &'static NvrtcIdentity {
        self.identity
    }

    /// The NVRTC library, loaded now if it is not yet (and checked to be the one the
    /// owners name).
    ///
    /// # Errors
    /// [`ToolchainError::NoNvrtc`] when the owners name a recorded NVRTC and none is
    /// installed; the errors of locating and loading NVRTC
    /// ([`ToolchainError::NvrtcIdentityChanged`]).
    pub fn nvrtc(&self) -> Result<&'static Nvrtc, ToolchainError> {
        self.identity.load()
    }

    /// NVRTC's exact version, as the owners name it.
    pub fn version(&self) -> &NvrtcVersion {
        self.identity.version()
    }

    /// The owner of `request`'s entries: NVRTC's version, the arch and the canonical
    /// options.
    ///
    /// # Errors
    /// [`CompileError::Cache`] when the owner cannot be built (see [`KernelRequest::owner`]).
    pub fn owner(&self, request: &KernelRequest) -> Result<Owner, CompileError> {
        request.owner(self.identity.version())
    }

    /// Compiles `request` to CUBIN and PTX, without the cache. Loads NVRTC on the
    /// first call, and checks that the compiler's banner names the release the owners
    /// name.
    ///
    /// # Errors
    /// The errors of [`Compiler::nvrtc`]; [`CompileError::Compile`] with NVRTC's log
    /// when the source does not compile; [`ToolchainError::Nvrtc`] when an NVRTC call
    /// fails; [`ToolchainError::NvrtcIdentityChanged`] when the PTX banner names another
    /// release.
    pub fn compile(&self, request: &KernelRequest) -> Result<CompiledKernel, CompileError> {
        let nvrtc = self.nvrtc()?;
        let headers: Vec<(String, String)> = request
            .headers()
            .iter()
            .map(|h| (h.name.clone(), h.content.clone()))
            .collect();
        let options = request.nvrtc_options()?;
        let program_name = format!("{}.cu", request.name());
        let output = nvrtc.compile(&CompileInput {
            program_name: &program_name,
            source: request.source(),
            headers: &headers,
            name_expressions: request.name_expressions(),
            options: &options,
            arch_label: request.arch().to_string(),
            want_cubin: true,
        })?;
        let version = self.identity.version();
        if let Some(found) = banner_release(&output.ptx, version.major, version.minor)
            && found != version.release
        {
            return Err(self.identity.changed(nvrtc, &found).into());
        }
        let mut entry_points = output.lowered;
        if request.finds_kernels() {
            let text = String::from_utf8_lossy(&output.ptx);
            for kernel in extern_c_kernels(&text) {
                if !entry_points.iter().any(|e| e == kernel) {
                    entry_points.push(kernel.to_owned());
                }
            }
        }
        Ok(CompiledKernel {
            cubin: output.cubin,
            ptx: output.ptx,
            entry_points,
        })
    }

    /// The cache entry of `kernel`, compiled from `request` by this compiler: its
    /// artifacts, and as deps the request's own plus the toolchain's
    /// ([`KernelRequest::entry_deps`]: `cuda.nvrtc` and the named header sets).
    pub fn entry(&self, kernel: CompiledKernel, request: &KernelRequest) -> Compiled {
        request
            .entry_deps(self.version())
            .into_iter()
            .fold(kernel.into_compiled(request.name()), |entry, dep| {
                entry.dep(dep.name, dep.fingerprint)
            })
    }

    /// The cached entry of `request`: looked up under its owner and key, compiled
    /// (once, even with concurrent callers) when missing, with the deps of
    /// [`Compiler::entry`].
    ///
    /// # Errors
    /// The errors of [`Compiler::compile`] when the entry is not cached;
    /// [`CompileError::Cache`] when its key or owner cannot be built or the cache
    /// reports a failure.
    pub fn compile_cached<'c>(
        &self,
        cache: &'c Cache,
        request: &KernelRequest,
    ) -> Result<Hit<'c>, CompileError> {
        let owner = self.owner(request)?;
        let key: Key = request.key()?;
        Ok(cache.get_or_compile(&owner, &key, || {
            Ok(self.entry(self.compile(request)?, request))
        })?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extern_c_kernels_are_the_unmangled_entries() {
        let ptx = "//\n.version 9.0\n.target sm_80\n\n\
                   .visible .entry add_f32(\n\t.param .u64 a\n)\n{\n}\n\
                   .visible .entry _Z5scalePf(\n)\n\
                   .entry relu_bf16 (\n)\n\
                   .visible .func helper(\n)\n\
                   // .entry in_a_comment(\n";
        let found: Vec<&str> = extern_c_kernels(ptx).collect();
        assert_eq!(found, ["add_f32", "relu_bf16"]);
    }
}
