//! Canonical NVRTC options: one spelling per option, so that two option lists that
//! mean the same compile give the same [`Owner`](kiln_core::Owner).
//!
//! Rules:
//! - short spellings become long ones (`-use_fast_math` → `--use_fast_math`,
//!   `-D X` → `--define-macro=X`, `-std=c++17` → `--std=c++17`), and an option's value
//!   is always attached with `=`;
//! - boolean options without a value get their explicit form (`--fmad` →
//!   `--fmad=true`);
//! - single-valued options keep their last occurrence (as NVRTC does) and are sorted
//!   by name; macro definitions and pre-includes keep their relative order (it
//!   matters), after them;
//! - options that would make the owner incomplete or machine-specific are refused:
//!   the arch (`-arch`, given separately as an [`Arch`](super::Arch)), include paths
//!   (given as fingerprinted include directories of the request) and options that
//!   change what kind of output NVRTC produces;
//! - nvcc's own options (`--expt-relaxed-constexpr`, `-O3`, `-Xcompiler`, `-gencode`,
//!   `-ccbin`...) are refused with [`CompileError::UnknownOption`] saying that NVRTC has no
//!   such option (NVRTC refuses them too), and listing what Kiln accepts; so is any
//!   other option Kiln does not know.
//!
//! # Accepted options
//!
//! | option | short | value |
//! | --- | --- | --- |
//! | `--device-debug` | `-G` | none |
//! | `--generate-line-info` | `-lineinfo` | none |
//! | `--dopt` | | one value (`on`, `off`) |
//! | `--Ofast-compile` | | one value (`0`, `min`, `mid`, `max`) |
//! | `--ptxas-options` | `-Xptxas` | repeated, in order |
//! | `--maxrregcount` | | one value |
//! | `--ftz` | | `true`/`false` (alone: `true`) |
//! | `--prec-sqrt` | | `true`/`false` (alone: `true`) |
//! | `--prec-div` | | `true`/`false` (alone: `true`) |
//! | `--fmad` | | `true`/`false` (alone: `true`) |
//! | `--use_fast_math` | | none |
//! | `--extra-device-vectorization` | | none |
//! | `--modify-stack-limit` | | `true`/`false` (alone: `true`) |
//! | `--define-macro` | `-D` | repeated, in order |
//! | `--undefine-macro` | `-U` | repeated, in order |
//! | `--pre-include` | `-include` | repeated, in order |
//! | `--std` | | one value (`c++17`...) |
//! | `--builtin-move-forward` | | `true`/`false` (alone: `true`) |
//! | `--builtin-initializer-list` | | `true`/`false` (alone: `true`) |
//! | `--disable-warnings` | `-w` | none |
//! | `--restrict` | | none |
//! | `--device-as-default-execution-space` | `-default-device` | none |
//! | `--device-int128` | | none |
//! | `--optimization-info` | `-opt-info` | one value |
//! | `--display-error-number` | `-err-no` | none |
//! | `--no-display-error-number` | `-no-err-no` | none |
//! | `--diag-error` | | repeated, in order |
//! | `--diag-suppress` | | repeated, in order |
//! | `--diag-warn` | | repeated, in order |
//! | `--split-compile` | | one value |
//! | `--fdevice-syntax-only` | | none |
//! | `--minimal` | | none |
//! | `--device-stack-protector` | | `true`/`false` (alone: `true`) |
//!
//! Refused with the reason: `--gpu-architecture` (`-arch`), `--include-path` (`-I`),
//! `--relocatable-device-code` (`-rdc`), `--extensible-whole-program` (`-ewp`),
//! `--dlink-time-opt` (`-dlto`), `--gen-opt-lto`, `--time`, `--pch`, `--create-pch`,
//! `--use-pch`, `--pch-dir`, `--fdevice-time-trace`.

use crate::toolchain::error::CompileError;

/// A list of NVRTC options in canonical form.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CanonicalOptions(Vec<String>);

