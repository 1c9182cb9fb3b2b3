//! A remote hit against a cold NVRTC compile of a tiny kernel.
//!
//! `cargo bench -p kiln-redis --bench remote`
//!
//! Starts a private `redis-server` on loopback (it must be on PATH:
//! `scripts/start-redis.sh --install`), then measures, for the `axpy<f32>`
//! kernel at `sm_90a`:
//!
//! - `nvrtc_cold`: a full NVRTC compile to CUBIN + PTX (what a miss costs);
//! - `remote_hit`: `Compiler::compile_cached` on a fresh cache whose only
//!   tier is the remote one: owner and key, `GETRANGE`, full verification of the
//!   image, the entry recorded in memory (connection pooled, as in a running
//!   process);
//! - `remote_hit_signed`: `remote_hit` with the value signed and the tier
//!   requiring a trusted key's signature (`KILN_TRUSTED_KEYS`): the
//!   difference is what checking a signature adds to a remote hit;
//! - `remote_hit_write_through`: a fresh process's cache with the global
//!   cache's tiers (`kiln_core::add_tiers`: a disk tier in an empty
//!   directory, then the remote tier of `KILN_REMOTE_CACHE`, connecting on
//!   first use), the hit written through to disk (an atomic, fsynced
//!   segment): what the first process on a machine pays.
//!
//! Both hits use the tiers `kiln_core::add_tiers` builds, as the global cache
//! does. Compare them with `nvrtc_cold` measured in the same run.
//!
//! Without NVRTC, the group `remote/batch11` still runs (it compiles
//! nothing): one iteration is eleven remote hits (`RemoteTier::load_entry`,
//! pooled connection, no write-through) on eleven entries of 6.5 KiB stored
//! together, divide by 11 for a hit:
//!
//! - `unsigned`: values unsigned, a reader without trusted keys;
//! - `per_entry_signed`: each value signed on its own (`Tier::store` one by
//!   one), a reader with trusted keys: eleven verifications;
//! - `batch_signed`: the values signed with one batch signature
//!   (`Tier::store_batch`, as the background writer stores what was queued
//!   together), a reader with a fresh `TrustedKeys` memo each iteration (a
//!   new process): one verification, then a path of four hashes per other
//!   member;
//! - `batch_signed_memo_warm`: the same reader kept across iterations, the
//!   batch's root remembered: no verification at all.
//!
//! The readers of the first three are opened, and connected, in the
//! iteration's setup (not timed).

#[path = "../tests/suite/remote_support/mod.rs"]
mod remote_support;

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use kiln_core::{Cache, Key, Owner, Tier, TierEntry, TierSetup};
use kiln_cuda::{Arch, Compiler};
use kiln_kernel_set::{Dtype, KernelSpec};
use kiln_redis::{RemoteConfig, RemoteTier};
use remote_support::{RedisServer, remote};

/// The variables of a process using the remote tier at `url` (a long
/// timeout: the bench wants hits), with its disk tier in `disk` or none.
fn variables(url: &str, disk: Option<&Path>) -> kiln_core::settings::Settings {
    let mut vars = kiln_core::settings::Vars::from_iter([
        ("KILN_REMOTE_CACHE", OsString::from(url)),
        ("KILN_REMOTE_TIMEOUT_MS", OsString::from("5000")),
        ("KILN_REMOTE_WRITE", OsString::from("1")),
    ]);
    match disk {
        Some(dir) => vars.set("KILN_CACHE_DIR", dir.as_os_str()),
        None => vars.set("KILN_CACHE", "0"),
    }
    kiln_core::settings::Settings::from_vars(vars)
}

/// A fresh process's cache with the global cache's tiers
/// ([`kiln_core::add_tiers`]): the remote tier of `url`, after a disk tier
/// in `disk` or none.
fn wired(url: &str, disk: Option<&Path>) -> Cache {
    let cache = Cache::new();
    let tiers = kiln_core::add_tiers(&cache, &variables(url, disk));
    let expected: &[&str] = if disk.is_some() {
        &["disk", "remote"]
    } else {
        &["remote"]
    };
    assert_eq!(tiers, expected);
    cache
}

