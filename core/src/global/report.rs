//! What the init did ([`InitReport`], one [`ImageReport`] per image), and
//! its rendering on stderr when `KILN_LOG` asks kiln to print it itself
//! (`stderr_report`).

use std::fmt;

use crate::registry::ImageSource;
use crate::{Error, MergeReport};

/// Whether `error` refused an image for its signatures.
pub(super) fn is_untrusted(error: &Error) -> bool {
    matches!(error, Error::Image(kiln_image::ImageError::Signature(error)) if crate::trust::is_refusal(error))
}

/// What the init did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct InitReport {
    /// `KILN_DISABLE` was set: nothing was merged.
    pub disabled: bool,
    /// The extra tiers the init added, in lookup order (see [`add_tiers`];
    /// empty for [`load_images`]).
    pub(super) tiers: Vec<String>,
    /// One report per image, in merge order (append-only: images registered
    /// after the init are added when merged).
    pub(super) images: boxcar::Vec<ImageReport>,
}

impl InitReport {
    /// The names of the extra tiers the global cache asks after memory and
    /// images, in that order (e.g. `disk`, `remote`).
    pub fn tiers(&self) -> &[String] {
        &self.tiers
    }

    /// One report per image, in merge order.
    pub fn images(&self) -> impl Iterator<Item = &ImageReport> {
        self.images.iter().map(|(_, image)| image)
    }

    /// The images that were merged, with their merge reports.
    pub fn merged(&self) -> impl Iterator<Item = (&ImageSource, &MergeReport)> {
        self.images().filter_map(|image| match &image.outcome {
            ImageOutcome::Merged { merge, .. } => Some((&image.source, merge)),
            ImageOutcome::Skipped(_) => None,
        })
    }

    /// The images that were skipped, with the reason.
    pub fn skipped(&self) -> impl Iterator<Item = (&ImageSource, &Error)> {
        self.images().filter_map(|image| match &image.outcome {
            ImageOutcome::Skipped(err) => Some((&image.source, err)),
            ImageOutcome::Merged { .. } => None,
        })
    }

    /// The images refused because no trusted key signed them
    /// (`KILN_TRUSTED_KEYS` set), with the reason: unsigned, signed by
    /// other keys only, or a signature that does not verify. Also among
    /// [`InitReport::skipped`].
    pub fn untrusted(&self) -> impl Iterator<Item = (&ImageSource, &Error)> {
        self.skipped().filter(|(_, err)| is_untrusted(err))
    }

    /// Entries inserted, over all images.
    pub fn inserted(&self) -> u64 {
        self.merged().map(|(_, merge)| merge.inserted).sum()
    }
}

impl fmt::Display for InitReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.disabled {
            return writeln!(f, "KILN_DISABLE is set: no image merged");
        }
        for image in self.images() {
            writeln!(f, "{image}")?;
        }
        Ok(())
    }
}

/// One image's part of the [`InitReport`].
#[derive(Debug)]
#[non_exhaustive]
pub struct ImageReport {
    /// Where the image came from.
    pub source: ImageSource,
    /// What happened to it.
    pub outcome: ImageOutcome,
    /// The trusted key that signed it, when `KILN_TRUSTED_KEYS` is set and
    /// a signature was checked (`None` otherwise, and for an unsigned
    /// embedded image).
    pub signer: Option<kiln_image::PublicKey>,
}

impl fmt::Display for ImageReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            ImageOutcome::Merged { entries, merge } => {
                write!(f, "{}: {entries} entries: {merge}", self.source)
            }
            ImageOutcome::Skipped(err) => write!(f, "{}: skipped: {err}", self.source),
        }
    }
}

/// What happened to one image at init.
#[derive(Debug)]
#[non_exhaustive]
pub enum ImageOutcome {
    /// The image was opened and merged.
    Merged {
        /// Entries in the image.
        entries: usize,
        /// What the merge did with them.
        merge: MergeReport,
    },
    /// The image could not be opened (or its directory listed); nothing of
    /// it was merged.
    Skipped(Error),
}

/// `KILN_LOG` in a program without a `tracing` subscriber: the init's
/// report on stderr, printed by kiln itself. A library does not install a
/// subscriber (where logs go is the program's choice), so with one installed
/// kiln prints nothing itself and its `tracing` events go to it.
pub(super) mod stderr_report {
    use super::{ImageOutcome, ImageReport, InitReport};

    /// How much of the report `KILN_LOG` asks for.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(in crate::global) enum Detail {
        /// `warn` or `error`: images skipped, entries stale or rejected.
        Problems,
        /// Any other filter (`info`, `debug`, `kiln_core=debug`...): every
        /// image and every tier as well.
        Everything,
    }

    /// What `log` (the value of `KILN_LOG`) asks kiln to print itself:
    /// `None` when it is unset or `off`, or when the program installed a
    /// `tracing` subscriber (which then gets the events).
    pub(in crate::global) fn detail(log: Option<&str>) -> Option<Detail> {
        let log = log?;
        let subscribed = tracing::dispatcher::get_default(|dispatch| {
            !dispatch.is::<tracing::subscriber::NoSubscriber>()
        });
        if subscribed {
            return None;
        }
        filter_detail(log)
    }

    /// The detail of a `KILN_LOG` filter; `None` for `off`.
    pub(in crate::global) fn filter_detail(log: &str) -> Option<Detail> {
        match log.trim().to_ascii_lowercase().as_str() {
            "off" => None,
            "warn" | "error" => Some(Detail::Problems),
            _ => Some(Detail::Everything),
        }
    }

    /// The lines of the init's report that `detail` asks for.
    pub(in crate::global) fn init_lines(detail: Detail, report: &InitReport) -> Vec<String> {
        let mut lines = Vec::new();
        if detail == Detail::Everything {
            lines.push(match report.tiers() {
                [] => "kiln: no extra cache tier".to_owned(),
                tiers => format!(
                    "kiln: cache tiers after memory and images: {}",
                    tiers.join(", ")
                ),
            });
            if report.disabled {
                lines.push("kiln: KILN_DISABLE is set: no image merged".to_owned());
            }
        }
        for image in report.images() {
            lines.extend(image_lines(detail, image));
        }
        lines
    }

    /// The lines about one image that `detail` asks for.
    pub(in crate::global) fn image_lines(detail: Detail, image: &ImageReport) -> Vec<String> {
        let source = &image.source;
        match &image.outcome {
            ImageOutcome::Skipped(err) => {
                vec![format!(
                    "kiln: skipped image {source}: {}",
                    crate::ErrorChain(err)
                )]
            }
            ImageOutcome::Merged { entries, merge } => {
                let mut lines = Vec::new();
                if detail == Detail::Everything {
                    lines.push(format!(
                        "kiln: merged image {source}: {entries} entries: {merge}"
                    ));
                }
                if merge.stale > 0 {
                    lines.push(format!(
                        "kiln: image {source}: {} entries skipped as stale: a definition they \
                         depend on has another fingerprint in this process; they compile again \
                         when asked for",
                        merge.stale
                    ));
                }
                for rejection in &merge.rejected {
                    lines.push(format!(
                        "kiln: image {source} rejected: {}",
                        rejection.reason
                    ));
                }
                lines
            }
        }
    }

    /// Prints the init's report on stderr.
    pub(in crate::global) fn init(detail: Detail, report: &InitReport) {
        for line in init_lines(detail, report) {
            eprintln!("{line}");
        }
    }

    /// Prints the report of an image merged after the init on stderr.
    pub(in crate::global) fn image(detail: Detail, report: &ImageReport) {
        for line in image_lines(detail, report) {
            eprintln!("{line}");
        }
    }
}
