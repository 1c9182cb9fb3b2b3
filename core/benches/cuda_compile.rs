//! NVRTC compile vs. cache hit for kernels of the set.
//!
//! `cargo bench -p kiln-core --features cuda --bench cuda_compile`
//!
//! - `nvrtc/*`: a full NVRTC compile to CUBIN + PTX (NVRTC keeps nothing between
//!   compiles, so every one is cold);
//! - `hit/*`: `Compiler::compile_cached` on a cache that holds the entry (owner and
//!   key derivation plus the lookup: what a warm process pays per call);
//! - `lookup/*`: the bare lookup with a precomputed owner digest and key.
//!
//! - `cccl_fingerprint`: hashing every file of the CCCL header tree, paid once per
//!   process by the first CUB kernel (`IncludeDir::new` remembers the digest).
//!
//! Compare `hit` and `lookup` with `nvrtc` measured in the same run.

use criterion::{Criterion, criterion_group, criterion_main};
use kiln_core::Cache;
use kiln_core::cuda::kernels::{Dtype, KernelSpec, ReduceOp, cccl_include_dir};
use kiln_core::cuda::{Arch, Compiler, IncludeDir};

fn bench(c: &mut Criterion) {
    let compiler = match Compiler::new() {
        Ok(compiler) => compiler,
        Err(e) => {
            eprintln!("cuda_compile: NVRTC not available, nothing measured: {e}");
            return;
        }
    };
    let arch: Arch = "sm_90a".parse().expect("sm_90a is a valid arch");
    let specs = [
        (KernelSpec::Axpy { dtype: Dtype::F32 }, 20),
        (
            KernelSpec::BlockReduce {
                dtype: Dtype::F32,
                op: ReduceOp::Sum,
                block: 256,
            },
            10,
        ),
    ];
    for (spec, samples) in specs {
        let request = spec.request(arch).expect("kernel request");
        let name = spec.name();
        let mut group = c.benchmark_group(format!("cuda_compile/{name}"));
        group.sample_size(samples);
        group.bench_function("nvrtc", |b| {
            b.iter(|| compiler.compile(&request).expect("compile"))
        });
        let cache = Cache::new();
        compiler.compile_cached(&cache, &request).expect("compile");
        group.bench_function("hit", |b| {
            b.iter(|| {
                compiler
                    .compile_cached(&cache, &request)
                    .expect("hit")
                    .key()
            })
        });
        let owner = compiler.owner(&request).expect("owner").digest();
        let key = request.key().expect("key");
        group.bench_function("lookup", |b| {
            b.iter(|| cache.lookup(&owner, &key).expect("hit").key())
        });
        group.finish();
    }
    let cccl = cccl_include_dir().expect("CCCL headers");
    let mut group = c.benchmark_group("cuda_compile");
    group.sample_size(10);
    group.bench_function("cccl_fingerprint", |b| {
        b.iter(|| {
            IncludeDir::rescan(cccl.path())
                .expect("fingerprint")
                .digest()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
