//! `shardgate check-module`: the checks a module passes before it may serve,
//! run offline.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use shardgate_wasm::swap::{Candidate, Golden};
use shardgate_wasm::{Engine, Limits};

#[derive(clap::Args)]
pub struct CheckModuleArgs {
    /// The reconcile component (.wasm).
    module: PathBuf,
    /// The SHA-256 (hex) the module must have.
    #[arg(long, value_name = "HEX")]
    sha256: Option<String>,
}

impl CheckModuleArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let bytes = std::fs::read(&self.module)
            .with_context(|| format!("reading {}", self.module.display()))?;
        let engine = Engine::new(Limits::default())?;
        let golden = Golden::builtin();
        let candidate = Candidate {
            bytes: &bytes,
            sha256: self.sha256.as_deref(),
        };
        match candidate.check(&engine, &golden, None) {
            Ok(accepted) => {
                let t = accepted.timings;
                println!("{}: accepted", self.module.display());
                println!("sha256: {}", accepted.digest);
                println!(
                    "compile: {:.1} ms, self-check: {:.1} ms ({} golden inputs + 1 invalid spec)",
                    t.compile.as_secs_f64() * 1e3,
                    t.self_check.as_secs_f64() * 1e3,
                    golden.cases.len()
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(r) => {
                println!("{}: rejected ({}): {r}", self.module.display(), r.kind());
                Ok(ExitCode::FAILURE)
            }
        }
    }
}
