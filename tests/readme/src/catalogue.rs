//! The README's shared module: owners, keys and the compile, used by the
//! build script (and, in the README, by the library).

use kiln::cache::Cache;
use kiln::{Artifact, ArtifactKind, Compiled, Hit, KeyBuilder, Owner};

/// One specialization of the library's kernel.
pub struct Spec {
    /// The element type.
    pub dtype: &'static str,
    /// The unroll factor.
    pub unroll: u32,
}

impl Spec {
    /// The specialization's name.
    pub fn label(&self) -> String {
        format!("scale<{}, {}>", self.dtype, self.unroll)
    }
}

/// What the build script precompiles.
pub fn common_specializations() -> Vec<Spec> {
    vec![
        Spec {
            dtype: "f32",
            unroll: 4,
        },
        Spec {
            dtype: "f64",
            unroll: 2,
        },
    ]
}

/// The entry of `spec` for `target_arch`: from the cache, else compiled.
///
/// # Errors
/// When the owner is invalid or the compile fails.
pub fn compile<'c>(
    cache: &'c Cache,
    target_arch: &str,
    spec: &Spec,
) -> Result<Hit<'c>, kiln::Error> {
    let owner = Owner::new("toy-compiler", "1.0", target_arch, ["-O2"])?;
    let key = KeyBuilder::new("my-kernels", 1)
        .str("dtype", spec.dtype)
        .u32("unroll", spec.unroll)
        .finish();
    cache.get_or_compile(&owner, &key, || {
        let code = toy_compiler(spec)?; // `?` takes any std::error::Error
        Ok(Compiled::new(spec.label()).artifact(Artifact {
            kind: ArtifactKind::Bytes,
            entry_points: vec!["scale".into()],
            bytes: code,
        }))
    })
}

fn toy_compiler(spec: &Spec) -> std::io::Result<Vec<u8>> {
    Ok(spec.label().into_bytes()) // a real compiler runs here
}
