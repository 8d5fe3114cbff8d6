//! Scratch directories for tests and benches: a fresh directory under the
//! system temp directory that goes away when its test is done, and stays
//! (its path printed) when the test fails, or always with
//! `SHARDGATE_KEEP_SCRATCH` set, so what the test left in it (server logs,
//! pod files, module caches) can be read.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Tells apart the directories one process makes within the clock's
/// resolution.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A unique directory `<temp>/shardgate-<name>-<pid>-<nanos>-<n>`, removed
/// on drop, or kept with its path printed when dropped while the thread
/// panics (a failing test).
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// A new, empty scratch directory, created now.
    pub fn new(name: &str) -> ScratchDir {
        let dir = ScratchDir::unmade(name);
        std::fs::create_dir_all(&dir.0)
            .unwrap_or_else(|e| panic!("creating {}: {e}", dir.0.display()));
        dir
    }

    /// A fresh scratch path that is not created: for code that makes the
    /// directory itself (the sandbox, its kubelet, a valkey-server's
    /// `--dir`). Removed on drop all the same.
    pub fn unmade(name: &str) -> ScratchDir {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        ScratchDir(std::env::temp_dir().join(format!(
            "shardgate-{name}-{}-{nanos}-{n}",
            std::process::id()
        )))
    }

    /// Where the directory is.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `path` inside the directory.
    pub fn join(&self, path: impl AsRef<Path>) -> PathBuf {
        self.0.join(path)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("SHARDGATE_KEEP_SCRATCH").is_some() {
            eprintln!("scratch directory kept: {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_fresh_and_removed_on_drop() {
        let (a, b) = (
            ScratchDir::new("scratch-test"),
            ScratchDir::new("scratch-test"),
        );
        assert_ne!(a.path(), b.path());
        assert!(a.path().is_dir() && b.path().is_dir());
        std::fs::write(a.join("file"), "x").unwrap();
        let path = a.path().to_path_buf();
        drop(a);
        assert!(!path.exists());

        let unmade = ScratchDir::unmade("scratch-test");
        assert!(!unmade.path().exists());
        std::fs::create_dir_all(unmade.join("inner")).unwrap();
        let path = unmade.path().to_path_buf();
        drop(unmade);
        assert!(!path.exists());
    }

    #[test]
    fn is_kept_when_the_thread_panics() {
        let dir = ScratchDir::new("scratch-test-kept");
        let path = dir.path().to_path_buf();
        let panicked = std::thread::spawn(move || {
            let _dir = dir;
            panic!("a failing test");
        })
        .join();
        assert!(panicked.is_err());
        assert!(path.is_dir(), "kept after a panic");
        std::fs::remove_dir_all(&path).unwrap();
    }
}
