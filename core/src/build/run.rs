//! [`Precompile::run`] in phases, each with a typed result: the plan
//! ([`Plan`]: paths, settings, target), the block's cache and tiers
//! ([`Setup`]), the block ([`Ran`]), the image written and signed
//! ([`Written`]), the candidate manifest, then what the build script
//! tells cargo ([`BuildOutput`]), printed once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_image::{ArtifactKind, Digest, ImageMeta, PublicKey};
use kiln_ship::{CANDIDATE_EXTENSION, Candidate, Manifest};

use super::embed::{self, Embedding};
use super::output::BuildOutput;
use super::session::{NotDone, Session};
use super::shipped::{self, ShippedSource};
use super::vouch::{Taken, UnverifiedTier};
use super::{
    BLOCK, BLOCK_SWITCHES, BUILD_UNVERIFIED, ERRORS_SHOWN, Precompile, PrecompileReport, Summary,
    TRUST_VARIABLES, Target, first_line, missing_lines, one_line, rerun_env_vars,
    trusted_key_files, trusted_keys_warnings, vouching_policy,
};
use crate::registry::IMAGE_EXTENSION;
use crate::settings::Settings;
use crate::trust::Provenance;
use crate::{BoxError, Cache, CacheConfig, Error};

/// What the run works from: where things are, the settings (parsed once)
/// and the target.
struct Plan {
    name: String,
    /// The image written: `<out_dir>/<name>.kimg`.
    path: PathBuf,
    shipped_path: PathBuf,
    library: PathBuf,
    meta: ImageMeta,
    /// The key the shipped image must be signed by, if any.
    key: Option<PublicKey>,
    settings: Settings,
    target: Option<Target>,
    embedding: Embedding,
}

/// The block's cache, with the shipped image and the tiers it may take
/// from, and what that set-up found.
struct Setup {
    cache: Cache,
    shipped: Option<ShippedSource>,
    /// The shipped image is sound but this signed build cannot vouch for it.
    unvouched_shipped: bool,
    /// What the unverified tiers gave (`KILN_BUILD_UNVERIFIED`).
    taken: Taken,
}

/// What the block did.
struct Ran {
    snapshot: crate::Snapshot,
    sources: BTreeSet<PathBuf>,
    env: BTreeSet<String>,
    records: BTreeMap<String, String>,
    labels: Vec<String>,
    done: Vec<(String, Duration)>,
    missing: Vec<(String, String)>,
    failed: Vec<(String, String)>,
    /// What a signed build could neither vouch for nor compile.
    unvouchable: Vec<(String, String)>,
    dropped: HashMap<(Digest, Digest), Vec<ArtifactKind>>,
    not_shippable: Option<String>,
    notes: Vec<String>,
    warnings: Vec<String>,
}

/// The image written.
struct Written {
    entries: usize,
    /// How many entries were taken unverified.
    unverified: usize,
    size_warnings: Vec<String>,
    /// The digests of the declared sources now.
    sources_now: BTreeMap<String, Digest>,
    not_shippable: Option<String>,
}