impl CanonicalOptions {
    /// Canonicalizes `options` (see the module documentation).
    ///
    /// ```
    /// use kiln_cuda::options::CanonicalOptions;
    /// let a = CanonicalOptions::new(["-use_fast_math", "-D", "N=4", "-std=c++17"])?;
    /// let b = CanonicalOptions::new(["--std=c++17", "--use_fast_math", "--define-macro=N=4"])?;
    /// assert_eq!(a, b);
    /// assert_eq!(a.as_slice(), ["--std=c++17", "--use_fast_math", "--define-macro=N=4"]);
    /// # Ok::<(), kiln_cuda::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`CompileError::RefusedOption`] for an option the owner or the key covers
    /// (include paths, the arch) or one that takes a missing value.
    pub fn new<I>(options: I) -> Result<Self, CompileError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let mut single: Vec<(String, String)> = Vec::new();
        let mut ordered: Vec<String> = Vec::new();
        let mut iter = options.into_iter();
        while let Some(raw) = iter.next() {
            let raw = raw.as_ref().trim();
            if raw.is_empty() {
                continue;
            }
            let (name, inline_value) = split_option(raw)?;
            let spec = lookup(name).ok_or_else(|| unknown(raw, name))?;
            let value = match (spec.kind, inline_value) {
                (Kind::Refused(why), _) => {
                    return Err(match spec.long {
                        "include-path" => CompileError::UnfingerprintedInclude {
                            path: inline_value
                                .map(str::to_owned)
                                .or_else(|| iter.next().map(|v| v.as_ref().to_owned()))
                                .unwrap_or_default(),
                        },
                        _ => CompileError::RefusedOption {
                            option: raw.to_owned(),
                            why,
                        },
                    });
                }
                (Kind::Flag, None) => None,
                (Kind::Flag, Some(_)) => {
                    return Err(CompileError::RefusedOption {
                        option: raw.to_owned(),
                        why: "this option takes no value",
                    });
                }
                (Kind::Bool, None) => Some("true".to_owned()),
                (Kind::Bool, Some(v)) => Some(canonical_bool(raw, v)?),
                (Kind::Value | Kind::Ordered, Some(v)) => Some(v.to_owned()),
                (Kind::Value | Kind::Ordered, None) => {
                    let next = iter.next().ok_or_else(|| CompileError::RefusedOption {
                        option: raw.to_owned(),
                        why: "this option needs a value",
                    })?;
                    Some(next.as_ref().trim().to_owned())
                }
            };
            let text = match &value {
                Some(v) => format!("--{}={v}", spec.long),
                None => format!("--{}", spec.long),
            };
            if text.contains('\0') {
                return Err(CompileError::InteriorNul {
                    what: format!("option {raw:?}"),
                });
            }
            if matches!(spec.kind, Kind::Ordered) {
                ordered.push(text);
            } else {
                single.retain(|(long, _)| long != spec.long);
                single.push((spec.long.to_owned(), text));
            }
        }
        single.sort();
        let mut all: Vec<String> = single.into_iter().map(|(_, text)| text).collect();
        all.extend(ordered);
        Ok(Self(all))
    }

    /// The canonical options, in order.
    pub fn as_slice(&self) -> &[String] {
        &self.0
    }
}

/// How an option takes a value.
#[derive(Clone, Copy)]
enum Kind {
    /// No value (`--use_fast_math`).
    Flag,
    /// `true`/`false`, defaulting to `true` when absent (`--fmad`).
    Bool,
    /// One value; the last occurrence wins (`--std=c++17`).
    Value,
    /// One value each; every occurrence counts, in order (`--define-macro`).
    Ordered,
    /// Not accepted, with the reason.
    Refused(&'static str),
}

struct Spec {
    long: &'static str,
    short: &'static [&'static str],
    kind: Kind,
}

