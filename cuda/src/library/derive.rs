//! One derivation of a kernel for a device: shipped entries, compiled here,
//! compiled elsewhere. What does not depend on the kernel asked for (requests,
//! owners, keys, the compiled entry, entry points) is taken from and kept in the
//! program's memo ([`ProgramMemo`]), shared by the derivations of every kernel of
//! the program.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use kiln_core::{Cache, Hit, World};

use super::attempt::{Attempt, Attempts};
use super::error::ServeError;
use super::program::{Keyed, ProgramMemo, Under};
use super::served::{ChosenArtifact, Served, artifact_kind};
use super::walk::{Found, Shelf, Walked, compiled_elsewhere, describe, walk};
use crate::select::{Candidate, Selection, select};
use crate::toolchain::error::ToolchainError;
use crate::{Arch, BuildRecord, Device, KernelRequest, Toolchain, ToolchainPolicy};

/// How many entry points an [`ServeError::NoSuchKernel`] lists.
const KERNELS_LISTED: usize = 16;

/// This machine's toolchain, or why there is none (found once, shared).
pub(super) type LocalToolchain = Result<Arc<Toolchain>, Arc<ToolchainError>>;

/// What a derivation asks of the kernel library it derives for.
pub(super) trait Library<S> {
    /// The library's request of `spec` for `arch` under `toolchain`.
    fn request(
        &self,
        spec: &S,
        toolchain: &Toolchain,
        arch: Arch,
    ) -> Result<KernelRequest, ServeError>;

    /// The policy in force.
    fn policy(&self) -> ToolchainPolicy;

    /// This machine's toolchain, located once (a failure too).
    fn local(&self) -> LocalToolchain;

    /// This machine's toolchain of CUDA major `major`, located once per major.
    fn local_of_major(&self, major: u32) -> LocalToolchain;
}

/// One derivation of a kernel for a device: the steps shipped, compiled here and
/// compiled elsewhere, sharing the requests they build (once per toolchain and arch,
/// in the program's memo) and the attempts that did not serve.
pub(super) struct Derivation<'a, 'c, S> {
    library: &'a dyn Library<S>,
    cache: &'c Cache,
    device: &'a Device,
    spec: &'a S,
    kernel: Option<&'a str>,
    world: World,
    record: &'a BuildRecord,
    recorded: &'a [Toolchain],
    memo: &'a ProgramMemo,
    tried: Vec<Attempt>,
}

/// A step's outcome: served, not served (an attempt was noted), or an error that
/// ends the derivation.
type Step<'c> = Result<Option<Served<'c>>, ServeError>;