impl Precompile<'_> {
    /// Runs `block` on the block's cache (the shipped image, then the disk
    /// and remote tiers, then compiles), then writes the entries it got
    /// into the image and prints the `cargo::` directives.
    ///
    /// The image is written in every case, with what is ready, so that
    /// `include_image!` always finds it. A specialization this machine
    /// cannot compile ([`Unavailable`](super::Unavailable)), or a block that returns
    /// `Unavailable`, is a warning; any other failure is an error, returned
    /// after the image is written and every directive printed.
    ///
    /// `block` returns [`BoxError`], so `?` works on any error in it and
    /// its final `Ok(())` needs no annotation.
    ///
    /// # Errors
    /// [`Error::Precompile`] when a specialization or the block failed (the
    /// library's code does not compile); [`Error::OutDirUnset`];
    /// [`Error::Image`] when the image cannot be written or the shipped key
    /// is not a public key; [`Error::BuildOutput`] when the directives
    /// cannot be printed.
    pub fn run<F>(mut self, block: F) -> Result<PrecompileReport, Error>
    where
        F: FnOnce(&mut Session<'_>) -> Result<(), BoxError>,
    {
        let started = Instant::now();
        let mut writer = std::mem::replace(&mut self.output, Box::new(std::io::sink()));
        let plan = self.plan()?;
        let mut output = BuildOutput::new(&plan.name);
        let setup = set_up(&plan, &mut output);
        let ran = run_block(&plan, &setup, block);
        let written = write_image(&plan, &setup, &ran)?;
        directives(&plan, &ran, &mut output);
        let stats = report(&plan, &setup, &ran, &written, started, &mut output);
        output.write_to(&mut writer)?;
        finish(plan, setup, ran, written, stats, output)
    }

    /// The plan: paths, the shipped key, the settings (parsed once: what
    /// [`Precompile::env`] gave, else the process's), the target, the
    /// embedding.
    fn plan(self) -> Result<Plan, Error> {
        let path = self.image_path()?;
        let shipped_path = self.shipped_path();
        let library = self.library_root();
        let meta = self.meta();
        let key = self
            .shipped_key
            .as_deref()
            .map(str::parse::<PublicKey>)
            .transpose()?;
        let settings = self.settings.unwrap_or_else(|| Settings::process().clone());
        let target = self
            .target
            .or_else(|| Target::from_vars(settings.vars().text_pairs()));
        let embedding = settings.embedding()?;
        Ok(Plan {
            name: self.name,
            path,
            shipped_path,
            library,
            meta,
            key,
            settings,
            target,
            embedding,
        })
    }
}

/// The block's cache: no memory cap, the shipped image, then the tiers
/// under the vouching policy (and, with `KILN_BUILD_UNVERIFIED`, the same
/// tiers unchecked). Warns of switches set to what they do not take, of
/// unusable trusted-keys files and of a shipped image not used.
fn set_up(plan: &Plan, output: &mut BuildOutput) -> Setup {
    let settings = &plan.settings;
    for variable in BLOCK_SWITCHES {
        if let Err(error) = crate::env::parse_switch(variable, settings.vars().get(variable)) {
            let default = if variable == crate::disk::config::CACHE {
                "on"
            } else {
                "off"
            };
            output
                .warnings
                .push(format!("{error}; it stays {default} (its default)"));
        }
    }
    // No memory cap: every entry the block gets must reach the image
    // (the snapshot would pin them anyway).
    let cache = Cache::with_config(
        CacheConfig::default()
            .memory_max_bytes(None)
            .memory_max_entries(None)
            .always_compile(settings.cache.always_compile)
            // Every payload goes into the image: a corrupt one found in
            // a tier is a miss, compiled again.
            .check_tier_payloads(true),
    );
    let trust = settings.trust.clone();
    // What the trust policy logs goes nowhere in a build script: its
    // warnings about the trusted keys are the build's.
    output
        .warnings
        .extend(trusted_keys_warnings(&settings.vars().lookup()));
    let signs = trust.signs();
    let vouching = vouching_policy(&trust);
    let read = if settings.build.ignore_shipped {
        Ok(None)
    } else {
        let vouch = signs.then_some(vouching.trusted_keys.as_ref()).flatten();
        shipped::read(&plan.shipped_path, &plan.name, plan.key.as_ref(), vouch)
    };
    let mut unvouched_shipped = false;
    let shipped = match read {
        Ok(found) => found,
        Err(not_used) => {
            unvouched_shipped = not_used.unvouched;
            output.warnings.push(format!(
                "the shipped image {} is not used: {}",
                plan.shipped_path.display(),
                not_used.why
            ));
            None
        }
    };
    if let Some(found) = &shipped {
        cache.add_tier(Box::new(shipped::ShippedTier::new(Arc::clone(
            &found.shipped,
        ))));
    }
    // The tiers, admitting only what the block can vouch for: this
    // user's own compiles and what a trusted key signed.
    crate::global::add_tiers_wrapped(&cache, settings, &vouching, |tier| tier);
    let unverified = settings.build.build_unverified;
    if unverified && signs {
        output.warnings.push(format!(
            "{BUILD_UNVERIFIED} is ignored: KILN_SIGNING_KEY is set, and a signed image vouches \
             for every entry it holds"
        ));
    }
    // With KILN_BUILD_UNVERIFIED, then the same tiers unchecked: what
    // they give is recorded as unverified in the image.
    let taken = Taken::default();
    if unverified && !signs {
        let mut unchecked = trust.clone();
        unchecked.trusted_keys = None;
        crate::global::add_tiers_wrapped(&cache, settings, &unchecked, |tier| {
            Box::new(UnverifiedTier::new(tier, taken.clone()))
        });
    }
    Setup {
        cache,
        shipped,
        unvouched_shipped,
        taken,
    }
}

