//! Tests of `expand.rs`.

use super::*;
use std::path::Path;

fn search_in(dir: &Path) -> SearchDirs {
    SearchDirs {
        out_dir: Some(dir.to_path_buf()),
        manifest_dir: None,
    }
}

fn expand(dir: &Path, input: &str) -> String {
    let args: Args = syn::parse_str(input).unwrap();
    include_image(&args, &search_in(dir), "demo-crate").to_string()
}

fn valid_image() -> Vec<u8> {
    use kiln_image::{Artifact, ArtifactKind, Digest, EntryData, ImageMeta, ImageWriter};
    let mut writer = ImageWriter::new(ImageMeta::default());
    writer.push(EntryData {
        owner: Digest::of(b"owner"),
        owner_label: "test owner".to_owned(),
        key: Digest::of(b"key"),
        name: "kernel".to_owned(),
        min_world: 1,
        max_world: u64::MAX,
        deps: Vec::new(),
        artifacts: vec![Artifact {
            kind: ArtifactKind::Ptx,
            entry_points: vec!["kernel".to_owned()],
            bytes: b"ptx bytes".to_vec(),
        }],
    });
    writer.to_bytes().unwrap()
}

#[test]
fn a_missing_image_is_a_compile_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = expand(dir.path(), r#""absent.kimg""#);
    assert!(out.starts_with(":: core :: compile_error !"), "{out}");
    assert!(out.contains("absent.kimg"), "{out}");
    assert!(out.contains("no image file"), "{out}");
}

#[test]
fn a_corrupt_image_is_a_compile_error_naming_the_failed_check() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("junk.kimg"),
        b"this is not a kiln image at all",
    )
    .unwrap();
    let err = check_image("junk.kimg", &search_in(dir.path())).unwrap_err();
    assert!(err.contains("failed verification"), "{err}");
    let out = expand(dir.path(), r#""junk.kimg""#);
    assert!(out.contains("compile_error"), "{out}");
}

#[test]
fn a_flipped_payload_byte_fails_full_verification() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = valid_image();
    let at = bytes
        .windows(9)
        .rposition(|w| w == b"ptx bytes")
        .expect("the payload is stored verbatim");
    bytes[at] ^= 0x20;
    std::fs::write(dir.path().join("flipped.kimg"), &bytes).unwrap();
    let err = check_image("flipped.kimg", &search_in(dir.path())).unwrap_err();
    assert!(err.contains("failed verification"), "{err}");
}

#[test]
fn a_valid_image_is_embedded_by_absolute_path_and_registered() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = valid_image();
    let file = dir.path().join("good.kimg");
    std::fs::write(&file, &bytes).unwrap();
    let out = expand(dir.path(), r#"crate = ::kiln_core, "good.kimg""#).replace(' ', "");
    assert!(!out.contains("compile_error"), "{out}");
    assert!(
        out.contains(&format!("AlignedBytes<{}>", bytes.len())),
        "{out}"
    );
    assert!(
        out.contains(&format!("include_bytes!({:?})", file.to_str().unwrap())),
        "{out}"
    );
    assert!(
        out.contains("::kiln_core::__private::inventory::submit!"),
        "{out}"
    );
    assert!(
        out.contains("verified_at_compile_time(\"demo-crate\",\"good.kimg\""),
        "{out}"
    );
    let header = Literal::byte_string(&bytes[..HEADER_LEN])
        .to_string()
        .replace(' ', "");
    assert!(
        out.contains(&format!("KILN_IMAGE_BYTES.as_slice(),{header},)")),
        "the verified header is embedded: {out}"
    );
}
