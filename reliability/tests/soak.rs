//! The soak test, briefly: `kiln-soak` for a few seconds (3 processes × 4
//! threads, memory cap 4 MiB, disk cap 8 MiB, through `global()`), every
//! answer checked, and every process's resident memory within
//! `soak::rss_bound`. The recorded minutes-long runs are in RELIABILITY.md.

use std::process::Command;

use kiln_reliability::soak::{Figures, MAX_PAYLOAD, MIN_PAYLOAD};

#[test]
fn a_few_seconds_of_soak_serve_no_error_and_no_wrong_byte() {
    let output = Command::new(env!("CARGO_BIN_EXE_kiln-soak"))
        .args(["--seconds", "3", "--processes", "3", "--threads", "4"])
        .args(["--memory-max", "4M", "--disk-max", "8M"])
        .output()
        .expect("kiln-soak runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .rev()
        .find_map(|line| line.strip_prefix("RESULT "))
        .expect("a RESULT line");
    let figures = Figures::parse(line).expect("figures");

    assert_eq!(figures.get("errors"), 0, "{line}");
    assert_eq!(figures.get("wrong"), 0, "{line}");
    assert_eq!(figures.get("disk_segments_bad"), 0, "{line}");
    // Every way of answering was exercised.
    for answered in ["memory", "image", "disk", "compiled"] {
        assert!(
            figures.get(answered) > 0,
            "no answer from {answered}: {line}"
        );
    }
    assert_eq!(
        figures.get("requests"),
        ["memory", "image", "disk", "compiled"]
            .iter()
            .map(|a| figures.get(a))
            .sum::<u64>()
    );
    // The hot set does not fit: entries were evicted, and the cache never
    // held more than the cap plus the entry just recorded.
    assert!(figures.get("evictions") > 0, "{line}");
    let cap = figures.get("memory_max");
    assert_eq!(cap, 4 << 20);
    assert!(
        figures.get("peak_bytes_held") <= cap + MAX_PAYLOAD as u64,
        "{line}"
    );
    // The disk cache stays near its cap (a compaction skipped while another
    // process holds the lock leaves it over until the next store).
    assert!(
        figures.get("disk_bytes") <= 2 * figures.get("disk_max"),
        "{line}"
    );
    // Memory follows what the cache holds, not what it has seen: entries
    // allocated (resident, queued for the disk, held by a hit) stay within
    // what the caps allow, however many new specializations were asked
    // for, and every RSS sample was within its bound.
    assert!(figures.get("new") > 0, "{line}");
    let queued = cap; // the store queue's byte bound: the cap, under 64 MiB
    let most = (cap + queued) / MIN_PAYLOAD as u64 + 2 + 12;
    assert!(
        figures.get("entries_alive_max") <= most,
        "at most {most} entries allocated: {line}"
    );
    assert!(figures.get("rss_bound_permille_max") > 0, "sampled: {line}");
    assert_eq!(figures.get("rss_over_bound"), 0, "{line}");
}
