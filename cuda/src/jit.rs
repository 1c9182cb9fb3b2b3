//! The driver's JIT, paid once per fleet: the CUBIN the CUDA driver produces from a
//! PTX entry is kept as a cache entry of its own.
//!
//! When a device runs no shipped CUBIN, the loader hands the PTX to the driver,
//! which JIT-compiles it (seconds for a large module). The CUBIN it produces
//! (`cuLinkComplete`'s output) depends on exactly three things: the PTX entry, the
//! device's arch and the driver's release. So it is an entry like any other:
//!
//! - **owner** [`JIT_COMPILER_ID`] at the driver's exact release (`580.159.04`,
//!   the user-space library that compiled it), for the device's exact arch
//!   (`sm_90`): no other driver or arch ever gets it;
//! - **key** ([`jit_key`]) the PTX entry's owner and key, and which kernels were
//!   compiled (all of them, or the few extracted from the module: see
//!   [`JitKernels`]);
//! - **deps** the PTX entry's own (so redefining what it was built from, or
//!   `KILN_STRICT_TOOLCHAIN`, closes the CUBIN too) plus [`JIT_SOURCE_DEP`], which
//!   names the PTX entry it came from; its name says the same for people
//!   (`kiln inspect`, `kiln report`).
//!
//! [`get_or_jit`] goes through [`Cache::get_or_compile`], so the CUBIN comes from
//! memory, the images (an application's `kiln bake` takes it like any recorded
//! entry), the disk tier and the remote tier (signed by the fleet's signing key,
//! under the trust rules of any remote entry) before the driver is asked; the
//! driver's output is stored into every tier in the background. Only the call
//! that JIT-compiles needs a GPU: everything here is tested without one.

use std::fmt;

use kiln_core::{
    Artifact, ArtifactKind, Cache, Compiled, Dep, Digest, Hit, Key, KeyBuilder, Owner,
};

use crate::Arch;
use crate::loader::error::LoadError;

/// The compiler id of the owners of JIT-compiled CUBINs.
pub const JIT_COMPILER_ID: &str = "cuda-driver-jit";

/// The schema name and version of JIT entries' keys; bump the version when
/// [`jit_key`] changes.
pub const JIT_KEY_SCHEMA: (&str, u32) = ("kiln.cuda.jit", 1);

/// The dependency under which a JIT entry names the PTX entry it was compiled
/// from (fingerprint: [`jit_source_fingerprint`]). No definition has this name,
/// so it never makes the entry stale; it is provenance.
pub const JIT_SOURCE_DEP: &str = "cuda.jit.ptx";

/// The device and driver a JIT-compiled CUBIN is for: the device's exact arch
/// and the exact release of the driver library that compiles.
///
/// ```
/// use kiln_cuda::Arch;
/// use kiln_cuda::jit::JitTarget;
/// let target = JitTarget::new("sm_90".parse::<Arch>()?, "580.159.04")?;
/// assert_eq!(target.owner()?.label(), "cuda-driver-jit-580.159.04/sm_90");
/// assert!(JitTarget::new("sm_90".parse::<Arch>()?, "latest").is_err());
/// # Ok::<(), kiln_cuda::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JitTarget {
    arch: Arch,
    driver: String,
}

impl JitTarget {
    /// A target of `arch` (the device's, exactly) whose driver is `driver_release`
    /// (`580.159.04`: digits and dots, at most 32 bytes).
    ///
    /// # Errors
    /// [`LoadError::InvalidDriverRelease`] when the release is not such a version.
    pub fn new(arch: Arch, driver_release: impl Into<String>) -> Result<JitTarget, LoadError> {
        let driver = driver_release.into();
        let valid = !driver.is_empty()
            && driver.len() <= 32
            && driver.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            && driver.split('.').all(|part| !part.is_empty());
        if !valid {
            return Err(LoadError::InvalidDriverRelease { given: driver });
        }
        Ok(JitTarget { arch, driver })
    }

    /// The device's arch.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The driver's release (`580.159.04`).
    pub fn driver(&self) -> &str {
        &self.driver
    }

    /// The owner of the CUBINs this driver compiles for this arch.
    ///
    /// # Errors
    /// Never in practice (every field is non-empty); the cache's owner error
    /// otherwise.
    pub fn owner(&self) -> Result<Owner, LoadError> {
        Ok(Owner::new(
            JIT_COMPILER_ID,
            self.driver.as_str(),
            self.arch.to_string(),
            std::iter::empty::<&str>(),
        )?)
    }
}

impl fmt::Display for JitTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} by driver {}", self.arch, self.driver)
    }
}

/// Which kernels of a PTX entry a CUBIN holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JitKernels<'a> {
    /// The whole module, every kernel.
    All,
    /// Only these kernels (lowered names) and what they call, extracted from the
    /// module (see [`PtxModule`](crate::ptx::PtxModule)).
    Only(&'a [&'a str]),
}

