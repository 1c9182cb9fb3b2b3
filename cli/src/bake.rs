//! `kiln bake RECORD... -o OUT.kimg [--image FILE]... [--cache-dir DIR]...
//! [--remote URL] [--only-compiled] [--producer TEXT] [--json]`: one image
//! of exactly the entries that record files (written by processes run with
//! `KILN_RECORD`) say an application used, taken from the images, disk
//! caches and remote cache given, so that a fresh process with the image in
//! its `KILN_IMAGE_PATH` compiles nothing for the same workload.
//!
//! Each recorded `(owner, key)` is looked for in the `--image` files (in
//! the order given: the libraries' images, images already shipped), then in
//! the `--cache-dir` disk caches (the `KILN_CACHE_DIR` of the machines that
//! ran the application), then on the `--remote` Redis server (the fleet's
//! `KILN_REMOTE_CACHE`), asked only for what the others lack. Every
//! artifact is checked against its checksum before it is baked; a remote
//! value is verified as the remote tier verifies a hit (a valid one-entry
//! image of exactly that entry) and, with `KILN_TRUSTED_KEYS` set, must be
//! signed by one of those keys. `KILN_REMOTE_TIMEOUT_MS` bounds each
//! request; after a failure the server is not asked again for 30 s (the
//! entries left are listed as missing, with why: the `damaged_in` list of
//! `--json` and the `REFUSED BY` column hold each store's reason: damage,
//! a refused signature or an unreachable server). `--only-compiled`
//! leaves out the entries some process got from an image: what no shipped
//! image held.
//!
//! The image is deterministic (entries sorted, no timestamps, no paths) and
//! records its provenance in its labels (`kiln.provenance=baked`,
//! `kiln.baked-from=` the kinds of sources its entries came from:
//! `disk`, `image`, `remote`); it is written atomically, also when some recorded entries were not found;
//! those are listed, and the exit status is then 1.
//!
//! With `KILN_SIGNING_KEY` set the image is signed with that key before it
//! is written (`"signed": true` in `--json`); a key that cannot be used
//! writes nothing (exit status 2). A signature vouches for every entry, so
//! a signed bake takes only entries that were checked: from an `--image`
//! file signed by a trusted key (`KILN_TRUSTED_KEYS`, and `--trusted-key`
//! added to them), from a `--cache-dir` whose provenance says this user's
//! processes compiled them (in a directory only this user may write) or
//! that a trusted key signed, and from `--remote` only with trusted keys
//! (the server is untrusted). A copy that is not vouched for is passed
//! over for a later store's; an entry no store holds a vouched copy of
//! stops the bake: nothing is signed or written, and the error lists each
//! such entry with where it was found and why it was refused (exit status
//! 2). With trusted keys, an unsigned bake also takes only what a program
//! with those keys would serve (a refused copy is listed among the reasons
//! an entry is missing); without them, every copy that passes its
//! checksums.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use kiln_core::disk::{DiskCache, DiskConfig, config};
use kiln_core::record::{DEFAULT_READ_LIMIT, Damage, Recording, Used};
use kiln_core::settings::Settings;
use kiln_core::trust::{Origin, Provenance, TrustPolicy};
use kiln_image::{
    Digest, EntryData, Image, ImageMeta, ImageWriter, SigningKey, TrustedKeys, Verification,
};
use kiln_redis::{RemoteConfig, RemoteTier};
use serde_json::{Value, json};

use crate::common::{PrintArgs, RecordArgs, Seq, TrustArgs, print_json, short, write_rows};
use crate::escape;
use crate::{CliError, Outcome};

