//! JIT-compiling a PTX entry with the CUBINs kept: the whole module, or one
//! kernel at a time from extracts of it (see the [module documentation](super)).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use cudarc::driver::{CudaContext, CudaModule};
use kiln_core::{ArtifactKind, Cache, Hit};

use super::link::{checked_ptx, link_ptx, load_image};
use crate::jit::{JitKernels, JitSource, JitTarget, cached_jit, get_or_jit};
use crate::loader::error::LoadError;
use crate::ptx::PtxModule;

/// Where the PTX of a module being JIT-compiled is read when the driver is
/// asked: from the cache the CUBINs are kept in (looked up again, so that a
/// process whose CUBINs are all cached never reads the PTX), or a copy.
#[derive(Debug)]
enum PtxSource {
    InCache(&'static Cache),
    Copied(Arc<[u8]>),
}

impl PtxSource {
    /// `None` when the entry is not in `cache` and its PTX fails its checksum.
    fn new(hit: &Hit<'_>, source: &JitSource, cache: Option<&'static Cache>) -> Option<PtxSource> {
        if let Some(cache) = cache
            && cache.lookup(&source.owner(), &source.key()).is_some()
        {
            return Some(PtxSource::InCache(cache));
        }
        hit.artifact(&ArtifactKind::Ptx)
            .map(|bytes| PtxSource::Copied(Arc::from(bytes)))
    }

    fn with<R>(
        &self,
        source: &JitSource,
        function: &str,
        use_it: impl FnOnce(&[u8]) -> Result<R, LoadError>,
    ) -> Result<R, LoadError> {
        match self {
            PtxSource::Copied(bytes) => use_it(bytes),
            PtxSource::InCache(cache) => {
                let gone = || LoadError::JitSourceGone {
                    name: source.name().to_owned(),
                    function: function.to_owned(),
                };
                let hit = cache
                    .lookup(&source.owner(), &source.key())
                    .ok_or_else(gone)?;
                use_it(hit.artifact(&ArtifactKind::Ptx).ok_or_else(gone)?)
            }
        }
    }
}

/// What JIT-compiling one PTX entry needs: the entry, the target and the
/// cache the CUBINs are kept in (neither when the driver's release is unknown
/// or keeping is off), and the PTX.
#[derive(Debug)]
pub(super) struct JitJob {
    source: JitSource,
    target: Option<JitTarget>,
    cache: Option<&'static Cache>,
    ptx: PtxSource,
}

impl JitJob {
    /// The job of the PTX entry `hit` (`source`), its CUBINs kept in `cache` for
    /// `target` (when both are known); `None` when the entry is not in `cache`
    /// and its PTX fails its checksum.
    pub(super) fn new(
        hit: &Hit<'_>,
        source: JitSource,
        cache: Option<&'static Cache>,
        target: Option<JitTarget>,
    ) -> Option<JitJob> {
        let ptx = PtxSource::new(hit, &source, cache)?;
        Some(JitJob {
            source,
            target,
            cache,
            ptx,
        })
    }

    /// The kernels (lowered names) the PTX declares.
    pub(super) fn entry_points(&self) -> &[String] {
        self.source.entry_points()
    }

    fn kept(&self) -> Option<(&'static Cache, &JitTarget)> {
        Some((self.cache?, self.target.as_ref()?))
    }

    /// The whole module: its kept CUBIN, else the driver's JIT (kept).
    pub(super) fn whole(&self, ctx: &Arc<CudaContext>) -> Result<Arc<CudaModule>, LoadError> {
        let name = self.source.name();
        let Some((cache, target)) = self.kept() else {
            // Nothing kept: the driver JIT-compiles at load, as without Kiln.
            let text = self
                .ptx
                .with(&self.source, "", |ptx| checked_ptx(name, ptx))?;
            return load_image(ctx, text, "PTX", name);
        };
        let link = || {
            self.ptx.with(&self.source, "", |ptx| {
                link_ptx(ctx, &checked_ptx(name, ptx)?, name, target)
            })
        };
        let cubin = kept_cubin(cache, &self.source, target, JitKernels::All, link)?;
        load_image(ctx, cubin, "JIT-compiled CUBIN", name)
    }

    /// The kept CUBIN of `kernels`, if a process sharing the cache compiled it.
    fn cached(
        &self,
        ctx: &Arc<CudaContext>,
        kernels: JitKernels<'_>,
    ) -> Result<Option<Arc<CudaModule>>, LoadError> {
        let Some((cache, target)) = self.kept() else {
            return Ok(None);
        };
        let Some(hit) = cached_jit(cache, &self.source, target, kernels)? else {
            return Ok(None);
        };
        // A kept CUBIN that fails its checksum is excluded by the cache: a miss.
        let Some(cubin) = hit.artifact(&ArtifactKind::Cubin) else {
            return Ok(None);
        };
        load_image(
            ctx,
            cubin.to_vec(),
            "JIT-compiled CUBIN",
            self.source.name(),
        )
        .map(Some)
    }

