//! NVRTC compile vs. cache hit for kernels of the set.
//!
//! `cargo bench -p kiln-kernel-set --bench cuda_compile`
//!
//! - `nvrtc/*`: a full NVRTC compile to CUBIN + PTX (NVRTC keeps nothing between
//!   compiles, so every one is cold);
//! - `hit/*`: `Compiler::compile_cached` on a cache that holds the entry (owner and
//!   key derivation plus the lookup: what a warm process pays per call);
//! - `lookup/*`: the bare lookup with a precomputed owner digest and key.
//!
//! - `cccl_fingerprint`: hashing every file of the CCCL header tree (what a process
//!   without a memo pays once, at its first CUB kernel); `cccl_memo`: checking the
//!   memo's manifest (one `statx` per folder and file) that reuses it instead;
//! - `identity_memo`: learning the NVRTC identity from its memo (stats, no load).
//!
//! - `fresh_process/*`: owner + key derivation of every kernel of the set in a new
//!   process (this binary, re-run as a child), spawn included:
//!   - `spawn_only`: a child that does nothing (the floor);
//!   - `no_memo`: `KILN_CACHE=0`, so NVRTC is loaded and asked for its release
//!     (empty compile) and the CCCL tree is hashed, as every process did before
//!     identity memos;
//!   - `warm_memo`: a warm `KILN_CACHE_DIR`: NVRTC is not loaded, CCCL not read;
//!   - `recorded_no_nvrtc`: no NVRTC installed (`KILN_NVRTC` points nowhere), owners
//!     from the recorded release, CCCL from the warm memo;
//!   - `build_record`: owners and keys from a kernel library's `BuildRecord` (the
//!     recorded release and CCCL digest): nothing located, loaded or read.
//!
//! - `library/*`: `KernelLibrary::get` for one specialization on a cache holding
//!   its shipped entries: `remembered` is a repeated call (the answer remembered
//!   per cache, device and specialization: one hash lookup and one cache lookup),
//!   `derived` the first call (request, owner and key from the record, then the
//!   lookups), on a fresh library each time.
//!
//! Compare `hit` and `lookup` with `nvrtc`, and the `fresh_process` variants with
//! each other, measured in the same run.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, criterion_group};
use kiln_core::Cache;
use kiln_cuda::{
    Arch, Compiler, Device, IncludeDir, KernelLibrary, KernelRequest, Toolchain,
    toolchain::MemoDir,
    toolchain::SearchConfig,
    toolchain::{BuildRecord, CCCL, ToolchainPolicy},
};
use kiln_kernel_set::{Dtype, KernelSpec, ReduceOp, cccl_include_dir};

/// Set in a child process: what it derives.
const CHILD: &str = "KILN_BENCH_CUDA_CHILD";
/// The recorded release a `recorded` child names.
const RECORDED: &str = "KILN_BENCH_CUDA_RECORDED";
/// The build record a `build_record` child derives from.
const RECORD: &str = "KILN_BENCH_CUDA_RECORD";

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
    let cccl_path = cccl.path().expect("a located folder");
    let memo_dir = tempfile::tempdir().expect("temporary folder");
    // Settled files only (the installed trees are old): the default settle time.
    let memo = MemoDir::at(memo_dir.path());
    IncludeDir::with_memo(cccl_path, &memo).expect("fingerprint");
    Compiler::with_memo(&SearchConfig::from_env(), &memo).expect("identity");
    let mut group = c.benchmark_group("cuda_compile");
    group.sample_size(10);
    group.bench_function("cccl_fingerprint", |b| {
        b.iter(|| IncludeDir::rescan(cccl_path).expect("fingerprint").digest())
    });
    group.bench_function("cccl_memo", |b| {
        b.iter(|| {
            IncludeDir::with_memo(cccl_path, &memo)
                .expect("fingerprint")
                .digest()
        })
    });
    group.bench_function("identity_memo", |b| {
        b.iter(|| {
            Compiler::with_memo(&SearchConfig::from_env(), &memo)
                .expect("identity")
                .identity()
                .origin()
        })
    });
    group.finish();
    let record = BuildRecord::new(compiler.version().clone())
        .with_cubin_targets([arch])
        .with_ptx_target(Some(arch))
        .with_header_set(CCCL, cccl.digest());
    library(c, &compiler, &record);
    fresh_process(c, &compiler, &record);
}

/// The request function of the benchmarked library.
fn request(
    spec: &KernelSpec,
    toolchain: &Toolchain,
    arch: Arch,
) -> Result<KernelRequest, kiln_cuda::Error> {
    spec.request_with(toolchain, arch)
}

