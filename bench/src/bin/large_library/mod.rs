//! What `kiln-bench-library` and `kiln-bench-embed` share: both time
//! `kiln-large-library` through `kiln::global()` in fresh processes, check
//! every kernel served the same way, and report the same way. Included by
//! path (`#[path = "large_library/mod.rs"]`): the bench binaries have no
//! library of their own to share it through.

use std::time::Duration;

use kiln::ArtifactKind;
use kiln::cache::Source;
use kiln::cuda::Served;
use kiln::cuda::select::Selection;
use kiln_large_library::Program;

/// The device arch asked for: Hopper (H100, H200), one of the shipped targets.
pub const ARCH: &str = "sm_90";

/// `d` in nanoseconds, saturating.
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// That `served` is the program's exact-arch CUBIN from the embedded image,
/// listing the kernel.
pub fn check(served: &Served<'_>, (program, kernel): &(Program, String)) -> Result<(), String> {
    let hit = served.hit();
    let listed = hit
        .artifacts()
        .iter()
        .any(|a| a.kind == ArtifactKind::Cubin && a.entry_points.contains(&kernel.as_str()));
    let expected = served.selection() == Selection::ExactCubin
        && served.target().to_string() == ARCH
        && hit.source() == Source::Image
        && hit.name() == program.name()
        && listed;
    if expected {
        Ok(())
    } else {
        Err(format!("{kernel} of {program:?} served as {served:?}"))
    }
}

/// The median of `values` (the mean of the middle two for an even count).
pub fn median(values: &[u64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2] as f64,
        _ => (sorted[n / 2 - 1] as f64 + sorted[n / 2] as f64) / 2.0,
    }
}

/// The machine and its load: CPUs, the CPU model, `/proc/loadavg`.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    format!(
        "machine: {} CPUs, {cpu}; load average {}",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    )
}
