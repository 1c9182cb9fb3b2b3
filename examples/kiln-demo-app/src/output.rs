//! What the application prints: a table for people, or one JSON object per
//! line (`--json`) for tests and scripts.

use std::time::Duration;

use kiln::cache::{ImageOutcome, InitReport};
use kiln::cuda::{
    Arch, Device,
    library::{KernelOutcome, SelectionStats},
    select::Selection,
    toolchain::BuildRecord,
};
use serde_json::json;

/// How one kernel was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Served from a merged image: no compile.
    Image,
    /// Already in memory (asked for before in this process).
    Memory,
    /// From an extra tier (a disk cache).
    Tier,
    /// Compiled now with NVRTC.
    Compiled,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Image => "image",
            Outcome::Memory => "memory",
            Outcome::Tier => "tier",
            Outcome::Compiled => "compiled",
        }
    }
}

/// One kernel served.
pub struct Kernel<'a> {
    /// The library it comes from.
    pub library: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Where it came from.
    pub outcome: Outcome,
    /// Which code it is.
    pub selection: Selection,
    /// The arch the code was compiled for.
    pub target: Arch,
    /// The length and BLAKE3 of the code served (the artifact a loader
    /// would load), when it could be read.
    pub code: Option<(usize, kiln::image::Digest)>,
    /// The NVRTC release that compiled it.
    pub nvrtc: Option<String>,
}

/// The counts of the summary line.
pub struct Summary {
    /// Kernels asked for.
    pub kernels: usize,
    /// Served from merged images.
    pub from_image: usize,
    /// Served from an extra tier (the disk cache).
    pub from_tier: usize,
    /// Compiled now.
    pub compiled: usize,
    /// NVRTC compiles the global cache ran (`Stats::compiles`).
    pub nvrtc_compiles: u64,
    /// Hits the global cache's extra tiers answered (`Stats::hits_tier`).
    pub hits_tier: u64,
    /// How the kernels were served (every kernel library of the process).
    pub selections: SelectionStats,
}

/// Prints in the chosen format.
pub struct Output {
    pub json: bool,
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

impl Output {
    pub fn init(&self, report: &InitReport, elapsed: Duration) {
        if self.json {
            for image in report.images() {
                let line = match &image.outcome {
                    ImageOutcome::Merged { entries, merge } => json!({
                        "event": "image",
                        "source": image.source.to_string(),
                        "entries": entries,
                        "inserted": merge.inserted,
                        "duplicate": merge.duplicate,
                        "stale": merge.stale,
                        "foreign_owner": merge.foreign_owner,
                        "skipped": null,
                    }),
                    ImageOutcome::Skipped(err) => json!({
                        "event": "image",
                        "source": image.source.to_string(),
                        "skipped": err.to_string(),
                    }),
                    // An outcome newer than this program.
                    other => json!({
                        "event": "image",
                        "source": image.source.to_string(),
                        "outcome": format!("{other:?}"),
                    }),
                };
                println!("{line}");
            }
            println!(
                "{}",
                json!({"event": "init", "disabled": report.disabled, "micros": micros(elapsed)})
            );
        } else {
            println!(
                "init: {} images merged in {elapsed:.1?}",
                report.merged().count()
            );
            print!("{report}");
        }
    }

