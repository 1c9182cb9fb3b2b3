//! `kiln merge A B... -o OUT`: one image holding every entry of the inputs;
//! when several inputs hold the same (owner, key), the first one wins. The
//! output is deterministic (sorted, no timestamps) and written atomically.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::PathBuf;

use kiln_image::{Digest, Image, ImageMeta, ImageWriter, Verification};

use crate::escape;
use crate::{CliError, Outcome};

/// Arguments of `kiln merge`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The input images, in priority order.
    #[arg(required = true)]
    images: Vec<PathBuf>,
    /// The merged image to write.
    #[arg(short, long)]
    output: PathBuf,
}

pub(crate) fn run(args: Args) -> Result<Outcome, CliError> {
    let mut seen: HashSet<(Digest, Digest)> = HashSet::new();
    let mut owner_labels: HashMap<Digest, String> = HashMap::new();
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    let mut entries = Vec::new();
    let mut duplicates = 0usize;
    for path in &args.images {
        let image = Image::open(path, Verification::Full).map_err(CliError::image(path))?;
        for (key, value) in image.meta().labels {
            labels.entry(key).or_insert(value);
        }
        for entry in image.entries() {
            let entry = entry.map_err(CliError::image(path))?;
            if !seen.insert((entry.owner(), entry.key())) {
                duplicates += 1;
                continue;
            }
            let mut data = entry.to_data().map_err(CliError::image(path))?;
            // One label per owner: the first input's.
            data.owner_label = owner_labels
                .entry(data.owner)
                .or_insert(data.owner_label)
                .clone();
            entries.push(data);
        }
    }
    let mut meta = ImageMeta::new("kiln merge", env!("CARGO_PKG_VERSION"));
    meta.labels = labels;
    let mut writer = ImageWriter::new(meta);
    let count = entries.len();
    for entry in entries {
        writer.push(entry);
    }
    writer
        .write_atomic(&args.output)
        .map_err(CliError::image(&args.output))?;
    writeln!(
        std::io::stdout().lock(),
        "merged {count} entries from {} images into {} ({duplicates} duplicates skipped)",
        args.images.len(),
        escape::path(&args.output)
    )?;
    Ok(Outcome::Clean)
}
