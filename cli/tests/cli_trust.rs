//! Every `kiln` tool reads the trust policy the library reads
//! (`KILN_TRUSTED_KEYS`, with `--trusted-key` adding to it), and a signed
//! `kiln bake` vouches only for what was checked: from every source
//! (`--image`, `--cache-dir`, and a disk cache that a process without
//! trusted keys wrote an unsigned value from a real `redis-server` into),
//! each `kiln` run as a separate process.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_core::record::Recorder;
use kiln_core::{Artifact, ArtifactKind, Cache, Compiled, Key, KeyBuilder, Owner, Tier};
use kiln_image::{Image, ImageMeta, PublicKey, Verification};
use kiln_redis::{RemoteConfig, RemoteTier};
use kiln_test_support::redis_server::RedisServer;
use serde_json::Value;

/// `kiln ARGS` with `vars` set and every other trust variable unset.
fn kiln(args: &[&str], vars: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kiln"));
    command
        .args(args)
        .env_remove("KILN_LOG")
        .env_remove("KILN_SIGNING_KEY")
        .env_remove("KILN_TRUSTED_KEYS")
        .env_remove("KILN_CACHE_TRUST_DIR");
    for (name, value) in vars {
        command.env(name, value);
    }
    command.output().expect("run kiln")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(output), stderr(output)))
}

fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 temp path")
}

fn owner() -> Owner {
    Owner::new("trust-compiler", "1.0", "trust-target", ["-O2"]).expect("owner")
}

fn key(name: &str) -> Key {
    KeyBuilder::new("kiln-cli trust tests", 1)
        .str("name", name)
        .finish()
}

fn code(name: &str) -> Vec<u8> {
    format!("code of {name}").into_bytes()
}

fn compiled(name: &str) -> Compiled {
    Compiled::new(name).artifact(Artifact {
        kind: ArtifactKind::Ptx,
        entry_points: vec![name.to_owned()],
        bytes: code(name),
    })
}

/// An image of the entries `names` at `path`.
fn image_of(path: &Path, names: &[&str]) {
    let cache = Cache::new();
    let before = cache.snapshot();
    for name in names {
        cache.insert(&owner(), &key(name), compiled(name));
    }
    cache
        .delta(&before)
        .write_image(path, ImageMeta::new("trust-lib", "1.0"))
        .expect("writes");
}

