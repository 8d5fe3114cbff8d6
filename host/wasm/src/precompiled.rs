//! An on-disk cache of precompiled modules (`.cwasm`), so a restart skips
//! compilation.
//!
//! Only blobs this engine compiled itself are ever deserialized:
//! - an entry is written only by [`Engine::load_cached`] right after it
//!   compiled the module itself; nothing else is read from the directory;
//! - its name is the sha256 of the *wasm* bytes plus a hash of the engine's
//!   `precompile_compatibility_hash()`, so a module or an engine
//!   configuration that differs never matches;
//! - beside each entry lies the sha256 of the `.cwasm` bytes as written; an
//!   entry whose bytes no longer match (tampered, truncated) is not
//!   deserialized, it is deleted and the module compiled again;
//! - the directory must be owned by this user (else the cache is refused)
//!   and is private to it: created with mode `0700`, and an existing one
//!   that group or others may use at all (say `0755`, or an `emptyDir`'s
//!   `0777`) is tightened to `0700`, whatever the umask. Entries are written
//!   with mode `0600`. Anyone who can write there as this user could forge
//!   both files, so the directory's permissions are the trust boundary: give
//!   it to the operator alone (an `emptyDir`).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use sha2::{Digest, Sha256};
use tracing::{info, warn};
use wasmtime::component::Component;

use crate::engine::Engine;
use crate::module::Module;

/// Where a load came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loaded {
    /// Compiled now (and stored).
    Compiled,
    /// Deserialized from a verified entry.
    Precompiled,
}

/// Lowercase hex sha256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A directory of precompiled modules that this process may trust.
#[derive(Clone, Debug)]
pub struct Precompiled {
    dir: PathBuf,
}

impl Precompiled {
    /// Opens a cache directory, creating it (and any missing parents) if
    /// needed; see the module docs for the modes it gets. Refuses one that
    /// another user owns.
    pub fn open(dir: impl Into<PathBuf>) -> anyhow::Result<Self> {
        let dir = dir.into();
        create_private_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            let meta = std::fs::metadata(&dir)?;
            if meta.uid() != current_uid()? {
                bail!(
                    "{}: owned by another user; refusing to use it as a module cache",
                    dir.display()
                );
            }
            if meta.permissions().mode() & 0o777 != PRIVATE_DIR {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(PRIVATE_DIR))
                    .with_context(|| format!("{}: making it private (mode 0700)", dir.display()))?;
            }
        }
        Ok(Precompiled { dir })
    }

    /// Whether an entry for this module and engine exists (it is verified
    /// only when loaded).
    pub fn contains(&self, engine: &Engine, wasm_sha256: &str) -> bool {
        self.entry(engine, wasm_sha256).is_file()
    }

    fn entry(&self, engine: &Engine, wasm_sha256: &str) -> PathBuf {
        let mut h = DefaultHasher::new();
        engine.engine.precompile_compatibility_hash().hash(&mut h);
        self.dir
            .join(format!("{wasm_sha256}-{:016x}.cwasm", h.finish()))
    }
}

/// The cache directory's mode: its owner's alone.
#[cfg(unix)]
const PRIVATE_DIR: u32 = 0o700;
/// An entry's mode: its owner's alone.
#[cfg(unix)]
const PRIVATE_FILE: u32 = 0o600;

/// Creates `dir` with mode 0700 (less what the umask masks; [`Precompiled::open`]
/// then sets it exactly), its missing parents as usual; an existing `dir` is
/// left as it is.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, PRIVATE_DIR);
    match builder.create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        created => created,
    }
}

/// Writes `data` to a new `path` that only its owner can read or write
/// (mode 0600 whatever the umask), replacing any file there.
fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, PRIVATE_FILE);
    let mut file = options.open(path)?;
    // The mode above applies only to a new file, less the umask.
    #[cfg(unix)]
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(PRIVATE_FILE))?;
    file.write_all(data)
}

fn digest_path(entry: &Path) -> PathBuf {
    entry.with_extension("cwasm.sha256")
}

/// This process's effective uid: the owner of `/proc/self`.
#[cfg(unix)]
fn current_uid() -> anyhow::Result<u32> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata("/proc/self")
        .context("reading /proc/self to learn this process's uid")?
        .uid())
}