    /// What a kernel library's build recorded: the compiler, the targets.
    pub fn library(&self, name: &str, record: Result<&BuildRecord, kiln::cuda::ToolchainError>) {
        let (text, nvrtc, targets, ptx) = match &record {
            Ok(record) => (
                record.to_string(),
                record.nvrtc().map(|v| v.release.clone()),
                record.cubin_targets().iter().map(Arch::to_string).collect(),
                record.ptx_target().map(|a| a.to_string()),
            ),
            Err(error) => (error.to_string(), None, Vec::new(), None),
        };
        let toolchains: Vec<serde_json::Value> = record
            .as_ref()
            .map(|record| {
                record
                    .toolchains()
                    .iter()
                    .map(|t| {
                        json!({
                            "nvrtc": t.nvrtc().release,
                            "cubin_targets": t.cubin_targets().iter().map(Arch::to_string).collect::<Vec<_>>(),
                            "ptx_targets": t.ptx_targets().iter().map(Arch::to_string).collect::<Vec<_>>(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        if self.json {
            println!(
                "{}",
                json!({
                    "event": "library",
                    "name": name,
                    "record": text,
                    "nvrtc": nvrtc,
                    "cubin_targets": targets,
                    "ptx_target": ptx,
                    "toolchains": toolchains,
                })
            );
        } else {
            let shipped = match &record {
                Ok(record) if nvrtc.is_some() => record
                    .toolchains()
                    .iter()
                    .map(|t| {
                        let list = |archs: &[Arch]| {
                            archs
                                .iter()
                                .map(Arch::to_string)
                                .collect::<Vec<_>>()
                                .join(", ")
                        };
                        format!(
                            "CUBINs for {} and PTX for {} by NVRTC {}",
                            list(t.cubin_targets()),
                            list(t.ptx_targets()),
                            t.nvrtc()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
                _ => format!("nothing shipped ({text})"),
            };
            println!("{name}: {shipped}");
        }
    }

    pub fn device(&self, device: &Device, gpu: bool) {
        let arch = device.arch().to_string();
        if self.json {
            println!(
                "{}",
                json!({
                    "event": "device",
                    "arch": arch,
                    "driver": device.driver(),
                    "gpu": gpu,
                })
            );
        } else {
            let what = if gpu {
                "GPU 0"
            } else {
                "asked for (no GPU used)"
            };
            let driver = device
                .driver()
                .map(|d| {
                    format!(
                        ", driver for CUDA {}",
                        kiln::cuda::select::cuda_version_text(d)
                    )
                })
                .unwrap_or_default();
            println!("device: {arch}{driver}, {what}");
            println!(
                "{:<28} {:<22} {:<9} {:<17} {:<7} {:<8} {:>12}",
                "kernel", "library", "from", "code", "arch", "nvrtc", "time"
            );
        }
    }

    pub fn kernel(&self, kernel: Kernel<'_>, elapsed: Duration) {
        let Kernel {
            library,
            name,
            outcome,
            selection,
            target,
            code,
            nvrtc,
        } = kernel;
        if self.json {
            println!(
                "{}",
                json!({
                    "event": "kernel",
                    "library": library,
                    "name": name,
                    "outcome": outcome.as_str(),
                    "selection": selection.as_str(),
                    "target": target.to_string(),
                    "code_bytes": code.map(|(len, _)| len),
                    "code_blake3": code.map(|(_, digest)| digest.to_string()),
                    "nvrtc": nvrtc,
                    "micros": micros(elapsed),
                })
            );
        } else {
            println!(
                "{name:<28} {library:<22} {:<9} {:<17} {:<7} {:<8} {:>12}",
                outcome.as_str(),
                selection.as_str(),
                target.to_string(),
                nvrtc.unwrap_or_default(),
                format!("{elapsed:.1?}")
            );
        }
    }

    /// One kernel as its library would serve it (`--list`).
    pub fn listed(
        &self,
        library: &str,
        program: &str,
        kernel: Option<&str>,
        outcome: &KernelOutcome,
    ) {
        if self.json {
            let mut line = json!({
                "event": "listed",
                "library": library,
                "program": program,
                "kernel": kernel,
                "outcome": outcome.to_string(),
                "missing": outcome.is_missing(),
            });
            if let Some((selection, artifact)) = outcome.served() {
                line["selection"] = json!(selection.as_str());
                line["target"] = json!(artifact.target.to_string());
                line["nvrtc"] = json!(artifact.nvrtc.as_ref().map(|v| v.release.clone()));
                line["driver_needed"] = json!(artifact.driver_needed());
            }
            println!("{line}");
        } else {
            println!("{program:<28} {library:<22} {outcome}");
        }
    }

    pub fn failure(&self, library: &str, name: &str, error: &kiln::cuda::ServeError) {
        if self.json {
            println!(
                "{}",
                json!({"event": "kernel", "library": library, "name": name, "outcome": "failed", "error": error.to_string()})
            );
        } else {
            println!("{name:<28} {library:<22} FAILED: {error}");
        }
    }

    pub fn summary(&self, counts: Summary, total: Duration) {
        let Summary {
            kernels,
            from_image,
            from_tier,
            compiled,
            nvrtc_compiles,
            hits_tier,
            selections,
        } = counts;
        if self.json {
            println!(
                "{}",
                json!({
                    "event": "summary",
                    "kernels": kernels,
                    "from_image": from_image,
                    "from_tier": from_tier,
                    "compiled": compiled,
                    "nvrtc_compiles": nvrtc_compiles,
                    "hits_tier": hits_tier,
                    "exact_cubin": selections.exact_cubin,
                    "compatible_cubin": selections.compatible_cubin,
                    "ptx": selections.ptx,
                    "compiled_here": selections.compiled,
                    "micros": micros(total),
                })
            );
        } else {
            println!(
                "total: {kernels} kernels in {total:.1?}: {from_image} from images, {from_tier} from \
                 the disk cache, {compiled} compiled (NVRTC compiles: {nvrtc_compiles})"
            );
            println!(
                "code: {} exact CUBIN, {} compatible CUBIN, {} PTX, {} compiled here",
                selections.exact_cubin,
                selections.compatible_cubin,
                selections.ptx,
                selections.compiled
            );
        }
    }

    pub fn cold(&self, kernels: usize, cold: Duration, warm: Duration) {
        let ratio = cold.as_secs_f64() / warm.as_secs_f64().max(1e-9);
        if self.json {
            println!(
                "{}",
                json!({"event": "cold", "kernels": kernels, "micros": micros(cold), "ratio": ratio})
            );
        } else {
            println!(
                "cold: the same {kernels} kernels compiled from scratch in {cold:.1?}: {ratio:.0}x the time above"
            );
        }
    }

    pub fn gpu(&self, name: &str, result: &Result<String, String>) {
        if self.json {
            let line = match result {
                Ok(artifact) => {
                    json!({"event": "gpu", "name": name, "ok": true, "artifact": artifact})
                }
                Err(error) => json!({"event": "gpu", "name": name, "ok": false, "error": error}),
            };
            println!("{line}");
        } else {
            match result {
                Ok(artifact) => {
                    println!("gpu: {name}: matches the CPU reference (ran the {artifact})")
                }
                Err(error) => println!("gpu: {name}: FAILED: {error}"),
            }
        }
    }
}
