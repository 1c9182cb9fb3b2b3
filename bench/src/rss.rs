//! Resident memory of this process (Linux: `/proc/self/status`).

use std::path::Path;

use crate::error::BenchError;

/// The process's resident set size (`VmRSS`), in KiB.
pub fn resident_kib() -> Result<u64, BenchError> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|err| BenchError::Rss(err.to_string()))?;
    parse_vm_rss(&status).ok_or_else(|| BenchError::Rss("no VmRSS line".to_owned()))
}

/// Drops `file`'s clean pages from the page cache (`POSIX_FADV_DONTNEED`), so
/// that the next reader faults them in from the disk.
pub fn evict_from_page_cache(file: &Path) -> Result<(), BenchError> {
    use std::os::fd::AsRawFd;
    let opened = std::fs::File::open(file).map_err(BenchError::io(file))?;
    opened.sync_all().map_err(BenchError::io(file))?;
    // SAFETY: `posix_fadvise` only reads its integer arguments; the descriptor
    // is valid, owned by `opened`, for the whole call. The advice changes no
    // file contents.
    let status =
        unsafe { libc::posix_fadvise(opened.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if status != 0 {
        return Err(BenchError::io(file)(std::io::Error::from_raw_os_error(
            status,
        )));
    }
    Ok(())
}

/// Resident KiB of this process's mappings of `file` (`/proc/self/smaps`).
pub fn mapped_kib(file: &Path) -> Result<u64, BenchError> {
    let file = file
        .canonicalize()
        .map_err(|err| BenchError::Rss(format!("{}: {err}", file.display())))?;
    let smaps = std::fs::read_to_string("/proc/self/smaps")
        .map_err(|err| BenchError::Rss(err.to_string()))?;
    Ok(parse_mapped_kib(&smaps, &file.to_string_lossy()))
}

/// Sums the `Rss:` of the mappings of `path` in a `/proc/<pid>/smaps` text.
fn parse_mapped_kib(smaps: &str, path: &str) -> u64 {
    let mut in_mapping = false;
    let mut total = 0;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            // A mapping header: range, perms, offset, dev, inode, path.
            in_mapping = line.split_whitespace().nth(5) == Some(path);
        } else if in_mapping && first == "Rss:" {
            total += fields
                .next()
                .and_then(|kib| kib.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    total
}

/// The `VmRSS:` value of a `/proc/<pid>/status` text, in KiB.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let mut fields = line.split_whitespace().skip(1);
    let value = fields.next()?.parse().ok()?;
    (fields.next() == Some("kB")).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_vm_rss_line() {
        let status = "Name:\tx\nVmPeak:\t  9000 kB\nVmRSS:\t    4242 kB\nThreads:\t1\n";
        assert_eq!(parse_vm_rss(status), Some(4242));
        assert_eq!(parse_vm_rss("VmRSS:\t12 MB\n"), None);
        assert_eq!(parse_vm_rss("Name: x\n"), None);
    }

    #[test]
    fn sums_the_rss_of_one_files_mappings() {
        let smaps = "\
7f00-7f10 r--p 00000000 fe:00 12 /tmp/a.kimg
Size:                 64 kB
Rss:                  16 kB
7f20-7f30 r--p 00000000 fe:00 13 /tmp/b.kimg
Rss:                  32 kB
7f40-7f50 r--p 00010000 fe:00 12 /tmp/a.kimg
Rss:                   8 kB
";
        assert_eq!(parse_mapped_kib(smaps, "/tmp/a.kimg"), 24);
        assert_eq!(parse_mapped_kib(smaps, "/tmp/c.kimg"), 0);
    }

    #[test]
    fn this_process_is_resident() {
        assert!(resident_kib().unwrap() > 0);
    }
}
