//! `kiln bake` and `kiln report` on record files written by real caches
//! (`kiln_core::record::Recorder`), with a real image, a real disk cache
//! and a real `redis-server` (`--remote`): what is baked, what is missing,
//! determinism, and what a report says library authors missed.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kiln_core::record::Recorder;
use kiln_core::{Artifact, ArtifactKind, Cache, Compiled, Key, KeyBuilder, Owner};
use kiln_image::{Image, ImageMeta, Verification};
use kiln_redis::{RemoteConfig, RemoteTier};
use kiln_test_support::redis_server::RedisServer;
use serde_json::Value;

fn kiln(args: &[&str]) -> Output {
    kiln_with(args, None)
}

/// `kiln ARGS`, with `KILN_SIGNING_KEY` set to `signing_key` (unset when
/// `None`).
fn kiln_with(args: &[&str], signing_key: Option<&Path>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kiln"));
    command
        .args(args)
        .env_remove("KILN_LOG")
        .env_remove("KILN_SIGNING_KEY");
    if let Some(key) = signing_key {
        command.env("KILN_SIGNING_KEY", key);
    }
    command.output().expect("run kiln")
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn owner() -> Owner {
    Owner::new("bake-compiler", "2.0", "bake-target", ["-O3"]).unwrap()
}

fn key(name: &str) -> Key {
    KeyBuilder::new("kiln-cli bake tests", 1)
        .str("name", name)
        .finish()
}

fn compiled(name: &str) -> Compiled {
    Compiled::new(name).artifact(Artifact {
        kind: ArtifactKind::Ptx,
        entry_points: vec![name.to_owned()],
        bytes: format!("code of {name}").into_bytes(),
    })
}

fn get(cache: &Cache, name: &str) -> bool {
    let mut ran = false;
    cache
        .get_or_compile(&owner(), &key(name), || {
            ran = true;
            Ok(compiled(name))
        })
        .unwrap();
    ran
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A library's image of `shipped-a` and `shipped-b`; a process that uses
/// `shipped-a` from it and compiles `extra-c` and `extra-d` (kept in the
/// disk cache); another that compiles `lost-e` with no disk cache. Both
/// record into one file.
struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    library: PathBuf,
    cache_dir: PathBuf,
    record: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let library = root.join("lib.kimg");
    let builder = Cache::new();
    let before = builder.snapshot();
    for name in ["shipped-a", "shipped-b"] {
        builder.insert(&owner(), &key(name), compiled(name));
    }
    builder
        .delta(&before)
        .write_image(&library, ImageMeta::new("lib-a", "1.0"))
        .unwrap();

    let cache_dir = root.join("cache");
    let record = root.join("app.rec");
    let app = Cache::new();
    let settings = kiln_core::settings::Settings::from_vars(
        [("KILN_CACHE_DIR", OsString::from(&cache_dir))]
            .into_iter()
            .collect(),
    );
    kiln_core::add_tiers(&app, &settings);
    app.merge_image(Image::open(&library, Verification::Structural).unwrap());
    app.record_into(Recorder::open(&record).unwrap()).unwrap();
    assert!(!get(&app, "shipped-a"));
    assert!(!get(&app, "shipped-a"));
    assert!(get(&app, "extra-c"));
    assert!(get(&app, "extra-d"));
    assert!(!get(&app, "extra-c"));
    drop(app);

    let other = Cache::new();
    other.record_into(Recorder::open(&record).unwrap()).unwrap();
    assert!(get(&other, "lost-e"));
    assert!(get(&other, "extra-c"));
    drop(other);
    Setup {
        _dir: dir,
        root,
        library,
        cache_dir,
        record,
    }
}

fn names(image: &Path) -> Vec<String> {
    let image = Image::open(image, Verification::Full).unwrap();
    image
        .entries()
        .map(|entry| entry.unwrap().name().to_owned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

#[test]
fn bake_takes_every_recorded_entry_it_finds_and_lists_the_others() {
    let t = setup();
    let out = t.root.join("app.kimg");
    let args = [
        "bake",
        s(&t.record),
        "-o",
        s(&out),
        "--image",
        s(&t.library),
        "--cache-dir",
        s(&t.cache_dir),
        "--producer",
        "my-app 3.1",
    ];
    let text = kiln(&args);
    assert_eq!(text.status.code(), Some(1), "lost-e is missing: {text:?}");
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("baked 3 of 4 recorded entries"), "{stdout}");
    assert!(stdout.contains("lost-e"), "{stdout}");
    assert_eq!(names(&out), ["extra-c", "extra-d", "shipped-a"]);
    let image = Image::open(&out, Verification::Full).unwrap();
    assert_eq!(image.producer(), "my-app 3.1");
    let first = std::fs::read(&out).unwrap();

    let mut with_json = args.to_vec();
    with_json.push("--json");
    let report = json(&kiln(&with_json));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        first,
        "baking is deterministic"
    );
    let missing = report["missing"].as_array().unwrap();
    assert_eq!(missing.len(), 1, "{report:#}");
    assert_eq!(missing[0]["name"], "lost-e");
    assert_eq!(missing[0]["recorded_from"], serde_json::json!(["compiled"]));
    assert_eq!(report["signed"], false);
    let from: Vec<(&str, &str)> = report["baked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["name"].as_str().unwrap(), b["from"].as_str().unwrap()))
        .collect();
    assert!(from.contains(&("shipped-a", &*format!("image {}", t.library.display()))));
    assert!(from.contains(&("extra-c", &*format!("disk cache {}", t.cache_dir.display()))));

    // A fresh process with the baked image compiles nothing of what the
    // first one compiled and kept.
    let fresh = Cache::new();
    fresh.merge_image(Image::open(&out, Verification::Structural).unwrap());
    for name in ["shipped-a", "extra-c", "extra-d"] {
        assert!(!get(&fresh, name), "{name} compiled again");
    }
}

#[test]
fn bake_signs_with_kiln_signing_key_and_says_so() {
    let t = setup();
    let key = t.root.join("release.key");
    let keygen = kiln(&["keygen", "-o", s(&key)]);
    assert!(keygen.status.success(), "{keygen:?}");
    let public: kiln_image::PublicKey = String::from_utf8_lossy(&keygen.stdout)
        .trim()
        .parse()
        .unwrap();
    // The library's image, signed by the release key: trusted, so a
    // signed bake may take its entries; the disk cache's entries were
    // compiled by this user.
    let signed_library = t.root.join("lib-signed.kimg");
    let sign = kiln(&[
        "sign",
        s(&t.library),
        "--key",
        s(&key),
        "-o",
        s(&signed_library),
    ]);
    assert!(sign.status.success(), "{sign:?}");
    let out = t.root.join("signed.kimg");
    let public_hex = public.to_hex();
    let args = [
        "bake",
        s(&t.record),
        "-o",
        s(&out),
        "--image",
        s(&signed_library),
        "--cache-dir",
        s(&t.cache_dir),
        "--trusted-key",
        &public_hex,
        "--json",
    ];
    let output = kiln_with(&args, Some(&key));
    assert_eq!(
        output.status.code(),
        Some(1),
        "lost-e is missing: {output:?}"
    );
    assert_eq!(json(&output)["signed"], true);
    assert_eq!(names(&out), ["extra-c", "extra-d", "shipped-a"]);
    let image = Image::open(&out, Verification::Full).unwrap();
    assert_eq!(image.signers(), [public]);
    let trusted = kiln_image::TrustedKeys::new([public]);
    assert_eq!(image.verify_signature(&trusted).unwrap(), public);
    let verify = kiln(&["verify", "--trusted-key", &public.to_hex(), s(&out)]);
    assert!(verify.status.success(), "{verify:?}");

    // The unsigned library: nothing vouches for shipped-a, so nothing is
    // signed or written, and the error says which entry and why.
    let refused = t.root.join("refused.kimg");
    let mut unsigned_args = args;
    unsigned_args[3] = s(&refused);
    unsigned_args[5] = s(&t.library);
    let output = kiln_with(&unsigned_args, Some(&key));
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("1 recorded entries"), "{stderr}");
    assert!(stderr.contains("shipped-a"), "{stderr}");
    assert!(stderr.contains("signature.missing"), "{stderr}");
    assert!(!refused.exists());

    // A key that cannot be used writes nothing unsigned in its place.
    let output = kiln_with(
        &args_with(&args, 3, s(&refused)),
        Some(&t.root.join("no-such.key")),
    );
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("KILN_SIGNING_KEY"),
        "{output:?}"
    );
    assert!(!refused.exists());
}

