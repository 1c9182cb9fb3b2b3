//! How start-up grows with the image: init + first lookup for synthetic
//! images of growing entry counts, and resident memory after init and after
//! touching 1% of a large image. Each measured in a fresh process.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Instant;

use kiln::cache::Cache;
use kiln::image::{Image, ImageMeta, ImageWriter, Verification};
use kiln::{Key, Owner};
use serde::{Deserialize, Serialize};

use crate::baseline::postcard_image::{self, SerdeImage};
use crate::child::nanos;
use crate::error::BenchError;
use crate::kernel_set::IN_HAND;
use crate::rss::{evict_from_page_cache, mapped_kib, resident_kib};
use crate::synthetic;

/// Payload bytes per entry of the scaling images (a small kernel).
pub const SCALE_PAYLOAD: usize = 256;

/// Payload bytes per entry of the resident-memory image.
pub const RSS_PAYLOAD: usize = 64 * 1024;

/// The container a scaling child opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// A Kiln image, memory-mapped (structural verification) and merged.
    Kiln,
    /// The serde + postcard image, read, checked and deserialized whole.
    Postcard,
}

impl Format {
    /// Both formats.
    pub const ALL: [Format; 2] = [Format::Kiln, Format::Postcard];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Format::Kiln => "kiln-file",
            Format::Postcard => "postcard-image",
        }
    }

    /// The file of this format in `dir`.
    pub fn file(self, dir: &Path) -> PathBuf {
        match self {
            Format::Kiln => dir.join("image.kimg"),
            Format::Postcard => dir.join("image.postcard"),
        }
    }
}

/// Writes `entries` synthetic entries of `payload` bytes each into `dir`, in
/// both formats.
pub fn write_images(dir: &Path, entries: usize, payload: usize) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir).map_err(BenchError::io(dir))?;
    let owner = synthetic::owner()?;
    let data = (0..entries as u64)
        .map(|index| synthetic::entry(&owner, index, payload))
        .collect::<Result<Vec<_>, _>>()?;
    postcard_image::write(&Format::Postcard.file(dir), &data)?;
    let mut writer = ImageWriter::new(ImageMeta::new("kiln-bench", env!("CARGO_PKG_VERSION")));
    for entry in data {
        writer.push(entry);
    }
    writer.write_atomic(&Format::Kiln.file(dir))?;
    Ok(())
}

/// An opened image of either format.
enum Opened {
    Kiln(Box<Cache>),
    Postcard(SerdeImage),
}

impl Opened {
    fn open(format: Format, dir: &Path) -> Result<Opened, BenchError> {
        let file = format.file(dir);
        Ok(match format {
            Format::Kiln => {
                let cache = Box::new(Cache::new());
                cache.merge_image(Image::open(&file, Verification::Structural)?);
                Opened::Kiln(cache)
            }
            Format::Postcard => Opened::Postcard(SerdeImage::load(&file)?),
        })
    }

    /// The length of the artifact of `(owner, key)`, read whole.
    fn touch(&self, owner: &Owner, key: &Key) -> Result<usize, BenchError> {
        // Read every byte, as a loader copying it to the GPU would.
        let read = |bytes: &[u8]| {
            black_box(bytes.iter().fold(0u8, |acc, b| acc ^ b));
            bytes.len()
        };
        let len = match self {
            // The bytes are borrowed from the hit, which must outlive them.
            Opened::Kiln(cache) => cache
                .lookup(&owner.digest(), key)
                .and_then(|hit| hit.artifact(&IN_HAND).map(read)),
            Opened::Postcard(image) => image
                .get(owner, key)
                .and_then(|e| e.artifact(&IN_HAND))
                .map(read),
        };
        len.ok_or_else(|| BenchError::Missing {
            mode: "scaling".to_owned(),
            kernel: key.to_hex(),
        })
    }
}

/// Init + first lookup on an image of `entries` entries.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ScaleMeasurement {
    /// The container.
    pub format: Format,
    /// Entries in the image.
    pub entries: usize,
    /// Opening (and for Kiln merging) the image, in nanoseconds.
    pub init_ns: u64,
    /// The first lookup, artifact in hand, in nanoseconds.
    pub first_lookup_ns: u64,
}