/// Arguments of `kiln bake`.
#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    records: RecordArgs,
    /// The image to write.
    #[arg(short, long)]
    output: PathBuf,
    /// An image file that may hold recorded entries (a library's image, an
    /// image already shipped); searched first, in the order given.
    #[arg(long = "image", value_name = "FILE")]
    images: Vec<PathBuf>,
    /// A disk cache directory (the KILN_CACHE_DIR of a machine that ran the
    /// application) that may hold the entries it compiled or fetched;
    /// searched after the images.
    #[arg(long = "cache-dir", value_name = "DIR")]
    cache_dirs: Vec<PathBuf>,
    /// A remote cache (redis://host:port/db, rediss:// for TLS) that may
    /// hold the entries; asked last, for what the images and disk caches
    /// lack. KILN_TRUSTED_KEYS and KILN_REMOTE_TIMEOUT_MS apply.
    #[arg(long, value_name = "URL")]
    remote: Option<String>,
    /// Bake only the entries no process got from an image: what no shipped
    /// image held.
    #[arg(long)]
    only_compiled: bool,
    /// The producer written into the image's header, e.g. your application's
    /// name and version [default: kiln bake <version>].
    #[arg(long, value_name = "TEXT")]
    producer: Option<String>,
    #[command(flatten)]
    trust: TrustArgs,
    #[command(flatten)]
    print: PrintArgs,
}

/// Reads and merges the record files at `paths`, each up to
/// [`DEFAULT_READ_LIMIT`] bytes.
pub(crate) fn read_records(paths: &[PathBuf]) -> Result<Recording, CliError> {
    let mut recording = Recording::new();
    for path in paths {
        recording.read_file(path, DEFAULT_READ_LIMIT)?;
    }
    Ok(recording)
}

/// What was skipped in the record files, as one line; `None` when nothing.
pub(crate) fn damage_line(damage: &Damage) -> Option<String> {
    if damage.is_clean() {
        return None;
    }
    let parts: Vec<String> = [
        (damage.torn, "torn records"),
        (damage.corrupt, "corrupt lines"),
        (damage.too_long, "lines too long"),
        (damage.unknown_version, "records of another format version"),
        (damage.unread_bytes, "bytes past the read limit"),
    ]
    .iter()
    .filter(|(count, _)| *count > 0)
    .map(|(count, what)| format!("{count} {what}"))
    .collect();
    Some(format!("skipped in the record files: {}", parts.join(", ")))
}

/// The JSON form of a [`Damage`].
pub(crate) fn damage_json(damage: &Damage) -> Value {
    json!({
        "torn": damage.torn,
        "corrupt": damage.corrupt,
        "too_long": damage.too_long,
        "unknown_version": damage.unknown_version,
        "unread_bytes": damage.unread_bytes,
    })
}

