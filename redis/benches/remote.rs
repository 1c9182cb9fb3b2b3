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

#[path = "../tests/suite/remote_support/mod.rs"]
mod remote_support;

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use kiln_core::{Cache, Tier, TierSetup};
use kiln_cuda::{Arch, Compiler};
use kiln_kernel_set::{Dtype, KernelSpec};
use remote_support::{RedisServer, remote};

/// The variables of a process using the remote tier at `url` (a long
/// timeout: the bench wants hits), with its disk tier in `disk` or none.
fn variables<'a>(url: &'a str, disk: Option<&'a Path>) -> impl Fn(&str) -> Option<OsString> + 'a {
    move |name| match name {
        "KILN_REMOTE_CACHE" => Some(OsString::from(url)),
        "KILN_REMOTE_TIMEOUT_MS" => Some(OsString::from("5000")),
        "KILN_REMOTE_WRITE" => Some(OsString::from("1")),
        "KILN_CACHE_DIR" => disk.map(|dir| dir.as_os_str().to_owned()),
        "KILN_CACHE" => disk.is_none().then(|| OsString::from("0")),
        _ => None,
    }
}

/// A fresh process's cache with the global cache's tiers
/// ([`kiln_core::add_tiers`]): the remote tier of `url`, after a disk tier
/// in `disk` or none.
fn wired(url: &str, disk: Option<&Path>) -> Cache {
    let cache = Cache::new();
    let tiers = kiln_core::add_tiers(&cache, variables(url, disk));
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
    let lookup = variables(&url, None);
    let factory = kiln_core::registry::tier_factories()
        .into_iter()
        .find(|factory| factory.name() == "remote")
        .expect("kiln-redis registers the remote tier");
    let pooled: Arc<dyn Tier> = Arc::from(
        factory
            .build(&TierSetup::new(&lookup, None))
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
    assert_eq!(
        signer.stats().stored,
        1,
        "the signed entry is on the server"
    );
    let trusted_lookup = |name: &str| match name {
        "KILN_TRUSTED_KEYS" => Some(trusted_file.clone().into_os_string()),
        _ => lookup(name),
    };
    let checking: Arc<dyn Tier> = Arc::from(
        factory
            .build(&TierSetup::new(&trusted_lookup, None))
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

criterion_group!(benches, bench);
criterion_main!(benches);
