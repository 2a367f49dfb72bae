//! The standard `process_*` metrics of the container's own process, read
//! from `/proc/self` at each scrape (Linux only: elsewhere they are absent):
//! CPU seconds, resident and virtual memory, open and maximum file
//! descriptors, and the start time. prometheus-client has no process
//! collector, so this small one reads the kernel's files itself; a file it
//! cannot read leaves its metric out of that scrape.

use prometheus_client::registry::Registry;

/// Registers the process collector (nothing off Linux).
pub fn register(registry: &mut Registry) {
    #[cfg(target_os = "linux")]
    registry.register_collector(Box::new(linux::ProcessCollector));
    #[cfg(not(target_os = "linux"))]
    let _ = registry;
}

/// What `/proc/self/stat` says of the process (the fields the metrics read).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stat {
    /// User plus system CPU time, in clock ticks.
    pub cpu_ticks: u64,
    /// When the process started, in clock ticks after boot.
    pub start_ticks: u64,
    /// Virtual memory size, in bytes.
    pub virtual_bytes: u64,
    /// Resident set size, in pages.
    pub resident_pages: u64,
}

/// The kernel's clock ticks per second for `/proc` times (`USER_HZ`): 100 on
/// every architecture Linux exports to user space, whatever its internal
/// tick rate.
pub const USER_HZ: f64 = 100.0;

/// Reads `/proc/self/stat`. The command name (field 2) is in parentheses
/// and may hold spaces or parentheses itself, so the fields are counted
/// from the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    // Fields from 3 (state) on; utime is field 14, stime 15, starttime 22,
    // vsize 23, rss 24.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(Stat {
        cpu_ticks: field(14)?.checked_add(field(15)?)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
        resident_pages: field(24)?,
    })
}

/// The boot time in seconds since the epoch, from `/proc/stat`'s `btime`.
pub fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of open files, from `/proc/self/limits`.
pub fn parse_max_fds(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(target_os = "linux")]
mod linux {
    use super::{USER_HZ, parse_boot_time, parse_max_fds, parse_stat};
    use prometheus_client::collector::Collector;
    use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::gauge::ConstGauge;

    /// Reads `/proc/self` at each scrape.
    #[derive(Debug)]
    pub struct ProcessCollector;

    fn read(path: &str) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }

    /// The resident size: `VmRSS` of `/proc/self/status` (exact, in KiB),
    /// else the page count of `stat` times 4 KiB (the page size of every
    /// architecture the image is built for).
    fn resident_bytes(pages: u64) -> u64 {
        read("/proc/self/status")
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            })
            .map_or(pages.saturating_mul(4096), |kib| kib.saturating_mul(1024))
    }

    fn gauge(
        encoder: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        value: f64,
    ) -> Result<(), std::fmt::Error> {
        let metric = ConstGauge::new(value);
        metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
    }

    impl Collector for ProcessCollector {
        fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            let stat = read("/proc/self/stat").and_then(|s| parse_stat(&s));
            if let Some(stat) = stat {
                let cpu = ConstCounter::new(stat.cpu_ticks as f64 / USER_HZ);
                cpu.encode(encoder.encode_descriptor(
                    "process_cpu_seconds",
                    "Total user and system CPU time spent in seconds",
                    None,
                    cpu.metric_type(),
                )?)?;
                gauge(
                    &mut encoder,
                    "process_resident_memory_bytes",
                    "Resident memory size in bytes",
                    resident_bytes(stat.resident_pages) as f64,
                )?;
                gauge(
                    &mut encoder,
                    "process_virtual_memory_bytes",
                    "Virtual memory size in bytes",
                    stat.virtual_bytes as f64,
                )?;
                if let Some(boot) = read("/proc/stat").and_then(|s| parse_boot_time(&s)) {
                    gauge(
                        &mut encoder,
                        "process_start_time_seconds",
                        "Start time of the process since unix epoch in seconds",
                        boot as f64 + stat.start_ticks as f64 / USER_HZ,
                    )?;
                }
            }
            if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
                gauge(
                    &mut encoder,
                    "process_open_fds",
                    "Number of open file descriptors",
                    fds.count() as f64,
                )?;
            }
            if let Some(max) = read("/proc/self/limits").and_then(|s| parse_max_fds(&s)) {
                gauge(
                    &mut encoder,
                    "process_max_fds",
                    "Maximum number of open file descriptors",
                    max as f64,
                )?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // A command name with a space and a parenthesis of its own.
        let text = "4242 (tcab (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 \
                    150 25 0 0 20 0 9 0 123456 52000000 3000 18446744073709551615 \
                    1 1 0 0 0 0 0 4096 17922 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            parse_stat(text),
            Some(Stat {
                cpu_ticks: 175,
                start_ticks: 123456,
                virtual_bytes: 52_000_000,
                resident_pages: 3000,
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn boot_time_and_fd_limit_are_read() {
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1764600000\nprocesses 9\n"),
            Some(1_764_600_000)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1048576              1048576              files     \n";
        assert_eq!(parse_max_fds(limits), Some(1_048_576));
        assert_eq!(
            parse_max_fds("Max open files unlimited unlimited files"),
            None
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_exports_its_process_metrics() {
        let mut registry = Registry::default();
        register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
            .expect("encodes");
        for name in [
            "# TYPE process_cpu_seconds_total counter",
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_virtual_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
        ] {
            assert!(text.contains(name), "{name} missing in:\n{text}");
        }
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("{name} in {text}"))
        };
        assert!(value("process_resident_memory_bytes ") > 1_000_000.0);
        assert!(value("process_open_fds ") >= 3.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch")
            .as_secs_f64();
        let started = value("process_start_time_seconds ");
        assert!(
            started <= now + 1.0 && started > now - 3600.0,
            "{started} vs {now}"
        );
    }
}
