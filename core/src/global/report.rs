//! What the init did ([`InitReport`], one [`ImageReport`] per image), and
//! kiln's events on stderr when `KILN_LOG` asks kiln to print them itself
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

/// `KILN_LOG` in a program without a `tracing` subscriber: kiln's own
/// `tracing` events on stderr. A library does not install a subscriber
/// (where logs go is the program's choice), so with one installed kiln
/// prints nothing itself and its events go to it. Without one, the init
/// (and each merge of a late registration) runs with [`StderrLog`] as the
/// scoped subscriber ([`scoped`]): the same events, printed one per line.
/// This is the one place where kiln-core writes to stderr.
pub(super) mod stderr_report {
    use std::fmt::{self, Write as _};
    use std::io::Write as _;

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    use crate::Stats;

    /// How much `KILN_LOG` asks for.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(in crate::global) enum Detail {
        /// `warn` or `error`: warnings and errors (images skipped, entries
        /// stale or rejected).
        Problems,
        /// Any other filter (`info`, `debug`, `kiln_core=debug`...): `info`
        /// events as well (every image merged, the tiers added).
        Everything,
    }

    impl Detail {
        /// Whether events of `level` are printed.
        fn admits(self, level: &Level) -> bool {
            match self {
                Detail::Problems => *level <= Level::WARN,
                Detail::Everything => *level <= Level::INFO,
            }
        }
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

    /// Where [`StderrLog`] writes its lines.
    type Sink = Box<dyn Fn(&str) + Send + Sync>;

    /// A `tracing` subscriber that prints kiln's events (targets starting
    /// with `kiln`) that `detail` admits, one line each: `kiln: ` and the
    /// message, then the other fields. Never installed as the global
    /// default: used in scope only (see [`scoped`]).
    pub(in crate::global) struct StderrLog {
        detail: Detail,
        sink: Sink,
    }

    impl StderrLog {
        /// Prints on stderr.
        pub(in crate::global) fn new(detail: Detail) -> StderrLog {
            StderrLog::with_sink(detail, Box::new(write_line))
        }

        /// Gives each line to `sink` (tests).
        pub(in crate::global) fn with_sink(detail: Detail, sink: Sink) -> StderrLog {
            StderrLog { detail, sink }
        }
    }

    impl Subscriber for StderrLog {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            metadata.is_event()
                && metadata.target().starts_with("kiln")
                && self.detail.admits(metadata.level())
        }

        fn new_span(&self, _span: &Attributes<'_>) -> Id {
            // Spans are never enabled; an id is required all the same.
            Id::from_u64(1)
        }

        fn record(&self, _span: &Id, _values: &Record<'_>) {}

        fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

        fn event(&self, event: &Event<'_>) {
            let mut line = Line::default();
            event.record(&mut line);
            (self.sink)(&line.finish());
        }

        fn enter(&self, _span: &Id) {}

        fn exit(&self, _span: &Id) {}
    }

    /// An event's line: its message, then its other fields.
    #[derive(Default)]
    struct Line {
        message: String,
        fields: String,
    }

    impl Visit for Line {
        fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
            if field.name() == "message" {
                let _ = write!(self.message, "{value:?}");
            } else {
                let gap = if self.fields.is_empty() { "" } else { ", " };
                let _ = write!(self.fields, "{gap}{}={value:?}", field.name());
            }
        }

        fn record_str(&mut self, field: &Field, value: &str) {
            if field.name() == "message" {
                self.message.push_str(value);
            } else {
                let gap = if self.fields.is_empty() { "" } else { ", " };
                let _ = write!(self.fields, "{gap}{}={value}", field.name());
            }
        }
    }

    impl Line {
        fn finish(self) -> String {
            if self.fields.is_empty() {
                format!("kiln: {}", self.message)
            } else {
                format!("kiln: {} ({})", self.message, self.fields)
            }
        }
    }

    /// Writes one line on stderr (a failed write is ignored: there is
    /// nowhere else to report it).
    fn write_line(line: &str) {
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }

    /// Runs `run` with kiln's events printed on stderr as `detail` asks
    /// (nothing more when `None`).
    pub(in crate::global) fn scoped<T>(detail: Option<Detail>, run: impl FnOnce() -> T) -> T {
        match detail {
            Some(detail) => {
                let dispatch = tracing::Dispatch::new(StderrLog::new(detail));
                tracing::dispatcher::with_default(&dispatch, run)
            }
            None => run(),
        }
    }

    /// The cache's figures at exit as `detail` asks (`Problems`: only
    /// failed or dropped stores). Written directly, not through `tracing`:
    /// the exit hook runs after the main thread's thread-locals are gone,
    /// and with them the scoped subscriber `tracing` would dispatch to.
    pub(in crate::global) fn stats_at_exit(detail: Detail, stats: &Stats) {
        match detail {
            Detail::Everything => write_line(&format!("kiln: at exit: {stats}")),
            Detail::Problems => {
                if stats.store_failures > 0 || stats.stores_dropped > 0 {
                    write_line(&format!(
                        "kiln: at exit: {} cache stores failed, {} dropped (queue full)",
                        stats.store_failures, stats.stores_dropped
                    ));
                }
            }
        }
    }

    /// At exit, stores still queued after the exit hook's wait (written
    /// directly, as [`stats_at_exit`]).
    pub(in crate::global) fn unflushed_at_exit(queued: u64, waited: std::time::Duration) {
        write_line(&format!(
            "kiln: at exit: {queued} cache stores still queued after {} s; not waiting longer",
            waited.as_secs()
        ));
    }
}