impl<'a, 'c, S> Derivation<'a, 'c, S>
where
    S: Clone + Eq + Hash + fmt::Debug + Send + Sync,
{
    /// A derivation of `spec` (and `kernel`, if named) for `device` in `cache`, at
    /// the world of `memo` (the program's memo for this cache and device, made at
    /// the cache's world), by a library whose build recorded `record` (and
    /// `recorded`, the toolchains it names, in its order).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        library: &'a dyn Library<S>,
        cache: &'c Cache,
        device: &'a Device,
        spec: &'a S,
        kernel: Option<&'a str>,
        record: &'a BuildRecord,
        recorded: &'a [Toolchain],
        memo: &'a ProgramMemo,
    ) -> Self {
        Derivation {
            library,
            cache,
            device,
            spec,
            kernel,
            world: memo.world(),
            record,
            recorded,
            memo,
            tried: Vec::new(),
        }
    }

    /// The world the derivation started in: its answer is valid while the cache
    /// stays in it.
    pub(super) fn world(&self) -> World {
        self.world
    }

    /// Steps 1 to 3, in order: the first that serves, else the error.
    pub(super) fn run(&mut self) -> Result<Served<'c>, ServeError> {
        if let Some(served) = self.shipped_entry()? {
            return Ok(served);
        }
        let local = match self.local_for_device() {
            Ok(local) => local,
            Err(cause) => return self.cannot_compile(cause),
        };
        let request = match self.request(Under::Local, &local, self.device.arch()) {
            Ok(request) => request,
            Err(ServeError::Cache(other)) => return Err(ServeError::Cache(other)),
            Err(cause) => return self.cannot_compile(Arc::new(cause)),
        };
        let Some(compiler) = local.compiler() else {
            let cause = Arc::new(ServeError::Toolchain(ToolchainError::NoNvrtc {
                version: local.nvrtc().release.clone(),
            }));
            return self.cannot_compile(cause);
        };
        let nvrtc = local.nvrtc().clone();
        let request = Arc::clone(request.request());
        // The entry compiled for another kernel of the program, if the cache still
        // holds it: what `compile_cached` would find first.
        if let Some((owner, key)) = self.memo.compiled()
            && let Some(hit) = self.cache.lookup(&owner, &key)
        {
            return self.exact(hit, Selection::Compiled, request, &nvrtc);
        }
        let hit = compiler.compile_cached(self.cache, &request)?;
        self.memo.set_compiled(&hit);
        self.exact(hit, Selection::Compiled, request, &nvrtc)
    }

    /// The local toolchain whose code runs on the device and loads on its driver:
    /// the process's, unless its CUDA major is newer than the driver loads (or than
    /// compiles for the arch: CUDA 13 dropped sm_50 to sm_72), then the local one
    /// of the newest major that does.
    fn local_for_device(&self) -> Result<Arc<Toolchain>, Arc<ServeError>> {
        let arch = self.device.arch();
        let limit = match (
            self.device.driver(),
            crate::select::support::newest_major_for(arch),
        ) {
            (Some(driver), Some(newest)) => {
                Some((driver / 1000).max(0) as u32).map(|d| d.min(newest))
            }
            (Some(driver), None) => Some((driver / 1000).max(0) as u32),
            (None, newest) => newest,
        };
        let local = self.library.local();
        match (limit, &local) {
            (Some(limit), Ok(found)) if found.nvrtc().major > limit => {
                self.library.local_of_major(limit).map_err(|cause| {
                    Arc::new(ServeError::NoLocalToolchainFor {
                        found: found.nvrtc().clone(),
                        wanted: limit,
                        device: describe(self.device),
                        cause: shared(cause),
                    })
                })
            }
            (Some(limit), Err(_)) => self.library.local_of_major(limit).or(local).map_err(shared),
            _ => local.map_err(shared),
        }
    }

    /// Step 1: the shipped candidates for the device, each under the recorded
    /// toolchain that built it, walked in order ([`walk`]).
    fn shipped_entry(&mut self) -> Step<'c> {
        if self.recorded.is_empty() {
            self.tried.push(Attempt::NothingShipped);
            return Ok(None);
        }
        let strict = match self.library.policy() {
            ToolchainPolicy::Strict => self.library.local().ok(),
            ToolchainPolicy::Shipped => None,
        };
        if let Some(local) = &strict {
            local.define_in(self.cache);
        }
        let candidates = select(self.device, self.record);
        if self.cache.config().always_compile {
            self.tried.push(Attempt::AlwaysCompile);
            return Ok(None);
        }
        let mut tried = std::mem::take(&mut self.tried);
        let mut shelf = Shipped {
            derivation: self,
            strict,
            strict_skipped: false,
        };
        let walked = walk(
            self.device,
            self.record,
            &candidates,
            self.kernel,
            &mut shelf,
            &mut tried,
        );
        self.tried.append(&mut tried);
        match walked? {
            Walked::Served((hit, request, nvrtc), candidate) => {
                Ok(Some(self.served(hit, candidate.selection, request, &nvrtc)))
            }
            Walked::NoSuchKernel((hit, request, _), candidate) => {
                Err(self.no_such_kernel(&hit, candidate.selection, &request))
            }
            Walked::NotServed => Ok(None),
        }
    }

    /// The entry compiled for exactly the device's arch by a recorded toolchain
    /// whose CUBINs its driver loads, if the cache or its tiers hold it: what a
    /// machine with the build's toolchain compiled at run time and stored, which is
    /// what a compile here would give. `Ok(None)` (attempts noted) when none does.
    fn compiled_elsewhere(&mut self) -> Step<'c> {
        for index in compiled_elsewhere(self.device, self.record) {
            let Some(recorded) = self.recorded.get(index) else {
                continue;
            };
            match self.request(Under::Recorded(index), recorded, self.device.arch()) {
                Ok(keyed) => {
                    let owner = keyed.owner(recorded.nvrtc())?;
                    let key = keyed.key()?;
                    match self.cache.get_cached(owner, &key) {
                        Some(hit) => {
                            let nvrtc = recorded.nvrtc().clone();
                            let request = Arc::clone(keyed.request());
                            return self
                                .exact(hit, Selection::Compiled, request, &nvrtc)
                                .map(Some);
                        }
                        None => self.tried.push(Attempt::NotCompiledElsewhere {
                            nvrtc: recorded.nvrtc().clone(),
                        }),
                    }
                }
                Err(ServeError::Cache(other)) => return Err(ServeError::Cache(other)),
                Err(why) => self.tried.push(Attempt::NoRecordedRequest {
                    why: why.to_string(),
                }),
            }
        }
        Ok(None)
    }

    /// What the cache already holds for the kernel, compiling nothing: step 1, then
    /// the entry compiled elsewhere for the device's arch (as on a machine without
    /// a toolchain). `Ok(None)` when neither serves: [`Derivation::attempts`] says
    /// why.
    ///
    /// # Errors
    /// [`ServeError::NoSuchKernel`] when an entry built for exactly the device's arch
    /// lacks the kernel; a key that cannot be derived.
    pub(super) fn without_compiling(&mut self) -> Step<'c> {
        if let Some(served) = self.shipped_entry()? {
            return Ok(Some(served));
        }
        if self.cache.config().always_compile || self.strict_here() {
            return Ok(None);
        }
        self.compiled_elsewhere()
    }

    /// The attempts noted so far, taken.
    pub(super) fn attempts(&mut self) -> Vec<Attempt> {
        std::mem::take(&mut self.tried)
    }

    /// No compile possible here (no NVRTC, or a header set missing): what a machine
    /// with the build's toolchain compiled for this arch at run time and stored (the
    /// disk or remote tier) is what a compile here would give; else the miss is
    /// [`ServeError::NotShipped`].
    fn cannot_compile(&mut self, cause: Arc<ServeError>) -> Result<Served<'c>, ServeError> {
        // Under KILN_STRICT_TOOLCHAIN a process that has a toolchain serves only
        // what that toolchain built.
        if !self.cache.config().always_compile
            && !self.strict_here()
            && let Some(served) = self.compiled_elsewhere()?
        {
            return Ok(served);
        }
        Err(ServeError::NotShipped {
            kernel: self.kernel_label(),
            arch: describe(self.device),
            tried: Attempts(std::mem::take(&mut self.tried)),
            cause,
        })
    }

    /// An entry built for exactly the device's arch: served when it holds the
    /// kernel, else proof that the kernel does not exist for the arch.
    fn exact(
        &self,
        hit: Hit<'c>,
        selection: Selection,
        request: Arc<KernelRequest>,
        nvrtc: &crate::NvrtcVersion,
    ) -> Result<Served<'c>, ServeError> {
        if self.holds_kernel(&hit, selection) {
            return Ok(self.served(hit, selection, request, nvrtc));
        }
        Err(self.no_such_kernel(&hit, selection, &request))
    }

    /// The error for an entry built for exactly the device's arch that lacks the
    /// kernel asked for.
    fn no_such_kernel(
        &self,
        hit: &Hit<'c>,
        selection: Selection,
        request: &KernelRequest,
    ) -> ServeError {
        ServeError::NoSuchKernel {
            kernel: self.kernel.unwrap_or_default().to_owned(),
            program: request.name().to_owned(),
            arch: self.device.arch().to_string(),
            built: selection.to_string(),
            kernels: kernels_of(hit, selection).into(),
        }
    }

    fn served(
        &self,
        hit: Hit<'c>,
        selection: Selection,
        request: Arc<KernelRequest>,
        nvrtc: &crate::NvrtcVersion,
    ) -> Served<'c> {
        Served {
            artifact: ChosenArtifact::of(selection, request.arch(), nvrtc),
            hit,
            selection,
            request,
        }
    }

    /// Whether the artifact `selection` loads from `hit` holds the kernel asked
    /// for (any entry does when none is), from the program memo's index of the
    /// entry's entry points.
    fn holds_kernel(&self, hit: &Hit<'c>, selection: Selection) -> bool {
        let Some(kernel) = self.kernel else {
            return true;
        };
        self.memo.holds(hit, &artifact_kind(selection), kernel)
    }

    /// The request under `toolchain` for `arch`, built once per program memo.
    fn request(
        &self,
        under: Under,
        toolchain: &Toolchain,
        arch: Arch,
    ) -> Result<Arc<Keyed>, ServeError> {
        let (library, spec) = (self.library, self.spec);
        self.memo
            .keyed(under, arch, || library.request(spec, toolchain, arch))
    }

    /// Whether the policy is strict and this process has a toolchain: then it serves
    /// only what that toolchain built.
    fn strict_here(&self) -> bool {
        matches!(self.library.policy(), ToolchainPolicy::Strict) && self.library.local().is_ok()
    }

    /// The kernel named in errors: the one asked for, of its program; else the
    /// program (the first request's name), else the specialization.
    fn kernel_label(&self) -> String {
        let program = self
            .memo
            .first_request_name()
            .or_else(|| {
                let recorded = self.recorded.first()?;
                let request = self
                    .library
                    .request(self.spec, recorded, self.device.arch());
                request.ok().map(|r| r.name().to_owned())
            })
            .unwrap_or_else(|| format!("{:?}", self.spec));
        match self.kernel {
            Some(kernel) => format!("{kernel} (of {program})"),
            None => program,
        }
    }
}

