//! The build script's output as one value ([`BuildOutput`]), printed in
//! one syntax by one function ([`BuildOutput::write_to`]).

use std::io::Write;
use std::path::PathBuf;

use crate::Error;

/// Everything a precompile run tells cargo and whoever reads the build
/// script's output: collected while it runs, printed once at its end by
/// [`BuildOutput::write_to`], in cargo's `cargo::` syntax (cargo 1.77 and
/// later; the workspace needs Rust 1.88).
///
/// Messages are kept without the block's `kiln: <name>: ` prefix, which
/// the printing adds.
///
/// ```
/// use std::path::PathBuf;
/// use kiln_core::build::BuildOutput;
///
/// let mut output = BuildOutput::new("demo");
/// output.rerun_if_changed.push(PathBuf::from("src/kernels.rs"));
/// output.rerun_if_env_changed.push("KILN_SIGNING_KEY".to_owned());
/// output.warnings.push("b: no compiler here".to_owned());
/// output.summary = "1 entry (1 compiled) into out/demo.kimg".to_owned();
/// let mut printed = Vec::new();
/// output.write_to(&mut printed)?;
/// assert_eq!(
///     String::from_utf8(printed).unwrap(),
///     "cargo::rerun-if-changed=src/kernels.rs\n\
///      cargo::rerun-if-env-changed=KILN_SIGNING_KEY\n\
///      cargo::warning=kiln: demo: b: no compiler here\n\
///      kiln: demo: 1 entry (1 compiled) into out/demo.kimg\n"
/// );
/// # Ok::<(), kiln_core::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BuildOutput {
    /// The block's name (the image's), which prefixes its messages.
    pub name: String,
    /// Progress lines, not directives (cargo keeps them in the build
    /// script's output; `cargo build -vv` shows them): one per
    /// specialization ready, with its time.
    pub progress: Vec<String>,
    /// `cargo::rerun-if-changed`: the declared sources, the shipped image
    /// (or its folder) and the key files, in that order.
    pub rerun_if_changed: Vec<PathBuf>,
    /// `cargo::rerun-if-env-changed`: the declared variables, the trust
    /// variables and the build-time `KILN_*` ones, sorted.
    pub rerun_if_env_changed: Vec<String>,
    /// `cargo::warning`: one line each.
    pub warnings: Vec<String>,
    /// `cargo::error`: what fails the build.
    pub errors: Vec<String>,
    /// The summary line: how many entries, from where, into which image,
    /// in how long, and the backends' notes.
    pub summary: String,
    /// Whether the summary is a warning (something is missing, or the
    /// image is empty while the block asked for entries).
    pub summary_warns: bool,
}

impl BuildOutput {
    /// An empty output of the block `name`.
    pub fn new(name: impl Into<String>) -> BuildOutput {
        BuildOutput {
            name: name.into(),
            ..BuildOutput::default()
        }
    }

    /// The lines printed, in order: progress, `rerun-if-changed`,
    /// `rerun-if-env-changed`, warnings, errors, then the summary.
    pub fn lines(&self) -> Vec<String> {
        let name = &self.name;
        let mut lines: Vec<String> = self.progress.clone();
        lines.extend(
            self.rerun_if_changed
                .iter()
                .map(|path| format!("cargo::rerun-if-changed={}", path.display())),
        );
        lines.extend(
            self.rerun_if_env_changed
                .iter()
                .map(|var| format!("cargo::rerun-if-env-changed={var}")),
        );
        lines.extend(
            self.warnings
                .iter()
                .map(|warning| format!("cargo::warning=kiln: {name}: {warning}")),
        );
        lines.extend(
            self.errors
                .iter()
                .map(|error| format!("cargo::error=kiln: {name}: {error}")),
        );
        if !self.summary.is_empty() {
            let directive = if self.summary_warns {
                "cargo::warning="
            } else {
                ""
            };
            lines.push(format!("{directive}kiln: {name}: {}", self.summary));
        }
        lines
    }

    /// Prints [`BuildOutput::lines`] to `out`, one per line, and flushes
    /// it.
    ///
    /// # Errors
    /// [`Error::BuildOutput`] when `out` cannot be written.
    pub fn write_to(&self, out: &mut dyn Write) -> Result<(), Error> {
        for line in self.lines() {
            writeln!(out, "{line}").map_err(Error::BuildOutput)?;
        }
        out.flush().map_err(Error::BuildOutput)
    }
}
