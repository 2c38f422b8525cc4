//! Process metrics read from `/proc` on each scrape, under the names of the Prometheus client
//! libraries' process collectors (Go's, which upstream's binaries export), so existing
//! dashboards keep working: `process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! `process_open_fds`, `process_start_time_seconds`.
//!
//! `/proc` is read with the `procfs` crate. A value that cannot be read (no `/proc`, another
//! operating system) is left out of the scrape and logged once at debug level; the other
//! metrics are still served.

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{counter::ConstCounter, gauge::ConstGauge},
    registry::Registry,
};
use std::sync::atomic::{AtomicBool, Ordering};

/// Reads this process's `/proc/self` entries when the registry is encoded.
#[derive(Debug, Default)]
pub struct ProcessCollector {
    /// Whether a read failure was logged already (one line, not one per scrape).
    logged: AtomicBool,
}

/// One reading of `/proc/self`; `None` where the value could not be read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessSample {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: Option<f64>,
    /// Resident set size, in bytes.
    pub resident_memory_bytes: Option<i64>,
    /// Open file descriptors.
    pub open_fds: Option<i64>,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
}

/// Registers [`ProcessCollector`] in `registry`: every binary's `/metrics` then has the four
/// `process_*` metrics.
pub fn register(registry: &mut Registry) {
    registry.register_collector(Box::new(ProcessCollector::default()));
}

// === impl ProcessCollector ===

impl ProcessCollector {
    /// Reads `/proc/self` now.
    pub fn sample(&self) -> ProcessSample {
        match read() {
            Ok(sample) => sample,
            Err(error) => {
                if !self.logged.swap(true, Ordering::Relaxed) {
                    tracing::debug!(%error, "cannot read process metrics from /proc");
                }
                ProcessSample::default()
            }
        }
    }
}

/// Reads the stat line, the fd directory and the boot time.
fn read() -> procfs::ProcResult<ProcessSample> {
    let process = procfs::process::Process::myself()?;
    let stat = process.stat()?;
    let ticks = procfs::ticks_per_second() as f64;
    let start_time_seconds = procfs::boot_time_secs()
        .ok()
        .map(|boot| boot as f64 + stat.starttime as f64 / ticks);
    Ok(ProcessSample {
        cpu_seconds: Some((stat.utime + stat.stime) as f64 / ticks),
        resident_memory_bytes: i64::try_from(stat.rss.saturating_mul(procfs::page_size())).ok(),
        open_fds: process.fd_count().ok().and_then(|n| i64::try_from(n).ok()),
        start_time_seconds,
    })
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let sample = self.sample();
        if let Some(cpu) = sample.cpu_seconds {
            let counter = ConstCounter::new(cpu);
            counter.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                counter.metric_type(),
            )?)?;
        }
        if let Some(rss) = sample.resident_memory_bytes {
            let gauge = ConstGauge::new(rss);
            gauge.encode(encoder.encode_descriptor(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                None,
                gauge.metric_type(),
            )?)?;
        }
        if let Some(fds) = sample.open_fds {
            let gauge = ConstGauge::new(fds);
            gauge.encode(encoder.encode_descriptor(
                "process_open_fds",
                "Number of open file descriptors.",
                None,
                gauge.metric_type(),
            )?)?;
        }
        if let Some(start) = sample.start_time_seconds {
            let gauge = ConstGauge::new(start);
            gauge.encode(encoder.encode_descriptor(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                None,
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    fn scrape() -> String {
        let mut registry = Registry::default();
        register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    fn value(text: &str, name: &str) -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"));
        line[name.len() + 1..].trim().parse().unwrap()
    }

    #[test]
    fn the_four_process_metrics_describe_this_process() {
        // Open two files so the descriptor count has something to count.
        let a = std::fs::File::open("/proc/self/stat").unwrap();
        let b = std::fs::File::open("/proc/self/status").unwrap();
        let text = scrape();

        let cpu = value(&text, "process_cpu_seconds_total");
        assert!(cpu > 0.0 && cpu < 3600.0, "cpu {cpu}");
        assert!(text.contains("# TYPE process_cpu_seconds counter"));

        // The kernel's own count: VmRSS in /proc/self/status, within what this test allocates
        // in between.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let vm_rss_kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        let rss = value(&text, "process_resident_memory_bytes");
        assert!(
            (rss - vm_rss_kib * 1024.0).abs() < 16.0 * 1024.0 * 1024.0,
            "rss {rss} vs VmRSS {vm_rss_kib} KiB"
        );

        let fds = value(&text, "process_open_fds");
        let listed = std::fs::read_dir("/proc/self/fd").unwrap().count() as f64;
        // The listing itself holds one descriptor; other test threads may open a few.
        assert!(
            fds >= 5.0 && (fds - listed).abs() <= 8.0,
            "fds {fds} vs {listed}"
        );
        drop((a, b));

        let start = value(&text, "process_start_time_seconds");
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            start <= now + 1.0 && start > now - 3600.0,
            "start {start}, now {now}"
        );
    }
}