/// A shipped entry found for a candidate: the cache entry, the request it is the
/// entry of, and the NVRTC release that built it.
type Entry<'c> = (Hit<'c>, Arc<KernelRequest>, crate::NvrtcVersion);

/// The shelf of step 1: each candidate's request under the recorded toolchain that
/// built it, looked up in the cache's memory and images by its owner and key.
/// Under `KILN_STRICT_TOOLCHAIN` a candidate whose toolchain the local one is not
/// is passed over.
struct Shipped<'d, 'a, 'c, S> {
    derivation: &'d Derivation<'a, 'c, S>,
    strict: Option<Arc<Toolchain>>,
    strict_skipped: bool,
}

impl<'c, S> Shelf for Shipped<'_, '_, 'c, S>
where
    S: Clone + Eq + Hash + fmt::Debug + Send + Sync,
{
    type Entry = Entry<'c>;

    fn find(&mut self, candidate: &Candidate) -> Result<Found<Entry<'c>>, ServeError> {
        let derivation = self.derivation;
        let Some(recorded) = derivation.recorded.get(candidate.toolchain) else {
            return Ok(Found::Skipped(None));
        };
        let keyed = derivation.request(
            Under::Recorded(candidate.toolchain),
            recorded,
            candidate.target,
        )?;
        if let Some(local) = &self.strict
            && let Some(why) = differs(local, recorded, keyed.request())
        {
            let first = !self.strict_skipped;
            self.strict_skipped = true;
            return Ok(Found::Skipped(
                first.then_some(Attempt::StrictToolchain { why }),
            ));
        }
        let owner = keyed.owner(recorded.nvrtc())?.digest();
        let key = keyed.key()?;
        Ok(match derivation.cache.lookup(&owner, &key) {
            Some(hit) => Found::Entry((hit, Arc::clone(keyed.request()), recorded.nvrtc().clone())),
            None => Found::Absent,
        })
    }

    fn holds(&mut self, entry: &Entry<'c>, selection: Selection, kernel: &str) -> bool {
        self.derivation
            .memo
            .holds(&entry.0, &artifact_kind(selection), kernel)
    }
}

