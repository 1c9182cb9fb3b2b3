//! End to end, across processes: the driver's JIT paid once per fleet.
//!
//! Each process here is this test binary run again (`child`), with the
//! global cache configured by its environment, as an application's is. It
//! gets a PTX entry (NVRTC, or a tier) and the CUBIN JIT-compiled from it for
//! an sm_90 device through `kiln::cuda::jit::get_or_jit`, the loader's path. The
//! driver's JIT needs a GPU, so it is stood in for by NVRTC's CUBIN of the same
//! kernel for sm_90 (real CUBIN bytes); whether it ran is what each process
//! reports. Then:
//!
//! 1. a first process JIT-compiles, with a fresh disk cache, a remote tier on
//!    a real loopback `redis-server` and the fleet's signing key;
//! 2. a second process on the same disk cache does not;
//! 3. a process with a fresh disk cache (a second machine) gets the CUBIN from
//!    the remote tier, its signature checked against the trusted key;
//! 4. one that trusts another key refuses it and JIT-compiles;
//! 5. `kiln bake` of the first process's record takes the CUBIN from the disk
//!    cache into an image, named and with its provenance; a process with that
//!    image and no cache does not JIT-compile.
//!
//! Needs NVRTC and `redis-server`: without them the test skips, except under
//! `CI=true`, where it fails.
#![cfg(all(feature = "cuda", feature = "redis"))]

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kiln::cuda::jit::{
    JIT_COMPILER_ID, JIT_SOURCE_DEP, JitKernels, JitSource, JitTarget, get_or_jit,
};
use kiln::cuda::{Arch, Compiler, KernelRequest};
use kiln_test_support::child;
use kiln_test_support::redis_server::RedisServer;
use serde_json::Value;

const ROLE: &str = "KILN_E2E_JIT_ROLE";
const RELEASE: &str = "580.159.04";

/// The switches the test sets itself: never inherited.
const SWITCHES: [&str; 12] = [
    "KILN_DISABLE",
    "KILN_ALWAYS_COMPILE",
    "KILN_IMAGE_PATH",
    "KILN_LOG",
    "KILN_RECORD",
    "KILN_CACHE",
    "KILN_CACHE_DIR",
    "KILN_CACHE_MAX_BYTES",
    "KILN_REMOTE_CACHE",
    "KILN_TRUSTED_KEYS",
    "KILN_SIGNING_KEY",
    "KILN_REMOTE_WRITE",
];

const AXPY: &str = "template <typename T>\n\
    __global__ void kiln_axpy(int n, T a, const T* x, T* y) {\n\
        int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
        if (i < n) y[i] = a * x[i] + y[i];\n\
    }\n";

fn request(arch: &str) -> KernelRequest {
    KernelRequest::new("e2e_jit_axpy", AXPY, arch.parse::<Arch>().expect("an arch"))
        .name_expression("kiln_axpy<float>")
}

/// The child: the PTX entry for sm_80, then the CUBIN for sm_90 as the loader
/// gets it; prints what happened.
#[test]
#[ignore = "run by the tests of this file as a child process"]
fn child() {
    if std::env::var_os(ROLE).is_none() {
        return;
    }
    let cache = kiln::global();
    let compiler = Compiler::new().expect("NVRTC");
    let ptx = compiler
        .compile_cached(cache, &request("sm_80"))
        .expect("the PTX entry");
    let source = JitSource::of(&ptx).expect("the entry carries PTX");
    let target = JitTarget::new("sm_90".parse::<Arch>().unwrap(), RELEASE).unwrap();
    let linked = Cell::new(false);
    let hit = get_or_jit(cache, &source, &target, JitKernels::All, || {
        linked.set(true);
        Ok::<_, kiln::cuda::CompileError>(compiler.compile(&request("sm_90"))?.cubin)
    })
    .expect("the CUBIN");
    cache.flush();
    println!(
        "RESULT linked={} source={} untrusted={} owner={}",
        u8::from(linked.get()),
        hit.source().name(),
        cache.stats().tier_untrusted,
        hit.owner_label()
    );
}

struct Run {
    linked: bool,
    source: String,
    untrusted: u64,
}

fn run(env: &[(&str, &Path)]) -> Run {
    let mut command = child::command(ROLE, "jit");
    for switch in SWITCHES {
        command.env_remove(switch);
    }
    command.envs(env.iter().copied());
    let stdout = child::run(&mut command);
    let line = child::result_line(&stdout).expect("a RESULT line");
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} in {line}"))
            .to_owned()
    };
    assert_eq!(field("owner"), format!("{JIT_COMPILER_ID}-{RELEASE}/sm_90"));
    Run {
        linked: field("linked") == "1",
        source: field("source"),
        untrusted: field("untrusted").parse().expect("a count"),
    }
}