fn bench(c: &mut Criterion) {
    let compiler = match Compiler::new() {
        Ok(compiler) => compiler,
        Err(e) => {
            eprintln!("remote: NVRTC not available, nothing measured: {e}");
            return;
        }
    };
    let Some(server) = RedisServer::start() else {
        return;
    };
    let arch: Arch = "sm_90a".parse().expect("sm_90a is a valid arch");
    let request = KernelSpec::Axpy { dtype: Dtype::F32 }
        .request(arch)
        .expect("kernel request");
    let tier = remote(&server.url());

    // Seed the server: one compile, stored remotely.
    let seed = Cache::new();
    seed.add_tier(Box::new(tier.clone()));
    compiler.compile_cached(&seed, &request).expect("compile");
    // Stores run on the cache's background writer.
    seed.flush();
    assert_eq!(tier.stats().stored, 1, "the entry is on the server");

    let mut group = c.benchmark_group("remote/axpy_f32");
    group.sample_size(20);
    group.bench_function("nvrtc_cold", |b| {
        b.iter(|| compiler.compile(&request).expect("compile"))
    });
    // One process of the kind measured: its hit must come from the tiers.
    let check = wired(&server.url(), None);
    compiler.compile_cached(&check, &request).expect("hit");
    let stats = check.stats();
    assert_eq!((stats.hits_tier, stats.compiles), (1, 0), "{stats:?}");

    // A pooled connection, as in a running process: the remote tier as the
    // global cache builds it (kiln-redis's registered factory), shared by a
    // fresh cache (empty memory) each time.
    let url = server.url();
    let settings = variables(&url, None);
    let factory = kiln_core::registry::tier_factories()
        .into_iter()
        .find(|factory| factory.name() == "remote")
        .expect("kiln-redis registers the remote tier");
    let pooled: Arc<dyn Tier> = Arc::from(
        factory
            .build(&TierSetup::new(&settings, None, &settings.trust))
            .expect("KILN_REMOTE_CACHE is set"),
    );
    group.bench_function("remote_hit", |b| {
        b.iter_batched_ref(
            || {
                let cache = Cache::new();
                cache.add_tier(Box::new(Arc::clone(&pooled)));
                cache
            },
            |cache| compiler.compile_cached(cache, &request).expect("hit").key(),
            BatchSize::SmallInput,
        )
    });
    // The same entry signed, read by a tier that requires a trusted key's
    // signature (`KILN_TRUSTED_KEYS`): the difference with `remote_hit` is
    // the check (hashing the value's header and index, one ed25519
    // verification).
    let keys = tempfile::tempdir().expect("temp dir");
    let signing = Arc::new(kiln_image::SigningKey::from_secret_bytes([7; 32]));
    let trusted_file = keys.path().join("trusted.pub");
    std::fs::write(&trusted_file, format!("{}\n", signing.public_key())).expect("writes");
    let signer = kiln_redis::RemoteTier::open(
        kiln_redis::RemoteConfig::new(server.url()).signing_key(Arc::clone(&signing)),
    )
    .expect("a valid URL");
    // Compiles (the unsigned value is not asked for) and stores it signed.
    let resign = Cache::with_config(kiln_core::CacheConfig::default().always_compile(true));
    resign.add_tier(Box::new(signer.clone()));
    compiler.compile_cached(&resign, &request).expect("compile");
    resign.flush();
    assert_eq!(
        signer.stats().stored,
        1,
        "the signed entry is on the server"
    );
    let trusted = settings.with_var("KILN_TRUSTED_KEYS", trusted_file.clone());
    let checking: Arc<dyn Tier> = Arc::from(
        factory
            .build(&TierSetup::new(&trusted, None, &trusted.trust))
            .expect("KILN_REMOTE_CACHE is set"),
    );
    group.bench_function("remote_hit_signed", |b| {
        b.iter_batched_ref(
            || {
                let cache = Cache::new();
                cache.add_tier(Box::new(Arc::clone(&checking)));
                cache
            },
            |cache| {
                let hit = compiler.compile_cached(cache, &request).expect("hit");
                assert_eq!(cache.stats().compiles, 0, "a trusted remote hit");
                hit.key()
            },
            BatchSize::SmallInput,
        )
    });
    group.bench_function("remote_hit_write_through", |b| {
        b.iter_batched_ref(
            || {
                let dir = tempfile::tempdir().expect("temp dir");
                (wired(&server.url(), Some(dir.path())), dir)
            },
            |(cache, _)| compiler.compile_cached(cache, &request).expect("hit").key(),
            BatchSize::PerIteration,
        )
    });
    group.finish();
    let stats = tier.stats();
    assert_eq!((stats.rejected, stats.failures), (0, 0), "{stats:?}");
}

