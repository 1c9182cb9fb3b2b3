//! A kernel library as a crate of its own: `examples/kiln-activations-demo`
//! (its build script, sources, and a manifest that depends on this
//! repository's `kiln-rs` by path) copied into a scratch folder, without its
//! shipped image, for tests and benches that build a library with `cargo`
//! as its author or a downstream machine would.

use std::io;
use std::path::{Path, PathBuf};

/// The copied library's package name.
pub const NAME: &str = "kiln-activations-demo";

/// Copies the library from the repository at `repo` into `dir` (replacing
/// what was there) as a workspace of its own whose build script links the
/// remote tier (the `redis` feature of its `kiln` build-dependency), with the
/// repository's `Cargo.lock`; its folder.
///
/// # Errors
/// When a file cannot be copied or written.
pub fn copy_library(repo: &Path, dir: &Path) -> io::Result<PathBuf> {
    let from = repo.join("examples").join(NAME);
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir.join("src"))?;
    for file in ["build.rs", "src/lib.rs", "src/generate.rs"] {
        std::fs::copy(from.join(file), dir.join(file))?;
    }
    let kiln = format!("package = \"kiln-rs\", path = {repo:?}");
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"{NAME}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\
             publish = false\n\n[dependencies]\nkiln = {{ {kiln}, features = [\"cuda\"] }}\n\n\
             [build-dependencies]\nkiln = {{ {kiln}, features = [\"cuda\", \"redis\"] }}\n\n\
             [workspace]\n"
        ),
    )?;
    std::fs::copy(repo.join("Cargo.lock"), dir.join("Cargo.lock"))?;
    Ok(dir.to_path_buf())
}

/// Changes the library's relu kernels (its `f32` and `f64` specializations):
/// `variant` picks the leak factor, so that each variant has keys of its own.
///
/// # Errors
/// When the source cannot be read or written, or no longer holds the relu
/// kernel this edits.
pub fn edit_relu(dir: &Path, variant: u32) -> io::Result<()> {
    let source = dir.join("src/generate.rs");
    let text = std::fs::read_to_string(&source)?;
    let edited = text.replace(
        r#"Activation::Relu => format!("v > ({t})0 ? v : ({t})0"),"#,
        &format!(
            r#"Activation::Relu => format!("v > ({{t}})0 ? v : ({{t}})0.{:02} * v"),"#,
            variant + 1
        ),
    );
    if edited == text {
        return Err(io::Error::other("the relu kernel's source was not found"));
    }
    std::fs::write(source, edited)
}

/// The output of the latest run of `package`'s build script under
/// `build_dir` (`target/<profile>/build`): its `cargo:` lines and what it
/// printed.
///
/// # Errors
/// When `build_dir` cannot be read, no run of that build script is there, or
/// its output cannot be read.
pub fn build_script_output(build_dir: &Path, package: &str) -> io::Result<String> {
    let prefix = format!("{package}-");
    let newest = std::fs::read_dir(build_dir)?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path().join("output"))
        .filter(|p| p.is_file())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "no build-script output of {package} in {}",
                    build_dir.display()
                ),
            )
        })?;
    std::fs::read_to_string(newest)
}

/// The last summary line of the precompile block `block` in a build
/// script's output (`kiln: BLOCK: N entries (A from shipped, ...) into PATH
/// in T`).
pub fn summary_line<'a>(output: &'a str, block: &str) -> Option<&'a str> {
    let head = format!("kiln: {block}: ");
    output
        .lines()
        .rev()
        .find(|l| l.contains(&head) && l.contains(" entries ("))
}
