//! Builds the test-only `misbehave` component for the sandbox tests.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let crate_dir = manifest_dir.join("modules/misbehave");
    for watched in ["src", "wit", "Cargo.toml", "Cargo.lock"] {
        println!(
            "cargo:rerun-if-changed={}",
            crate_dir.join(watched).display()
        );
    }
    println!(
        "cargo:rerun-if-changed={}",
        manifest_dir.join("../wit").display()
    );
    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|d| {
            if d.is_absolute() {
                d
            } else {
                manifest_dir.join("..").join(d)
            }
        })
        .unwrap_or_else(|| manifest_dir.join("../target"))
        .join("guest-build");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--locked")
        .arg("--manifest-path")
        .arg(crate_dir.join("Cargo.toml"))
        .args(["--target", "wasm32-wasip2", "--release", "--target-dir"])
        .arg(&target_dir);
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd
        .status()
        .expect("running cargo to build the misbehave module");
    assert!(
        status.success(),
        "building tests/modules/misbehave failed (see above)"
    );
    println!(
        "cargo:rustc-env=MISBEHAVE_WASM={}",
        target_dir
            .join("wasm32-wasip2/release/misbehave.wasm")
            .display()
    );
}
