//! Builds reuse what any earlier build compiled: a kernel library's real
//! build script (`examples/kiln-activations-demo`, copied without its
//! shipped image, so that every entry must come from a tier or a compile)
//! built with `cargo build` in scratch target folders, with a private disk
//! cache, and for the build farm a real `redis-server` on loopback.
//!
//! - a clean rebuild compiles nothing and writes the same image; an edit of
//!   one kernel compiles that kernel's targets only; an added target compiles
//!   that target only; a corrupt disk entry is compiled again;
//! - two builders with their own target folders and disk caches share one
//!   remote cache: the first compiles and stores signed entries, the second
//!   compiles nothing; an entry planted unsigned, or signed by another key,
//!   is refused by a builder that trusts the first one's key, and compiled.
//!
//! Needs NVRTC and `redis-server`; without them the tests skip, except under
//! `CI=true`, where they fail.
#![cfg(feature = "cuda")]

mod demo_app;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;

use demo_app::nvrtc_available;
use kiln_image::SigningKey;
use kiln_test_support::library;
use kiln_test_support::redis_server::RedisServer;

/// The library's kernels (8) for the targets the tests build (2).
const ENTRIES: u64 = 16;
const TARGETS: &str = "sm_80,sm_90";

/// The library, copied into `root/<name>` as a workspace of its own without
/// its shipped image; its build script links the remote tier.
fn library(root: &Path, name: &str) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    library::copy_library(repo, &root.join(name)).expect("the library copied")
}

/// One builder: a target folder and a disk cache of its own, and the
/// variables its builds run with.
struct Builder {
    library: PathBuf,
    target: PathBuf,
    cache: PathBuf,
    vars: Vec<(&'static str, OsString)>,
}

/// What a build script's summary line says.
#[derive(Debug, PartialEq, Eq)]
struct Summary {
    entries: u64,
    from_disk: u64,
    from_remote: u64,
    compiled: u64,
    missing: u64,
    image: PathBuf,
}

impl Builder {
    fn new(library: PathBuf, scratch: &Path, name: &str) -> Builder {
        Builder {
            library,
            target: scratch.join(format!("{name}-target")),
            cache: scratch.join(format!("{name}-cache")),
            vars: vec![("KILN_DEMO_ARCHS", TARGETS.into())],
        }
    }

    fn var(mut self, name: &'static str, value: impl Into<OsString>) -> Builder {
        self.vars.retain(|(n, _)| *n != name);
        self.vars.push((name, value.into()));
        self
    }

