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
//!   is refused by a builder that trusts the first one's key, and compiled;
//! - a block embeds only what it can vouch for: code planted in the remote
//!   cache (unsigned) and in a disk cache others may write (labelled as a
//!   compile) never reaches the image, with trusted keys at build time or
//!   only at run time; told to take unverified entries
//!   (`KILN_BUILD_UNVERIFIED=1`), the image records them and the
//!   application, run with `KILN_TRUSTED_KEYS`, refuses them.
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
    unverified: u64,
    compiled: u64,
    missing: u64,
    refused: u64,
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

    /// A copy of this builder with `name` set to `value`.
    fn clone_with(&self, name: &'static str, value: impl Into<OsString>) -> Builder {
        Builder {
            library: self.library.clone(),
            target: self.target.clone(),
            cache: self.cache.clone(),
            vars: self.vars.clone(),
        }
        .var(name, value)
    }

    fn var(mut self, name: &'static str, value: impl Into<OsString>) -> Builder {
        self.vars.retain(|(n, _)| *n != name);
        self.vars.push((name, value.into()));
        self
    }

    /// `cargo build` of the library; its build script's summary.
    fn build(&self) -> Summary {
        self.build_with(&[])
    }

    /// `cargo build` of the library and its examples.
    fn build_examples(&self) -> Summary {
        self.build_with(&["--examples"])
    }

    fn build_with(&self, args: &[&str]) -> Summary {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(cargo);
        command
            .args(["build", "--offline"])
            .args(args)
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
            "KILN_BUILD_UNVERIFIED",
            "KILN_CACHE_TRUST_DIR",
            "KILN_REMOTE_WRITE",
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
            line.split(['(', ',', ')'])
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
            unverified: count("from unverified disk") + count("from unverified remote"),
            compiled: count("compiled"),
            missing: count("missing"),
            refused: count("refused unverified"),
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
    std::fs::write(
        &secret,
        format!("{}\n", kiln_image::Digest([0x5a; 32]).to_hex()),
    )
    .expect("key file");
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

/// What the application run by [`served`] reports.
#[derive(Debug, PartialEq, Eq)]
struct Served {
    /// Entries merged from the library's embedded image.
    inserted: u64,
    /// Entries it refused as taken unverified at build time.
    unverified: u64,
    /// Per entry asked for: `own` (compiled code), `planted`, `missing`.
    entries: Vec<String>,
}

/// The application of the planted tests: it merges the library's embedded
/// image, says what the merge did, and for each `owner:key` given (hex
/// digests) whether the image serves it and with which code.
const SERVED: &str = r#"
fn main() {
    let _ = kiln_activations_demo::library();
    let report = kiln::init();
    let (mut inserted, mut unverified) = (0, 0);
    for (_, merge) in report.merged() {
        inserted += merge.inserted;
        unverified += merge.unverified;
    }
    println!("inserted={inserted} unverified={unverified}");
    for arg in std::env::args().skip(1) {
        let (owner, key) = arg.split_once(':').expect("owner:key");
        let owner: kiln::image::Digest = owner.parse().expect("an owner digest");
        let key = kiln::Key::from_digest(key.parse().expect("a key digest"));
        let served = match kiln::global().lookup(&owner, &key) {
            None => "missing",
            Some(hit) => {
                let planted = hit.artifacts().iter().any(|artifact| {
                    artifact.bytes().is_some_and(|bytes| bytes.windows(4).any(|w| w == b"EVIL"))
                });
                if planted { "planted" } else { "own" }
            }
        };
        println!("{served}");
    }
}
"#;

/// Runs the application built by `builder` as on a production machine
/// (`env -i`, a fresh `HOME`, no disk or remote tier), with `keys` as
/// `KILN_TRUSTED_KEYS` if given, asking for `entries`.
fn served(builder: &Builder, keys: Option<&Path>, entries: &[&str]) -> Served {
    let home = tempfile::tempdir().expect("a home");
    let mut command = Command::new(builder.target.join("debug/examples/served"));
    command
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", "/usr/bin:/bin")
        .env("KILN_CACHE", "0")
        .args(entries);
    if let Some(keys) = keys {
        command.env("KILN_TRUSTED_KEYS", keys);
    }
    let output = command.output().expect("the application runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut lines = stdout.lines();
    let counts = lines.next().expect("the counts");
    let field = |name: &str| -> u64 {
        counts
            .split_whitespace()
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {counts}"))
    };
    Served {
        inserted: field("inserted"),
        unverified: field("unverified"),
        entries: lines.map(str::to_owned).collect(),
    }
}

/// `value`, a remote value (a one-entry image, signed or not), with other
/// code in every artifact, checksums recomputed and no signature: what an
/// attacker who can write to the server or to a shared directory plants.
fn evil(value: &[u8]) -> kiln_image::EntryData {
    let unsigned = kiln_image::strip_signatures(value).expect("an image");
    let image =
        kiln_image::Image::from_bytes(&unsigned, kiln_image::Verification::Full).expect("opens");
    let mut entry = image
        .entry(0)
        .expect("one entry")
        .to_data()
        .expect("its data");
    for artifact in &mut entry.artifacts {
        artifact.bytes = b"// EVIL code planted by another user\n".to_vec();
    }
    entry
}

/// The `owner:key` hex of a remote key name (`kiln:v2:<owner>:<key>`).
fn ids_of(redis_key: &str) -> String {
    let mut parts = redis_key.rsplitn(3, ':');
    let key = parts.next().expect("a key");
    let owner = parts.next().expect("an owner");
    format!("{owner}:{key}")
}

#[test]
fn a_block_embeds_no_planted_code_and_a_process_with_keys_refuses_what_it_took_unverified() {
    if !nvrtc_available() {
        return;
    }
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let scratch = scratch("planted");
    let library = library(&scratch, "library");
    std::fs::create_dir_all(library.join("examples")).expect("examples");
    std::fs::write(library.join("examples/served.rs"), SERVED).expect("the application");
    let writer_key = SigningKey::from_secret_bytes([0x5b; 32]);
    let secret = scratch.join("writer.key");
    std::fs::write(
        &secret,
        format!("{}\n", kiln_image::Digest([0x5b; 32]).to_hex()),
    )
    .expect("key file");
    set_mode(&secret, 0o600);
    let trusted = scratch.join("writer.pub");
    std::fs::write(&trusted, format!("{}\n", writer_key.public_key().to_hex())).expect("key file");
    let port = redis
        .url()
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .and_then(|p| p.parse().ok())
        .expect("port");

    // The fleet's writer fills the remote cache, signed.
    let base = Builder::new(library, &scratch, "planted").var("KILN_REMOTE_CACHE", redis.url());
    let writer_cache = scratch.join("writer-cache");
    let _ = std::fs::remove_dir_all(&writer_cache);
    let written = base
        .clone_with("KILN_CACHE_DIR", &writer_cache)
        .var("KILN_SIGNING_KEY", &secret)
        .build();
    assert_eq!(written.compiled, ENTRIES, "{written:?}");

    // The attacker plants other code for two kernels: one remote value,
    // unsigned; one segment in a disk cache others may write (used with
    // KILN_CACHE_TRUST_DIR=1), labelled as a compile.
    let keys = redis_keys(port);
    assert_eq!(keys.len() as u64, ENTRIES, "{keys:?}");
    let (remote_victim, disk_victim) = (&keys[0], &keys[1]);
    let planted = evil(&redis_get(port, remote_victim));
    let mut one = kiln_image::ImageWriter::new(kiln_image::ImageMeta::new("kiln-redis", "0"));
    one.push(planted);
    redis_set(port, remote_victim, &one.to_bytes().expect("an image"));
    let shared = scratch.join("shared-cache");
    let _ = std::fs::remove_dir_all(&shared);
    std::fs::create_dir_all(&shared).expect("shared");
    set_mode(&shared, 0o777);
    let mut config = kiln::disk::DiskConfig::new(&shared);
    config.trust_dir = true;
    let disk = kiln::disk::DiskCache::open(config).expect("the shared cache");
    assert!(disk.put(&evil(&redis_get(port, disk_victim))));
    drop(disk);
    let victims = [ids_of(remote_victim), ids_of(disk_victim)];
    let victims: Vec<&str> = victims.iter().map(String::as_str).collect();

    let reader = base
        .clone_with("KILN_CACHE_DIR", &shared)
        .var("KILN_CACHE_TRUST_DIR", "1");
    // Payloads are read through the image (they are compressed when
    // embedded), not searched for in the file's bytes.
    let contains_planted = |summary: &Summary| {
        let image = kiln_image::Image::open(&summary.image, kiln_image::Verification::Full)
            .expect("a sound image");
        image.entries().any(|entry| {
            entry.expect("an entry").artifacts().any(|artifact| {
                artifact
                    .bytes()
                    .expect("checked bytes")
                    .windows(4)
                    .any(|w| w == b"EVIL")
            })
        })
    };

    // Told to take unverified entries, with keys at build time: what the
    // writer signed comes from the remote cache, and the planted remote
    // value is taken, recorded as unverified. The application with keys
    // refuses it; without keys nothing is checked, and it serves it.
    let keyed = reader.clone_with("KILN_TRUSTED_KEYS", &trusted);
    let opted = keyed.clone_with("KILN_BUILD_UNVERIFIED", "1");
    let built = opted.build_examples();
    assert_eq!(
        (built.unverified, built.compiled, built.from_remote),
        (1, 0, ENTRIES - 1),
        "{built:?}"
    );
    assert!(contains_planted(&built));
    let run = served(&opted, Some(&trusted), &victims);
    assert_eq!((run.inserted, run.unverified), (ENTRIES - 1, 1), "{run:?}");
    assert_eq!(run.entries, ["missing", "own"], "{run:?}");
    let run = served(&opted, None, &victims);
    assert_eq!((run.inserted, run.unverified), (ENTRIES, 0), "{run:?}");
    assert_eq!(run.entries, ["planted", "own"], "{run:?}");

    // Told to take unverified entries, keys only at run time: nothing comes
    // from a tier the block can vouch for (it trusts no key), so every
    // entry is recorded as unverified, the planted code among them; the
    // application with keys refuses all of them.
    let opted = reader.clone_with("KILN_BUILD_UNVERIFIED", "1");
    let built = opted.build_examples();
    assert_eq!(
        (built.unverified, built.compiled),
        (ENTRIES, 0),
        "{built:?}"
    );
    assert!(contains_planted(&built));
    let run = served(&opted, Some(&trusted), &victims);
    assert_eq!((run.inserted, run.unverified), (0, ENTRIES), "{run:?}");
    assert_eq!(run.entries, ["missing", "missing"], "{run:?}");
    let run = served(&opted, None, &victims);
    assert_eq!(run.entries[0], "planted", "{run:?}");

    // Keys only at run time, the default: the block trusts no signature,
    // so it takes nothing from the remote cache or the shared directory
    // (planted code, signed values, what earlier builds wrote through),
    // compiles every kernel and says so; the application serves its own
    // code, with keys or without.
    let built = reader.build_examples();
    assert_eq!(
        (
            built.compiled,
            built.from_remote,
            built.from_disk,
            built.unverified
        ),
        (ENTRIES, 0, 0, 0),
        "{built:?}"
    );
    assert!(built.refused >= ENTRIES, "{built:?}");
    assert!(!contains_planted(&built));
    for keys in [None, Some(trusted.as_path())] {
        let run = served(&reader, keys, &victims);
        assert_eq!((run.inserted, run.unverified), (ENTRIES, 0), "{run:?}");
        assert_eq!(run.entries, ["own", "own"], "{run:?}");
    }

    // Keys at build time, the default: what the writer signed comes from
    // the remote cache (or the disk, where an earlier build wrote it
    // through with its signature); the planted remote value is refused
    // and compiled, and so is everything else the shared directory holds
    // unsigned (a directory others may write serves only signed entries).
    let built = keyed.build_examples();
    assert_eq!(
        (built.compiled, built.from_remote + built.from_disk),
        (1, ENTRIES - 1),
        "{built:?}"
    );
    assert!(!contains_planted(&built));
    let run = served(&keyed, Some(&trusted), &victims);
    assert_eq!((run.inserted, run.unverified), (ENTRIES, 0), "{run:?}");
    assert_eq!(run.entries, ["own", "own"], "{run:?}");
}