/// The sources a recorded entry came from, comma-separated.
pub(crate) fn sources(used: &Used) -> String {
    used.sources
        .keys()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Where an entry can be found (a few, each kept for the whole run: their
/// sizes do not matter).
#[allow(clippy::large_enum_variant)]
enum Store {
    /// An image file, and whether a signer may take its entries (a
    /// trusted key's signature verifies), or why not.
    Image {
        path: PathBuf,
        image: Image,
        vouched: Result<(), String>,
    },
    /// A disk cache, opened to find every copy (each is then judged by
    /// its provenance: [`DiskCache::vouch`]).
    Disk {
        dir: PathBuf,
        cache: DiskCache,
    },
    Remote {
        tier: RemoteTier,
    },
}

/// A copy of an entry a store holds, and whether it is vouched for (a
/// trusted key signed it, or this user compiled it; `Err`: why not).
struct Found {
    data: EntryData,
    vouched: Result<(), String>,
}

impl Store {
    /// What kind of store it is, for the baked image's provenance label
    /// (no path: images record no paths of the machine that made them).
    fn kind(&self) -> &'static str {
        match self {
            Store::Image { .. } => "image",
            Store::Disk { .. } => "disk",
            Store::Remote { .. } => "remote",
        }
    }

    fn name(&self) -> String {
        match self {
            Store::Image { path, .. } => format!("image {}", path.display()),
            Store::Disk { dir, .. } => format!("disk cache {}", dir.display()),
            Store::Remote { tier } => format!("remote cache {}", tier.server()),
        }
    }

    /// The entry of `(owner, key)`, every payload checked, and whether it
    /// is vouched for under `trusted`; `Err` when the store has it but it is
    /// damaged.
    fn get(
        &self,
        owner: &Digest,
        key: &Digest,
        trusted: Option<&TrustedKeys>,
    ) -> Result<Option<Found>, String> {
        match self {
            Store::Image { image, vouched, .. } => match image.find(owner, key) {
                Ok(Some(entry)) => entry
                    .to_data()
                    .map(|data| {
                        Some(Found {
                            data,
                            vouched: vouched.clone(),
                        })
                    })
                    .map_err(|e| e.to_string()),
                Ok(None) => Ok(None),
                Err(error) => Err(error.to_string()),
            },
            // A disk hit's payloads passed their checksums; its provenance
            // says whether this user compiled it.
            Store::Disk { cache, .. } => match cache.get(owner, key) {
                Some(hit) => {
                    let vouched = cache.vouch(&hit, trusted).map(|_| ()).map_err(|error| {
                        format!("{}: {} ({error})", hit.provenance(), error.check())
                    });
                    hit.entry()
                        .and_then(|entry| Ok(entry.to_data()?))
                        .map(|data| Some(Found { data, vouched }))
                        .map_err(|e| e.to_string())
                }
                None => Ok(None),
            },
            // Verified (and, with trusted keys, its signature checked; a
            // signed bake from a server needs them).
            Store::Remote { tier } => tier
                .fetch(owner, key)
                .map(|found| {
                    found.map(|data| Found {
                        data,
                        vouched: Ok(()),
                    })
                })
                .map_err(|e| e.to_string()),
        }
    }
}

/// The remote tier of the server at `url`, with the environment's other
/// remote settings (`KILN_REMOTE_TIMEOUT_MS`) and the tool's trust policy.
fn open_remote(url: &str, trust: &TrustPolicy, signing: bool) -> Result<RemoteTier, CliError> {
    let settings = Settings::process().with_var(kiln_redis::REMOTE_CACHE, url);
    let config = RemoteConfig::from_settings(&settings, trust)?.ok_or(CliError::NoRemoteUrl)?;
    // Signing what an untrusted server gave, unchecked, would vouch for it.
    if config.trusted_keys.is_none() && signing {
        return Err(CliError::SigningUnverifiedRemote);
    }
    Ok(RemoteTier::open(config)?)
}

/// Whether a signer may take the entries of `image`: a trusted key of
/// `trust` signed it (an image file comes from elsewhere); without trusted
/// keys nothing vouches for it.
fn vouch_image(image: &Image, trust: &TrustPolicy) -> Result<(), String> {
    let keys = trust.trusted_keys.clone().unwrap_or_default();
    kiln_core::trust::admit(Some(&keys), image, Origin::Elsewhere)
        .map(|_| ())
        .map_err(|error| match trust.trusted_keys {
            Some(_) => format!("{}: {error}", error.check()),
            None => format!(
                "{}: no trusted keys to check it with (KILN_TRUSTED_KEYS, --trusted-key)",
                error.check()
            ),
        })
}

/// Opens the disk cache in `dir`, which must exist; its other settings come
/// from the environment (`KILN_CACHE_TRUST_DIR`), `KILN_CACHE=0` ignored.
/// Opened without trusted keys, so that every copy is found and judged by
/// the bake ([`Store::get`]).
fn open_disk(dir: &Path) -> Result<DiskCache, CliError> {
    if !dir.is_dir() {
        return Err(CliError::NoCacheDir {
            path: dir.to_owned(),
        });
    }
    let config = Settings::process()
        .with_var(config::CACHE_DIR, dir.as_os_str())
        .without_var(config::CACHE)
        .disk()?
        .unwrap_or_else(|| DiskConfig::new(dir));
    let mut config = config;
    config.trusted_keys = None;
    Ok(DiskCache::open(config)?)
}

/// One entry baked, and the store it came from.
struct Baked<'s> {
    name: String,
    owner_label: String,
    owner: Digest,
    key: Digest,
    from: &'s Store,
}

/// One recorded entry found only where nothing vouches for it, while
/// signing: where, and why.
struct Unvouched {
    name: String,
    store: String,
    why: String,
}

/// One recorded entry not found, and why.
struct Missing<'r> {
    used: &'r Used,
    /// Stores that held it damaged.
    damaged: Vec<String>,
}