impl Engine {
    /// Loads `bytes` through `cache`: a verified precompiled entry if there
    /// is one, else compiles (and stores the result). Either way the module
    /// is type-checked against the reconcile world.
    #[allow(unsafe_code)] // deserializes only what this engine just compiled
    pub fn load_cached(
        &self,
        bytes: &[u8],
        cache: &Precompiled,
    ) -> anyhow::Result<(Module, Loaded)> {
        let entry = cache.entry(self, &sha256_hex(bytes));
        if let Some(component) = self.read_entry(&entry) {
            return Ok((self.prepare(component)?, Loaded::Precompiled));
        }
        let serialized = self
            .engine
            .precompile_component(bytes)
            .map_err(|e| anyhow!("not a valid wasm component: {e:#}"))?;
        // SAFETY: `serialized` was produced just now by this very engine.
        let component = unsafe { Component::deserialize(&self.engine, &serialized) }
            .map_err(|e| anyhow!("{e:#}"))?;
        let module = self.prepare(component)?;
        if let Err(e) = write_entry(&entry, &serialized) {
            warn!(error = %format!("{e:#}"), "could not store the precompiled module");
        }
        Ok((module, Loaded::Compiled))
    }

    /// A verified entry, or `None` (missing, or deleted because its bytes
    /// do not match the digest written with it).
    #[allow(unsafe_code)] // deserializes only verified entries this engine wrote
    fn read_entry(&self, entry: &Path) -> Option<Component> {
        let bytes = std::fs::read(entry).ok()?;
        let recorded = std::fs::read_to_string(digest_path(entry)).unwrap_or_default();
        if recorded.trim() != sha256_hex(&bytes) {
            warn!(entry = %entry.display(), "precompiled module does not match its digest; discarding it");
            let _ = std::fs::remove_file(entry);
            let _ = std::fs::remove_file(digest_path(entry));
            return None;
        }
        // SAFETY: the entry is one this engine wrote (see the module docs),
        // for this engine configuration (in its name), unchanged since (its
        // digest matches).
        match unsafe { Component::deserialize(&self.engine, &bytes) } {
            Ok(c) => {
                info!(entry = %entry.display(), "loaded a precompiled module");
                Some(c)
            }
            Err(e) => {
                warn!(entry = %entry.display(), error = %format!("{e:#}"), "precompiled module refused; compiling");
                None
            }
        }
    }
}

/// Writes the entry and its digest (mode 0600), each atomically (temp file
/// + rename).
fn write_entry(entry: &Path, serialized: &[u8]) -> anyhow::Result<()> {
    let write = |path: &Path, data: &[u8]| -> anyhow::Result<()> {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        write_private(&tmp, data).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
        Ok(())
    };
    write(&digest_path(entry), sha256_hex(serialized).as_bytes())?;
    write(entry, serialized)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EMBEDDED_GUEST;
    use crate::isolation::Limits;

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("shardgate-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn compiles_once_then_loads_precompiled_and_refuses_tampering() {
        let engine = Engine::new(Limits::default()).unwrap();
        let dir = temp_dir("roundtrip");
        let cache = Precompiled::open(&dir).unwrap();
        let started = std::time::Instant::now();
        let (_, first) = engine.load_cached(EMBEDDED_GUEST, &cache).unwrap();
        let compiled = started.elapsed();
        assert_eq!(first, Loaded::Compiled);
        let started = std::time::Instant::now();
        let (module, second) = engine.load_cached(EMBEDDED_GUEST, &cache).unwrap();
        let precompiled = started.elapsed();
        assert_eq!(second, Loaded::Precompiled);
        println!("compile {compiled:?}, precompiled load {precompiled:?}");
        // The precompiled module works.
        let c = shardgate_contract::model::Cluster {
            name: "demo".into(),
            namespace: "default".into(),
            shards: 3,
            replicas: 1,
            ..Default::default()
        };
        assert!(module.validate(&c).unwrap().is_empty());

        // Flip one byte of the entry: it is discarded, never deserialized.
        let entry = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|x| x == "cwasm"))
            .unwrap();
        let mut bytes = std::fs::read(&entry).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&entry, &bytes).unwrap();
        let (_, third) = engine.load_cached(EMBEDDED_GUEST, &cache).unwrap();
        assert_eq!(third, Loaded::Compiled, "a tampered entry is recompiled");
        let (_, fourth) = engine.load_cached(EMBEDDED_GUEST, &cache).unwrap();
        assert_eq!(fourth, Loaded::Precompiled, "and stored again");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_different_module_never_matches_an_entry() {
        let engine = Engine::new(Limits::default()).unwrap();
        let dir = temp_dir("keyed");
        let cache = Precompiled::open(&dir).unwrap();
        engine.load_cached(EMBEDDED_GUEST, &cache).unwrap();
        // Same component plus a custom section: another digest, another entry.
        let mut other = EMBEDDED_GUEST.to_vec();
        other.extend_from_slice(&[0x00, 0x04, 0x01, b'x', 0x00, 0x00]);
        let (_, loaded) = engine.load_cached(&other, &cache).unwrap();
        assert_eq!(loaded, Loaded::Compiled);
        assert!(engine.load_cached(b"not wasm", &cache).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_world_writable_directory_is_locked_down() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("perms");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        Precompiled::open(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
