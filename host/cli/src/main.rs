//! The `shardgate` command line: each subcommand is a module of
//! [`commands`], over the library crates of `host/`.

mod commands;
mod logging;

use std::process::ExitCode;

use clap::Parser;

/// jemalloc instead of glibc's malloc: the operator allocates and frees many
/// small objects across tokio's worker threads, and measured side by side it
/// spends 12-27% less CPU with jemalloc (docs/performance.md, P4).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its start (its symbols carry the `_rjem_`
/// prefix): pages freed stay resident for 1 s instead of 10 s, then go
/// straight back to the system, purged by jemalloc's background thread even
/// while the operator is idle. Measured side by side at 100 clusters, the
/// peak RSS drops by ~7 MiB with no measurable CPU cost
/// (docs/performance.md, P4). `_RJEM_MALLOC_CONF` overrides it.
#[allow(unsafe_code)] // a symbol jemalloc reads; nothing else refers to it
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &[u8; 60] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

fn main() -> ExitCode {
    match commands::Cli::parse().command.run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