/// `kiln bake`: opens the stores, selects each recorded entry from the
/// first store that holds a copy the bake may take, writes the image (not
/// when a signed bake lacks a vouched copy), then reports; exit 1 when
/// recorded entries were not found.
pub(crate) fn run(args: Args) -> Result<Outcome, CliError> {
    let trust = args.trust.policy()?;
    // A key that cannot be used stops the bake before anything is read.
    let signer = kiln_core::trust::signing_key_from_lookup(Settings::process().vars().lookup())?;
    let recording = read_records(&args.records.records)?;
    let stores = open_stores(&args, &trust, signer.is_some())?;
    let selection = select(&args, &recording, &stores, &trust, signer.is_some());
    let producer = args
        .producer
        .clone()
        .unwrap_or_else(|| format!("kiln bake {}", env!("CARGO_PKG_VERSION")));
    let meta = image_meta(&args.output, &producer, &selection.baked);
    selection.refuse_unvouched()?;
    let signed = write_image(&args.output, meta, selection.entries, signer.as_deref())?;
    let report = BakeReport {
        args: &args,
        producer: &producer,
        recording: &recording,
        baked: &selection.baked,
        missing: &selection.missing,
        left_out: selection.left_out,
        signed,
    };
    if args.print.json {
        report.print_json()?;
    } else {
        report.print_text()?;
    }
    Ok(if selection.missing.is_empty() {
        Outcome::Clean
    } else {
        Outcome::Findings
    })
}

/// The stores of `args`, in the order they are searched: the `--image`
/// files, the `--cache-dir` directories, then the `--remote` server.
fn open_stores(args: &Args, trust: &TrustPolicy, signing: bool) -> Result<Vec<Store>, CliError> {
    let mut stores = Vec::new();
    for path in &args.images {
        let image = Image::open(path, Verification::Structural).map_err(CliError::image(path))?;
        let vouched = vouch_image(&image, trust);
        stores.push(Store::Image {
            path: path.clone(),
            image,
            vouched,
        });
    }
    for dir in &args.cache_dirs {
        stores.push(Store::Disk {
            dir: dir.clone(),
            cache: open_disk(dir)?,
        });
    }
    if let Some(url) = &args.remote {
        stores.push(Store::Remote {
            tier: open_remote(url, trust, signing)?,
        });
    }
    Ok(stores)
}

/// What the bake takes from the stores: the entries to write, and the
/// recorded entries it leaves out, misses or may not sign.
struct Selection<'r, 's> {
    /// The entries of the image, in record order.
    entries: Vec<EntryData>,
    /// One per entry: where it came from.
    baked: Vec<Baked<'s>>,
    /// Recorded entries no store holds a copy of the bake may take.
    missing: Vec<Missing<'r>>,
    /// While signing: recorded entries found only where nothing vouches
    /// for them.
    unvouched: Vec<Unvouched>,
    /// Entries left out by `--only-compiled`.
    left_out: usize,
}

impl Selection<'_, '_> {
    /// A signed bake stops, writing nothing, when an entry has no vouched
    /// copy.
    fn refuse_unvouched(&self) -> Result<(), CliError> {
        if self.unvouched.is_empty() {
            return Ok(());
        }
        Err(CliError::SigningUnvouched {
            count: self.unvouched.len(),
            entries: unvouched_list(&self.unvouched),
        })
    }
}