const fn spec(long: &'static str, short: &'static [&'static str], kind: Kind) -> Spec {
    Spec { long, short, kind }
}

const OUTPUT_KIND: &str = "changes the kind of output NVRTC produces; Kiln compiles whole \
                           programs to CUBIN and PTX";

/// The NVRTC options Kiln accepts, with their short spellings.
const SPECS: &[Spec] = &[
    spec(
        "gpu-architecture",
        &["arch"],
        Kind::Refused("give the arch as the request's Arch, not as an option"),
    ),
    spec(
        "include-path",
        &["I"],
        Kind::Refused("include paths must be fingerprinted"),
    ),
    spec(
        "relocatable-device-code",
        &["rdc"],
        Kind::Refused(OUTPUT_KIND),
    ),
    spec(
        "extensible-whole-program",
        &["ewp"],
        Kind::Refused(OUTPUT_KIND),
    ),
    spec("dlink-time-opt", &["dlto"], Kind::Refused(OUTPUT_KIND)),
    spec("gen-opt-lto", &[], Kind::Refused(OUTPUT_KIND)),
    spec(
        "time",
        &[],
        Kind::Refused("writes a file on the compiling machine"),
    ),
    spec(
        "pch",
        &[],
        Kind::Refused("precompiled headers live on the compiling machine"),
    ),
    spec(
        "create-pch",
        &[],
        Kind::Refused("precompiled headers live on the compiling machine"),
    ),
    spec(
        "use-pch",
        &[],
        Kind::Refused("precompiled headers live on the compiling machine"),
    ),
    spec(
        "pch-dir",
        &[],
        Kind::Refused("precompiled headers live on the compiling machine"),
    ),
    spec("device-debug", &["G"], Kind::Flag),
    spec("generate-line-info", &["lineinfo"], Kind::Flag),
    spec("dopt", &[], Kind::Value),
    spec("Ofast-compile", &[], Kind::Value),
    spec("ptxas-options", &["Xptxas"], Kind::Ordered),
    spec("maxrregcount", &[], Kind::Value),
    spec("ftz", &[], Kind::Bool),
    spec("prec-sqrt", &[], Kind::Bool),
    spec("prec-div", &[], Kind::Bool),
    spec("fmad", &[], Kind::Bool),
    spec("use_fast_math", &[], Kind::Flag),
    spec(
        "extra-device-vectorization",
        &["extra-device-vectorization"],
        Kind::Flag,
    ),
    spec("modify-stack-limit", &[], Kind::Bool),
    spec("define-macro", &["D"], Kind::Ordered),
    spec("undefine-macro", &["U"], Kind::Ordered),
    spec("pre-include", &["include"], Kind::Ordered),
    spec("std", &[], Kind::Value),
    spec("builtin-move-forward", &[], Kind::Bool),
    spec("builtin-initializer-list", &[], Kind::Bool),
    spec("disable-warnings", &["w"], Kind::Flag),
    spec("restrict", &["restrict"], Kind::Flag),
    spec(
        "device-as-default-execution-space",
        &["default-device"],
        Kind::Flag,
    ),
    spec("device-int128", &["device-int128"], Kind::Flag),
    spec("optimization-info", &["opt-info"], Kind::Value),
    spec("display-error-number", &["err-no"], Kind::Flag),
    spec("no-display-error-number", &["no-err-no"], Kind::Flag),
    spec("diag-error", &[], Kind::Ordered),
    spec("diag-suppress", &[], Kind::Ordered),
    spec("diag-warn", &[], Kind::Ordered),
    spec("split-compile", &[], Kind::Value),
    spec("fdevice-syntax-only", &[], Kind::Flag),
    spec("minimal", &[], Kind::Flag),
    spec("device-stack-protector", &[], Kind::Bool),
    spec(
        "fdevice-time-trace",
        &[],
        Kind::Refused("writes a file on the compiling machine"),
    ),
];

/// nvcc's options that NVRTC does not have (long and short spellings, without
/// dashes): NVRTC refuses them ("unrecognized option").
const NVCC_ONLY: &[&str] = &[
    "expt-relaxed-constexpr",
    "expt-extended-lambda",
    "extended-lambda",
    "relaxed-constexpr",
    "optimize",
    "O0",
    "O1",
    "O2",
    "O3",
    "compiler-options",
    "Xcompiler",
    "linker-options",
    "Xlinker",
    "compiler-bindir",
    "ccbin",
    "generate-code",
    "gencode",
    "gpu-code",
    "code",
    "output-file",
    "o",
    "compile",
    "c",
    "ptx",
    "cubin",
    "fatbin",
    "keep",
    "keep-dir",
    "cudart",
    "cudadevrt",
    "library",
    "library-path",
    "shared",
    "lib",
    "run",
    "machine",
    "m64",
    "threads",
    "allow-unsupported-compiler",
    "forward-unknown-to-host-compiler",
    "x",
    "Werror",
    "resource-usage",
    "source-in-ptx",
];

/// The error for an option Kiln does not accept: nvcc's own, or unknown.
fn unknown(raw: &str, name: &str) -> CompileError {
    let bare = name.split('=').next().unwrap_or(name);
    let why = if NVCC_ONLY.contains(&bare) {
        "it is an nvcc option and NVRTC has no such option (NVRTC compiles device code \
         only, and refuses it too): drop it"
    } else {
        "not an NVRTC option Kiln knows how to canonicalize; a misspelt or new option would \
         otherwise be hashed under several spellings"
    };
    CompileError::UnknownOption {
        option: raw.to_owned(),
        why,
        accepted: accepted(),
    }
}

/// The options Kiln accepts, as one line: `--device-debug (-G), ...`.
fn accepted() -> String {
    SPECS
        .iter()
        .filter(|s| !matches!(s.kind, Kind::Refused(_)))
        .map(|s| match s.short.iter().find(|short| **short != s.long) {
            Some(short) => format!("--{} (-{short})", s.long),
            None => format!("--{}", s.long),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn lookup(name: &str) -> Option<&'static Spec> {
    SPECS
        .iter()
        .find(|s| s.long == name || s.short.contains(&name))
}

/// Splits `--name=value`, `-name=value`, `-Dvalue`, `-Ivalue` into name and value.
fn split_option(raw: &str) -> Result<(&str, Option<&str>), CompileError> {
    let Some(body) = raw.strip_prefix("--").or_else(|| raw.strip_prefix('-')) else {
        return Err(CompileError::RefusedOption {
            option: raw.to_owned(),
            why: "options start with - or --",
        });
    };
    if let Some((name, value)) = body.split_once('=')
        && lookup(name).is_some()
    {
        return Ok((name, Some(value)));
    }
    if lookup(body).is_some() {
        return Ok((body, None));
    }
    // Glued one-letter forms: -DNAME=1, -UNAME, -I/path.
    for letter in ["D", "U", "I"] {
        if let Some(value) = body.strip_prefix(letter)
            && !value.is_empty()
        {
            return Ok((letter, Some(value)));
        }
    }
    Ok((body, None))
}

fn canonical_bool(raw: &str, value: &str) -> Result<String, CompileError> {
    match value {
        "true" | "1" => Ok("true".to_owned()),
        "false" | "0" => Ok("false".to_owned()),
        _ => Err(CompileError::RefusedOption {
            option: raw.to_owned(),
            why: "the value must be true or false",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(options: &[&str]) -> Vec<String> {
        CanonicalOptions::new(options).unwrap().0
    }

    #[test]
    fn spellings_converge() {
        assert_eq!(canon(&["-ftz=1", "--fmad"]), ["--fmad=true", "--ftz=true"]);
        assert_eq!(canon(&["-DN=4"]), canon(&["--define-macro", "N=4"]));
        assert_eq!(canon(&["-lineinfo"]), ["--generate-line-info"]);
    }

    #[test]
    fn last_single_value_wins_and_macros_keep_order() {
        assert_eq!(
            canon(&["-DA", "--std=c++14", "-UA", "--std=c++17"]),
            ["--std=c++17", "--define-macro=A", "--undefine-macro=A"]
        );
    }

    #[test]
    fn different_values_stay_different() {
        assert_ne!(canon(&["--fmad=false"]), canon(&["--fmad=true"]));
        assert_ne!(canon(&["-DA", "-UA"]), canon(&["-UA", "-DA"]));
    }

    #[test]
    fn nvcc_only_and_unknown_options_say_so_and_list_what_is_accepted() {
        for (option, nvcc) in [
            ("--expt-relaxed-constexpr", true),
            ("-O3", true),
            ("-Xcompiler=-Wall", true),
            ("--frobnicate", false),
        ] {
            let Err(error @ CompileError::UnknownOption { .. }) = CanonicalOptions::new([option])
            else {
                panic!("{option} accepted");
            };
            let message = error.to_string();
            assert_eq!(
                message.contains("NVRTC has no such option"),
                nvcc,
                "{message}"
            );
            for accepted in ["--use_fast_math", "--define-macro (-D)", "--std", "--fmad"] {
                assert!(message.contains(accepted), "{message}");
            }
            assert!(!message.contains("--include-path"), "{message}");
        }
    }

    #[test]
    fn the_module_documentation_lists_every_option() {
        let docs: String = include_str!("options.rs")
            .lines()
            .filter(|line| line.starts_with("//!"))
            .collect();
        for spec in SPECS {
            assert!(
                docs.contains(&format!("`--{}`", spec.long)),
                "{}",
                spec.long
            );
        }
    }

    #[test]
    fn include_paths_arch_and_unknown_options_are_refused() {
        for (opts, path) in [
            (&["-I/opt/inc"][..], "/opt/inc"),
            (&["--include-path", "x"][..], "x"),
        ] {
            match CanonicalOptions::new(opts) {
                Err(CompileError::UnfingerprintedInclude { path: p }) => assert_eq!(p, path),
                other => panic!("{opts:?}: {other:?}"),
            }
        }
        for opts in [&["-arch=sm_90"][..], &["-rdc=true"], &["plain"]] {
            assert!(
                matches!(
                    CanonicalOptions::new(opts),
                    Err(CompileError::RefusedOption { .. })
                ),
                "{opts:?}"
            );
        }
    }
}
