//! What to compile: a [`KernelRequest`], its inputs fingerprinted, and the [`Key`]
//! and [`Owner`] derived from it.
//!
//! The key covers the kernel's identity: its name, the source, every header (by
//! content), every include directory (by the content of every file under it), the
//! name expressions and the specialization parameters. The owner covers the compiler
//! configuration: NVRTC's exact version, the arch and the canonical options. Paths
//! are in neither: an include directory is identified by what it holds, so the same
//! headers give the same key on every machine.
//!
//! An include directory can also stand for a *recorded* digest ([`IncludeDir::recorded`]):
//! the digest a kernel library's build script recorded (see
//! [`BuildRecord`](super::BuildRecord)). A request built with one derives the same key
//! without reading a file, so a process whose kernels are all in images never touches
//! the headers; compiling it needs the real directory and is refused
//! ([`CompileError::RecordedIncludeDir`]).
//!
//! Besides key and owner, a request carries the definitions its entry depends on
//! ([`KernelRequest::dep`]), and the toolchain it is compiled with becomes two more
//! ([`KernelRequest::entry_deps`]): `cuda.nvrtc` at the compiler's release and
//! `cuda.headers.<set>` at the digest of each named header set (CCCL: `cccl`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use kiln_core::{Dep, Digest, Key, KeyBuilder, Owner};

use super::{Arch, CanonicalOptions, MemoDir};
use crate::toolchain::NvrtcVersion;
use crate::toolchain::error::{CompileError, ToolchainError};
use crate::toolchain::include_tree;

/// The schema name and version of CUDA kernel keys; bump the version when the key
/// derivation changes.
pub const KEY_SCHEMA: (&str, u32) = ("kiln.cuda.kernel", 1);

/// The compiler id in every CUDA owner.
pub const COMPILER_ID: &str = "nvrtc";

/// The dependency name under which every CUDA entry records the NVRTC release it was
/// compiled by (fingerprint: [`nvrtc_fingerprint`]).
pub const NVRTC_DEP: &str = "cuda.nvrtc";

/// The prefix of the dependency names under which a CUDA entry records the digest of
/// each named header set it was compiled with: `cuda.headers.cccl`.
pub const HEADERS_DEP_PREFIX: &str = "cuda.headers.";

/// The fingerprint of NVRTC release `version` as entries record it under
/// [`NVRTC_DEP`].
pub fn nvrtc_fingerprint(version: &NvrtcVersion) -> Digest {
    let mut hasher = blake3::Hasher::new_derive_key("kiln cuda nvrtc release v1");
    hasher.update(version.release.as_bytes());
    Digest(*hasher.finalize().as_bytes())
}

/// A header given by content, included by `#include "name"`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// The name the source includes it by.
    pub name: String,
    /// Its text.
    pub content: String,
}

/// An include directory whose every file Kiln has fingerprinted.
///
/// The digest covers each regular file's path relative to the directory and its
/// bytes, in sorted order (symbolic links are followed; a folder reached twice is
/// walked once, so link cycles end). It depends on nothing but the tree, so the same
/// headers give the same key on every machine.
///
/// Hashing a big tree such as CCCL (1,700 files, 17 MB) takes tens of milliseconds,
/// so [`IncludeDir::new`] avoids it twice over: within a process it remembers the
/// digest of each canonical path, and across processes it keeps an identity memo
/// (see [`MemoDir`]): the digest together with the tree's manifest, every folder and
/// file by relative path with its stamp (device, inode, size, mode, modification and
/// status-change times). A fresh process checks the manifest with one `statx` per
/// folder and file (no folder is listed, no file is read) and reuses the memoized
/// digest only when every stamp is unchanged; any added, removed, renamed or written
/// file changes a folder's or a file's stamp and makes it hash the tree again.
///
/// A directory may belong to a named *header set* ([`IncludeDir::named`]; the CCCL
/// headers are the set `cccl`): entries compiled with it then record its digest as the
/// dependency `cuda.headers.<set>`, and a kernel library's build records it, so that a
/// process can stand for the directory by that digest alone
/// ([`IncludeDir::recorded`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IncludeDir {
    /// `None` for a recorded digest: no directory on this machine.
    path: Option<PathBuf>,
    digest: Digest,
    set: Option<String>,
}

