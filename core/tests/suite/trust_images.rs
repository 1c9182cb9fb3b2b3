//! Images at init under `KILN_TRUSTED_KEYS`: a file of `KILN_IMAGE_PATH`
//! unsigned, signed by a key nobody trusts, or signed by a trusted key;
//! embedded images; key rotation; the report; and a build script's
//! precompile block signing its image with `KILN_SIGNING_KEY`.

use std::ffi::OsString;
use std::path::Path;

use kiln_core::registry::{EmbeddedImage, ImageSource};
use kiln_core::settings::Settings;
use kiln_core::trust::TrustPolicy;
use kiln_core::{
    Artifact, ArtifactKind, Cache, Compiled, Error, ImageOutcome, Key, KeyBuilder, Owner, Source,
};
use kiln_image::{
    Image, ImageMeta, PublicKey, SignatureError, SigningKey, TrustedKeys, Verification, sign_image,
};
use kiln_test_support::{child, leak_aligned};

const ROLE: &str = "KILN_TRUST_IMAGES_ROLE";

fn owner() -> Owner {
    Owner::new("trust-test-cc", "1.0", "cpu", ["-O2"]).expect("a valid owner")
}

fn key(name: &str) -> Key {
    KeyBuilder::new("kiln-trust-test", 1)
        .str("name", name)
        .finish()
}

/// An image of one entry per name, its code the name's bytes.
fn image(names: &[&str]) -> Vec<u8> {
    let cache = Cache::new();
    let before = cache.snapshot();
    for name in names {
        cache.insert(
            &owner(),
            &key(name),
            Compiled::new(*name).artifact(Artifact {
                kind: ArtifactKind::Object,
                entry_points: vec![(*name).to_owned()],
                bytes: name.as_bytes().to_vec(),
            }),
        );
    }
    cache
        .delta(&before)
        .to_bytes(ImageMeta::new("trust-test", "1"))
        .expect("an image")
}

fn signed(names: &[&str], key: &SigningKey) -> Vec<u8> {
    sign_image(&image(names), key).expect("signs")
}

fn signer(n: u8) -> SigningKey {
    SigningKey::from_secret_bytes([n; 32])
}

fn trusting(keys: &[&SigningKey]) -> TrustedKeys {
    TrustedKeys::new(keys.iter().map(|key| key.public_key()))
}

/// Whether `cache` serves `name` from an image.
fn served(cache: &Cache, name: &str) -> bool {
    cache
        .lookup(&owner().digest(), &key(name))
        .is_some_and(|hit| {
            hit.source() == Source::Image
                && hit.artifact(&ArtifactKind::Object) == Some(name.as_bytes())
        })
}

/// The outcome per image, as `(file or embedded name, signer or refusal)`.
fn outcomes(report: &kiln_core::InitReport) -> Vec<(String, String)> {
    report
        .images()
        .map(|image| {
            let name = match &image.source {
                ImageSource::File(path) => path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                other => other.to_string(),
            };
            let outcome = match (&image.outcome, image.signer) {
                (ImageOutcome::Merged { .. }, Some(key)) => format!("merged, signed by {key}"),
                (ImageOutcome::Merged { .. }, None) => "merged".to_owned(),
                (ImageOutcome::Skipped(Error::Image(error)), _) => error.check().to_owned(),
                (ImageOutcome::Skipped(other), _) => format!("skipped: {other}"),
                (other, _) => format!("{other:?}"),
            };
            (name, outcome)
        })
        .collect()
}

fn write(dir: &Path, file: &str, bytes: &[u8]) {
    std::fs::write(dir.join(file), bytes).expect("writes");
}

#[test]
fn image_files_are_merged_only_when_a_trusted_key_signed_them() {
    let (release, stranger) = (signer(1), signer(2));
    let dir = tempfile::tempdir().expect("temp dir");
    write(dir.path(), "a-unsigned.kimg", &image(&["a"]));
    write(dir.path(), "b-stranger.kimg", &signed(&["b"], &stranger));
    write(dir.path(), "c-release.kimg", &signed(&["c"], &release));
    let mut tampered = signed(&["d"], &release);
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    write(dir.path(), "d-tampered.kimg", &tampered);

    // Keys configured: only the release-signed image.
    let mut settings = Settings::default();
    settings.images.path = vec![dir.path().to_path_buf()];
    settings.trust = TrustPolicy::default().with_trusted_keys(trusting(&[&release]));
    let cache = Cache::new();
    let report = kiln_core::load_images(&cache, &settings, &[]);
    assert_eq!(
        outcomes(&report),
        [
            ("a-unsigned.kimg".into(), "signature.missing".into()),
            ("b-stranger.kimg".into(), "signature.untrusted".into()),
            (
                "c-release.kimg".into(),
                format!("merged, signed by {}", release.public_key())
            ),
            ("d-tampered.kimg".into(), "signature.invalid".into()),
        ]
    );
    assert_eq!(report.untrusted().count(), 3);
    assert_eq!(
        [
            served(&cache, "a"),
            served(&cache, "b"),
            served(&cache, "c"),
            served(&cache, "d")
        ],
        [false, false, true, false]
    );
    let text = report.to_string();
    assert!(
        text.contains("a-unsigned.kimg: skipped: image is not signed"),
        "{text}"
    );

    // No keys configured: every well-formed image, as before.
    let mut settings = Settings::default();
    settings.images.path = vec![dir.path().to_path_buf()];
    let cache = Cache::new();
    let report = kiln_core::load_images(&cache, &settings, &[]);
    assert_eq!(report.merged().count(), 4);
    assert_eq!(report.untrusted().count(), 0);
    assert!(["a", "b", "c", "d"].iter().all(|name| served(&cache, name)));
}