/// `kiln keygen -o DIR/NAME`: the key file and its public key.
fn keygen(dir: &Path, name: &str) -> (PathBuf, PublicKey) {
    let path = dir.join(name);
    let output = kiln(&["keygen", "-o", s(&path)], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let public = stdout(&output).trim().parse().expect("a public key");
    (path, public)
}

/// `kiln sign IMAGE --key KEY -o OUT`.
fn sign(image: &Path, key: &Path, out: &Path) {
    let output = kiln(&["sign", s(image), "--key", s(key), "-o", s(out)], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
}

/// The names of the entries of the image at `path`.
fn names(path: &Path) -> Vec<String> {
    let image = Image::open(path, Verification::Full).expect("opens");
    let mut names: Vec<String> = image
        .entries()
        .map(|entry| entry.expect("valid").name().to_owned())
        .collect();
    names.sort();
    names
}

/// Keys and images: a release key (trusted), a stranger's key; an image
/// signed by each, and an unsigned one.
struct Keys {
    _dir: tempfile::TempDir,
    root: PathBuf,
    release: PathBuf,
    release_pub: PathBuf,
    stranger_pub: PathBuf,
    unsigned: PathBuf,
    by_release: PathBuf,
    by_stranger: PathBuf,
}

fn keys() -> Keys {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().to_path_buf();
    let (release, _) = keygen(&root, "release.key");
    let (stranger, _) = keygen(&root, "stranger.key");
    let unsigned = root.join("unsigned.kimg");
    image_of(&unsigned, &["img-unsigned"]);
    let plain = root.join("plain-trusted.kimg");
    image_of(&plain, &["img-trusted"]);
    let by_release = root.join("by-release.kimg");
    sign(&plain, &release, &by_release);
    let plain = root.join("plain-stranger.kimg");
    image_of(&plain, &["img-stranger"]);
    let by_stranger = root.join("by-stranger.kimg");
    sign(&plain, &stranger, &by_stranger);
    Keys {
        _dir: dir,
        release_pub: root.join("release.key.pub"),
        stranger_pub: root.join("stranger.key.pub"),
        root,
        release,
        unsigned,
        by_release,
        by_stranger,
    }
}

#[test]
fn every_tool_reads_kiln_trusted_keys_and_trusted_key_adds_to_it() {
    let k = keys();
    let trusting_release = [("KILN_TRUSTED_KEYS", k.release_pub.as_path())];
    let trusting_stranger = [("KILN_TRUSTED_KEYS", k.stranger_pub.as_path())];

    // verify: the variable alone requires a trusted signature.
    let verify = |image: &Path, vars: &[(&str, &Path)], extra: &[&str]| {
        let mut args = vec!["verify", s(image)];
        args.extend(extra);
        kiln(&args, vars).status.code()
    };
    assert_eq!(
        verify(&k.unsigned, &[], &[]),
        Some(0),
        "no keys: not required"
    );
    assert_eq!(verify(&k.unsigned, &trusting_release, &[]), Some(1));
    assert_eq!(verify(&k.by_stranger, &trusting_release, &[]), Some(1));
    assert_eq!(verify(&k.by_release, &trusting_release, &[]), Some(0));
    // --trusted-key adds to the variable's keys, it does not replace them.
    let release_arg = ["--trusted-key", s(&k.release_pub)];
    assert_eq!(
        verify(&k.by_release, &trusting_stranger, &release_arg),
        Some(0)
    );
    assert_eq!(
        verify(&k.by_stranger, &trusting_stranger, &release_arg),
        Some(0)
    );
    assert_eq!(
        verify(&k.unsigned, &trusting_stranger, &release_arg),
        Some(1)
    );

    // install: what a program with the keys would skip is not installed.
    let installed = k.root.join("installed");
    std::fs::create_dir(&installed).expect("mkdir");
    let install = kiln(
        &["install", s(&k.unsigned), s(&k.by_release), s(&installed)],
        &trusting_release,
    );
    assert_eq!(install.status.code(), Some(1), "{}", stderr(&install));
    assert!(!installed.join("unsigned.kimg").exists());
    assert!(installed.join("by-release.kimg").exists());

    // inspect: its verdict follows the same keys.
    let inspect = |image: &Path, vars: &[(&str, &Path)]| {
        json(&kiln(&["inspect", s(image), "--json"], vars))["trust"].clone()
    };
    assert_eq!(inspect(&k.unsigned, &[])["checked"], false);
    let refused = inspect(&k.unsigned, &trusting_release);
    assert_eq!(
        (refused["admitted"].clone(), refused["check"].clone()),
        (Value::Bool(false), Value::from("signature.missing"))
    );
    assert_eq!(
        inspect(&k.by_stranger, &trusting_release)["check"],
        "signature.untrusted"
    );
    assert_eq!(inspect(&k.by_release, &trusting_release)["admitted"], true);
    let text = stdout(&kiln(&["inspect", s(&k.unsigned)], &trusting_release));
    assert!(
        text.contains("trust     skipped from KILN_IMAGE_PATH"),
        "{text}"
    );

    // cache verify: a segment a program with the keys would refuse is a
    // finding, compiled entries are not.
    let cache_dir = k.root.join("cache");
    let disk = DiskCache::open(DiskConfig::new(&cache_dir)).expect("opens");
    let entry = |name: &str| kiln_image::EntryData {
        owner: owner().digest(),
        owner_label: owner().label().to_owned(),
        key: *key(name).digest(),
        name: name.to_owned(),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![],
        artifacts: vec![Artifact {
            kind: ArtifactKind::Ptx,
            entry_points: vec![name.to_owned()],
            bytes: code(name),
        }],
    };
    assert!(disk.put(&entry("compiled-here")));
    assert!(disk.put_unsigned(&entry("received"), "remote"));
    drop(disk);
    let verify_cache = |vars: &[(&str, &Path)], extra: &[&str]| {
        let mut args = vec!["cache", "verify", "--dir", s(&cache_dir)];
        args.extend(extra);
        kiln(&args, vars)
    };
    let plain = verify_cache(&[], &[]);
    assert_eq!(plain.status.code(), Some(0), "{}", stdout(&plain));
    assert!(stdout(&plain).contains("received unsigned from the remote tier"));
    let keyed = verify_cache(&trusting_release, &[]);
    assert_eq!(keyed.status.code(), Some(1), "{}", stdout(&keyed));
    assert_eq!(
        stdout(&keyed).matches("UNTRUSTED").count(),
        1,
        "{}",
        stdout(&keyed)
    );
    let by_arg = verify_cache(&[], &release_arg);
    assert_eq!(by_arg.status.code(), Some(1), "{}", stdout(&by_arg));
    let listed = json(&kiln(
        &["cache", "ls", "--dir", s(&cache_dir), "--json"],
        &[],
    ));
    let mut provenance: Vec<(String, String)> = listed
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_owned(),
                e["provenance"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    provenance.sort();
    assert_eq!(
        provenance,
        [
            (
                "compiled-here".to_owned(),
                "compiled by this user's processes".to_owned()
            ),
            (
                "received".to_owned(),
                "received unsigned from the remote tier".to_owned()
            ),
        ]
    );
}

#[cfg(unix)]
#[test]
fn a_secret_key_others_may_read_is_refused_and_told_to_chmod_600() {
    use std::os::unix::fs::PermissionsExt;
    let k = keys();
    std::fs::set_permissions(&k.release, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = k.root.join("signed.kimg");
    let output = kiln(
        &[
            "sign",
            s(&k.unsigned),
            "--key",
            s(&k.release),
            "-o",
            s(&out),
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("chmod 600"), "{}", stderr(&output));
    assert!(!out.exists());
    let record = k.root.join("empty.rec");
    std::fs::write(&record, "").expect("writes");
    let output = kiln(
        &["bake", s(&record), "-o", s(&out)],
        &[("KILN_SIGNING_KEY", k.release.as_path())],
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("chmod 600"), "{}", stderr(&output));
    assert!(!out.exists());
}

/// A record file naming every entry of `names` (each got through `cache`).
fn record(path: &Path, cache: &Cache, names: &[&str]) {
    cache
        .record_into(Recorder::open(path).expect("opens"))
        .expect("records");
    for name in names {
        cache
            .get_or_compile(&owner(), &key(name), || Ok(compiled(name)))
            .expect("gets");
    }
    cache.flush();
}

#[test]
fn a_signed_bake_takes_only_what_was_checked_from_every_source() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let k = keys();
    let cache_dir = k.root.join("cache");
    // The value an attacker planted on the server: unsigned, for
    // `laundered` (anyone who can write to the server can store one).
    let laundered = key("laundered");
    let planter = RemoteTier::open(RemoteConfig::new(server.url()).write_unsigned(true))
        .expect("a valid URL");
    let planted = kiln_image::EntryData {
        owner: owner().digest(),
        owner_label: owner().label().to_owned(),
        key: *laundered.digest(),
        name: "laundered".into(),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![],
        artifacts: vec![Artifact {
            kind: ArtifactKind::Ptx,
            entry_points: vec!["laundered".into()],
            bytes: b"// EVIL".to_vec(),
        }],
    };
    planter.store(&owner(), &planted).expect("stores");
    assert_eq!(planter.stats().stored, 1);

    // One application run records every entry: from the three images, a
    // compile kept in the disk cache, and the planted remote value.
    let record_file = k.root.join("app.rec");
    let app = Cache::new();
    let url = server.url();
    let settings = kiln_core::settings::Settings::from_vars(
        [
            ("KILN_CACHE_DIR", OsString::from(&cache_dir)),
            ("KILN_REMOTE_CACHE", OsString::from(&url)),
        ]
        .into_iter()
        .collect(),
    );
    kiln_core::add_tiers(&app, &settings);
    for image in [&k.unsigned, &k.by_release, &k.by_stranger] {
        app.merge_image(Image::open(image, Verification::Structural).expect("opens"));
    }
    record(
        &record_file,
        &app,
        &[
            "img-unsigned",
            "img-trusted",
            "img-stranger",
            "disk-compiled",
            "laundered",
        ],
    );
    let served = app
        .get_or_compile(&owner(), &laundered, || Ok(compiled("laundered")))
        .expect("gets");
    assert_eq!(
        served.artifact(&ArtifactKind::Ptx),
        Some(&b"// EVIL"[..]),
        "served without keys"
    );
    drop(served);
    drop(app);

    let out = k.root.join("baked.kimg");
    let bake = |vars: &[(&str, &Path)], extra: &[&str]| {
        let mut args = vec![
            "bake",
            s(&record_file),
            "-o",
            s(&out),
            "--image",
            s(&k.unsigned),
            "--image",
            s(&k.by_release),
            "--image",
            s(&k.by_stranger),
            "--cache-dir",
            s(&cache_dir),
            "--json",
        ];
        args.extend(extra);
        kiln(&args, vars)
    };
    let signing = ("KILN_SIGNING_KEY", k.release.as_path());
    let trusting = ("KILN_TRUSTED_KEYS", k.release_pub.as_path());

    // Signing with the release key: the unsigned image, the stranger's and
    // the laundered disk entry vouch for nothing. Nothing written.
    for vars in [vec![signing, trusting], vec![signing]] {
        let extra: &[&str] = if vars.len() == 1 {
            &["--trusted-key", s(&k.release_pub)]
        } else {
            &[]
        };
        let output = bake(&vars, extra);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        let error = stderr(&output);
        assert!(error.contains("3 recorded entries"), "{error}");
        for (name, why) in [
            ("img-unsigned", "signature.missing"),
            ("img-stranger", "signature.untrusted"),
            ("laundered", "received unsigned from the remote tier"),
        ] {
            let line = error
                .lines()
                .find(|line| line.contains(&format!("  {name} ")))
                .unwrap_or_else(|| panic!("{name} not listed: {error}"));
            assert!(line.contains(why), "{line}");
        }
        assert!(
            !error.contains("img-trusted") && !error.contains("disk-compiled"),
            "{error}"
        );
        assert!(!out.exists(), "nothing written");
    }
    // Without trusted keys, only this user's compile vouches for itself.
    let output = bake(&[signing], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("4 recorded entries"),
        "{}",
        stderr(&output)
    );

    // With trusted keys and no signing key, only what a program with the
    // keys would serve is taken: the others are missing, each with why.
    let output = bake(&[trusting], &[]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = json(&output);
    assert_eq!(report["signed"], false);
    let mut missing: Vec<(String, String)> = report["missing"]
        .as_array()
        .expect("missing")
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap_or_default().to_owned(),
                m["damaged_in"].to_string(),
            )
        })
        .collect();
    missing.sort();
    let missing_names: Vec<&str> = missing.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(missing_names, ["img-stranger", "img-unsigned", "laundered"]);
    assert!(
        missing[2]
            .1
            .contains("received unsigned from the remote tier"),
        "{missing:?}"
    );
    assert_eq!(names(&out), ["disk-compiled", "img-trusted"]);

    // Only vouched entries recorded: signed, and it verifies.
    let vouched_record = k.root.join("vouched.rec");
    let again = Cache::new();
    let settings = kiln_core::settings::Settings::from_vars(
        [("KILN_CACHE_DIR", OsString::from(&cache_dir))]
            .into_iter()
            .collect(),
    );
    kiln_core::add_tiers(&again, &settings);
    again.merge_image(Image::open(&k.by_release, Verification::Structural).expect("opens"));
    record(&vouched_record, &again, &["img-trusted", "disk-compiled"]);
    drop(again);
    let output = kiln(
        &[
            "bake",
            s(&vouched_record),
            "-o",
            s(&out),
            "--image",
            s(&k.unsigned),
            "--image",
            s(&k.by_release),
            "--cache-dir",
            s(&cache_dir),
            "--json",
        ],
        &[signing, trusting],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(json(&output)["signed"], true);
    assert_eq!(names(&out), ["disk-compiled", "img-trusted"]);
    // Its provenance, in its labels: baked, from an image and a disk cache.
    let labels = Image::open(&out, Verification::Full)
        .expect("opens")
        .meta()
        .labels;
    assert_eq!(
        labels.get("kiln.provenance").map(String::as_str),
        Some("baked")
    );
    assert_eq!(
        labels.get("kiln.baked-from").map(String::as_str),
        Some("disk,image")
    );
    let verify = kiln(&["verify", s(&out)], &[trusting]);
    assert_eq!(verify.status.code(), Some(0), "{}", stdout(&verify));
}
