//! What the benches (`host/cli/benches`) and the tests that print timings
//! share: how a bench was invoked (quick mode or a full run), the summary
//! statistics of a set of timings, and the line naming the machine the
//! figures come from.

use std::time::Duration;

/// A bench binary's command line: the flags `cargo bench` and
/// `cargo test --benches` pass (`--bench`, `--list`) and the bench's own
/// (`--quick`).
#[derive(Debug, Clone)]
pub struct Invocation {
    args: Vec<String>,
}

impl Invocation {
    /// This process's arguments.
    pub fn from_env() -> Invocation {
        Invocation {
            args: std::env::args().skip(1).collect(),
        }
    }

    /// Whether `flag` was given.
    pub fn has(&self, flag: &str) -> bool {
        self.args.iter().any(|a| a == flag)
    }

    /// Quick mode: `SHARDGATE_BENCH_QUICK` set (not empty, not `0`),
    /// `--quick`, or no `--bench` (`cargo test --benches` runs a bench binary
    /// without it). A quick run checks correctness only, never timings.
    pub fn quick(&self) -> bool {
        std::env::var("SHARDGATE_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
            || self.has("--quick")
            || !self.has("--bench")
    }
}

/// The median of `samples` (the upper one of an even count); panics when
/// there are none.
pub fn median(samples: &[Duration]) -> Duration {
    let mut v = samples.to_vec();
    v.sort_unstable();
    v[v.len() / 2]
}

/// The largest of `samples` (zero when there are none).
pub fn max(samples: &[Duration]) -> Duration {
    samples.iter().copied().max().unwrap_or_default()
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The build profile this code was compiled in: `debug` or `release`
/// (a bench's dependencies are built in the bench's profile).
pub fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// How many CPUs this process may use (0 when unknown).
pub fn nproc() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

/// `machine: nproc N, <CPU model>; build profile: P`, printed under a
/// bench's figures.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| {
                l.strip_prefix("model name")?
                    .split_once(':')
                    .map(|(_, m)| m.trim().to_string())
            })
        })
        .unwrap_or_else(|| "unknown cpu".into());
    format!(
        "machine: nproc {}, {cpu}; build profile: {}",
        nproc(),
        build_profile()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_statistics() {
        let ms = |n: u64| Duration::from_millis(n);
        assert_eq!(median(&[ms(3), ms(1), ms(2)]), ms(2));
        assert_eq!(median(&[ms(4), ms(1), ms(3), ms(2)]), ms(3));
        assert_eq!(max(&[ms(3), ms(7), ms(2)]), ms(7));
        assert_eq!(max(&[]), Duration::ZERO);
        assert_eq!(super::ms(ms(1500)), 1500.0);
    }

    #[test]
    fn invocation_flags() {
        let inv = |args: &[&str]| Invocation {
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        assert!(inv(&["--bench", "--list"]).has("--list"));
        assert!(!inv(&["--bench"]).has("--list"));
        // `cargo test --benches` passes no `--bench`.
        assert!(inv(&[]).quick());
        assert!(inv(&["--bench", "--quick"]).quick());
    }
}