#[test]
fn rotating_keys_accepts_both_then_refuses_the_old_ones_images() {
    let (old, new) = (signer(3), signer(4));
    let dir = tempfile::tempdir().expect("temp dir");
    write(dir.path(), "old.kimg", &signed(&["x"], &old));
    write(dir.path(), "new.kimg", &signed(&["y"], &new));
    let load = |keys: TrustedKeys| {
        let mut settings = Settings::default();
        settings.images.path = vec![dir.path().to_path_buf()];
        settings.trust = TrustPolicy::default().with_trusted_keys(keys);
        let cache = Cache::new();
        let report = kiln_core::load_images(&cache, &settings, &[]);
        (
            report.merged().count(),
            served(&cache, "x"),
            served(&cache, "y"),
        )
    };
    assert_eq!(load(trusting(&[&old, &new])), (2, true, true));
    assert_eq!(load(trusting(&[&new])), (1, false, true));
    // A trusted-keys setting whose files could not be read trusts nothing.
    assert_eq!(load(TrustedKeys::default()), (0, false, false));
}

#[test]
fn embedded_images_are_the_programs_own_unless_their_signature_says_otherwise() {
    let (release, stranger) = (signer(5), signer(6));
    let embedded = |name: &'static str, bytes: Vec<u8>| -> &'static EmbeddedImage {
        Box::leak(Box::new(EmbeddedImage::new(
            "lib",
            name,
            leak_aligned(&bytes),
        )))
    };
    let images = [
        embedded("unsigned.kimg", image(&["e"])),
        embedded("release.kimg", signed(&["f"], &release)),
        embedded("stranger.kimg", signed(&["g"], &stranger)),
    ];
    let mut settings = Settings::default();
    settings.trust = TrustPolicy::default().with_trusted_keys(trusting(&[&release]));
    let cache = Cache::new();
    let report = kiln_core::load_images(&cache, &settings, &images);
    let outcome: Vec<String> = outcomes(&report).into_iter().map(|(_, o)| o).collect();
    assert_eq!(
        outcome,
        [
            "merged".to_owned(),
            format!("merged, signed by {}", release.public_key()),
            "signature.untrusted".to_owned(),
        ]
    );
    assert_eq!(
        [
            served(&cache, "e"),
            served(&cache, "f"),
            served(&cache, "g")
        ],
        [true, true, false]
    );
}

/// An embedded image whose build took entries unverified from a tier
/// (`KILN_BUILD_UNVERIFIED`) records them: a process with trusted keys
/// refuses those entries, as it would from the tier, and serves the rest;
/// without keys nothing is checked; a record it cannot read refuses the
/// whole image under keys.
#[test]
fn entries_an_embedded_image_records_as_unverified_are_refused_under_keys() {
    let labelled = |names: &[&str], unverified: &[&str], label: Option<&str>| -> Vec<u8> {
        let opened = Image::from_bytes(&image(names), Verification::Full).expect("opens");
        let mut meta = ImageMeta::new("trust-test", "1");
        let value = label.map_or_else(
            || {
                kiln_core::trust::unverified_label(
                    unverified
                        .iter()
                        .map(|name| (owner().digest(), *key(name).digest())),
                )
            },
            str::to_owned,
        );
        meta.labels.insert(
            kiln_core::trust::Provenance::UNVERIFIED_LABEL.to_owned(),
            value,
        );
        let mut with_label = kiln_image::ImageWriter::new(meta);
        for entry in opened.entries() {
            with_label.push(entry.expect("an entry").to_data().expect("its data"));
        }
        with_label.to_bytes().expect("an image")
    };
    let embedded = |name: &'static str, bytes: Vec<u8>| -> &'static EmbeddedImage {
        Box::leak(Box::new(EmbeddedImage::new(
            "lib",
            name,
            leak_aligned(&bytes),
        )))
    };
    let built = embedded("built.kimg", labelled(&["own", "taken"], &["taken"], None));
    let garbled = embedded(
        "garbled.kimg",
        labelled(&["other"], &[], Some("not digests")),
    );

    // With trusted keys (none of which signed anything here).
    let mut settings = Settings::default();
    settings.trust = TrustPolicy::default().with_trusted_keys(trusting(&[&signer(9)]));
    let cache = Cache::new();
    let report = kiln_core::load_images(&cache, &settings, &[built, garbled]);
    let merged: Vec<u64> = report.merged().map(|(_, merge)| merge.unverified).collect();
    assert_eq!(merged, [1]);
    assert_eq!(report.inserted(), 1);
    assert!(served(&cache, "own"));
    assert!(
        !served(&cache, "taken"),
        "refused as it would be from the tier"
    );
    let skipped: Vec<String> = report.skipped().map(|(_, e)| e.to_string()).collect();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(
        skipped[0].contains("record of unverified entries"),
        "{skipped:?}"
    );
    assert!(
        report.to_string().contains("1 unverified refused"),
        "{report}"
    );

    // Without keys: nothing is checked, everything served.
    let cache = Cache::new();
    let report = kiln_core::load_images(&cache, &Settings::default(), &[built, garbled]);
    assert_eq!(report.inserted(), 3);
    assert!(served(&cache, "taken") && served(&cache, "other"));
}