/// Each recorded entry from the first store holding a copy the bake may
/// take: while signing, a vouched copy; with trusted keys, one a program
/// with those keys would serve; otherwise any copy that passes its
/// checksums. As an image entry, valid from world 1 on, under the first
/// label found for its owner.
fn select<'r, 's>(
    args: &Args,
    recording: &'r Recording,
    stores: &'s [Store],
    trust: &TrustPolicy,
    signing: bool,
) -> Selection<'r, 's> {
    let mut selection = Selection {
        entries: Vec::new(),
        baked: Vec::new(),
        missing: Vec::new(),
        unvouched: Vec::new(),
        left_out: 0,
    };
    let mut owner_labels: HashMap<Digest, String> = HashMap::new();
    let trusted = trust.trusted_keys.as_ref();
    for used in recording.entries() {
        if args.only_compiled && used.from_image() {
            selection.left_out += 1;
            continue;
        }
        let mut damaged = Vec::new();
        let mut passed_over = None;
        let found =
            stores
                .iter()
                .find_map(|store| match store.get(&used.owner, &used.key, trusted) {
                    // Signing takes only vouched copies; with trusted keys, so
                    // does an unsigned bake (as a program with them would).
                    Ok(Some(found)) => match found.vouched {
                        Err(why) if signing => {
                            passed_over.get_or_insert((store.name(), why));
                            None
                        }
                        Err(why) if trusted.is_some() => {
                            damaged.push(format!("{}: refused: {why}", store.name()));
                            None
                        }
                        _ => Some((store, found.data)),
                    },
                    Ok(None) => None,
                    Err(why) => {
                        damaged.push(format!("{}: {why}", store.name()));
                        None
                    }
                });
        let Some((store, mut data)) = found else {
            match passed_over {
                Some((store, why)) => selection.unvouched.push(Unvouched {
                    name: used.name.clone(),
                    store,
                    why,
                }),
                None => selection.missing.push(Missing { used, damaged }),
            }
            continue;
        };
        // As an image entry: valid from the world it is merged in on.
        data.min_world = 1;
        data.max_world = u64::MAX;
        // One label per owner: the first one found.
        data.owner_label = owner_labels
            .entry(data.owner)
            .or_insert(data.owner_label)
            .clone();
        selection.baked.push(Baked {
            name: data.name.clone(),
            owner_label: data.owner_label.clone(),
            owner: data.owner,
            key: data.key,
            from: store,
        });
        selection.entries.push(data);
    }
    selection
}

/// The baked image's header: its producer, the output's stem as its
/// `image` label, and its provenance (baked, from these kinds of sources,
/// sorted, once each).
fn image_meta(output: &Path, producer: &str, baked: &[Baked<'_>]) -> ImageMeta {
    let mut meta = ImageMeta::new(producer.to_owned(), "");
    if let Some(stem) = output.file_stem() {
        meta.labels
            .insert("image".to_owned(), stem.to_string_lossy().into_owned());
    }
    let kinds: std::collections::BTreeSet<&str> = baked.iter().map(|b| b.from.kind()).collect();
    meta.labels
        .insert(Provenance::LABEL.to_owned(), "baked".to_owned());
    meta.labels.insert(
        BAKED_FROM_LABEL.to_owned(),
        kinds.into_iter().collect::<Vec<_>>().join(","),
    );
    meta
}

/// Writes the image of `entries` to `path` ([`publish`]: signed with
/// `signer` when there is one); returns whether it was signed.
fn write_image(
    path: &Path,
    meta: ImageMeta,
    entries: Vec<EntryData>,
    signer: Option<&SigningKey>,
) -> Result<bool, CliError> {
    let mut writer = ImageWriter::new(meta);
    for entry in entries {
        writer.push(entry);
    }
    let bytes = writer.to_bytes().map_err(CliError::image(path))?;
    publish(path, bytes, signer)
}

/// The entries a signed bake refused, one per line (at most
/// [`UNVOUCHED_SHOWN`], then how many more), escaped.
fn unvouched_list(unvouched: &[Unvouched]) -> String {
    let mut lines: Vec<String> = unvouched
        .iter()
        .take(UNVOUCHED_SHOWN)
        .map(|u| {
            format!(
                "  {} (found in {}: {})",
                escape::escape(&u.name),
                escape::escape(&u.store),
                escape::escape(&u.why)
            )
        })
        .collect();
    if unvouched.len() > UNVOUCHED_SHOWN {
        lines.push(format!("  and {} more", unvouched.len() - UNVOUCHED_SHOWN));
    }
    lines.join("\n")
}

/// The label of a baked image naming the kinds of sources its entries came
/// from (`disk`, `image`, `remote`).
const BAKED_FROM_LABEL: &str = "kiln.baked-from";

/// How many refused entries the error of a signed bake lists.
const UNVOUCHED_SHOWN: usize = 20;

/// Signs the baked image with `signer` (`KILN_SIGNING_KEY`) when there is
/// one, then writes it to `path` atomically. Returns whether it was
/// signed.
fn publish(path: &Path, bytes: Vec<u8>, signer: Option<&SigningKey>) -> Result<bool, CliError> {
    let bytes = match signer {
        Some(key) => kiln_image::sign_image(&bytes, key).map_err(CliError::image(path))?,
        None => bytes,
    };
    kiln_image::write_file_atomic(path, &bytes).map_err(CliError::image(path))?;
    Ok(signer.is_some())
}

/// What a bake did, for its report.
#[derive(Clone, Copy)]
struct BakeReport<'a> {
    args: &'a Args,
    producer: &'a str,
    recording: &'a Recording,
    baked: &'a [Baked<'a>],
    missing: &'a [Missing<'a>],
    left_out: usize,
    signed: bool,
}

