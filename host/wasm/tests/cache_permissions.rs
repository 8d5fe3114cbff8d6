//! The module cache is private to its owner whatever the umask: a new
//! directory is `0700`, an existing `0755` one is tightened to `0700`, and
//! entries are `0600`. The umask is process-wide, so this binary holds this
//! one test alone.
#![cfg(unix)]

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::Mode;
use rustix::process::umask;
use shardgate_wasm::{EMBEDDED_GUEST, Engine, Limits, Loaded, Precompiled};

/// Sets the umask, and restores the previous one when dropped.
struct Umask(Mode);

impl Umask {
    fn set(mask: u32) -> Self {
        Umask(umask(Mode::from_raw_mode(mask)))
    }
}

impl Drop for Umask {
    fn drop(&mut self) {
        umask(self.0);
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The files in `dir` and their modes.
fn entries(dir: &Path) -> Vec<(PathBuf, u32)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let m = mode(&p);
            (p, m)
        })
        .collect()
}

/// Opens a cache at `dir`, stores the embedded guest in it, and checks the
/// modes: `0700` for the directory, `0600` for the entry and its digest.
fn stores_privately(engine: &Engine, dir: &Path) {
    let cache = Precompiled::open(dir).unwrap();
    assert_eq!(mode(dir), 0o700, "{}", dir.display());
    let (_, loaded) = engine.load_cached(EMBEDDED_GUEST, &cache).unwrap();
    assert_eq!(loaded, Loaded::Compiled);
    let files = entries(dir);
    assert_eq!(files.len(), 2, "the entry and its digest: {files:?}");
    for (path, mode) in files {
        assert_eq!(mode, 0o600, "{}", path.display());
    }
    // What was stored is used.
    let (_, loaded) = engine.load_cached(EMBEDDED_GUEST, &cache).unwrap();
    assert_eq!(loaded, Loaded::Precompiled);
}

#[test]
fn the_cache_is_private_whatever_the_umask() {
    let root = std::env::temp_dir().join(format!("shardgate-cache-modes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let engine = Engine::new(Limits::default()).unwrap();
    let umask = Umask::set(0o022);

    // A new directory, under a parent that does not exist yet either.
    stores_privately(&engine, &root.join("parent/new"));

    // An existing directory that others may read and enter is tightened.
    let existing = root.join("existing");
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&existing)
        .unwrap();
    assert_eq!(mode(&existing), 0o755);
    stores_privately(&engine, &existing);

    // With nothing masked at all, too.
    drop(umask);
    let _umask = Umask::set(0);
    stores_privately(&engine, &root.join("unmasked"));

    let _ = std::fs::remove_dir_all(&root);
}