/// Measures init + first lookup of the `format` image in `dir` (holding
/// `entries` synthetic entries); the lookup asks for the middle entry.
pub fn measure_scale(
    format: Format,
    dir: &Path,
    entries: usize,
) -> Result<ScaleMeasurement, BenchError> {
    let owner = synthetic::owner()?;
    let key = synthetic::key(entries as u64 / 2)?;
    let clock = Instant::now();
    let opened = Opened::open(format, dir)?;
    let init = clock.elapsed();
    let clock = Instant::now();
    opened.touch(&owner, &key)?;
    let first_lookup = clock.elapsed();
    Ok(ScaleMeasurement {
        format,
        entries,
        init_ns: nanos(init),
        first_lookup_ns: nanos(first_lookup),
    })
}

/// The state of the image file in the page cache when a child opens it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PageCache {
    /// As the writer left it: every page cached (in large folios, which a
    /// fault may map whole).
    Hot,
    /// Dropped (`POSIX_FADV_DONTNEED`) before opening: pages are read as faults
    /// ask for them, as after a reboot.
    Evicted,
}

impl PageCache {
    /// Both states.
    pub const ALL: [PageCache; 2] = [PageCache::Hot, PageCache::Evicted];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            PageCache::Hot => "hot",
            PageCache::Evicted => "evicted",
        }
    }
}

/// Resident memory around opening a large image and touching 1% of it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RssMeasurement {
    /// The container.
    pub format: Format,
    /// The file's page-cache state at open.
    pub page_cache: PageCache,
    /// Entries in the image.
    pub entries: usize,
    /// Size of the image file, in bytes.
    pub image_bytes: u64,
    /// Entries touched (1%, evenly spread).
    pub touched: usize,
    /// Artifact bytes read while touching.
    pub touched_bytes: u64,
    /// Process resident memory (`VmRSS`) before opening, in KiB.
    pub start_kib: u64,
    /// `VmRSS` after init, in KiB.
    pub init_kib: u64,
    /// `VmRSS` after touching 1% of the entries, in KiB.
    pub touched_kib: u64,
    /// Resident pages of the image file's mapping after touching, in KiB (0
    /// when the format reads the file instead of mapping it).
    pub mapped_kib: u64,
}

impl RssMeasurement {
    /// `VmRSS` growth from before init to after the touches, as a fraction of
    /// the image.
    pub fn growth_fraction(&self) -> f64 {
        let growth = self.touched_kib.saturating_sub(self.start_kib) as f64 * 1024.0;
        growth / self.image_bytes.max(1) as f64
    }
}

/// The folder of the small images a resident-memory child opens first, so
/// that the code it runs is resident before the measurement starts.
pub fn warmup_dir(dir: &Path) -> PathBuf {
    dir.join("warmup")
}

/// Writes the resident-memory images: `entries` entries of [`RSS_PAYLOAD`]
/// bytes in `dir`, and a small warm-up pair in [`warmup_dir`].
pub fn write_rss_images(dir: &Path, entries: usize) -> Result<(), BenchError> {
    write_images(dir, entries, RSS_PAYLOAD)?;
    write_images(&warmup_dir(dir), 4, RSS_PAYLOAD)
}

/// Measures resident memory for the `format` image in `dir` (written by
/// [`write_rss_images`]).
pub fn measure_rss(
    format: Format,
    dir: &Path,
    entries: usize,
    page_cache: PageCache,
) -> Result<RssMeasurement, BenchError> {
    let file = format.file(dir);
    let image_bytes = std::fs::metadata(&file)
        .map_err(BenchError::io(&file))?
        .len();
    let owner = synthetic::owner()?;
    let touched = entries.div_ceil(100);
    let stride = (entries / touched).max(1);
    let keys = (0..entries)
        .step_by(stride)
        .take(touched)
        .map(|index| synthetic::key(index as u64))
        .collect::<Result<Vec<_>, _>>()?;
    // The same code on a small image first: its pages are not the image's.
    let warmup = Opened::open(format, &warmup_dir(dir))?;
    warmup.touch(&owner, &synthetic::key(0)?)?;
    drop(warmup);

    if page_cache == PageCache::Evicted {
        evict_from_page_cache(&file)?;
    }
    let start_kib = resident_kib()?;
    let opened = Opened::open(format, dir)?;
    let init_kib = resident_kib()?;
    let mut touched_bytes = 0u64;
    for key in &keys {
        touched_bytes += opened.touch(&owner, key)? as u64;
    }
    let touched_kib = resident_kib()?;
    let mapped_kib = mapped_kib(&file)?;
    drop(black_box(opened));
    Ok(RssMeasurement {
        format,
        page_cache,
        entries,
        image_bytes,
        touched,
        touched_bytes,
        start_kib,
        init_kib,
        touched_kib,
        mapped_kib,
    })
}