impl IncludeDir {
    /// Fingerprints `path`, or reuses this process's fingerprint of it, or the
    /// process's memo of it ([`MemoDir::process`]) when no file changed since.
    ///
    /// # Errors
    /// [`ToolchainError::Io`] when the directory or one of its files cannot be read.
    pub fn new(path: impl AsRef<Path>) -> Result<Self, ToolchainError> {
        let path = canonical(path.as_ref())?;
        static SEEN: OnceLock<Mutex<HashMap<PathBuf, Digest>>> = OnceLock::new();
        let seen = SEEN.get_or_init(Default::default);
        let cached = seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&path)
            .copied();
        let digest = match cached {
            Some(digest) => digest,
            None => {
                let digest = include_tree::memoized_digest(&path, MemoDir::process())?;
                seen.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(path.clone(), digest);
                digest
            }
        };
        Ok(Self::found(path, digest))
    }

    /// Fingerprints `path` through the memos of `memo`, ignoring this process's
    /// earlier fingerprint: the tree is stat-walked, and hashed only when the memo
    /// does not match it.
    ///
    /// # Errors
    /// [`ToolchainError::Io`] when the directory or one of its files cannot be read.
    pub fn with_memo(path: impl AsRef<Path>, memo: &MemoDir) -> Result<Self, ToolchainError> {
        let path = canonical(path.as_ref())?;
        let digest = include_tree::memoized_digest(&path, memo)?;
        Ok(Self::found(path, digest))
    }

    /// Fingerprints `path` afresh by hashing every file, trusting neither this
    /// process's earlier fingerprint nor a memo (for directories whose contents
    /// change while the process runs).
    ///
    /// # Errors
    /// [`ToolchainError::Io`] when the directory or one of its files cannot be read.
    pub fn rescan(path: impl AsRef<Path>) -> Result<Self, ToolchainError> {
        let path = canonical(path.as_ref())?;
        let digest = include_tree::hash_tree(&path)?;
        Ok(Self::found(path, digest))
    }

    /// Stands for header set `set` by the digest a build recorded, without a
    /// directory: a request built with it has the key of one built with the real
    /// directory (the key holds only the digest), reads no file, and cannot be
    /// compiled.
    ///
    /// ```
    /// use kiln_core::Digest;
    /// use kiln_cuda::IncludeDir;
    /// let cccl = IncludeDir::recorded("cccl", Digest::of(b"the tree"));
    /// assert_eq!((cccl.path(), cccl.set()), (None, Some("cccl")));
    /// ```
    pub fn recorded(set: impl Into<String>, digest: Digest) -> Self {
        Self {
            path: None,
            digest,
            set: Some(set.into()),
        }
    }

    /// The same directory as a member of header set `set` (`cccl` for the CCCL
    /// headers): entries compiled with it record its digest as the dependency
    /// `cuda.headers.<set>`.
    pub fn named(mut self, set: impl Into<String>) -> Self {
        self.set = Some(set.into());
        self
    }

    fn found(path: PathBuf, digest: Digest) -> Self {
        Self {
            path: Some(path),
            digest,
            set: None,
        }
    }

    /// The directory (canonical path); `None` for a recorded digest.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The header set it belongs to, if named.
    pub fn set(&self) -> Option<&str> {
        self.set.as_deref()
    }

    /// The fingerprint of everything under it.
    pub fn digest(&self) -> Digest {
        self.digest
    }
}

fn canonical(given: &Path) -> Result<PathBuf, ToolchainError> {
    given.canonicalize().map_err(|source| ToolchainError::Io {
        path: given.to_path_buf(),
        source,
    })
}

/// One kernel program to compile: source, headers, entry points, specialization and
/// target.
///
/// ```
/// use kiln_cuda::{Arch, KernelRequest};
/// let request = KernelRequest::new(
///     "scale",
///     "template <typename T> __global__ void scale(T* x, T a) { x[threadIdx.x] *= a; }",
///     "sm_90a".parse::<Arch>()?,
/// )
/// .name_expression("scale<float>")
/// .param("T", "float")
/// .options(["-use_fast_math"])?;
/// assert_eq!(request.name_expressions(), ["scale<float>"]);
/// # Ok::<(), kiln_cuda::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelRequest {
    name: String,
    source: String,
    headers: Vec<Header>,
    include_dirs: Vec<IncludeDir>,
    name_expressions: Vec<String>,
    params: BTreeMap<String, String>,
    arch: Arch,
    options: CanonicalOptions,
    deps: Vec<Dep>,
    every_kernel: bool,
}

