//! What the derivations of one program for one device share: the requests built,
//! their owners and keys, the entry compiled here, and the entry points of each
//! artifact looked in, kept per (cache, device, specialization) while the cache
//! stays in one world.
//!
//! A program holds many kernels, and [`KernelLibrary::get_kernel`] derives each
//! kernel's answer on its first call: with this memo, the derivations after the
//! first build no request and hash no source again; they look the cached entries
//! up by the owners and keys already derived, and the kernel's name up in an
//! index of the artifact's entry points built once per entry. The steps and their
//! order are the derivation's own (`derive.rs`): only their inputs are
//! remembered, so each call still sees the cache as it is now.
//!
//! What it rests on: an owner and a key name one entry's content (invariant 6,
//! ARCHITECTURE.md), so the entry points of the entry found under them are the
//! same whichever tier or layer serves it; and a memo is used only in the world
//! it was made in, so nothing a definition change closes is looked up through it.
//!
//! [`KernelLibrary::get_kernel`]: super::KernelLibrary::get_kernel

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use kiln_core::{ArtifactKind, Cache, Digest, Hit, Key, Owner, World};

use crate::toolchain::NvrtcVersion;
use crate::{Arch, Device, KernelRequest, ServeError};

/// Which toolchain a request was built under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Under {
    /// One the library's build recorded (shipped entries): its index in the
    /// record.
    Recorded(usize),
    /// This machine's (compiles): the one chosen for the memo's device, the
    /// same on every call.
    Local,
}

/// A request, with its owner and key once derived.
pub(super) struct Keyed {
    request: Arc<KernelRequest>,
    owner: OnceLock<Owner>,
    key: OnceLock<Key>,
}

impl Keyed {
    fn new(request: KernelRequest) -> Keyed {
        Keyed {
            request: Arc::new(request),
            owner: OnceLock::new(),
            key: OnceLock::new(),
        }
    }

    /// The request.
    pub(super) fn request(&self) -> &Arc<KernelRequest> {
        &self.request
    }

    /// Its owner under NVRTC `nvrtc` (the toolchain it was built under: the
    /// same for every call on one memo), derived once.
    pub(super) fn owner(&self, nvrtc: &NvrtcVersion) -> Result<&Owner, ServeError> {
        if let Some(owner) = self.owner.get() {
            return Ok(owner);
        }
        let owner = self.request.owner(nvrtc)?;
        Ok(self.owner.get_or_init(|| owner))
    }

    /// Its key, derived once.
    pub(super) fn key(&self) -> Result<Key, ServeError> {
        if let Some(key) = self.key.get() {
            return Ok(*key);
        }
        let key = self.request.key()?;
        Ok(*self.key.get_or_init(|| key))
    }
}

/// The entry points of one artifact kind of one entry.
struct EntryPoints {
    owner: Digest,
    key: Key,
    kind: ArtifactKind,
    names: HashSet<Box<str>>,
}

#[derive(Default)]
struct State {
    requests: Vec<(Under, Arch, Arc<Keyed>)>,
    compiled: Option<(Digest, Key)>,
    entry_points: Vec<Arc<EntryPoints>>,
}

/// The memo of one (cache, device, specialization) in one world.
pub(super) struct ProgramMemo {
    cache: usize,
    device: Device,
    world: World,
    state: Mutex<State>,
}

impl ProgramMemo {
    /// An empty memo for `device` in `cache` (by its identity) at `world`.
    pub(super) fn new(cache: usize, device: Device, world: World) -> ProgramMemo {
        ProgramMemo {
            cache,
            device,
            world,
            state: Mutex::default(),
        }
    }

    /// Whether this is the memo of `device` in the cache `cache`.
    pub(super) fn is_for(&self, cache: usize, device: &Device) -> bool {
        self.cache == cache && self.device == *device
    }

    /// Whether it may be used in `cache` now: its world is the cache's.
    pub(super) fn is_current(&self, cache: &Cache) -> bool {
        self.world == cache.world()
    }

    /// The world it was made in.
    pub(super) fn world(&self) -> World {
        self.world
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The request under `under` for `arch`, built by `build` the first time
    /// (outside the lock: a library's request function may take its time).
    pub(super) fn keyed(
        &self,
        under: Under,
        arch: Arch,
        build: impl FnOnce() -> Result<KernelRequest, ServeError>,
    ) -> Result<Arc<Keyed>, ServeError> {
        if let Some(found) = self.find(under, arch) {
            return Ok(found);
        }
        let built = Arc::new(Keyed::new(build()?));
        let mut state = self.state();
        // Another thread may have built it meanwhile: the first one stays.
        if let Some((.., found)) = state
            .requests
            .iter()
            .find(|(u, a, _)| *u == under && *a == arch)
        {
            return Ok(Arc::clone(found));
        }
        state.requests.push((under, arch, Arc::clone(&built)));
        Ok(built)
    }

    fn find(&self, under: Under, arch: Arch) -> Option<Arc<Keyed>> {
        self.state()
            .requests
            .iter()
            .find(|(u, a, _)| *u == under && *a == arch)
            .map(|(.., keyed)| Arc::clone(keyed))
    }

    /// The name of the first request built (for messages).
    pub(super) fn first_request_name(&self) -> Option<String> {
        self.state()
            .requests
            .first()
            .map(|(.., keyed)| keyed.request.name().to_owned())
    }

    /// The owner and key of the entry compiled here for the device's arch, once
    /// one was had.
    pub(super) fn compiled(&self) -> Option<(Digest, Key)> {
        self.state().compiled
    }

    /// Notes the entry compiled here for the device's arch.
    pub(super) fn set_compiled(&self, hit: &Hit<'_>) {
        self.state().compiled = Some((hit.owner(), hit.key()));
    }

    /// Whether an artifact of `kind` of `hit` lists `kernel` as an entry point:
    /// the entry's entry points are read once, into a set.
    pub(super) fn holds(&self, hit: &Hit<'_>, kind: &ArtifactKind, kernel: &str) -> bool {
        let (owner, key) = (hit.owner(), hit.key());
        let known = self
            .state()
            .entry_points
            .iter()
            .find(|e| e.owner == owner && e.key == key && e.kind == *kind)
            .cloned();
        let points = known.unwrap_or_else(|| {
            let names = hit
                .artifacts()
                .iter()
                .filter(|a| a.kind == *kind)
                .flat_map(|a| a.entry_points.iter().map(|&name| Box::from(name)))
                .collect();
            let built = Arc::new(EntryPoints {
                owner,
                key,
                kind: kind.clone(),
                names,
            });
            self.state().entry_points.push(Arc::clone(&built));
            built
        });
        points.names.contains(kernel)
    }
}