/// The key of the CUBIN of `kernels` JIT-compiled from the PTX entry
/// `(ptx_owner, ptx_key)`. The same inputs give the same key everywhere; the
/// order of the kernels does not matter.
///
/// ```
/// use kiln_core::{Digest, KeyBuilder};
/// use kiln_cuda::jit::{JitKernels, jit_key};
/// let (owner, key) = (Digest::of(b"owner"), KeyBuilder::new("k", 1).finish());
/// let ab = jit_key(&owner, &key, JitKernels::Only(&["a", "b"]));
/// assert_eq!(ab, jit_key(&owner, &key, JitKernels::Only(&["b", "a"])));
/// assert_ne!(ab, jit_key(&owner, &key, JitKernels::All));
/// ```
pub fn jit_key(ptx_owner: &Digest, ptx_key: &Key, kernels: JitKernels<'_>) -> Key {
    let (schema, version) = JIT_KEY_SCHEMA;
    let builder = KeyBuilder::new(schema, version)
        .bytes("ptx-owner", &ptx_owner.0)
        .key("ptx-key", ptx_key);
    match kernels {
        JitKernels::All => builder.bool("whole-module", true),
        JitKernels::Only(names) => {
            let mut sorted: Vec<&str> = names.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            let builder = builder
                .bool("whole-module", false)
                .u64("kernels", sorted.len() as u64);
            sorted
                .into_iter()
                .fold(builder, |builder, name| builder.str("kernel", name))
        }
    }
    .finish()
}

/// The fingerprint under which a JIT entry names its PTX entry
/// ([`JIT_SOURCE_DEP`]).
pub fn jit_source_fingerprint(ptx_owner: &Digest, ptx_key: &Key) -> Digest {
    let mut hasher = blake3::Hasher::new_derive_key("kiln cuda jit source v1");
    hasher.update(&ptx_owner.0);
    hasher.update(&ptx_key.digest().0);
    Digest(*hasher.finalize().as_bytes())
}

/// The PTX entry a CUBIN is JIT-compiled from: its identity and what the JIT
/// entry inherits from it. Taken from a cache hit ([`JitSource::of`]), so that
/// it can outlive the hit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitSource {
    owner: Digest,
    owner_label: String,
    key: Key,
    name: String,
    deps: Vec<Dep>,
    entry_points: Vec<String>,
}

impl JitSource {
    /// The PTX entry of `hit` (its identity, name, deps and the PTX's entry
    /// points); `None` when the entry carries no PTX.
    pub fn of(hit: &Hit<'_>) -> Option<JitSource> {
        let artifacts = hit.artifacts();
        let ptx = artifacts.iter().find(|a| a.kind == ArtifactKind::Ptx)?;
        Some(JitSource {
            owner: hit.owner(),
            owner_label: hit.owner_label().to_owned(),
            key: hit.key(),
            name: hit.name().to_owned(),
            deps: hit.deps().into_owned(),
            entry_points: ptx.entry_points.iter().map(|e| (*e).to_owned()).collect(),
        })
    }

    /// The PTX entry's owner digest.
    pub fn owner(&self) -> Digest {
        self.owner
    }

    /// The PTX entry's key.
    pub fn key(&self) -> Key {
        self.key
    }

    /// The PTX entry's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kernels (lowered names) the PTX declares.
    pub fn entry_points(&self) -> &[String] {
        &self.entry_points
    }

    /// The key of the CUBIN of `kernels` compiled from this entry.
    pub fn jit_key(&self, kernels: JitKernels<'_>) -> Key {
        jit_key(&self.owner, &self.key, kernels)
    }

    /// The entry recording `cubin`, compiled from this PTX for `target`: its
    /// name and deps as described in the module documentation, one
    /// [`ArtifactKind::Cubin`] artifact whose entry points are the kernels it
    /// holds.
    pub fn entry(&self, target: &JitTarget, kernels: JitKernels<'_>, cubin: Vec<u8>) -> Compiled {
        let (what, entry_points): (String, Vec<String>) = match kernels {
            JitKernels::All => ("all kernels".to_owned(), self.entry_points.clone()),
            JitKernels::Only(names) => (
                names.join(", "),
                names.iter().map(|name| (*name).to_owned()).collect(),
            ),
        };
        let mut compiled = Compiled::new(format!(
            "{} [{what}] JIT-compiled for {target} from the PTX of {}",
            self.name, self.owner_label
        ));
        compiled.deps = self.deps.clone();
        compiled.deps.push(Dep {
            name: JIT_SOURCE_DEP.to_owned(),
            fingerprint: jit_source_fingerprint(&self.owner, &self.key),
        });
        compiled.artifact(Artifact {
            kind: ArtifactKind::Cubin,
            entry_points,
            bytes: cubin,
        })
    }
}