/// `KernelLibrary::get`, remembered and derived, on a cache holding the entries.
fn library(c: &mut Criterion, compiler: &Compiler, record: &BuildRecord) {
    let arch = record.cubin_targets()[0];
    let cache = Cache::new();
    let local = Toolchain::with_compiler(*compiler, SearchConfig::from_env());
    let mut group = c.benchmark_group("cuda_compile/library");
    for spec in [
        KernelSpec::Axpy { dtype: Dtype::F32 },
        KernelSpec::BlockReduce {
            dtype: Dtype::F32,
            op: ReduceOp::Sum,
            block: 256,
        },
    ] {
        compiler
            .compile_cached(&cache, &request(&spec, &local, arch).expect("request"))
            .expect("compiles");
        let new_library = || {
            KernelLibrary::with_record(record.clone(), request)
                .with_policy(ToolchainPolicy::Shipped)
        };
        let device = Device::new(arch);
        let library = new_library();
        assert_eq!(
            library
                .get(&cache, &device, &spec)
                .expect("shipped")
                .hit()
                .source(),
            kiln_core::Source::Memory
        );
        let family = spec.name();
        group.bench_function(format!("remembered/{family}"), |b| {
            b.iter(|| {
                library
                    .get(&cache, &device, &spec)
                    .expect("shipped")
                    .selection()
            })
        });
        group.bench_function(format!("derived/{family}"), |b| {
            b.iter_batched(
                new_library,
                |fresh| {
                    fresh
                        .get(&cache, &device, &spec)
                        .expect("shipped")
                        .selection()
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

/// Owner + key derivation of the whole kernel set in new processes.
fn fresh_process(c: &mut Criterion, compiler: &Compiler, record: &BuildRecord) {
    let exe = std::env::current_exe().expect("the bench binary");
    let cache_dir = tempfile::tempdir().expect("temporary folder");
    let nowhere = cache_dir.path().join("no-nvrtc/libnvrtc.so.13");
    let release = compiler.version().release.clone();
    let child = |mode: &str, nvrtc: Option<&Path>, no_memo: bool| {
        let mut command = Command::new(&exe);
        command
            .env(CHILD, mode)
            .env(RECORDED, &release)
            .env(RECORD, record.to_string())
            .env("KILN_CACHE_DIR", cache_dir.path())
            .env_remove("KILN_CACHE")
            .env_remove("KILN_NVRTC");
        if no_memo {
            command.env("KILN_CACHE", "0");
        }
        if let Some(nvrtc) = nvrtc {
            command.env("KILN_NVRTC", nvrtc);
        }
        command
    };
    let run = |mut command: Command| {
        let status = command.status().expect("child process");
        assert!(status.success(), "child failed: {status}");
    };
    // Warm the memo directory.
    run(child("derive", None, false));
    let mut group = c.benchmark_group("cuda_compile/fresh_process");
    group.sample_size(10);
    let variants = [
        ("spawn_only", "nothing", None, false),
        ("no_memo", "derive", None, true),
        ("warm_memo", "derive", None, false),
        (
            "recorded_no_nvrtc",
            "recorded",
            Some(nowhere.as_path()),
            false,
        ),
        ("build_record", "record", Some(nowhere.as_path()), false),
    ];
    for (name, mode, nvrtc, no_memo) in variants {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let command = child(mode, nvrtc, no_memo);
                    let started = Instant::now();
                    run(command);
                    total += started.elapsed();
                }
                total
            })
        });
    }
    group.finish();
}

/// The child's work: derive the owner and key of every kernel of the set.
fn child(mode: &str) -> Result<(), Box<dyn std::error::Error>> {
    let compiler = match mode {
        "nothing" => return Ok(()),
        "record" => {
            let record: BuildRecord = std::env::var(RECORD)?.parse()?;
            let recorded = Toolchain::recorded(&record).ok_or("a record without NVRTC")?;
            let arch: Arch = "sm_90a".parse()?;
            for spec in KernelSpec::all() {
                let request = spec.request_with(&recorded, arch)?;
                std::hint::black_box((request.owner(recorded.nvrtc())?.digest(), request.key()?));
            }
            return Ok(());
        }
        "derive" => Compiler::new()?,
        "recorded" => {
            let release = std::env::var(RECORDED)?;
            let compiler = Compiler::new_or_recorded(release.parse()?)?;
            if compiler.identity().location().is_some() {
                return Err("an NVRTC was found; the recorded identity was not used".into());
            }
            compiler
        }
        other => return Err(format!("unknown child mode {other:?}").into()),
    };
    let arch: Arch = "sm_90a".parse()?;
    for spec in KernelSpec::all() {
        let request = spec.request(arch)?;
        std::hint::black_box((compiler.owner(&request)?.digest(), request.key()?));
    }
    Ok(())
}

criterion_group!(benches, bench);

fn main() {
    if let Ok(mode) = std::env::var(CHILD) {
        if let Err(e) = child(&mode) {
            eprintln!("cuda_compile child {mode}: {e}");
            std::process::exit(1);
        }
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