/// `cargo build -p kiln-tool`'s `kiln`.
fn kiln_tool() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "build",
            "-p",
            "kiln-tool",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::inherit())
        .output()
        .expect("cargo runs");
    assert!(output.status.success(), "building kiln-tool failed");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["target"]["name"] == "kiln")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .expect("cargo reports the kiln executable")
}

fn kiln(tool: &Path, args: &[&Path]) -> Value {
    let mut command = Command::new(tool);
    for switch in SWITCHES {
        command.env_remove(switch);
    }
    let output = command.args(args).output().expect("kiln runs");
    assert!(
        output.status.success(),
        "kiln {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

/// `kiln keygen -o DIR/NAME`; the key's path (its public key beside it, `.pub`).
fn keygen(tool: &Path, dir: &Path, name: &str) -> PathBuf {
    let key = dir.join(name);
    let output = Command::new(tool)
        .arg("keygen")
        .arg("-o")
        .arg(&key)
        .output()
        .expect("kiln runs");
    assert!(output.status.success(), "{output:?}");
    key
}

fn public(key: &Path) -> PathBuf {
    let mut path = key.as_os_str().to_owned();
    path.push(".pub");
    PathBuf::from(path)
}

#[test]
fn the_jit_compiled_cubin_is_shared_by_processes_machines_and_baked_images() {
    if kiln_test_support::ci::required(Compiler::new(), "NVRTC (scripts/install-cuda-wheels.sh)")
        .is_none()
    {
        return;
    }
    let Some(server) = RedisServer::start() else {
        return;
    };
    let tool = kiln_tool();
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    std::fs::create_dir(&keys).unwrap();
    let fleet = keygen(&tool, &keys, "fleet");
    let stranger = keygen(&tool, &keys, "stranger");
    let url = PathBuf::from(server.url());
    let machine = |name: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir(&path).unwrap();
        path
    };
    let (a, b, c) = (machine("a"), machine("b"), machine("c"));
    let record = dir.path().join("first.record");

    let first = run(&[
        ("KILN_CACHE_DIR", &a),
        ("KILN_REMOTE_CACHE", &url),
        ("KILN_SIGNING_KEY", &fleet),
        ("KILN_RECORD", &record),
    ]);
    assert!(first.linked, "the first process JIT-compiles");
    assert_eq!(first.source, "memory");

    let trusting = public(&fleet);
    let second = run(&[
        ("KILN_CACHE_DIR", &a),
        ("KILN_REMOTE_CACHE", &url),
        ("KILN_TRUSTED_KEYS", &trusting),
    ]);
    assert!(!second.linked, "the second process loads the kept CUBIN");
    assert_eq!(second.source, "tier");

    let other_machine = run(&[
        ("KILN_CACHE_DIR", &b),
        ("KILN_REMOTE_CACHE", &url),
        ("KILN_TRUSTED_KEYS", &trusting),
    ]);
    assert!(
        !other_machine.linked,
        "a machine sharing the remote tier gets it"
    );
    assert_eq!(other_machine.source, "tier");
    assert_eq!(other_machine.untrusted, 0);

    let distrusting = public(&stranger);
    let refused = run(&[
        ("KILN_CACHE_DIR", &c),
        ("KILN_REMOTE_CACHE", &url),
        ("KILN_TRUSTED_KEYS", &distrusting),
    ]);
    assert!(
        refused.linked,
        "a value signed by another key is not served"
    );
    assert!(refused.untrusted >= 1);

    // kiln bake takes the JIT-compiled CUBIN like any recorded entry.
    let images = machine("images");
    let baked = images.join("app.kimg");
    let arg = |s: &str| PathBuf::from(s);
    kiln(
        &tool,
        &[
            &arg("bake"),
            &record,
            &arg("-o"),
            &baked,
            &arg("--cache-dir"),
            &a,
            &arg("--json"),
        ],
    );
    let inspected = kiln(&tool, &[&arg("inspect"), &baked, &arg("--json")]);
    let entries = inspected["entries"].as_array().expect("entries");
    let jit = entries
        .iter()
        .find(|e| e["owner_label"] == format!("{JIT_COMPILER_ID}-{RELEASE}/sm_90"))
        .expect("the JIT-compiled CUBIN is baked");
    assert!(jit["name"].as_str().unwrap().contains("e2e_jit_axpy"));
    assert!(
        jit["deps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["name"] == JIT_SOURCE_DEP)
    );
    assert_eq!(jit["artifacts"][0]["kind"], "cubin");
    let no_cache = PathBuf::from("0");
    let from_image = run(&[("KILN_IMAGE_PATH", &images), ("KILN_CACHE", &no_cache)]);
    assert!(!from_image.linked, "the baked image holds the CUBIN");
    assert_eq!(from_image.source, "image");
}
