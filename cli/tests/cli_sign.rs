//! `kiln keygen`, `kiln sign`, and what `kiln verify` and `kiln inspect`
//! say of signatures, run as a separate process.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kiln_image::header::reseal_header;
use kiln_image::{
    Artifact, ArtifactKind, Digest, EntryData, Image, ImageMeta, ImageWriter, PublicKey,
    Verification,
};

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .output()
        .expect("run kiln")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 temp path")
}

fn image(dir: &Path, file: &str, code: &[u8]) -> PathBuf {
    let mut writer = ImageWriter::new(ImageMeta::new("cli-sign-test", "1.0"));
    writer.push(EntryData {
        owner: Digest::of(b"sm_90a"),
        owner_label: "sm_90a".into(),
        key: Digest::of(b"saxpy"),
        name: "saxpy".into(),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![],
        artifacts: vec![Artifact {
            kind: ArtifactKind::Ptx,
            entry_points: vec!["saxpy".into()],
            bytes: code.to_vec(),
        }],
    });
    let path = dir.join(file);
    writer.write_atomic(&path).expect("write image");
    path
}

/// `kiln keygen -o DIR/NAME`: the public key it printed.
fn keygen(dir: &Path, name: &str) -> (PathBuf, PublicKey) {
    let key = dir.join(name);
    let output = kiln(&["keygen", "-o", s(&key)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let public: PublicKey = stdout(&output).trim().parse().expect("a public key");
    (key, public)
}

#[test]
fn keygen_writes_a_private_secret_and_a_public_key_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keygen(dir.path(), "release.key");
    let pub_file = std::fs::read_to_string(dir.path().join("release.key.pub")).unwrap();
    assert_eq!(pub_file, format!("{public}\n"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let secret = std::fs::read_to_string(&key).unwrap();
    assert_eq!(secret.trim().len(), 64);
    // The secret is printed nowhere.
    let again = kiln(&["keygen", "-o", s(&key)]);
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert!(stderr(&again).contains("exists"), "{}", stderr(&again));
    assert!(!stdout(&again).contains(secret.trim()));
    assert_eq!(std::fs::read_to_string(&key).unwrap(), secret, "key kept");
}

#[test]
fn sign_then_verify_says_who_signed_and_trusted_keys_are_required_when_given() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keygen(dir.path(), "release.key");
    let (other_key, other) = keygen(dir.path(), "other.key");
    let unsigned = image(dir.path(), "a.kimg", b"ptx saxpy");
    let signed = dir.path().join("a.signed.kimg");

    let output = kiln(&["sign", s(&unsigned), "--key", s(&key), "-o", s(&signed)]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains(&public.to_hex()),
        "{}",
        stdout(&output)
    );
    let opened = Image::open(&signed, Verification::Full).unwrap();
    assert_eq!(opened.signers(), [public]);

    // Without trusted keys: who signed, or that nothing did.
    let output = kiln(&["verify", s(&unsigned), s(&signed)]);
    assert!(output.status.success(), "{}", stdout(&output));
    let text = stdout(&output);
    assert!(
        text.contains("a.kimg: 1 entries") && text.contains("unsigned"),
        "{text}"
    );
    assert!(text.contains(&format!("signed by {public}")), "{text}");

    // A trusted key given by hex, or by its .pub file.
    let pub_file = format!("{}.pub", s(&key));
    for trusted in [public.to_hex(), pub_file.clone()] {
        let output = kiln(&["verify", "--trusted-key", &trusted, s(&signed)]);
        assert!(output.status.success(), "{}", stdout(&output));
        assert!(
            stdout(&output).contains(&format!("signed by {public} (trusted)")),
            "{}",
            stdout(&output)
        );
    }
    // Unsigned, or signed by another key: exit 1, the check named.
    let output = kiln(&["verify", "--trusted-key", &pub_file, s(&unsigned)]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout(&output).contains("signature.missing"),
        "{}",
        stdout(&output)
    );
    let output = kiln(&["verify", "--trusted-key", &other.to_hex(), s(&signed)]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout(&output).contains("signature.untrusted"),
        "{}",
        stdout(&output)
    );
    // Two trusted keys (a rotation): either signer is accepted.
    let by_other = dir.path().join("b.kimg");
    let output = kiln(&[
        "sign",
        s(&unsigned),
        "--key",
        s(&other_key),
        "-o",
        s(&by_other),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let both = [
        "verify",
        "--trusted-key",
        &public.to_hex(),
        "--trusted-key",
        &other.to_hex(),
        s(&signed),
        s(&by_other),
    ];
    let output = kiln(&both);
    assert!(output.status.success(), "{}", stdout(&output));
    // JSON: the signatures, each checked.
    let output = kiln(&[
        "verify",
        "--json",
        "--trusted-key",
        &public.to_hex(),
        s(&signed),
    ]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json[0]["ok"], true);
    assert_eq!(json[0]["signatures"][0]["key"], public.to_hex());
    assert_eq!(json[0]["signatures"][0]["valid"], true);
    assert_eq!(json[0]["signatures"][0]["trusted"], true);
    // Not a key: a usage error.
    let output = kiln(&["verify", "--trusted-key", "abcd", s(&signed)]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
}

#[test]
fn a_tampered_signature_fails_verify_even_without_trusted_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keygen(dir.path(), "k");
    let path = image(dir.path(), "a.kimg", b"ptx saxpy");
    let output = kiln(&["sign", s(&path), "--key", s(&key)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    for args in [
        vec!["verify", s(&path)],
        vec!["verify", "--trusted-key", &public.to_hex(), s(&path)],
    ] {
        let output = kiln(&args);
        assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
        assert!(
            stdout(&output).contains("signature.invalid"),
            "{}",
            stdout(&output)
        );
    }
    // A producer changed after signing (header checksum recomputed).
    bytes[last] ^= 1;
    bytes[kiln_image::header::offsets::PRODUCER] ^= 1;
    reseal_header(&mut bytes);
    std::fs::write(&path, &bytes).unwrap();
    let output = kiln(&["verify", s(&path)]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("signature.invalid"),
        "{}",
        stdout(&output)
    );
    let output = kiln(&["inspect", s(&path)]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains(&format!(
            "signed    by {public} (signature does not verify)"
        )),
        "{}",
        stdout(&output)
    );
}

#[test]
fn sign_replaces_in_place_by_rename_and_keeps_other_signatures() {
    let dir = tempfile::tempdir().unwrap();
    let (a_key, a) = keygen(dir.path(), "a");
    let (b_key, b) = keygen(dir.path(), "b");
    let path = image(dir.path(), "x.kimg", b"ptx");
    let output = kiln(&["inspect", s(&path)]);
    assert!(
        stdout(&output).contains("signed    no"),
        "{}",
        stdout(&output)
    );
    for key in [&a_key, &b_key, &a_key] {
        let output = kiln(&["sign", s(&path), "--key", s(key)]);
        assert!(output.status.success(), "{}", stderr(&output));
    }
    let mut expected = vec![a, b];
    expected.sort();
    assert_eq!(
        Image::open(&path, Verification::Full).unwrap().signers(),
        expected
    );
    let output = kiln(&["inspect", "--json", s(&path)]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let keys: Vec<&str> = json["signatures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sig| sig["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        expected.iter().map(|k| k.to_hex()).collect::<Vec<_>>()
    );
    // A bad image is not signed, and the file is left as it was.
    let bad = dir.path().join("bad.kimg");
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&bad, &bytes).unwrap();
    let output = kiln(&["sign", s(&bad), "--key", s(&a_key)]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    assert!(stdout(&output).starts_with("FAIL"), "{}", stdout(&output));
    assert_eq!(std::fs::read(&bad).unwrap(), bytes);
    // A key file that is not a key.
    let output = kiln(&["sign", s(&path), "--key", s(&bad)]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
}

#[test]
fn install_with_trusted_keys_installs_only_what_those_keys_signed() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keygen(dir.path(), "release.key");
    let (_, other) = keygen(dir.path(), "other.key");
    let unsigned = image(dir.path(), "a.kimg", b"ptx saxpy");
    let signed = dir.path().join("b.kimg");
    let output = kiln(&["sign", s(&unsigned), "--key", s(&key), "-o", s(&signed)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let into = dir.path().join("images");
    std::fs::create_dir(&into).unwrap();

    // Signed by the trusted key: installed. Unsigned: refused, nothing
    // written under its name; the exit status says something was refused.
    let output = kiln(&[
        "install",
        "--trusted-key",
        &public.to_hex(),
        s(&signed),
        s(&unsigned),
        s(&into),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let text = stdout(&output);
    assert!(text.contains("ok    ") && text.contains("b.kimg"), "{text}");
    assert!(text.contains("signature.missing"), "{text}");
    assert_eq!(
        std::fs::read(into.join("b.kimg")).unwrap(),
        std::fs::read(&signed).unwrap()
    );
    assert!(
        !into.join("a.kimg").exists(),
        "the unsigned image installed"
    );

    // Signed, but by a key the machines do not trust: refused.
    let output = kiln(&[
        "install",
        "--trusted-key",
        &other.to_hex(),
        s(&signed),
        s(&into),
        "--name",
        "c.kimg",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    assert!(stdout(&output).contains("signature.untrusted"));
    assert!(!into.join("c.kimg").exists());

    // Without --trusted-key, an unsigned image installs as before.
    let output = kiln(&["install", s(&unsigned), s(&into)]);
    assert!(output.status.success(), "{}", stdout(&output));
    assert!(into.join("a.kimg").exists());
}

#[test]
fn verify_and_inspect_name_the_signer_of_a_batch_member_and_its_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keygen(dir.path(), "release.key");
    let secret = kiln_core::trust::read_signing_key(&key).unwrap();
    let unsigned: Vec<Vec<u8>> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            std::fs::read(image(dir.path(), &format!("{name}.kimg"), name.as_bytes())).unwrap()
        })
        .collect();
    let signed = kiln_image::sign_images_batch(
        &unsigned.iter().map(Vec::as_slice).collect::<Vec<_>>(),
        &secret,
    )
    .unwrap();
    let member = dir.path().join("b.signed.kimg");
    std::fs::write(&member, &signed[1]).unwrap();

    let output = kiln(&["verify", "--trusted-key", &public.to_hex(), s(&member)]);
    assert!(output.status.success(), "{}", stdout(&output));
    assert!(
        stdout(&output).contains(&format!(
            "signed by {public} (trusted), member 1 of a batch of 3"
        )),
        "{}",
        stdout(&output)
    );
    let output = kiln(&["verify", "--json", s(&member)]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json[0]["signature_batch"]["size"], 3);
    assert_eq!(json[0]["signatures"][0]["valid"], true);
    let output = kiln(&["inspect", s(&member)]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains(&format!(
            "signed    by {public} (signature verifies, member 1 of a batch of 3)"
        )),
        "{}",
        stdout(&output)
    );
    // `kiln sign` adds no signature beside a batch signature.
    let output = kiln(&["sign", s(&member), "--key", s(&key)]);
    assert!(!output.status.success());
    let said = format!("{}{}", stdout(&output), stderr(&output));
    assert!(said.contains("batch of 3"), "{said}");
}