impl KernelRequest {
    /// A request with no headers, entry points, parameters or options yet.
    pub fn new(name: impl Into<String>, source: impl Into<String>, arch: Arch) -> Self {
        Self {
            name: name.into(),
            source: source.into(),
            headers: Vec::new(),
            include_dirs: Vec::new(),
            name_expressions: Vec::new(),
            params: BTreeMap::new(),
            arch,
            options: CanonicalOptions::default(),
            deps: Vec::new(),
            every_kernel: false,
        }
    }

    /// Adds a header by content (replacing one of the same name).
    pub fn header(mut self, name: impl Into<String>, content: impl Into<String>) -> Self {
        let header = Header {
            name: name.into(),
            content: content.into(),
        };
        self.headers.retain(|h| h.name != header.name);
        self.headers.push(header);
        self
    }

    /// Adds an include directory; searched in the order added.
    pub fn include_dir(mut self, dir: IncludeDir) -> Self {
        self.include_dirs.push(dir);
        self
    }

    /// Adds Kiln's C and C++ library headers for NVRTC (`stdint.h`, `math.h`,
    /// `cmath`, `cuda.h`'s `CUDA_VERSION`...: [`c_headers`](crate::toolchain::c_headers)), by
    /// content, in the key. A header of the same name added before is replaced;
    /// add your own after this call to replace one of Kiln's.
    ///
    /// ```
    /// use kiln_cuda::{Arch, KernelRequest};
    /// let request = KernelRequest::new(
    ///     "fill",
    ///     "#include <stdint.h>\nextern \"C\" __global__ void fill(int64_t* x) { x[0] = INT64_MAX; }",
    ///     "sm_80".parse::<Arch>()?,
    /// )
    /// .c_headers();
    /// assert!(request.headers().iter().any(|h| h.name == "stdint.h"));
    /// # Ok::<(), kiln_cuda::Error>(())
    /// ```
    pub fn c_headers(self) -> Self {
        crate::toolchain::c_headers::HEADERS
            .iter()
            .fold(self, |request, (name, text)| request.header(*name, *text))
    }

    /// Asks for every `extern "C"` kernel the source defines as an entry point,
    /// after the name expressions' lowered names: the compiler finds them (the
    /// PTX's `.entry` lines whose names are not C++-mangled), so kernels generated
    /// by macros need not be listed. The entry records them, and a library looks a
    /// kernel up by its name
    /// ([`KernelLibrary::get_kernel`](crate::KernelLibrary::get_kernel)). Part of the
    /// key (the entry points differ).
    pub fn every_kernel(mut self) -> Self {
        self.every_kernel = true;
        self
    }

    /// Whether the request asks for every `extern "C"` kernel
    /// ([`KernelRequest::every_kernel`]).
    pub fn finds_kernels(&self) -> bool {
        self.every_kernel
    }

    /// Adds an entry point: a name expression such as `"saxpy<float>"` or
    /// `"my_extern_c_kernel"`. Its lowered (mangled) name becomes an entry point of
    /// the artifacts, in the order added.
    pub fn name_expression(mut self, expr: impl Into<String>) -> Self {
        self.name_expressions.push(expr.into());
        self
    }

    /// Records a specialization parameter (type, constant, block size...). It goes
    /// into the key; the source or the name expressions must use it.
    pub fn param(mut self, label: impl Into<String>, value: impl ToString) -> Self {
        self.params.insert(label.into(), value.to_string());
        self
    }