/// The entry points of the artifact `selection` loads from `hit`, as one line (the
/// first [`KERNELS_LISTED`] of them).
fn kernels_of(hit: &Hit<'_>, selection: Selection) -> String {
    let wanted = artifact_kind(selection);
    let artifacts = hit.artifacts();
    let names: Vec<&str> = artifacts
        .iter()
        .filter(|a| a.kind == wanted)
        .flat_map(|a| a.entry_points.iter().copied())
        .collect();
    let mut line = names
        .iter()
        .take(KERNELS_LISTED)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > KERNELS_LISTED {
        line.push_str(&format!(" and {} more", names.len() - KERNELS_LISTED));
    }
    if line.is_empty() {
        "none".to_owned()
    } else {
        line
    }
}

/// Why `local` is not the toolchain `recorded_request` was built for: another NVRTC
/// release, or another digest of a header set it uses. A header set not found
/// locally differs from nothing.
fn differs(
    local: &Toolchain,
    recorded: &Toolchain,
    recorded_request: &KernelRequest,
) -> Option<String> {
    if local.nvrtc() != recorded.nvrtc() {
        return Some(format!(
            "the local NVRTC is {}, the shipped entries were built by {}",
            local.nvrtc(),
            recorded.nvrtc()
        ));
    }
    recorded_request.include_dirs().iter().find_map(|dir| {
        let set = dir.set()?;
        let here = local.header_set(set).ok()?;
        (here.digest() != dir.digest()).then(|| {
            format!(
                "the local {set} headers (digest {}) are not those the shipped entries were \
                 built with ({})",
                &here.digest().to_hex()[..12],
                &dir.digest().to_hex()[..12]
            )
        })
    })
}

/// A toolchain error found once, as the cause of a serving error.
fn shared(error: Arc<ToolchainError>) -> Arc<ServeError> {
    Arc::new(ServeError::Toolchain(ToolchainError::Shared(error)))
}