impl BakeReport<'_> {
    /// The bake's report as JSON (keys in alphabetical order); the lists as
    /// long as the record files are written one element at a time ([`Seq`]).
    fn print_json(&self) -> Result<(), CliError> {
        let BakeReport {
            args,
            producer,
            recording,
            baked,
            missing,
            left_out,
            signed,
        } = *self;
        #[derive(serde::Serialize)]
        struct BakeJson<'a, B, M> {
            baked: B,
            damage: Value,
            left_out_from_images: usize,
            missing: M,
            output: String,
            producer: &'a str,
            recorded: usize,
            records: u64,
            signed: bool,
        }
        print_json(&BakeJson {
            baked: Seq(|| {
                baked.iter().map(|b| {
                    json!({
                        "name": b.name,
                        "owner": b.owner.to_hex(),
                        "owner_label": b.owner_label,
                        "key": b.key.to_hex(),
                        "from": b.from.name(),
                    })
                })
            }),
            damage: damage_json(&recording.damage()),
            left_out_from_images: left_out,
            missing: Seq(|| {
                missing.iter().map(|m| {
                    json!({
                        "name": m.used.name,
                        "owner": m.used.owner.to_hex(),
                        "owner_label": m.used.owner_label,
                        "key": m.used.key.to_hex(),
                        "recorded_from": m.used.sources.keys().map(ToString::to_string).collect::<Vec<_>>(),
                        "damaged_in": m.damaged,
                    })
                })
            }),
            output: args.output.display().to_string(),
            producer,
            recorded: recording.len(),
            records: recording.records(),
            signed,
        })
    }

    /// The bake's report as text, untrusted text escaped.
    fn print_text(&self) -> Result<(), CliError> {
        let BakeReport {
            args,
            producer,
            recording,
            baked,
            missing,
            left_out,
            signed,
        } = *self;
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "baked {} of {} recorded entries into {} (producer {:?}, {})",
            baked.len(),
            recording.len(),
            escape::path(&args.output),
            escape::escape(producer),
            if signed {
                "signed with KILN_SIGNING_KEY"
            } else {
                "unsigned"
            },
        )?;
        if left_out > 0 {
            writeln!(
                out,
                "left out {left_out} entries that came from an image (--only-compiled)"
            )?;
        }
        if let Some(line) = damage_line(&recording.damage()) {
            writeln!(out, "{line}")?;
        }
        if missing.is_empty() {
            return Ok(());
        }
        writeln!(
            out,
            "\nnot found in the images, disk caches and remote cache given ({}):",
            missing.len()
        )?;
        // One row per missing entry: as many as a record file names, so made
        // one at a time.
        let rows = || {
            missing.iter().map(|m| {
                vec![
                    m.used.name.clone(),
                    m.used.owner_label.clone(),
                    short(&m.used.key),
                    sources(m.used),
                    m.damaged.join("; "),
                ]
            })
        };
        let header = ["NAME", "OWNER", "KEY", "RECORDED FROM", "REFUSED BY"];
        write_rows(&mut out, "  ", &header, rows)?;
        Ok(())
    }
}