/// A build script's precompile block with `KILN_SIGNING_KEY` set signs its
/// image (and asks to rerun when the key file changes); the image verifies
/// with the key's public half, and is deterministic.
#[test]
fn precompile_signs_its_image_when_a_signing_key_is_set() {
    let dir = tempfile::tempdir().expect("temp dir");
    let key_file = dir.path().join("release.key");
    let key = signer(7);
    kiln_core::trust::write_signing_key(&key, &key_file).expect("writes the key");
    let run = |out: &Path, signing: Option<&Path>| -> String {
        let mut command = child::command(ROLE, "precompile");
        command.env("KILN_TRUST_TEST_OUT", out);
        match signing {
            Some(path) => command.env("KILN_SIGNING_KEY", path),
            None => command.env_remove("KILN_SIGNING_KEY"),
        };
        child::run(&mut command)
    };
    let (signed_out, plain_out, again_out) = (
        dir.path().join("signed"),
        dir.path().join("plain"),
        dir.path().join("again"),
    );
    let stdout = run(&signed_out, Some(&key_file));
    assert!(
        stdout.contains(&format!("cargo::rerun-if-changed={}", key_file.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains("cargo::rerun-if-env-changed=KILN_SIGNING_KEY"),
        "{stdout}"
    );
    run(&again_out, Some(&key_file));
    run(&plain_out, None);
    let bytes = std::fs::read(signed_out.join("trust-test.kimg")).expect("image written");
    let image = Image::from_bytes(&bytes, Verification::Full).expect("valid");
    let signer: Result<PublicKey, SignatureError> = image.verify_signature(&trusting(&[&key]));
    assert_eq!(signer.ok(), Some(key.public_key()));
    assert_eq!(
        std::fs::read(again_out.join("trust-test.kimg")).expect("written"),
        bytes,
        "signed images are deterministic"
    );
    let plain = std::fs::read(plain_out.join("trust-test.kimg")).expect("written");
    assert_eq!(kiln_image::strip_signatures(&bytes).expect("strips"), plain);

    // A key variable that does not name a key file fails the build rather
    // than write an unsigned image.
    let mut command = child::command(ROLE, "precompile");
    command
        .env("KILN_TRUST_TEST_OUT", dir.path().join("bad"))
        .env("KILN_SIGNING_KEY", dir.path().join("missing.key"));
    let output = command.output().expect("runs");
    assert!(!output.status.success());
    assert!(!dir.path().join("bad").join("trust-test.kimg").exists());
}

/// The role of a child process of these tests (`KILN_TRUST_IMAGES_ROLE`),
/// run by the suite's `child` test; nothing when the variable is unset.
pub fn run_child_role() {
    match std::env::var(ROLE).as_deref() {
        Ok("precompile") => {}
        _ => return,
    }
    let out: OsString = std::env::var_os("KILN_TRUST_TEST_OUT").expect("KILN_TRUST_TEST_OUT");
    std::fs::create_dir_all(&out).expect("creates the output directory");
    let report = kiln_core::build::Precompile::new("trust-test")
        .out_dir(&out)
        .run(|session| {
            for name in ["p", "q"] {
                session.specialize(name, |cache| {
                    cache
                        .get_or_compile(&owner(), &key(name), || {
                            Ok(Compiled::new(name).artifact(Artifact {
                                kind: ArtifactKind::Object,
                                entry_points: vec![name.to_owned()],
                                bytes: name.as_bytes().to_vec(),
                            }))
                        })
                        .map(|_| ())
                });
            }
            Ok(())
        });
    report.expect("the image is written");
}