    /// `cargo build` of the library; its build script's summary.
    fn build(&self) -> Summary {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(cargo);
        command
            .args(["build", "--offline"])
            .current_dir(&self.library)
            .env("CARGO_TARGET_DIR", &self.target)
            .env("KILN_CACHE_DIR", &self.cache);
        for name in [
            "KILN_REMOTE_CACHE",
            "KILN_TRUSTED_KEYS",
            "KILN_SIGNING_KEY",
            "KILN_ALWAYS_COMPILE",
            "KILN_CACHE",
            "KILN_CUDA_ARCHS",
            "KILN_IGNORE_SHIPPED",
            "KILN_SHIP_CANDIDATE",
        ] {
            command.env_remove(name);
        }
        for (name, value) in &self.vars {
            command.env(name, value);
        }
        let output = command.output().expect("cargo runs");
        assert!(
            output.status.success(),
            "the build failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        self.summary()
    }

    /// Removes the library's own build, so that its build script runs again
    /// (its dependencies stay built).
    fn clean(&self) {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let output = Command::new(cargo)
            .args(["clean", "--offline", "-p", "kiln-activations-demo"])
            .current_dir(&self.library)
            .env("CARGO_TARGET_DIR", &self.target)
            .output()
            .expect("cargo runs");
        assert!(output.status.success(), "cargo clean failed");
    }

    fn summary(&self) -> Summary {
        let output = library::build_script_output(&self.target.join("debug/build"), library::NAME)
            .unwrap_or_else(|e| panic!("the build script ran: {e}"));
        let line = library::summary_line(&output, library::NAME)
            .unwrap_or_else(|| panic!("no summary in\n{output}"));
        let count = |what: &str| -> u64 {
            line.split(['(', ','])
                .map(str::trim)
                .find_map(|part| part.strip_suffix(what)?.trim().parse().ok())
                .unwrap_or(0)
        };
        let entries = line
            .split("kiln-activations-demo: ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        let image = line
            .split(" into ")
            .nth(1)
            .and_then(|rest| rest.rsplit_once(" in "))
            .map(|(path, _)| PathBuf::from(path))
            .unwrap_or_else(|| panic!("{line}"));
        Summary {
            entries,
            from_disk: count("from disk"),
            from_remote: count("from remote"),
            compiled: count("compiled"),
            missing: count("missing"),
            image,
        }
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("e2e-build-cache")
        .join(name);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

/// The relu kernels (f32 and f64), changed.
fn edit_relu(library: &Path) {
    library::edit_relu(library, 0).expect("the relu kernel edited");
}

#[test]
fn a_rebuild_an_edit_and_a_new_target_compile_only_what_is_new() {
    if !nvrtc_available() {
        return;
    }
    let scratch = scratch("author");
    let library = library(&scratch, "library");
    let _ = std::fs::remove_dir_all(scratch.join("author-cache"));
    let author = Builder::new(library.clone(), &scratch, "author");

    let cold = author.build();
    assert_eq!(
        (cold.entries, cold.compiled, cold.from_disk),
        (ENTRIES, ENTRIES, 0)
    );
    let image = std::fs::read(&cold.image).expect("image");

    author.clean();
    let warm = author.build();
    assert_eq!(
        (warm.entries, warm.compiled, warm.from_disk),
        (ENTRIES, 0, ENTRIES)
    );
    assert_eq!(
        std::fs::read(&warm.image).expect("image"),
        image,
        "the same image whether compiled or found"
    );

    // One kernel edited: its two specializations, for each target.
    edit_relu(&library);
    let edited = author.build();
    assert_eq!(
        (edited.entries, edited.compiled, edited.from_disk),
        (ENTRIES, 4, 12)
    );

    // A target added: that target only.
    let wider = author.var("KILN_DEMO_ARCHS", "sm_80,sm_86,sm_90");
    let added = wider.build();
    assert_eq!(
        (added.entries, added.compiled, added.from_disk),
        (24, 8, 16)
    );

    // KILN_ALWAYS_COMPILE compiles everything (a run-time switch: it does
    // not rerun the build script by itself).
    let always = wider.var("KILN_ALWAYS_COMPILE", "1");
    always.clean();
    let everything = always.build();
    assert_eq!((everything.compiled, everything.from_disk), (24, 0));
    let always = always.var("KILN_ALWAYS_COMPILE", "0");

    // A corrupt disk cache: refused entry by entry, compiled again.
    let mut damaged = 0;
    for segment in files(&always.cache) {
        if segment.extension().is_some_and(|e| e == "kimg") {
            let mut bytes = std::fs::read(&segment).expect("segment");
            let last = bytes.len() - 1;
            bytes[last] ^= 0xff;
            std::fs::write(&segment, bytes).expect("segment");
            damaged += 1;
        }
    }
    assert!(damaged > 0, "no disk segment to damage");
    always.clean();
    let repaired = always.build();
    assert_eq!(repaired.entries, 24);
    assert!(repaired.compiled >= 1, "{repaired:?}");
    assert_eq!(repaired.compiled + repaired.from_disk, 24, "{repaired:?}");
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            all.extend(files(&path));
        } else {
            all.push(path);
        }
    }
    all
}

#[test]
fn a_build_farm_shares_signed_compiles_and_refuses_what_its_key_did_not_sign() {
    if !nvrtc_available() {
        return;
    }
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let scratch = scratch("farm");
    for old in ["first-cache", "second-cache"] {
        let _ = std::fs::remove_dir_all(scratch.join(old));
    }
    let library = library(&scratch, "library");
    let writer = SigningKey::from_secret_bytes([0x5a; 32]);
    let secret = scratch.join("writer.key");
    std::fs::write(&secret, format!("{}\n", hex(&[0x5a; 32]))).expect("key file");
    set_mode(&secret, 0o600);
    let trusted = scratch.join("writer.pub");
    std::fs::write(&trusted, format!("{}\n", writer.public_key().to_hex())).expect("key file");

    let first = Builder::new(library.clone(), &scratch, "first")
        .var("KILN_REMOTE_CACHE", redis.url())
        .var("KILN_SIGNING_KEY", &secret);
    let built = first.build();
    assert_eq!((built.compiled, built.from_remote), (ENTRIES, 0));

    let second = Builder::new(library.clone(), &scratch, "second")
        .var("KILN_REMOTE_CACHE", redis.url())
        .var("KILN_TRUSTED_KEYS", &trusted);
    let shared = second.build();
    assert_eq!(
        (shared.entries, shared.compiled, shared.from_remote),
        (ENTRIES, 0, ENTRIES)
    );
    let signed = std::fs::read(&built.image).expect("image");
    assert_eq!(
        std::fs::read(&shared.image).expect("image"),
        kiln_image::strip_signatures(&signed).expect("an image"),
        "the second builder's image is the first one's (which its key signed)"
    );

    // One entry planted unsigned, then signed by another key: refused by a
    // builder that trusts the writer's key alone, and compiled.
    let port = redis
        .url()
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .and_then(|p| p.parse().ok())
        .expect("port");
    let keys = redis_keys(port);
    assert_eq!(keys.len() as u64, ENTRIES, "{keys:?}");
    let planted = &keys[0];
    let value = redis_get(port, planted);
    let unsigned = kiln_image::strip_signatures(&value).expect("a remote value is an image");
    let other = SigningKey::from_secret_bytes([0x33; 32]);
    let foreign = kiln_image::sign_image(&unsigned, &other).expect("signs");
    for plant in [unsigned, foreign] {
        redis_set(port, planted, &plant);
        let _ = std::fs::remove_dir_all(&second.cache);
        second.clean();
        let refused = second.build();
        assert_eq!(
            (refused.entries, refused.compiled, refused.from_remote),
            (ENTRIES, 1, ENTRIES - 1)
        );
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// One command to the server on `port` (RESP), and its reply's bytes: a
/// bulk string's content, or each element of an array of bulk strings.
fn redis(port: u16, args: &[&[u8]]) -> Vec<Vec<u8>> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("redis-server");
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        request.extend_from_slice(arg);
        request.extend_from_slice(b"\r\n");
    }
    stream.write_all(&request).expect("send");
    let mut reader = std::io::BufReader::new(stream);
    let line = read_line(&mut reader);
    match line.first() {
        Some(b'+') => vec![line[1..].to_vec()],
        Some(b'$') => vec![read_bulk(&mut reader, &line)],
        Some(b'*') => {
            let count: usize = std::str::from_utf8(&line[1..])
                .ok()
                .and_then(|n| n.parse().ok())
                .expect("array length");
            (0..count)
                .map(|_| {
                    let header = read_line(&mut reader);
                    read_bulk(&mut reader, &header)
                })
                .collect()
        }
        _ => panic!("redis replied {:?}", String::from_utf8_lossy(&line)),
    }
}

fn read_line(reader: &mut impl std::io::BufRead) -> Vec<u8> {
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line).expect("reply");
    line.truncate(line.len().saturating_sub(2));
    line
}

fn read_bulk(reader: &mut impl Read, header: &[u8]) -> Vec<u8> {
    let len: usize = std::str::from_utf8(&header[1..])
        .ok()
        .and_then(|n| n.parse().ok())
        .expect("bulk length");
    let mut bytes = vec![0; len + 2];
    reader.read_exact(&mut bytes).expect("bulk");
    bytes.truncate(len);
    bytes
}

fn redis_keys(port: u16) -> Vec<String> {
    let mut keys: Vec<String> = redis(port, &[b"KEYS", b"*"])
        .into_iter()
        .map(|k| String::from_utf8(k).expect("a key name"))
        .collect();
    keys.sort();
    keys
}

fn redis_get(port: u16, key: &str) -> Vec<u8> {
    redis(port, &[b"GET", key.as_bytes()]).remove(0)
}

fn redis_set(port: u16, key: &str, value: &[u8]) {
    let reply = redis(port, &[b"SET", key.as_bytes(), value]);
    assert_eq!(reply, [b"OK".to_vec()]);
}
