//! Which artifact of an entry the loader loads, and the checks that it runs: what
//! a [`Served`](crate::Served) kernel chose, checked against the device, or, for
//! an entry no library chose for, the loader's own choice. Pure functions of the
//! entry, the arch it was built for and the device's arch, tested without a GPU.
//!
//! Nothing here reads the owner's label: the arch an entry was built for comes
//! from the [`ChosenArtifact`] a library served, or from the request the caller
//! says the entry is of.

use kiln_core::{ArtifactKind, Hit};

use crate::library::ChosenArtifact;
use crate::{Arch, Error};

/// Checks that `chosen` runs on a device of arch `device`: a CUBIN whose target's
/// CUBINs run there ([`Arch::cubin_runs_on`]), or PTX whose target's PTX runs
/// there ([`Arch::ptx_runs_on`]). Any other kind is no code for a device.
///
/// # Errors
/// [`Error::ChosenArtifactDoesNotRun`] when it does not.
pub(super) fn check_runs(name: &str, chosen: &ChosenArtifact, device: Arch) -> Result<(), Error> {
    let (major, minor) = (device.major(), device.minor());
    let runs = match chosen.kind {
        ArtifactKind::Cubin => chosen.target.cubin_runs_on(major, minor),
        ArtifactKind::Ptx => chosen.target.ptx_runs_on(major, minor),
        _ => false,
    };
    if runs {
        return Ok(());
    }
    Err(Error::ChosenArtifactDoesNotRun {
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
/// [`Error::NoCompatibleArtifact`] when neither does.
pub(super) fn own_choice(
    hit: &Hit<'_>,
    target: Arch,
    device: Arch,
) -> Result<ChosenArtifact, Error> {
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
    Err(Error::NoCompatibleArtifact {
        name: hit.name().to_owned(),
        arch: target.to_string(),
        major,
        minor,
    })
}

/// The CUBIN `chosen` names: its entry points and its bytes.
///
/// # Errors
/// [`Error::ChosenArtifactUnreadable`] when the entry has no CUBIN or its bytes
/// fail their checksum (or are empty).
pub(super) fn cubin<'h>(
    hit: &'h Hit<'_>,
    chosen: &ChosenArtifact,
) -> Result<(Vec<String>, &'h [u8]), Error> {
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

/// [`Error::ChosenArtifactUnreadable`] for `chosen` of `hit`.
pub(super) fn unreadable(hit: &Hit<'_>, chosen: &ChosenArtifact) -> Error {
    Error::ChosenArtifactUnreadable {
        name: hit.name().to_owned(),
        kind: chosen.kind.to_string(),
        target: chosen.target.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use kiln_core::{Artifact, Cache, Compiled, KeyBuilder, Owner};

    use super::*;

    fn arch(text: &str) -> Arch {
        text.parse().unwrap()
    }

    /// An entry built for `target` with these artifacts.
    fn entry<'c>(cache: &'c Cache, target: &str, artifacts: &[(ArtifactKind, &[u8])]) -> Hit<'c> {
        let owner = Owner::new("nvrtc", "13.0.88", target, ["-std=c++17"]).unwrap();
        let key = KeyBuilder::new("loader-choice", 1)
            .str("target", target)
            .u64("artifacts", artifacts.len() as u64)
            .finish();
        let compiled = artifacts
            .iter()
            .fold(Compiled::new("k"), |compiled, (kind, bytes)| {
                compiled.artifact(Artifact {
                    kind: kind.clone(),
                    entry_points: vec!["k".to_owned()],
                    bytes: bytes.to_vec(),
                })
            });
        cache.insert(&owner, &key, compiled)
    }

    fn chosen(kind: ArtifactKind, target: &str) -> ChosenArtifact {
        ChosenArtifact::new(kind, arch(target))
    }

    #[test]
    fn a_chosen_artifact_loads_only_where_it_runs() {
        use ArtifactKind::{Cubin, Ptx};
        let runs = |kind: ArtifactKind, target: &str, device: &str| {
            check_runs("k", &chosen(kind, target), arch(device)).is_ok()
        };
        assert!(runs(Cubin, "sm_80", "sm_80"));
        assert!(runs(Cubin, "sm_80", "sm_86"), "same major, higher minor");
        assert!(!runs(Cubin, "sm_86", "sm_80"), "a higher minor");
        assert!(!runs(Cubin, "sm_80", "sm_90"), "another major");
        assert!(runs(Cubin, "sm_90a", "sm_90"));
        assert!(
            !runs(Cubin, "sm_90a", "sm_100"),
            "an `a` target on its arch only"
        );
        assert!(runs(Ptx, "sm_80", "sm_90"), "PTX of an older arch");
        assert!(!runs(Ptx, "sm_90", "sm_80"), "PTX of a newer arch");
        assert!(!runs(ArtifactKind::Fatbin, "sm_80", "sm_80"));
        let refused = check_runs("k", &chosen(Cubin, "sm_80"), arch("sm_90")).unwrap_err();
        assert!(
            matches!(
                &refused,
                Error::ChosenArtifactDoesNotRun { kind, target, major: 9, minor: 0, .. }
                    if kind == "cubin" && target == "sm_80"
            ),
            "{refused}"
        );
    }

    #[test]
    fn the_own_choice_is_the_cubin_where_it_runs_else_the_ptx() {
        let cache = Cache::new();
        let both = entry(
            &cache,
            "sm_80",
            &[(ArtifactKind::Cubin, b"cubin"), (ArtifactKind::Ptx, b"ptx")],
        );
        let kind = |hit: &Hit<'_>, target: &str, device: &str| {
            own_choice(hit, arch(target), arch(device)).map(|c| c.kind)
        };
        assert_eq!(kind(&both, "sm_80", "sm_86").unwrap(), ArtifactKind::Cubin);
        assert_eq!(kind(&both, "sm_80", "sm_90").unwrap(), ArtifactKind::Ptx);
        assert!(matches!(
            kind(&both, "sm_80", "sm_75"),
            Err(Error::NoCompatibleArtifact {
                major: 7,
                minor: 5,
                ..
            })
        ));
        let cubin_only = entry(&cache, "sm_80", &[(ArtifactKind::Cubin, b"cubin")]);
        assert!(matches!(
            kind(&cubin_only, "sm_80", "sm_90"),
            Err(Error::NoCompatibleArtifact { .. })
        ));
        // An empty CUBIN is no code: the PTX is taken.
        let empty = entry(
            &cache,
            "sm_90",
            &[(ArtifactKind::Cubin, b""), (ArtifactKind::Ptx, b"ptx")],
        );
        assert_eq!(kind(&empty, "sm_90", "sm_90").unwrap(), ArtifactKind::Ptx);
    }

    #[test]
    fn the_chosen_cubin_is_read_or_refused_never_replaced() {
        let cache = Cache::new();
        let both = entry(
            &cache,
            "sm_80",
            &[(ArtifactKind::Cubin, b"cubin"), (ArtifactKind::Ptx, b"ptx")],
        );
        let (entry_points, bytes) = cubin(&both, &chosen(ArtifactKind::Cubin, "sm_80")).unwrap();
        assert_eq!((entry_points, bytes), (vec!["k".to_owned()], &b"cubin"[..]));
        // A CUBIN chosen from an entry that has only PTX is an error, not its PTX.
        let ptx_only = entry(&cache, "sm_75", &[(ArtifactKind::Ptx, b"ptx")]);
        let refused = cubin(&ptx_only, &chosen(ArtifactKind::Cubin, "sm_75")).unwrap_err();
        assert!(
            matches!(
                &refused,
                Error::ChosenArtifactUnreadable { kind, target, .. }
                    if kind == "cubin" && target == "sm_75"
            ),
            "{refused}"
        );
    }
}