/// Runs the block on the set-up cache, then waits until what it compiled
/// reached the disk and remote tiers.
fn run_block<F>(plan: &Plan, setup: &Setup, block: F) -> Ran
where
    F: FnOnce(&mut Session<'_>) -> Result<(), BoxError>,
{
    let snapshot = setup.cache.snapshot();
    let mut session = Session {
        cache: &setup.cache,
        target: plan.target.as_ref(),
        settings: &plan.settings,
        shipped: setup.shipped.as_ref().map(|found| &found.shipped.manifest),
        sources: BTreeSet::new(),
        env: BTreeSet::new(),
        records: BTreeMap::new(),
        labels: Vec::new(),
        done: Vec::new(),
        missing: Vec::new(),
        failed: Vec::new(),
        dropped: HashMap::default(),
        not_shippable: None,
        notes: Vec::new(),
        warnings: Vec::new(),
    };
    match block(&mut session).err().map(NotDone::of) {
        None => {}
        Some(NotDone::Missing(why)) => session.missing.push((BLOCK.to_owned(), why)),
        Some(NotDone::Failed(why)) => session.failed.push((BLOCK.to_owned(), why)),
    }
    setup.cache.flush();
    let Session {
        sources,
        env,
        records,
        labels,
        done,
        mut missing,
        failed,
        dropped,
        not_shippable,
        notes,
        warnings,
        ..
    } = session;
    // A signed build that could not vouch for the shipped image, and
    // cannot compile what it held, fails rather than ship less signed.
    let unvouchable = if setup.unvouched_shipped {
        std::mem::take(&mut missing)
    } else {
        Vec::new()
    };
    Ran {
        snapshot,
        sources,
        env,
        records,
        labels,
        done,
        missing,
        failed,
        unvouchable,
        dropped,
        not_shippable,
        notes,
        warnings,
    }
}

/// Writes the image (as the embedding asks, signed when a signing key is
/// set; the whole entries too for `kiln ship`), then the candidate beside
/// it, with its manifest and why it must not ship, if it must not.
fn write_image(plan: &Plan, setup: &Setup, ran: &Ran) -> Result<Written, Error> {
    let delta = setup.cache.delta(&ran.snapshot);
    let entries = delta.len();
    // The entries taken unverified (KILN_BUILD_UNVERIFIED) that the
    // image holds, recorded in it.
    let unverified_entries: Vec<(Digest, Digest)> = {
        let taken = setup.taken.entries();
        delta
            .entries()
            .map(|(owner, key, _)| (owner, *key.digest()))
            .filter(|id| taken.contains(id))
            .collect()
    };
    let mut meta = plan.meta.clone();
    if !unverified_entries.is_empty() {
        meta.labels.insert(
            Provenance::UNVERIFIED_LABEL.to_owned(),
            crate::trust::unverified_label(unverified_entries.iter().copied()),
        );
    }
    let whole = plan
        .settings
        .build
        .ship_candidate
        .then(|| -> Result<PathBuf, Error> {
            let whole = plan
                .path
                .with_extension(format!("entries.{IMAGE_EXTENSION}"));
            kiln_image::write_file_atomic(&whole, &delta.to_bytes(meta.clone())?)?;
            Ok(whole)
        })
        .transpose()?;
    let mut sizes = Vec::new();
    let writer = delta.to_writer_with(meta, |entry| {
        if let Some(kinds) = ran.dropped.get(&(entry.owner, entry.key)) {
            entry.artifacts.retain(|a| !kinds.contains(&a.kind));
        }
        sizes.push(embed::EntrySize::of(entry));
    });
    let unsigned = embed::write(&writer, plan.embedding)?;
    let size_warnings = embed::size_warnings_for(&writer, sizes, &unsigned, plan.embedding)?;
    let bytes = crate::trust::sign_if_configured(plan.settings.vars().lookup(), unsigned)?;
    kiln_image::write_file_atomic(&plan.path, &bytes)?;

    let sources_now = shipped::source_digests(&plan.library, &ran.sources);
    let mut manifest = Manifest::new(plan.name.clone());
    manifest.records = ran.records.clone();
    manifest.sources = sources_now.clone();
    manifest.specializations = Manifest::digest_labels(&ran.labels);
    manifest.specialization_count = ran.labels.len() as u64;
    let mut candidate = Candidate::new(manifest, plan.path.clone(), plan.shipped_path.clone());
    candidate.entries = whole;
    let incomplete =
        !ran.missing.is_empty() || !ran.failed.is_empty() || !ran.unvouchable.is_empty();
    let not_shippable = ran
        .not_shippable
        .clone()
        .or_else(|| {
            incomplete.then(|| {
                format!(
                    "{} specializations are missing and {} failed in this build",
                    ran.missing.len() + ran.unvouchable.len(),
                    ran.failed.len()
                )
            })
        })
        .or_else(|| {
            (!unverified_entries.is_empty()).then(|| {
                format!(
                    "{} entries were taken unverified from a cache tier ({BUILD_UNVERIFIED})",
                    unverified_entries.len()
                )
            })
        });
    candidate.not_shippable = not_shippable.clone();
    candidate.write(&plan.path.with_extension(CANDIDATE_EXTENSION))?;
    Ok(Written {
        entries,
        unverified: unverified_entries.len(),
        size_warnings,
        sources_now,
        not_shippable,
    })
}

/// What reruns the build script: the declared sources, the shipped image
/// (used or not: a refused one may be fixed) or its folder while it has
/// none, the key files; the declared variables, the trust variables and
/// every build-time `KILN_*` variable set.
fn directives(plan: &Plan, ran: &Ran, output: &mut BuildOutput) {
    let lookup = plan.settings.vars().lookup();
    output.rerun_if_changed.extend(ran.sources.iter().cloned());
    // (A path that does not exist would rerun the block on every build.)
    output
        .rerun_if_changed
        .extend(shipped::watched_path(&plan.shipped_path));
    // The keys' content, not only the variables, changes what the block
    // may embed and how the image is signed.
    output
        .rerun_if_changed
        .extend(crate::trust::signing_key_path(&lookup));
    output.rerun_if_changed.extend(trusted_key_files(&lookup));
    // Watched set or not: setting one later must rerun the block.
    let mut env = ran.env.clone();
    env.extend(TRUST_VARIABLES.iter().map(|&var| var.to_owned()));
    env.insert(embed::EMBED.to_owned());
    env.insert(embed::EMBED_LEVEL.to_owned());
    let set = plan.settings.vars().names().map(str::to_owned);
    output.rerun_if_env_changed = rerun_env_vars(env, set).into_iter().collect();
}

/// The progress lines, the warnings and errors of what the block did, and
/// the summary line; the cache's figures.
fn report(
    plan: &Plan,
    setup: &Setup,
    ran: &Ran,
    written: &Written,
    started: Instant,
    output: &mut BuildOutput,
) -> crate::Stats {
    output.progress = ran
        .done
        .iter()
        .map(|(label, elapsed)| format!("kiln: {label} ready in {elapsed:.1?}"))
        .collect();
    output
        .warnings
        .extend(ran.warnings.iter().map(|warning| one_line(warning)));
    let changed = setup
        .shipped
        .as_ref()
        .filter(|_| !ran.missing.is_empty())
        .map(|found| shipped::changed_since(&found.shipped.manifest, &written.sources_now))
        .unwrap_or_default();
    output.warnings.extend(missing_lines(
        &ran.missing,
        setup.shipped.as_ref().map(|s| s.path.as_path()),
        &changed,
    ));
    let stats = setup.cache.stats();
    let refused = refused(setup, &stats);
    if refused > 0 {
        output.warnings.push(format!(
            "{refused} entries found in the disk or remote tier were not used: this user did not \
             compile them and no trusted key signed them (a precompile block embeds only what it \
             can vouch for), so they were compiled here; set KILN_TRUSTED_KEYS to the keys of the \
             writers to trust, or {BUILD_UNVERIFIED}=1 to take them, recorded as unverified in \
             the image"
        ));
    }
    if written.unverified > 0 {
        output.warnings.push(format!(
            "{} entries were taken from a cache tier without a trusted key's signature \
             ({BUILD_UNVERIFIED}): the image records them, and a process with KILN_TRUSTED_KEYS \
             refuses them",
            written.unverified
        ));
    }
    output
        .warnings
        .extend(written.size_warnings.iter().cloned());
    for (label, why) in ran.unvouchable.iter().take(ERRORS_SHOWN) {
        output.errors.push(format!(
            "{label} cannot be vouched for: the shipped image {} carries no trusted key's \
             signature (KILN_SIGNING_KEY is set) and this machine cannot compile it ({}); sign \
             the shipped image with a key in KILN_TRUSTED_KEYS (`kiln ship --key`) or build \
             where the compiler is",
            plan.shipped_path.display(),
            one_line(why)
        ));
    }
    for (label, why) in ran.failed.iter().take(ERRORS_SHOWN) {
        output
            .errors
            .push(format!("{label} does not compile: {}", first_line(why)));
    }
    let failing = ran.unvouchable.len() + ran.failed.len();
    let shown = ran.unvouchable.len().min(ERRORS_SHOWN) + ran.failed.len().min(ERRORS_SHOWN);
    if failing > shown {
        output.errors.push(format!(
            "and {} more cannot be built (every message is on the build script's stderr)",
            failing - shown
        ));
    }
    let from_tiers = setup.cache.tier_hits();
    let summary = Summary {
        entries: written.entries,
        from_tiers: &from_tiers,
        compiles: stats.compiles,
        missing: ran.missing.len() + ran.unvouchable.len(),
        failed: ran.failed.len(),
        refused,
    };
    let notes: String = ran
        .notes
        .iter()
        .map(|n| format!("; {}", one_line(n)))
        .collect();
    output.summary = format!(
        "{summary} into {} in {:.1?}{notes}",
        plan.path.display(),
        started.elapsed(),
    );
    output.summary_warns =
        !ran.missing.is_empty() || (written.entries == 0 && !ran.labels.is_empty());
    stats
}

/// Tier entries not used because the block could not vouch for them (none
/// when it took them unverified).
fn refused(setup: &Setup, stats: &crate::Stats) -> u64 {
    if setup.taken.is_active() {
        0
    } else {
        stats.tier_untrusted
    }
}

/// The run's result: an error naming what failed (every message on
/// stderr), or the report.
fn finish(
    plan: Plan,
    setup: Setup,
    ran: Ran,
    written: Written,
    stats: crate::Stats,
    output: BuildOutput,
) -> Result<PrecompileReport, Error> {
    let Ran {
        done,
        missing,
        mut failed,
        unvouchable,
        ..
    } = ran;
    let name = plan.name;
    if !failed.is_empty() || !unvouchable.is_empty() {
        let mut details = String::new();
        for (label, why) in &failed {
            let _ = writeln!(details, "kiln: {name}: {label} does not compile:\n{why}\n");
        }
        for (label, why) in &unvouchable {
            let _ = writeln!(
                details,
                "kiln: {name}: {label} cannot be vouched for (the shipped image carries no \
                 trusted key's signature) nor compiled here:\n{why}\n"
            );
        }
        failed.extend(unvouchable);
        eprint!("{details}");
        return Err(Error::Precompile { name, failed });
    }
    Ok(PrecompileReport {
        path: plan.path,
        entries: written.entries,
        ready: done,
        compiles: stats.compiles,
        from_tiers: setup.cache.tier_hits(),
        missing,
        failed,
        not_shippable: written.not_shippable,
        unverified: written.unverified,
        output,
    })
}
