//! The ways a fresh process can get its kernels, and the environment it runs in.

use serde::{Deserialize, Serialize};

/// One way to get every kernel of a workload in a fresh process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// NVRTC compiles every kernel into a fresh cache.
    Cold,
    /// Kiln, the image embedded in the binary with `include_image!`, merged
    /// by `kiln::init()` into the global cache.
    KilnEmbedded,
    /// Kiln, the image memory-mapped from a `KILN_IMAGE_PATH` directory.
    KilnFile,
    /// Kiln's disk tier (`KILN_CACHE_DIR`), on a cache directory the driver
    /// warmed with the same entries.
    KilnDisk,
    /// One file per kernel named by its hex key, read and BLAKE3-checked per hit.
    DirCache,
    /// A serde + postcard image, checked and deserialized whole at start.
    PostcardImage,
    /// `kiln-embedded` in a production machine's environment (see [`Env::Stripped`]).
    KilnEmbeddedStripped,
    /// `kiln-file` in a production machine's environment.
    KilnFileStripped,
    /// `kiln-disk` in a production machine's environment.
    KilnDiskStripped,
}

/// The environment a child runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Env {
    /// The driver's, without its `KILN_*` cache switches (the variables that
    /// locate NVRTC and the CCCL headers are kept): a developer's machine.
    Developer,
    /// An empty environment but `HOME` (a fresh empty folder), `PATH=/usr/bin:/bin`
    /// and what the mode needs (`KILN_IMAGE_PATH`, `KILN_CACHE_DIR`): a
    /// production machine, where no `KILN_NVRTC`, `CUDA_HOME`, virtualenv or
    /// user-installed Python wheel says where NVRTC is.
    Stripped,
}

impl Mode {
    /// Every mode, in table order.
    pub const ALL: [Mode; 9] = [
        Mode::Cold,
        Mode::KilnEmbedded,
        Mode::KilnFile,
        Mode::KilnDisk,
        Mode::DirCache,
        Mode::PostcardImage,
        Mode::KilnEmbeddedStripped,
        Mode::KilnFileStripped,
        Mode::KilnDiskStripped,
    ];

    /// The name in tables, JSON and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Cold => "cold",
            Mode::KilnEmbedded => "kiln-embedded",
            Mode::KilnFile => "kiln-file",
            Mode::KilnDisk => "kiln-disk",
            Mode::DirCache => "dir-cache",
            Mode::PostcardImage => "postcard-image",
            Mode::KilnEmbeddedStripped => "kiln-embedded-stripped",
            Mode::KilnFileStripped => "kiln-file-stripped",
            Mode::KilnDiskStripped => "kiln-disk-stripped",
        }
    }

    /// A short description for the table.
    pub fn describe(self) -> &'static str {
        match self {
            Mode::Cold => "NVRTC every kernel, fresh cache",
            Mode::KilnEmbedded => "Kiln image embedded (include_image!)",
            Mode::KilnFile => "Kiln image mmapped (KILN_IMAGE_PATH)",
            Mode::KilnDisk => "Kiln disk tier (KILN_CACHE_DIR), warmed directory",
            Mode::DirCache => "file per kernel, read + BLAKE3",
            Mode::PostcardImage => "serde + postcard image, whole",
            Mode::KilnEmbeddedStripped => "kiln-embedded, production environment",
            Mode::KilnFileStripped => "kiln-file, production environment",
            Mode::KilnDiskStripped => "kiln-disk, production environment",
        }
    }

    /// What the process does to get its kernels: the mode itself for the
    /// developer's environment, the same mode for a stripped one.
    pub fn base(self) -> Mode {
        match self {
            Mode::KilnEmbeddedStripped => Mode::KilnEmbedded,
            Mode::KilnFileStripped => Mode::KilnFile,
            Mode::KilnDiskStripped => Mode::KilnDisk,
            other => other,
        }
    }

    /// The environment the child runs in.
    pub fn env(self) -> Env {
        if self.base() == self {
            Env::Developer
        } else {
            Env::Stripped
        }
    }

    /// Whether the mode finds every kernel cached (all but cold).
    pub fn is_warm(self) -> bool {
        self != Mode::Cold
    }

    /// Whether the kernels come from a Kiln cache (cold compiles into one).
    pub fn is_kiln(self) -> bool {
        matches!(
            self.base(),
            Mode::Cold | Mode::KilnEmbedded | Mode::KilnFile | Mode::KilnDisk
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripped_modes_do_what_their_base_does_in_a_stripped_environment() {
        let stripped: Vec<Mode> = Mode::ALL
            .into_iter()
            .filter(|m| m.env() == Env::Stripped)
            .collect();
        assert_eq!(
            stripped,
            [
                Mode::KilnEmbeddedStripped,
                Mode::KilnFileStripped,
                Mode::KilnDiskStripped
            ]
        );
        for mode in stripped {
            let base = mode.base();
            assert_eq!(base.env(), Env::Developer);
            assert_eq!(mode.name(), format!("{}-stripped", base.name()));
            assert!(mode.is_warm() && mode.is_kiln());
        }
        assert!(!Mode::DirCache.is_kiln() && Mode::Cold.is_kiln() && !Mode::Cold.is_warm());
    }
}