/// The CUBIN of `kernels` of `source` for `target`: from `cache` (memory,
/// images, the disk and remote tiers) if any process that shares them compiled
/// it, else `link()` (the driver's JIT), recorded in `cache` and stored into its
/// tiers in the background.
///
/// ```
/// use kiln_core::{Artifact, ArtifactKind, Cache, Compiled, KeyBuilder, Owner};
/// use kiln_cuda::LoadError;
/// use kiln_cuda::jit::{JitKernels, JitSource, JitTarget, get_or_jit};
///
/// let cache = Cache::new();
/// let ptx_owner = Owner::new("nvrtc", "13.0.88", "sm_80", ["-std=c++17"])?;
/// let ptx_key = KeyBuilder::new("doc", 1).str("kernel", "k").finish();
/// let ptx = cache.insert(&ptx_owner, &ptx_key, Compiled::new("k").artifact(Artifact {
///     kind: ArtifactKind::Ptx,
///     entry_points: vec!["k".into()],
///     bytes: b".version 9.0\n.target sm_80\n".to_vec(),
/// }));
/// let source = JitSource::of(&ptx).expect("a PTX entry");
/// let target = JitTarget::new("sm_90".parse()?, "580.159.04")?;
/// // On a GPU `link` is the driver (the loader does this); here, any bytes.
/// let first = get_or_jit(&cache, &source, &target, JitKernels::All, || {
///     Ok::<_, LoadError>(b"cubin".to_vec())
/// })?;
/// let again = get_or_jit(&cache, &source, &target, JitKernels::All, || -> Result<_, LoadError> {
///     unreachable!()
/// })?;
/// assert_eq!(again.artifact(&ArtifactKind::Cubin), Some(&b"cubin"[..]));
/// assert_eq!(cache.stats().compiles, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// `link`'s error, inside [`LoadError::Cache`] (a [`kiln_core::Error::Compile`]).
pub fn get_or_jit<'c, E>(
    cache: &'c Cache,
    source: &JitSource,
    target: &JitTarget,
    kernels: JitKernels<'_>,
    link: impl FnOnce() -> Result<Vec<u8>, E>,
) -> Result<Hit<'c>, LoadError>
where
    E: Into<kiln_core::BoxError>,
{
    let owner = target.owner()?;
    let key = source.jit_key(kernels);
    Ok(cache.get_or_compile(&owner, &key, || {
        let cubin = link().map_err(Into::into)?;
        Ok(source.entry(target, kernels, cubin))
    })?)
}

/// The CUBIN of `kernels` of `source` for `target` if `cache` has it (memory,
/// images, tiers); never compiles.
///
/// # Errors
/// Never in practice; the owner's error otherwise.
pub fn cached_jit<'c>(
    cache: &'c Cache,
    source: &JitSource,
    target: &JitTarget,
    kernels: JitKernels<'_>,
) -> Result<Option<Hit<'c>>, LoadError> {
    let owner = target.owner()?;
    Ok(cache.get_cached(&owner, &source.jit_key(kernels)))
}

/// The release of the CUDA driver library mapped into a process, from the text of
/// its `/proc/self/maps`: the version in the file name of the mapped
/// `libcuda.so.<release>` (`580.159.04`). `None` when no such file is mapped or
/// its name carries no release.
pub(crate) fn driver_release_from_maps(maps: &str) -> Option<String> {
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter_map(|path| path.rsplit('/').next())
        .find_map(|file| file.strip_prefix("libcuda.so."))
        .filter(|release| release.split('.').count() >= 2)
        .map(str::to_owned)
}

/// The release of the kernel module from the text of `/proc/driver/nvidia/version`
/// (`NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Wed ...`). The
/// user-space library must match it, except under CUDA's forward-compatibility
/// packages; it is the fallback when the mapped library's name carries no
/// release.
pub(crate) fn driver_release_from_proc_version(text: &str) -> Option<String> {
    let line = text
        .lines()
        .find(|line| line.starts_with("NVRM version:"))?;
    let after = &line[line.find("Kernel Module")? + "Kernel Module".len()..];
    after
        .split_whitespace()
        .find(|word| word.contains('.') && word.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_is_read_from_the_mapped_library() {
        let maps = "7f0000000000-7f0000001000 r-xp 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
                    7f1000000000-7f1000400000 r-xp 00000000 08:01 456 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04\n\
                    7f2000000000-7f2000001000 rw-p 00000000 00:00 0 \n";
        assert_eq!(
            driver_release_from_maps(maps).as_deref(),
            Some("580.159.04")
        );
        // Only a symbolic link's name (no release), or nothing mapped.
        let link = "7f1000000000-7f1000400000 r-xp 00000000 08:01 456 /usr/lib/libcuda.so.1\n";
        assert_eq!(driver_release_from_maps(link), None);
        assert_eq!(driver_release_from_maps(""), None);
        assert_eq!(driver_release_from_maps("garbage\n\n   \n"), None);
    }

    #[test]
    fn the_release_is_read_from_the_kernel_module_version() {
        let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  2 18:18:43 UTC 2025\n\
                    GCC version:  gcc version 13.3.0\n";
        assert_eq!(
            driver_release_from_proc_version(text).as_deref(),
            Some("580.159.04")
        );
        let open =
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build\n";
        assert_eq!(
            driver_release_from_proc_version(open).as_deref(),
            Some("580.65.06")
        );
        assert_eq!(driver_release_from_proc_version("NVRM version: odd"), None);
        assert_eq!(driver_release_from_proc_version(""), None);
    }
}