/// Members of the batch in `remote/batch11`.
const BATCH: u64 = 11;

/// Entry `i` of the batch bench: 6.5 KiB of code, as the axpy value.
fn batch_entry(i: u64) -> kiln_image::EntryData {
    let mut code = vec![0; 6656];
    blake3::Hasher::new()
        .update(&i.to_le_bytes())
        .finalize_xof()
        .fill(&mut code);
    kiln_image::EntryData {
        owner: remote_support::owner().digest(),
        owner_label: remote_support::owner().label().to_owned(),
        key: *remote_support::key(i).digest(),
        name: format!("kernel{i}"),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![],
        artifacts: vec![kiln_image::Artifact {
            kind: kiln_core::ArtifactKind::Cubin,
            entry_points: vec![format!("kernel{i}")],
            bytes: code,
        }],
    }
}

/// A tier on `url` in `namespace` (long timeout: the bench wants hits).
fn batch_tier(
    url: &str,
    namespace: &str,
    configure: impl FnOnce(RemoteConfig) -> RemoteConfig,
) -> RemoteTier {
    let config = RemoteConfig::new(url)
        .namespace(namespace)
        .timeout(std::time::Duration::from_secs(5));
    RemoteTier::open(configure(config)).expect("a valid URL")
}

/// Reads the eleven entries through `tier`: all hits.
fn read_all(tier: &RemoteTier, owner: &Owner, keys: &[Key]) -> usize {
    keys.iter()
        .filter(|key| {
            matches!(
                tier.load_entry(owner, key).expect("answers"),
                Some(TierEntry::Owned(_))
            )
        })
        .count()
}

fn batch(c: &mut Criterion) {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let signing = Arc::new(kiln_image::SigningKey::from_secret_bytes([11; 32]));
    let public = signing.public_key();
    let owner = remote_support::owner();
    let entries: Vec<kiln_image::EntryData> = (0..BATCH).map(batch_entry).collect();
    let items: Vec<(&Owner, &kiln_image::EntryData)> =
        entries.iter().map(|entry| (&owner, entry)).collect();
    let keys: Vec<Key> = (0..BATCH).map(remote_support::key).collect();

    // The same entries stored three ways, each in its own namespace.
    let unsigned = batch_tier(&url, "unsigned", |c| c.write_unsigned(true));
    for entry in &entries {
        unsigned.store(&owner, entry).expect("stores");
    }
    let direct = batch_tier(&url, "direct", |c| c.signing_key(Arc::clone(&signing)));
    for entry in &entries {
        direct.store(&owner, entry).expect("stores");
    }
    let batched = batch_tier(&url, "batch", |c| c.signing_key(Arc::clone(&signing)));
    assert!(batched.store_batch(&items).iter().all(Result::is_ok));
    for tier in [&unsigned, &direct, &batched] {
        assert_eq!(tier.stats().stored, BATCH, "{tier:?}");
    }

    // A reader as a fresh process opens it (its own memo), connected.
    let reader = |namespace: &str, trusted: bool| {
        let tier = batch_tier(&url, namespace, |c| {
            if trusted {
                c.trusted_keys(kiln_image::TrustedKeys::new([public]))
            } else {
                c
            }
        });
        let missing = remote_support::key(u64::MAX);
        assert!(
            tier.load_entry(&owner, &missing)
                .expect("answers")
                .is_none()
        );
        tier
    };
    let mut group = c.benchmark_group("remote/batch11");
    group.throughput(Throughput::Elements(BATCH));
    for (name, namespace, trusted) in [
        ("unsigned", "unsigned", false),
        ("per_entry_signed", "direct", true),
        ("batch_signed", "batch", true),
    ] {
        group.bench_function(name, |b| {
            b.iter_batched_ref(
                || reader(namespace, trusted),
                |tier| assert_eq!(read_all(tier, &owner, &keys), BATCH as usize),
                // One reader (one connection) alive at a time.
                BatchSize::PerIteration,
            )
        });
    }
    let warm = reader("batch", true);
    group.bench_function("batch_signed_memo_warm", |b| {
        b.iter(|| assert_eq!(read_all(&warm, &owner, &keys), BATCH as usize))
    });
    group.finish();
    let stats = warm.stats();
    assert_eq!(
        (stats.untrusted, stats.rejected, stats.failures),
        (0, 0, 0),
        "{stats:?}"
    );
}

criterion_group!(benches, bench, batch);
criterion_main!(benches);
