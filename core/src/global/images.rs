//! Loading images into a cache at init: embedded ones, then the files of
//! `KILN_IMAGE_PATH`, each admitted by the trust policy ([`load_images`]).

use crate::registry::{self, EmbeddedImage, ImageSource};
use crate::settings::Settings;
use crate::trust::{Admission, Origin, TrustPolicy};
use crate::{Cache, Error};

use super::report::{ImageOutcome, ImageReport, InitReport, is_untrusted};

/// Merges `embedded` and the files of `settings.images.path` into `cache`,
/// as the init of [`global()`](crate::global()) does (unless
/// `settings.cache.disable` is set), admitting each image under
/// `settings.trust`
/// ([`crate::trust::admit`]: embedded images are [`Origin::Program`],
/// files [`Origin::Elsewhere`]).
///
/// Exposed for programs that manage a cache of their own.
pub fn load_images(
    cache: &Cache,
    settings: &Settings,
    embedded: &[&'static EmbeddedImage],
) -> InitReport {
    let report = InitReport {
        disabled: settings.cache.disable,
        tiers: Vec::new(),
        images: boxcar::Vec::new(),
    };
    if settings.cache.disable {
        tracing::info!("KILN_DISABLE is set: no image merged");
        return report;
    }
    let trust = &settings.trust;
    for image in embedded {
        report.images.push(merge_embedded(cache, image, trust));
    }
    let (files, unreadable) = registry::image_files(&settings.images.path);
    for (dir, source) in unreadable {
        let err = Error::ImageDirectory {
            dir: dir.clone(),
            source,
        };
        report
            .images
            .push(merge(cache, ImageSource::Directory(dir), Err(err), trust));
    }
    for path in files {
        let opened = kiln_image::Image::open(&path, kiln_image::Verification::Structural)
            .map_err(Error::from)
            .and_then(|image| {
                let admission = trust.admit(&image, Origin::Elsewhere)?;
                Ok((image, admission))
            });
        report
            .images
            .push(merge(cache, ImageSource::File(path), opened, trust));
    }
    report
}

/// Merges one embedded image, admitted as the program's own.
pub(super) fn merge_embedded(
    cache: &Cache,
    image: &'static EmbeddedImage,
    trust: &TrustPolicy,
) -> ImageReport {
    let source = ImageSource::Embedded {
        crate_name: image.crate_name(),
        name: image.name(),
    };
    let opened = image.open().map_err(Error::from).and_then(|image| {
        let admission = trust.admit(&image, Origin::Program)?;
        Ok((image, admission))
    });
    merge(cache, source, opened, trust)
}

/// Merges one opened image (with why it was admitted), or records why it
/// could not be opened or was refused.
fn merge(
    cache: &Cache,
    source: ImageSource,
    opened: Result<(kiln_image::Image, Admission), Error>,
    trust: &TrustPolicy,
) -> ImageReport {
    let mut signer = None;
    let outcome = match opened {
        Ok((image, admission)) => {
            if let Admission::SignedBy(key) = admission {
                signer = Some(key);
            }
            if let Some(key) = signer {
                tracing::debug!(image = %source, %key, "kiln image signed by a trusted key");
            }
            let entries = image.len();
            // An embedded image admitted unsigned is the program's own,
            // except for the entries its precompile block took unverified
            // from a tier (KILN_BUILD_UNVERIFIED): with trusted keys those
            // are refused, as they would be from the tier.
            let refused = match admission {
                Admission::Own if trust.trusted_keys.is_some() => {
                    match crate::trust::unverified_entries(&image.meta().labels) {
                        Ok(refused) => refused,
                        Err(why) => {
                            let err = Error::UnverifiedLabel { why };
                            tracing::warn!(image = %source, "refused kiln image (KILN_TRUSTED_KEYS is set): {}", crate::ErrorChain(&err));
                            return ImageReport {
                                source,
                                outcome: ImageOutcome::Skipped(err),
                                signer,
                            };
                        }
                    }
                }
                _ => Vec::new(),
            };
            let merge = cache.merge_image_except(image, &refused);
            if merge.unverified > 0 {
                tracing::warn!(
                    image = %source,
                    unverified = merge.unverified,
                    "kiln image entries refused (KILN_TRUSTED_KEYS is set): its build took them \
                     from a cache tier without a trusted key's signature (KILN_BUILD_UNVERIFIED); \
                     they compile when asked for"
                );
            }
            tracing::info!(
                image = %source,
                entries,
                inserted = merge.inserted,
                duplicate = merge.duplicate,
                "merged kiln image"
            );
            if merge.stale > 0 {
                tracing::warn!(
                    image = %source,
                    stale = merge.stale,
                    "kiln image entries skipped as stale: a definition they depend on has another \
                     fingerprint in this process; they compile again when asked for"
                );
            }
            if merge.foreign_owner > 0 {
                tracing::info!(
                    image = %source,
                    foreign_owner = merge.foreign_owner,
                    "kiln image entries skipped: their compiler configuration is not accepted here"
                );
            }
            for rejection in &merge.rejected {
                tracing::warn!(image = %source, "kiln image rejected: {}", rejection.reason);
            }
            ImageOutcome::Merged { entries, merge }
        }
        Err(err) => {
            if trust.trusted_keys.is_some() && is_untrusted(&err) {
                tracing::warn!(image = %source, "refused kiln image (KILN_TRUSTED_KEYS is set): {}", crate::ErrorChain(&err));
            } else {
                tracing::warn!(image = %source, "skipped kiln image: {}", crate::ErrorChain(&err));
            }
            ImageOutcome::Skipped(err)
        }
    };
    ImageReport {
        source,
        outcome,
        signer,
    }
}
