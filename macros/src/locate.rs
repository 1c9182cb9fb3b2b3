//! Where the file named in `include_image!` is.

use std::path::{Path, PathBuf};

/// The directories a relative image path is resolved against.
pub(crate) struct SearchDirs {
    /// `OUT_DIR`, where a build script writes its image (set when the crate
    /// has a build script).
    pub(crate) out_dir: Option<PathBuf>,
    /// `CARGO_MANIFEST_DIR`, the crate root.
    pub(crate) manifest_dir: Option<PathBuf>,
}

impl SearchDirs {
    /// The directories of the crate being compiled, from cargo's variables.
    pub(crate) fn from_env() -> SearchDirs {
        SearchDirs {
            out_dir: std::env::var_os("OUT_DIR").map(PathBuf::from),
            manifest_dir: std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from),
        }
    }

    /// The absolute path of `path`: itself when absolute, else the first of
    /// `OUT_DIR/path` and `CARGO_MANIFEST_DIR/path` that is a file.
    pub(crate) fn locate(&self, path: &str) -> Result<PathBuf, String> {
        let path = Path::new(path);
        if path.is_absolute() {
            return if path.is_file() {
                Ok(path.to_path_buf())
            } else {
                Err(format!("no image file at {}", path.display()))
            };
        }
        let candidates: Vec<PathBuf> = [&self.out_dir, &self.manifest_dir]
            .into_iter()
            .flatten()
            .map(|dir| dir.join(path))
            .collect();
        if let Some(found) = candidates.iter().find(|candidate| candidate.is_file()) {
            return Ok(found.clone());
        }
        if candidates.is_empty() {
            return Err(
                "neither OUT_DIR nor CARGO_MANIFEST_DIR is set: give an absolute path, or build with cargo"
                    .to_owned(),
            );
        }
        let tried: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
        Err(format!(
            "no image file at {}; does the build script write it (kiln_core::build::Precompile)?",
            tried.join(" nor at ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(out: &Path, manifest: &Path) -> SearchDirs {
        SearchDirs {
            out_dir: Some(out.to_path_buf()),
            manifest_dir: Some(manifest.to_path_buf()),
        }
    }

    #[test]
    fn out_dir_comes_first_then_the_crate_root() {
        let out = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("a.kimg"), b"").unwrap();
        let search = dirs(out.path(), root.path());
        assert_eq!(search.locate("a.kimg").unwrap(), root.path().join("a.kimg"));
        std::fs::write(out.path().join("a.kimg"), b"").unwrap();
        assert_eq!(search.locate("a.kimg").unwrap(), out.path().join("a.kimg"));
    }

    #[test]
    fn a_missing_file_names_every_place_tried() {
        let out = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        let err = dirs(out.path(), root.path())
            .locate("gone.kimg")
            .unwrap_err();
        assert!(
            err.contains(&out.path().join("gone.kimg").display().to_string()),
            "{err}"
        );
        assert!(
            err.contains(&root.path().join("gone.kimg").display().to_string()),
            "{err}"
        );
    }

    #[test]
    fn an_absolute_path_is_taken_as_is() {
        let out = tempfile::tempdir().unwrap();
        let file = out.path().join("abs.kimg");
        std::fs::write(&file, b"").unwrap();
        let search = SearchDirs {
            out_dir: None,
            manifest_dir: None,
        };
        assert_eq!(search.locate(file.to_str().unwrap()).unwrap(), file);
        assert!(
            search
                .locate("relative.kimg")
                .unwrap_err()
                .contains("neither OUT_DIR")
        );
    }
}
