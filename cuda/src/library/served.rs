//! A kernel as served: the entry, and the artifact chosen for the device.

use std::fmt;
use std::sync::Arc;

use kiln_core::{ArtifactKind, Hit};

use crate::select::Selection;
use crate::toolchain::NvrtcVersion;
use crate::{Arch, KernelRequest};

/// The artifact of an entry a [`KernelLibrary`](super::KernelLibrary) chose for a device: what to load
/// ([`ArtifactKind::Cubin`] or [`ArtifactKind::Ptx`]) and the arch it was built
/// for. The loader obeys it
/// ([`ModuleCache::load_served`](crate::loader::ModuleCache::load_served) loads
/// exactly this artifact, after checking that it runs on the context's device;
/// invariant 17, ARCHITECTURE.md).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChosenArtifact {
    /// The artifact to load: the CUBIN of an exact, compatible or compiled entry,
    /// the PTX of a PTX one.
    pub kind: ArtifactKind,
    /// The arch the entry was built for (its owner's target).
    pub target: Arch,
    /// The NVRTC release that built it, when known: the loader checks that the
    /// driver loads its code (a CUBIN of a newer CUDA major, or PTX of a newer
    /// release, never reaches the driver).
    pub nvrtc: Option<NvrtcVersion>,
}

impl ChosenArtifact {
    pub(super) fn of(selection: Selection, target: Arch, nvrtc: &NvrtcVersion) -> ChosenArtifact {
        ChosenArtifact {
            nvrtc: Some(nvrtc.clone()),
            ..ChosenArtifact::new(artifact_kind(selection), target)
        }
    }

    /// The oldest driver that loads it, as the CUDA version it supports
    /// (`cuDriverGetVersion` form: 13000 for 13.0): for a CUBIN built by NVRTC
    /// `X.Y`, `X.0`; for PTX, `X.Y` (see [`select::support`](crate::select::support)).
    /// `None` when the NVRTC release is not known.
    pub fn driver_needed(&self) -> Option<i32> {
        let nvrtc = self.nvrtc.as_ref()?;
        Some(match self.kind {
            ArtifactKind::Ptx => crate::select::driver_needed_for_ptx(nvrtc),
            _ => crate::select::driver_needed_for_cubin(nvrtc),
        })
    }

    /// The `kind` artifact of an entry built for `target` (the loader's own choice
    /// for an entry no library chose for).
    pub(crate) fn new(kind: ArtifactKind, target: Arch) -> ChosenArtifact {
        ChosenArtifact {
            kind,
            target,
            nvrtc: None,
        }
    }
}

/// The artifact a selection loads: the PTX of a PTX candidate, else the CUBIN.
pub(super) fn artifact_kind(selection: Selection) -> ArtifactKind {
    match selection {
        Selection::Ptx => ArtifactKind::Ptx,
        _ => ArtifactKind::Cubin,
    }
}

/// A kernel as served to a device: the cache entry, what kind of code it is, the
/// artifact chosen, and the request it is the entry of (for the loader).
#[derive(Clone)]
pub struct Served<'c> {
    pub(super) hit: Hit<'c>,
    pub(super) selection: Selection,
    pub(super) artifact: ChosenArtifact,
    pub(super) request: Arc<KernelRequest>,
}

impl<'c> Served<'c> {
    /// The cache entry (its payloads are borrowed from it: see [`Hit`]).
    pub fn hit(&self) -> &Hit<'c> {
        &self.hit
    }

    /// The cache entry, taken out of the served kernel.
    pub fn into_hit(self) -> Hit<'c> {
        self.hit
    }

    /// Exact CUBIN, compatible CUBIN, PTX or compiled.
    pub fn selection(&self) -> Selection {
        self.selection
    }

    /// The artifact chosen for the device: its kind and the arch it was built for.
    pub fn artifact(&self) -> &ChosenArtifact {
        &self.artifact
    }

    /// The request whose entry this is (its arch is the entry's target). Load the
    /// served kernel itself, so that its chosen artifact is what loads:
    /// [`ModuleCache::load_served`](crate::loader::ModuleCache::load_served).
    pub fn request(&self) -> &KernelRequest {
        &self.request
    }

    /// The arch the entry was compiled for.
    pub fn target(&self) -> Arch {
        self.artifact.target
    }

    /// The NVRTC release that compiled the entry (the recorded toolchain's for a
    /// shipped one, the local one's for one compiled here).
    pub fn nvrtc(&self) -> Option<&NvrtcVersion> {
        self.artifact.nvrtc.as_ref()
    }
}

impl fmt::Debug for Served<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Served")
            .field("name", &self.hit.name())
            .field("owner", &self.hit.owner_label())
            .field("source", &self.hit.source())
            .field("selection", &self.selection)
            .field("artifact", &self.artifact)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cubin_needs_a_driver_of_its_major_and_ptx_one_of_its_release() {
        let nvrtc: NvrtcVersion = "12.9.86".parse().unwrap();
        let sm_80: Arch = "sm_80".parse().unwrap();
        let cubin = ChosenArtifact::of(Selection::ExactCubin, sm_80, &nvrtc);
        assert_eq!(cubin.driver_needed(), Some(12000));
        let ptx = ChosenArtifact::of(Selection::Ptx, sm_80, &nvrtc);
        assert_eq!(ptx.kind, ArtifactKind::Ptx);
        assert_eq!(ptx.driver_needed(), Some(12090));
        assert_eq!(
            ChosenArtifact::new(ArtifactKind::Cubin, sm_80).driver_needed(),
            None
        );
    }
}