    /// The module of kernel `lowered` alone, JIT-compiled from an extract of
    /// the PTX (kept); `None` when the module must stay whole (shared module
    /// variables, or the driver refused the extract).
    fn one(
        &self,
        ctx: &Arc<CudaContext>,
        lowered: &str,
        function: &str,
    ) -> Result<Option<Arc<CudaModule>>, LoadError> {
        let name = self.source.name();
        let extract = self.ptx.with(&self.source, function, |ptx| {
            let text = checked_ptx(name, ptx)?;
            let Ok(text) = std::str::from_utf8(&text[..text.len() - 1]) else {
                return Ok(None);
            };
            let module = PtxModule::parse(text);
            if !module.splittable() {
                return Ok(None);
            }
            Ok(module.extract(&[lowered]).map(|mut extract| {
                extract.push('\0');
                extract.into_bytes()
            }))
        })?;
        let Some(extract) = extract else {
            return Ok(None);
        };
        let result = match self.kept() {
            Some((cache, target)) => {
                let link = || link_ptx(ctx, &extract, name, target);
                kept_cubin(
                    cache,
                    &self.source,
                    target,
                    JitKernels::Only(&[lowered]),
                    link,
                )
                .and_then(|cubin| load_image(ctx, cubin, "JIT-compiled CUBIN", name))
            }
            None => load_image(ctx, extract, "PTX", name),
        };
        match result {
            Ok(module) => Ok(Some(module)),
            Err(error) => {
                tracing::warn!(
                    entry = name,
                    kernel = lowered,
                    %error,
                    "the driver refused one kernel extracted from a PTX module; compiling the whole module"
                );
                Ok(None)
            }
        }
    }
}

/// A PTX entry whose kernels are compiled one at a time.
#[derive(Debug)]
pub(super) struct PerKernel {
    jit: JitJob,
    kernels: Mutex<HashMap<String, Arc<CudaModule>>>,
    /// The whole module, once one kernel showed it cannot be split, or
    /// enough kernels were compiled alone ([`split_limit`]).
    whole: OnceLock<Arc<CudaModule>>,
    /// Kernels this process had the driver compile alone.
    compiled_alone: AtomicUsize,
}

/// How many kernels of a module of `kernels` a process has the driver compile
/// one at a time before it compiles the whole module instead: an eighth of
/// them, at least 4.
///
/// A kernel compiled alone costs several times its share of the whole
/// module's JIT (on an H100, a CUB library's kernel alone ~6× its share,
/// BENCHMARKS.md), so a process that goes on to need most kernels would pay
/// that many times the whole JIT; past the limit it pays the whole JIT
/// once, which bounds it to about twice the whole JIT, while a process
/// that needs a few kernels of a large module pays for those few.
pub(super) fn split_limit(kernels: usize) -> usize {
    (kernels / 8).max(4)
}

impl PerKernel {
    /// The kernels of `jit`, none compiled yet.
    pub(super) fn new(jit: JitJob) -> PerKernel {
        PerKernel {
            jit,
            kernels: Mutex::default(),
            whole: OnceLock::new(),
            compiled_alone: AtomicUsize::new(0),
        }
    }

    /// The module holding kernel `lowered` (asked for as `function`): compiled
    /// alone, taken from the JIT cache, or the whole module.
    pub(super) fn module_of(
        &self,
        ctx: &Arc<CudaContext>,
        lowered: &str,
        function: &str,
    ) -> Result<Arc<CudaModule>, LoadError> {
        let lock = || self.kernels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(module) = lock().get(lowered) {
            return Ok(Arc::clone(module));
        }
        if let Some(module) = self.whole.get() {
            return Ok(Arc::clone(module));
        }
        // Not under the lock: another kernel may be compiling meanwhile (the
        // cache's single flight compiles each kernel once).
        let only = [lowered];
        let module = match self.jit.cached(ctx, JitKernels::Only(&only))? {
            Some(module) => module,
            None => {
                if let Some(whole) = self.jit.cached(ctx, JitKernels::All)? {
                    return Ok(Arc::clone(self.whole.get_or_init(|| whole)));
                }
                let limit = split_limit(self.jit.source.entry_points().len());
                let alone = if self.compiled_alone.load(Ordering::Relaxed) < limit {
                    self.jit.one(ctx, lowered, function)?
                } else {
                    None
                };
                match alone {
                    Some(module) => {
                        self.compiled_alone.fetch_add(1, Ordering::Relaxed);
                        module
                    }
                    None => {
                        let whole = self.jit.whole(ctx)?;
                        return Ok(Arc::clone(self.whole.get_or_init(|| whole)));
                    }
                }
            }
        };
        Ok(Arc::clone(
            lock().entry(lowered.to_owned()).or_insert(module),
        ))
    }
}

/// The CUBIN of `kernels` from the cache, else `link()`'s, kept. A kept CUBIN
/// that fails its checksum is excluded by the cache, so the second try links.
fn kept_cubin(
    cache: &Cache,
    source: &JitSource,
    target: &JitTarget,
    kernels: JitKernels<'_>,
    link: impl Fn() -> Result<Vec<u8>, LoadError>,
) -> Result<Vec<u8>, LoadError> {
    for _ in 0..2 {
        let hit = get_or_jit(cache, source, target, kernels, &link)?;
        if let Some(cubin) = hit.artifact(&ArtifactKind::Cubin) {
            return Ok(cubin.to_vec());
        }
    }
    link()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_compiles_a_few_kernels_alone_then_the_whole_module() {
        assert_eq!(split_limit(1), 4);
        assert_eq!(split_limit(2), 4, "a small module's kernels all alone");
        assert_eq!(split_limit(40), 5);
        assert_eq!(split_limit(170), 21);
        assert_eq!(split_limit(443), 55);
    }
}