    /// Sets the NVRTC options, canonicalized (see [`CanonicalOptions`]).
    ///
    /// # Errors
    /// As [`CanonicalOptions::new`].
    pub fn options<I>(mut self, options: I) -> Result<Self, CompileError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.options = CanonicalOptions::new(options)?;
        Ok(self)
    }

    /// Records that the entry is built from definition `name` at `fingerprint` (the
    /// library's source of the kernel family, a generator version...). Not part of
    /// the key (the source and parameters are): it lets a process that redefines
    /// `name` ([`Cache::redefine`](kiln_core::Cache::redefine)) close the entries built
    /// from the old definition. A second dep of the same name replaces the first.
    pub fn dep(mut self, name: impl Into<String>, fingerprint: Digest) -> Self {
        let name = name.into();
        self.deps.retain(|d| d.name != name);
        self.deps.push(Dep { name, fingerprint });
        self
    }

    /// Changes the target arch.
    pub fn with_arch(mut self, arch: Arch) -> Self {
        self.arch = arch;
        self
    }

    /// The human name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The headers given by content.
    pub fn headers(&self) -> &[Header] {
        &self.headers
    }

    /// The include directories.
    pub fn include_dirs(&self) -> &[IncludeDir] {
        &self.include_dirs
    }

    /// The name expressions, in order: entry point `i` of an artifact is the lowered
    /// name of `name_expressions()[i]`.
    pub fn name_expressions(&self) -> &[String] {
        &self.name_expressions
    }

    /// The specialization parameters.
    pub fn params(&self) -> &BTreeMap<String, String> {
        &self.params
    }

    /// The target arch.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The canonical options.
    pub fn canonical_options(&self) -> &CanonicalOptions {
        &self.options
    }

    /// The definitions given with [`KernelRequest::dep`].
    pub fn deps(&self) -> &[Dep] {
        &self.deps
    }

    /// Every dependency the entry of this request records when NVRTC `nvrtc`
    /// compiles it: the request's own ([`KernelRequest::dep`]), then `cuda.nvrtc`
    /// ([`NVRTC_DEP`]) at the release, then `cuda.headers.<set>` at the digest of each
    /// named include directory.
    ///
    /// A process that defines these names at its own toolchain's fingerprints
    /// ([`Toolchain::define_in`](super::Toolchain::define_in)) makes the cache treat
    /// entries of another toolchain as stale.
    pub fn entry_deps(&self, nvrtc: &NvrtcVersion) -> Vec<Dep> {
        let mut deps = self.deps.clone();
        deps.push(Dep {
            name: NVRTC_DEP.to_owned(),
            fingerprint: nvrtc_fingerprint(nvrtc),
        });
        for dir in &self.include_dirs {
            if let Some(set) = &dir.set {
                let name = format!("{HEADERS_DEP_PREFIX}{set}");
                if !deps.iter().any(|d| d.name == name) {
                    deps.push(Dep {
                        name,
                        fingerprint: dir.digest,
                    });
                }
            }
        }
        deps
    }

    /// The key: everything about the kernel that changes its code, except what the
    /// owner covers (NVRTC version, arch, options).
    ///
    /// # Errors
    /// [`CompileError::Cache`] when a field cannot be encoded into the key.
    pub fn key(&self) -> Result<Key, CompileError> {
        // Exhaustive: a new field must be placed in the key or the owner here.
        let Self {
            name,
            source,
            headers,
            include_dirs,
            name_expressions,
            params,
            arch: _,    // in the owner
            options: _, // in the owner
            deps: _,    // recorded by the entry; the source and params are keyed
            every_kernel,
        } = self;
        let mut headers: Vec<(&str, [u8; 32])> = headers
            .iter()
            .map(|h| {
                (
                    h.name.as_str(),
                    *blake3::hash(h.content.as_bytes()).as_bytes(),
                )
            })
            .collect();
        headers.sort();
        let include_digests: Vec<[u8; 32]> = include_dirs.iter().map(|d| d.digest.0).collect();
        let (schema, version) = KEY_SCHEMA;
        let builder = KeyBuilder::new(schema, version)
            .str("name", name)
            .bytes("source", source.as_bytes())
            .field("headers", &headers)?
            .field("include_dirs", &include_digests)?
            .field("name_expressions", name_expressions)?
            .field("params", params)?;
        // Only when asked for, so that the keys of other requests stay those they
        // always were.
        let builder = if *every_kernel {
            builder.bool("every_extern_c_kernel", true)
        } else {
            builder
        };
        Ok(builder.finish())
    }

    /// The owner for this request under NVRTC `version`.
    ///
    /// # Errors
    /// [`CompileError::Cache`] when the version or the arch is empty.
    pub fn owner(&self, version: &NvrtcVersion) -> Result<Owner, CompileError> {
        Ok(Owner::new(
            COMPILER_ID,
            version.release.as_str(),
            self.arch.to_string(),
            self.options.as_slice(),
        )?)
    }

    /// The full NVRTC option list: canonical options, the arch, include paths.
    ///
    /// Fails with [`CompileError::RecordedIncludeDir`] for an include directory known only by
    /// its recorded digest.
    pub(crate) fn nvrtc_options(&self) -> Result<Vec<String>, CompileError> {
        let mut all = self.options.as_slice().to_vec();
        all.push(format!("--gpu-architecture={}", self.arch));
        for dir in &self.include_dirs {
            let Some(path) = &dir.path else {
                return Err(CompileError::RecordedIncludeDir {
                    kernel: self.name.clone(),
                    set: dir.set.clone().unwrap_or_default(),
                });
            };
            all.push(format!("--include-path={}", path.display()));
        }
        Ok(all)
    }
}
