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
//! - `remote_hit_write_through`: the same with a disk tier (empty) before
//!   the remote one and a new connection, the hit written through to disk
//!   (an atomic, fsynced segment): what the first process on a machine pays.
//!
//! Compare the hits with `nvrtc_cold` measured in the same run.

#[path = "../tests/remote_support/mod.rs"]
mod remote_support;

use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use kiln_core::Cache;
use kiln_kernel_set::{Dtype, KernelSpec};
use kiln_cuda::{Arch, Compiler};
use kiln_core::disk::{DiskCache, DiskConfig};
use remote_support::{RedisServer, remote};

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
    group.bench_function("remote_hit", |b| {
        b.iter_batched_ref(
            || {
                let cache = Cache::new();
                cache.add_tier(Box::new(tier.clone()));
                cache
            },
            |cache| compiler.compile_cached(cache, &request).expect("hit").key(),
            BatchSize::SmallInput,
        )
    });
    group.bench_function("remote_hit_write_through", |b| {
        b.iter_batched_ref(
            || {
                let dir = tempfile::tempdir().expect("temp dir");
                let disk = Arc::new(DiskCache::open(DiskConfig::new(dir.path())).expect("disk"));
                let cache = Cache::new();
                cache.add_tier(Box::new(Arc::clone(&disk)));
                // A new handle on the same server, writing through to this disk.
                cache.add_tier(Box::new(remote(&server.url()).write_through(disk)));
                (cache, dir)
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
