//! Tests of `choice.rs`.

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
        check_runs("k", &chosen(kind, target), arch(device), None).is_ok()
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
    let refused = check_runs("k", &chosen(Cubin, "sm_80"), arch("sm_90"), None).unwrap_err();
    assert!(
        matches!(
            &refused,
            LoadError::ChosenArtifactDoesNotRun { kind, target, major: 9, minor: 0, .. }
                if kind == "cubin" && target == "sm_80"
        ),
        "{refused}"
    );
}

#[test]
fn a_chosen_artifact_loads_only_on_a_driver_that_loads_its_toolchain() {
    use ArtifactKind::{Cubin, Ptx};
    let built = |kind: ArtifactKind, nvrtc: &str| ChosenArtifact {
        nvrtc: Some(nvrtc.parse().unwrap()),
        ..chosen(kind, "sm_80")
    };
    let loads = |artifact: &ChosenArtifact, driver: i32| {
        check_runs("k", artifact, arch("sm_80"), Some(driver))
    };
    // A 13.x CUBIN on a CUDA 12.8 driver: refused by Kiln, not by the driver.
    let refused = loads(&built(Cubin, "13.0.88"), 12080).unwrap_err();
    assert!(
        matches!(&refused, LoadError::ChosenArtifactDoesNotLoad { driver: 12080, nvrtc, .. } if nvrtc == "13.0.88"),
        "{refused}"
    );
    assert!(loads(&built(Cubin, "13.5.37"), 13000).is_ok(), "same major");
    assert!(
        loads(&built(Cubin, "12.9.86"), 13000).is_ok(),
        "an older major"
    );
    assert!(
        loads(&built(Cubin, "12.9.86"), 12000).is_ok(),
        "minor-version compatibility"
    );
    // PTX of NVRTC 13.5 on a 13.0 driver.
    let refused = loads(&built(Ptx, "13.5.37"), 13000).unwrap_err();
    assert!(
        matches!(&refused, LoadError::DriverTooOldForPtx { ptx_release, driver: 13000, .. } if ptx_release == "13.5"),
        "{refused}"
    );
    assert!(loads(&built(Ptx, "13.0.88"), 13000).is_ok());
    // Not known: the arch alone decides (the PTX banner is checked at load).
    assert!(loads(&chosen(Cubin, "sm_80"), 12000).is_ok());
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
        Err(LoadError::NoCompatibleArtifact {
            major: 7,
            minor: 5,
            ..
        })
    ));
    let cubin_only = entry(&cache, "sm_80", &[(ArtifactKind::Cubin, b"cubin")]);
    assert!(matches!(
        kind(&cubin_only, "sm_80", "sm_90"),
        Err(LoadError::NoCompatibleArtifact { .. })
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
            LoadError::ChosenArtifactUnreadable { kind, target, .. }
                if kind == "cubin" && target == "sm_75"
        ),
        "{refused}"
    );
}
