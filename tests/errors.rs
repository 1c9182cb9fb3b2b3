//! One error type on a library author's path: the CUDA backend's error
//! converts into `kiln::Error`, so a build script or a library returning
//! `kiln::Error` uses `?` on the backend's calls.
#![cfg(feature = "cuda")]

use std::error::Error as _;

/// What an author writes: kiln and the backend under one error type.
fn arch_of(name: &str) -> Result<kiln::cuda::Arch, kiln::Error> {
    Ok(name.parse::<kiln::cuda::Arch>()?)
}

#[test]
fn a_backend_error_becomes_kiln_error_backend_with_its_source() {
    assert_eq!(arch_of("sm_90a").expect("an arch").to_string(), "sm_90a");
    let error = arch_of("sm_1").expect_err("not an arch");
    match &error {
        kiln::Error::Backend { backend, .. } => assert_eq!(*backend, "kiln-cuda"),
        other => panic!("expected Error::Backend, got {other:?}"),
    }
    let source = error.source().expect("the backend's error");
    let cuda = source
        .downcast_ref::<kiln::cuda::Error>()
        .expect("a kiln::cuda::Error");
    assert!(
        matches!(cuda, kiln::cuda::Error::InvalidArch(_)),
        "{cuda:?}"
    );
    // The message names the backend; the cause follows it in the chain.
    assert!(!error.to_string().contains("sm_1"), "{error}");
    let shown = kiln::ErrorChain(&error).to_string();
    assert!(
        shown.starts_with("kiln-cuda failed: ") && shown.contains("sm_1"),
        "{shown}"
    );
}

#[test]
fn the_cache_error_a_backend_wraps_comes_back_unwrapped() {
    let wrapped = kiln::cuda::Error::from(kiln::Error::OutDirUnset);
    assert!(
        matches!(wrapped, kiln::cuda::Error::Cache(_)),
        "{wrapped:?}"
    );
    let back = kiln::Error::from(wrapped);
    assert!(matches!(back, kiln::Error::OutDirUnset), "{back:?}");
}
