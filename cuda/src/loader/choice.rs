//! Which artifact of an entry the loader loads, and the checks that it runs: what
//! a [`Served`](crate::Served) kernel chose, checked against the device, or, for
//! an entry no library chose for, the loader's own choice. Pure functions of the
//! entry, the arch it was built for and the device's arch, tested without a GPU.
//!
//! Nothing here reads the owner's label: the arch an entry was built for comes
//! from the [`ChosenArtifact`] a library served, or from the request the caller
//! says the entry is of.

use kiln_core::{ArtifactKind, Hit};

use crate::Arch;
use crate::library::ChosenArtifact;
use crate::loader::error::LoadError;

/// Checks that `chosen` runs on a device of arch `device` whose driver supports
/// CUDA `driver`: a CUBIN whose target's CUBINs run there ([`Arch::cubin_runs_on`])
/// and, when its NVRTC is known, of a CUDA major the driver loads; or PTX whose
/// target's PTX runs there ([`Arch::ptx_runs_on`]) and, when its NVRTC is known,
/// no newer than the driver. Any other kind is no code for a device.
///
/// # Errors
/// [`LoadError::ChosenArtifactDoesNotRun`] when it does not run on the arch;
/// [`LoadError::ChosenArtifactDoesNotLoad`] or [`LoadError::DriverTooOldForPtx`] when the
/// driver cannot load it.
pub(super) fn check_runs(
    name: &str,
    chosen: &ChosenArtifact,
    device: Arch,
    driver: Option<i32>,
) -> Result<(), LoadError> {
    check_arch(name, chosen, device)?;
    let (Some(nvrtc), Some(driver)) = (&chosen.nvrtc, driver) else {
        return Ok(());
    };
    match chosen.kind {
        ArtifactKind::Ptx if driver < crate::select::driver_needed_for_ptx(nvrtc) => {
            Err(LoadError::DriverTooOldForPtx {
                name: name.to_owned(),
                ptx_release: crate::select::cuda_version_text(
                    crate::select::driver_needed_for_ptx(nvrtc),
                ),
                driver,
            })
        }
        ArtifactKind::Cubin if driver < crate::select::driver_needed_for_cubin(nvrtc) => {
            Err(LoadError::ChosenArtifactDoesNotLoad {
                name: name.to_owned(),
                kind: chosen.kind.to_string(),
                nvrtc: nvrtc.release.clone(),
                driver,
            })
        }
        _ => Ok(()),
    }
}

/// Checks that `chosen` runs on a device of arch `device`.
fn check_arch(name: &str, chosen: &ChosenArtifact, device: Arch) -> Result<(), LoadError> {
    let (major, minor) = (device.major(), device.minor());
    let runs = match chosen.kind {
        ArtifactKind::Cubin => chosen.target.cubin_runs_on(major, minor),
        ArtifactKind::Ptx => chosen.target.ptx_runs_on(major, minor),
        _ => false,
    };
    if runs {
        return Ok(());
    }
    Err(LoadError::ChosenArtifactDoesNotRun {
        name: name.to_owned(),
        kind: chosen.kind.to_string(),
        target: chosen.target.to_string(),
        major,
        minor,
    })
}

/// The loader's own choice for an entry built for `target` that no library chose
/// for: its CUBIN when that runs on `device` and its bytes pass their checksum,
/// else its PTX when that runs there.
///
/// # Errors
/// [`LoadError::NoCompatibleArtifact`] when neither does.
pub(super) fn own_choice(
    hit: &Hit<'_>,
    target: Arch,
    device: Arch,
) -> Result<ChosenArtifact, LoadError> {
    let (major, minor) = (device.major(), device.minor());
    let artifacts = hit.artifacts();
    let first = |kind: ArtifactKind| artifacts.iter().find(|a| a.kind == kind);
    // Only the payload used is read (and checked): a PTX fallback is not paged in
    // when the CUBIN runs. A CUBIN that fails its checksum is passed over (the
    // cache excludes its entry), and the PTX is tried.
    let cubin_runs = target.cubin_runs_on(major, minor)
        && first(ArtifactKind::Cubin)
            .and_then(|a| a.bytes())
            .is_some_and(|bytes| !bytes.is_empty());
    if cubin_runs {
        return Ok(ChosenArtifact::new(ArtifactKind::Cubin, target));
    }
    if target.ptx_runs_on(major, minor) && first(ArtifactKind::Ptx).is_some() {
        return Ok(ChosenArtifact::new(ArtifactKind::Ptx, target));
    }
    Err(LoadError::NoCompatibleArtifact {
        name: hit.name().to_owned(),
        arch: target.to_string(),
        major,
        minor,
    })
}

/// The CUBIN `chosen` names: its entry points and its bytes.
///
/// # Errors
/// [`LoadError::ChosenArtifactUnreadable`] when the entry has no CUBIN or its bytes
/// fail their checksum (or are empty).
pub(super) fn cubin<'h>(
    hit: &'h Hit<'_>,
    chosen: &ChosenArtifact,
) -> Result<(Vec<String>, &'h [u8]), LoadError> {
    let artifacts = hit.artifacts();
    let cubin = artifacts
        .iter()
        .find(|a| a.kind == ArtifactKind::Cubin)
        .and_then(|a| {
            let bytes = a.bytes().filter(|b| !b.is_empty())?;
            let entry_points = a.entry_points.iter().map(|e| (*e).to_owned()).collect();
            Some((entry_points, bytes))
        });
    cubin.ok_or_else(|| unreadable(hit, chosen))
}

/// [`LoadError::ChosenArtifactUnreadable`] for `chosen` of `hit`.
pub(super) fn unreadable(hit: &Hit<'_>, chosen: &ChosenArtifact) -> LoadError {
    LoadError::ChosenArtifactUnreadable {
        name: hit.name().to_owned(),
        kind: chosen.kind.to_string(),
        target: chosen.target.to_string(),
    }
}

#[cfg(test)]
mod tests;
