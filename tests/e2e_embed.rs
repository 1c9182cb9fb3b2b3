//! The demo application with its libraries' images embedded compressed
//! (the default) and plain (`KILN_EMBED=plain`), each built through the
//! real build scripts and `include_image!`, run stripped (empty
//! environment, under `strace`) for three archs: every kernel comes from an
//! image in both, the code served is byte for byte the same, no toolchain
//! is touched, and the compressed binary is smaller by most of the images'
//! size.
//!
//! Needs NVRTC (to build) and `strace`, as `e2e_stripped.rs`; skips without
//! them, fails under `CI=true`.
#![cfg(feature = "cuda")]

mod demo_app;
mod stripped;

use demo_app::build_demo_app;
use stripped::{setup, stripped};

#[test]
fn compressed_and_plain_embeddings_serve_the_same_bytes_stripped() {
    let Some((strace, _)) = setup() else { return };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let plain = dir.path().join("kiln-demo-app.plain");
    let compressed = dir.path().join("kiln-demo-app.compressed");
    std::fs::copy(build_demo_app(&[("KILN_EMBED", "plain")]), &plain).expect("copy");
    // Last, so that the other tests find the default build in place.
    std::fs::copy(build_demo_app(&[]), &compressed).expect("copy");

    let size = |path: &std::path::Path| std::fs::metadata(path).expect("a binary").len();
    let saved = size(&plain).saturating_sub(size(&compressed));
    // The images hold 6.2 MB of payloads, which compress to about 0.3 MB.
    assert!(
        saved > 5 << 20,
        "compressed {} bytes, plain {} bytes",
        size(&compressed),
        size(&plain)
    );

    for (arch, selection) in [
        ("sm_75", "exact-cubin"),
        ("sm_86", "exact-cubin"),
        ("sm_90", "exact-cubin"),
    ] {
        let mut served = Vec::new();
        for app in [&plain, &compressed] {
            let run = stripped(&strace, app, &["--arch", arch]);
            run.assert_clean(app);
            run.assert_all_from_images(selection, arch);
            let code = run.run.field_per_kernel("code_blake3");
            assert!(
                code.iter().all(|(_, digest)| digest.len() == 64),
                "every kernel's code was read: {code:?}"
            );
            served.push(code);
        }
        assert_eq!(served[0], served[1], "{arch}: the same code from both");
    }
}
