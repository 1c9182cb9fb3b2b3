//! The ways a fresh process can get its kernels.

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
    /// Kiln's disk tier, on a cache directory the driver warmed with the same entries.
    KilnDisk,
    /// One file per kernel named by its hex key, read and BLAKE3-checked per hit.
    DirCache,
    /// A serde + postcard image, checked and deserialized whole at start.
    PostcardImage,
}

impl Mode {
    /// Every mode, in table order.
    pub const ALL: [Mode; 6] = [
        Mode::Cold,
        Mode::KilnEmbedded,
        Mode::KilnFile,
        Mode::KilnDisk,
        Mode::DirCache,
        Mode::PostcardImage,
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
        }
    }

    /// A short description for the table.
    pub fn describe(self) -> &'static str {
        match self {
            Mode::Cold => "NVRTC every kernel, fresh cache",
            Mode::KilnEmbedded => "Kiln image embedded (include_image!)",
            Mode::KilnFile => "Kiln image mmapped (KILN_IMAGE_PATH)",
            Mode::KilnDisk => "Kiln disk tier, warmed directory",
            Mode::DirCache => "file per kernel, read + BLAKE3",
            Mode::PostcardImage => "serde + postcard image, whole",
        }
    }

    /// Whether the mode finds every kernel cached (all but cold).
    pub fn is_warm(self) -> bool {
        self != Mode::Cold
    }
}
