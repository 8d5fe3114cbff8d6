//! Builds the guest component (`guest/`, for `wasm32-wasip2`) so the host can
//! embed it, with no manual step.
//!
//! Set `SHARDGATE_GUEST_WASM=/path/to/guest.wasm` to embed a prebuilt
//! component instead.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    reconcile_version();
    println!("cargo:rerun-if-env-changed=SHARDGATE_GUEST_WASM");
    if let Ok(prebuilt) = env::var("SHARDGATE_GUEST_WASM") {
        println!("cargo:rerun-if-changed={prebuilt}");
        println!("cargo:rustc-env=SHARDGATE_GUEST_WASM={prebuilt}");
        return;
    }
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let workspace = manifest_dir
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    for watched in [
        "guest/src",
        "guest/Cargo.toml",
        "wit",
        "Cargo.toml",
        "Cargo.lock",
    ] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|d| {
            if d.is_absolute() {
                d
            } else {
                workspace.join(d)
            }
        })
        .unwrap_or_else(|| workspace.join("target"))
        .join("guest-build");
    let wasm = build_guest(&workspace, &target_dir);
    println!("cargo:rustc-env=SHARDGATE_GUEST_WASM={}", wasm.display());
}

/// Sets `SHARDGATE_RECONCILE_VERSION` to the version of the
/// `shardgate:reconcile` package in `wit/reconcile.wit`, so the interface
/// the host looks for is the one the contract declares.
fn reconcile_version() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let wit = manifest_dir.join("../../wit/reconcile.wit");
    println!("cargo:rerun-if-changed={}", wit.display());
    let text = std::fs::read_to_string(&wit).expect("reading wit/reconcile.wit");
    let version = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("package shardgate:reconcile@"))
        .and_then(|rest| rest.strip_suffix(';'))
        .expect("wit/reconcile.wit declares `package shardgate:reconcile@VERSION;`");
    println!("cargo:rustc-env=SHARDGATE_RECONCILE_VERSION={version}");
}

fn build_guest(workspace: &Path, target_dir: &Path) -> PathBuf {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace)
        .args([
            "build",
            "--locked",
            "-p",
            "shardgate-guest",
            "--target",
            "wasm32-wasip2",
        ])
        .args(["--profile", "guest", "--target-dir"])
        .arg(target_dir);
    // The outer build's settings are for the host target, not the guest's.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd
        .status()
        .expect("running cargo to build the guest component");
    if !status.success() {
        panic!(
            "building the guest component failed (see above). If the target is missing, run \
             `rustup target add wasm32-wasip2`."
        );
    }
    target_dir.join("wasm32-wasip2/guest/shardgate_guest.wasm")
}
