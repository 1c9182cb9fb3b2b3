//! A disk-tier hit through `global()`'s own wiring (the tiers an application
//! gets, `KILN_CACHE_DIR` from the environment) is borrowed from the mapped
//! segment, not copied: ARCHITECTURE.md invariant 7 for the disk tier.
//!
//! Each process is this test binary re-run with `KILN_DISK_GLOBAL_ROLE` set,
//! running the suite's ignored test `child`: the first compiles an entry through
//! `kiln_core::global()`, which stores it on disk; the second gets it again
//! and checks where its payload bytes live.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_core::{Artifact, ArtifactKind, Compiled, Key, KeyBuilder, Owner, Source};
use kiln_test_support::child;

const ROLE: &str = "KILN_DISK_GLOBAL_ROLE";

/// Larger than a segment the disk cache reads instead of mapping (64 KiB).
const CUBIN_LEN: usize = 256 << 10;

fn owner() -> Owner {
    Owner::new("disk-global-test", "1.0", "sm_90a", ["-O3"]).expect("owner")
}

fn key() -> Key {
    KeyBuilder::new("kiln-core disk_global test", 1)
        .str("kernel", "big")
        .finish()
}

fn cubin() -> Vec<u8> {
    let mut bytes = vec![0; CUBIN_LEN];
    blake3::Hasher::new()
        .update(b"cubin")
        .finalize_xof()
        .fill(&mut bytes);
    bytes
}

fn ptx() -> Vec<u8> {
    b"// ptx of the big kernel\n".repeat(40)
}

/// A process of this test binary in `role`, with the disk tier in `dir`
/// and no other switch inherited.
fn process(role: &str, dir: &Path) -> Command {
    let mut command = child::command(ROLE, role);
    command.env("KILN_CACHE_DIR", dir);
    for switch in [
        "KILN_CACHE",
        "KILN_CACHE_MAX_BYTES",
        "KILN_DISABLE",
        "KILN_ALWAYS_COMPILE",
        "KILN_IMAGE_PATH",
        "KILN_REMOTE_CACHE",
    ] {
        command.env_remove(switch);
    }
    command
}

fn result(command: &mut Command) -> String {
    let stdout = child::run(command);
    child::result_line(&stdout)
        .map(|line| line.trim().to_owned())
        .unwrap_or_else(|| panic!("no RESULT line in:\n{stdout}"))
}

#[test]
fn a_disk_tier_hit_through_the_global_cache_is_borrowed_from_the_mapped_segment() {
    let dir = tempfile::tempdir().expect("temp dir");
    assert_eq!(
        result(&mut process("compile", dir.path())),
        "source=Memory compiles=1"
    );
    assert_eq!(
        result(&mut process("hit", dir.path())),
        "source=Tier compiles=0 hits_tier=1 corrupt=0 cubin=mapped,aligned ptx=mapped,aligned"
    );
}

/// The file mapped at `address` in this process, from `/proc/self/maps`.
fn mapped_file(address: usize) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let start = usize::from_str_radix(start, 16).ok()?;
        let end = usize::from_str_radix(end, 16).ok()?;
        let path = fields.nth(4)?;
        (start <= address && address < end).then(|| PathBuf::from(path))
    })
}

/// Where `bytes` live: `mapped` if in a file mapped from under `dir`, and
/// `aligned` if they start on a 64-byte boundary.
fn placement(bytes: &[u8], dir: &Path) -> String {
    let address = bytes.as_ptr() as usize;
    let mapped = match mapped_file(address) {
        Some(file) if file.starts_with(dir) => "mapped",
        Some(file) => panic!("payload in a mapping of {}", file.display()),
        None => "not-mapped",
    };
    let aligned = if address.is_multiple_of(64) {
        "aligned"
    } else {
        "unaligned"
    };
    format!("{mapped},{aligned}")
}

/// The child's role named by `KILN_DISK_GLOBAL_ROLE` (nothing when unset),
/// run by the suite's `child` test.
pub fn run_child_role() {
    let role = match std::env::var(ROLE) {
        Ok(role) => role,
        Err(_) => return,
    };
    let cache = kiln_core::global();
    let mut compiles = 0;
    let hit = cache
        .get_or_compile(&owner(), &key(), || {
            compiles += 1;
            Ok(Compiled::new("big")
                .artifact(Artifact {
                    kind: ArtifactKind::Cubin,
                    entry_points: vec!["big".into()],
                    bytes: cubin(),
                })
                .artifact(Artifact {
                    kind: ArtifactKind::Ptx,
                    entry_points: vec!["big".into()],
                    bytes: ptx(),
                }))
        })
        .expect("a hit or a compile");
    let cubin_bytes = hit.artifact(&ArtifactKind::Cubin).expect("a cubin");
    assert_eq!(cubin_bytes, cubin());
    let ptx_bytes = hit.artifact(&ArtifactKind::Ptx).expect("a ptx");
    assert_eq!(ptx_bytes, ptx());
    match role.as_str() {
        "compile" => println!("RESULT source={:?} compiles={compiles}", hit.source()),
        "hit" => {
            assert_eq!(hit.source(), Source::Tier);
            // The same bytes on a second access: the entry keeps borrowing.
            let again = hit.artifact(&ArtifactKind::Cubin).expect("a cubin");
            assert_eq!(again.as_ptr(), cubin_bytes.as_ptr());
            let dir = std::env::var_os("KILN_CACHE_DIR").expect("set by the parent");
            let dir = std::fs::canonicalize(dir).expect("the cache directory exists");
            let stats = cache.stats();
            println!(
                "RESULT source={:?} compiles={compiles} hits_tier={} corrupt={} cubin={} ptx={}",
                hit.source(),
                stats.hits_tier,
                stats.corrupt,
                placement(cubin_bytes, &dir),
                placement(ptx_bytes, &dir),
            );
        }
        other => panic!("no role {other:?}"),
    }
}