/// `args` with argument `at` replaced by `value`.
fn args_with<'a>(args: &[&'a str], at: usize, value: &'a str) -> Vec<&'a str> {
    let mut args = args.to_vec();
    args[at] = value;
    args
}

#[test]
fn only_compiled_leaves_out_what_came_from_an_image() {
    let t = setup();
    let out = t.root.join("extras.kimg");
    let output = kiln(&[
        "bake",
        s(&t.record),
        "-o",
        s(&out),
        "--cache-dir",
        s(&t.cache_dir),
        "--only-compiled",
        "--json",
    ]);
    let report = json(&output);
    assert_eq!(report["left_out_from_images"], 1);
    assert_eq!(names(&out), ["extra-c", "extra-d"]);
    // Without the library's image, shipped-a would be missing: but it
    // came from an image, so --only-compiled does not ask for it.
    let missing: Vec<&str> = report["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(missing, ["lost-e"]);
}

#[test]
fn bake_refuses_a_cache_dir_that_does_not_exist() {
    let t = setup();
    let output = kiln(&[
        "bake",
        s(&t.record),
        "-o",
        s(&t.root.join("x.kimg")),
        "--cache-dir",
        s(&t.root.join("nowhere")),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("is not a directory"),
        "{output:?}"
    );
    assert!(!t.root.join("nowhere").exists(), "nothing is created");
}

#[test]
fn report_lists_what_no_shipped_image_holds() {
    let t = setup();
    let svg = t.root.join("compile.svg");
    let output = kiln(&["report", s(&t.record), "--json", "--svg", s(&svg)]);
    assert!(output.status.success(), "{output:?}");
    let report = json(&output);
    assert_eq!(report["entries"], 4);
    let libraries = report["libraries"].as_array().unwrap();
    assert_eq!(libraries.len(), 1);
    assert_eq!(libraries[0]["producer"], "lib-a 1.0");
    assert_eq!(
        (
            libraries[0]["entries"].as_u64(),
            libraries[0]["hits"].as_u64()
        ),
        (Some(1), Some(2))
    );
    let owners = report["owners"].as_array().unwrap();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0]["owner_label"], owner().label());
    assert_eq!(owners[0]["image_hits"], 2);
    assert_eq!(owners[0]["compiles"], 4, "extra-c twice, extra-d, lost-e");
    let missed: Vec<&str> = report["not_in_any_shipped_image"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(missed.len(), 3);
    for name in ["extra-c", "extra-d", "lost-e"] {
        assert!(missed.contains(&name), "{missed:?}");
    }
    let extra_c = report["compiled"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "extra-c")
        .unwrap();
    assert_eq!(extra_c["compiles"], 2);
    assert_eq!(extra_c["hits"], 3);
    assert_eq!(extra_c["in_shipped_image"], false);
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(chart.starts_with("<svg"));
    for name in ["extra-c", "extra-d", "lost-e"] {
        assert!(chart.contains(name), "{chart}");
    }

    // Once the extras ship in an image, only lost-e is left to report.
    let out = t.root.join("app.kimg");
    kiln(&[
        "bake",
        s(&t.record),
        "-o",
        s(&out),
        "--cache-dir",
        s(&t.cache_dir),
    ]);
    let report = json(&kiln(&[
        "report",
        s(&t.record),
        "--image",
        s(&out),
        "--json",
    ]));
    let missed: Vec<&str> = report["not_in_any_shipped_image"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(missed, ["lost-e"]);

    let text = kiln(&["report", s(&t.record)]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("not in any shipped image (3)"), "{stdout}");
    assert!(stdout.contains("lib-a 1.0"), "{stdout}");
}

#[test]
fn damaged_record_files_are_read_as_far_as_they_are_whole() {
    let t = setup();
    let mut bytes = std::fs::read(&t.record).unwrap();
    let whole = bytes.len();
    bytes.extend_from_slice(b"\x1b[31mnot a record\n");
    bytes.extend_from_slice(&std::fs::read(&t.record).unwrap()[..50]);
    let damaged = t.root.join("damaged.rec");
    std::fs::write(&damaged, &bytes).unwrap();
    assert!(bytes.len() > whole);

    let report = json(&kiln(&["report", s(&damaged), "--json"]));
    assert_eq!(report["entries"], 4);
    assert_eq!(report["damage"]["corrupt"], 1);
    assert_eq!(report["damage"]["torn"], 1);
    let text = kiln(&["report", s(&damaged)]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.contains("1 torn records, 1 corrupt lines"),
        "{stdout}"
    );
    assert!(!stdout.contains('\u{1b}'));

    let missing = kiln(&["report", s(&t.root.join("absent.rec"))]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("absent.rec"));
}

/// A signing key from `kiln keygen`, beside `image`.
fn dir_key(image: &Path) -> PathBuf {
    let key = image.with_extension("key");
    assert!(kiln(&["keygen", "-o", s(&key)]).status.success());
    key
}

/// `kiln ARGS` with the variables `vars` set (and no signing key).
fn kiln_vars(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kiln"));
    command
        .args(args)
        .env_remove("KILN_LOG")
        .env_remove("KILN_SIGNING_KEY")
        .env_remove("KILN_TRUSTED_KEYS");
    command.envs(vars.iter().copied());
    command.output().expect("run kiln")
}

/// The remote tier of `server`: writing unsigned values when `writes`.
fn remote(server: &RedisServer, writes: bool) -> RemoteTier {
    let config = RemoteConfig::new(server.url()).write_unsigned(writes);
    RemoteTier::open(config).unwrap()
}

/// A fleet's Redis server, a temporary directory, the fleet's record file
/// in it and the path of the image to bake.
struct Fleet {
    server: RedisServer,
    dir: tempfile::TempDir,
    record: PathBuf,
    out: PathBuf,
}

/// A [`Fleet`] that has run ([`fleet_run`]); `None` when `redis-server`
/// is missing (outside CI).
fn fleet() -> Option<Fleet> {
    let server = RedisServer::start()?;
    let dir = tempfile::tempdir().unwrap();
    let (record, out) = (dir.path().join("app.rec"), dir.path().join("app.kimg"));
    fleet_run(&server, &record);
    Some(Fleet {
        server,
        dir,
        record,
        out,
    })
}

/// A fleet that shares a Redis server and no disk: a writer compiles
/// `remote-r` and `remote-s` (stored on the server), a reader gets
/// `remote-r` from the server, and a process with no tier compiles
/// `lost-t`. All three record into one file.
fn fleet_run(server: &RedisServer, record: &Path) {
    let writer = Cache::new();
    let tier = remote(server, true);
    writer.add_tier(Box::new(tier.clone()));
    writer.record_into(Recorder::open(record).unwrap()).unwrap();
    assert!(get(&writer, "remote-r"));
    assert!(get(&writer, "remote-s"));
    writer.flush();
    assert_eq!(tier.stats().stored, 2, "{:?}", tier.stats());
    drop(writer);

    let reader = Cache::new();
    reader.add_tier(Box::new(remote(server, false)));
    reader.record_into(Recorder::open(record).unwrap()).unwrap();
    assert!(!get(&reader, "remote-r"), "a remote hit");
    drop(reader);

    let alone = Cache::new();
    alone.record_into(Recorder::open(record).unwrap()).unwrap();
    assert!(get(&alone, "lost-t"));
}

#[test]
fn bake_takes_from_the_remote_cache_what_it_holds() {
    let Some(Fleet {
        server,
        dir: _dir,
        record,
        out,
    }) = fleet()
    else {
        return;
    };

    let args = ["bake", s(&record), "-o", s(&out), "--remote", &server.url()];
    let text = kiln_vars(&args, &[]);
    assert_eq!(text.status.code(), Some(1), "lost-t is missing: {text:?}");
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("baked 2 of 3 recorded entries"), "{stdout}");
    assert_eq!(names(&out), ["remote-r", "remote-s"]);

    let mut with_json = args.to_vec();
    with_json.push("--json");
    let report = json(&kiln_vars(&with_json, &[]));
    let from = format!("remote cache {}", server.url());
    for baked in report["baked"].as_array().unwrap() {
        assert_eq!(baked["from"], *from, "{report:#}");
    }
    let missing = report["missing"].as_array().unwrap();
    assert_eq!(missing.len(), 1, "{report:#}");
    assert_eq!(missing[0]["name"], "lost-t");
    assert_eq!(
        missing[0]["damaged_in"],
        serde_json::json!([]),
        "a plain miss"
    );

    // The baked image serves both in a fresh process, with no tier.
    let fresh = Cache::new();
    fresh.merge_image(Image::open(&out, Verification::Structural).unwrap());
    for name in ["remote-r", "remote-s"] {
        assert!(!get(&fresh, name), "{name} compiled again");
    }
}

#[test]
fn bake_with_trusted_keys_refuses_unsigned_remote_values() {
    let Some(Fleet {
        server,
        dir,
        record,
        out,
    }) = fleet()
    else {
        return;
    };
    let key = dir.path().join("fleet.key");
    assert!(kiln(&["keygen", "-o", s(&key)]).status.success());
    let public = dir.path().join("fleet.key.pub");

    let args = [
        "bake",
        s(&record),
        "-o",
        s(&out),
        "--remote",
        &server.url(),
        "--json",
    ];
    let output = kiln_vars(&args, &[("KILN_TRUSTED_KEYS", s(&public))]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let report = json(&output);
    assert_eq!(report["baked"], serde_json::json!([]), "{report:#}");
    let missing = report["missing"].as_array().unwrap();
    assert_eq!(missing.len(), 3, "{report:#}");
    for m in missing.iter().filter(|m| m["name"] != "lost-t") {
        let why = m["damaged_in"][0].as_str().unwrap_or_default();
        assert!(
            why.starts_with(&format!("remote cache {}", server.url())) && why.contains("refused"),
            "{report:#}"
        );
    }
}

#[test]
fn bake_lists_what_an_unreachable_remote_cache_could_not_give() {
    let Some(Fleet {
        server,
        dir: _dir,
        record,
        out,
    }) = fleet()
    else {
        return;
    };
    let url = server.url();
    drop(server);

    let args = [
        "bake",
        s(&record),
        "-o",
        s(&out),
        "--remote",
        &url,
        "--json",
    ];
    let output = kiln_vars(&args, &[("KILN_REMOTE_TIMEOUT_MS", "500")]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let report = json(&output);
    let missing = report["missing"].as_array().unwrap();
    assert_eq!(missing.len(), 3, "{report:#}");
    let reasons: Vec<&str> = missing
        .iter()
        .map(|m| m["damaged_in"][0].as_str().unwrap_or_default())
        .collect();
    // The first request fails; the others are not sent (the tier backs off).
    assert_eq!(
        reasons.iter().filter(|why| why.contains("cannot")).count(),
        1,
        "{reasons:?}"
    );
    assert_eq!(
        reasons
            .iter()
            .filter(|why| why.contains("was not asked"))
            .count(),
        2,
        "{reasons:?}"
    );
    // An image is written anyway, empty.
    assert!(names(&out).is_empty());

    // Signing what the untrusted server gave, with no trusted keys to check
    // it by: refused before anything is asked or written.
    let key = dir_key(&out);
    std::fs::remove_file(&out).unwrap();
    let signing = kiln_vars(&args, &[("KILN_SIGNING_KEY", s(&key))]);
    assert_eq!(signing.status.code(), Some(2), "{signing:?}");
    assert!(
        String::from_utf8_lossy(&signing.stderr).contains("needs KILN_TRUSTED_KEYS"),
        "{signing:?}"
    );
    assert!(!out.exists());

    let bad = kiln_vars(
        &["bake", s(&record), "-o", s(&out), "--remote", "http://x"],
        &[],
    );
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("redis://"),
        "{bad:?}"
    );
}
