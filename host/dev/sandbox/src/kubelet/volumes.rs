//! A pod's volumes as host directories under `<pod dir>/volumes/<volume>`:
//! configMap and secret volumes are written from the emulator's objects,
//! emptyDir volumes are plain directories that outlive container restarts.
//! A persistentVolumeClaim volume is the claim's own directory under
//! `<work dir>/.claims/<claim>`, which outlives the pod and goes only with
//! the claim object (see [`prune_claims`]).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Container, KeyToPath, Pod, Secret, Volume};
use kube_emulator::Emulator;

use super::spec::rewrite_paths;

/// A container mount: its path in the container and the host path standing
/// in for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Mount {
    pub container: String,
    pub host: PathBuf,
    /// Whether the volume is an emptyDir or a claim (a data directory).
    pub empty_dir: bool,
}

/// Where claims' directories live, under the work dir (a pod's name never
/// starts with a dot, so this is never a pod's directory).
pub(super) const CLAIMS_DIR: &str = ".claims";

/// The host directory of a pod's volume: a claim's own directory, else one
/// under the pod's.
fn volume_dir(pod_dir: &Path, volume: &Volume) -> PathBuf {
    match &volume.persistent_volume_claim {
        Some(claim) => claim_dir(pod_dir, &claim.claim_name),
        None => pod_dir.join("volumes").join(&volume.name),
    }
}

/// The directory of claim `name`, beside the pods' directories.
fn claim_dir(pod_dir: &Path, name: &str) -> PathBuf {
    pod_dir
        .parent()
        .unwrap_or(pod_dir)
        .join(CLAIMS_DIR)
        .join(name)
}

/// Removes the directories of claims that no longer exist (deleted by
/// their reclaim policy or by hand); returns the names removed.
pub(super) fn prune_claims(emu: &Emulator, namespace: &str, work_dir: &Path) -> Vec<String> {
    let dir = work_dir.join(CLAIMS_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if emu.get("PersistentVolumeClaim", namespace, &name).is_none()
            && std::fs::remove_dir_all(entry.path()).is_ok()
        {
            removed.push(name);
        }
    }
    removed
}

/// The container's mounts, each resolved to its volume's host directory
/// (plus `subPath`).
pub(super) fn mounts(
    pod: &Pod,
    container: &Container,
    pod_dir: &Path,
) -> Result<Vec<Mount>, String> {
    let volumes = pod_volumes(pod);
    container
        .volume_mounts
        .iter()
        .flatten()
        .map(|vm| {
            let volume = volumes
                .iter()
                .find(|v| v.name == vm.name)
                .ok_or_else(|| format!("volumeMount {}: no volume of that name", vm.name))?;
            let path = vm.mount_path.trim_end_matches('/');
            if !vm.mount_path.starts_with('/') || path.is_empty() {
                return Err(format!(
                    "volumeMount {}: mountPath {:?} is not supported",
                    vm.name, vm.mount_path
                ));
            }
            let mut host = volume_dir(pod_dir, volume);
            if let Some(sub) = vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
                host = host.join(
                    relative(sub).map_err(|e| format!("volumeMount {}: subPath {e}", vm.name))?,
                );
            }
            Ok(Mount {
                container: path.to_string(),
                host,
                empty_dir: volume.empty_dir.is_some() || volume.persistent_volume_claim.is_some(),
            })
        })
        .collect()
}

fn pod_volumes(pod: &Pod) -> &[Volume] {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default()
}

/// Writes every volume of the pod under `pod_dir`. configMap and secret
/// volumes are rewritten from scratch (a key removed from the object
/// disappears); configMap text files get `mounts` rewritten to host paths,
/// secret files are copied byte for byte. emptyDir contents are kept.
pub(super) fn materialize(
    emu: &Emulator,
    namespace: &str,
    pod: &Pod,
    pod_dir: &Path,
    mounts: &[Mount],
) -> Result<(), String> {
    for volume in pod_volumes(pod) {
        let dir = volume_dir(pod_dir, volume);
        let files = volume_files(emu, namespace, volume)?;
        let result = match files {
            None => std::fs::create_dir_all(&dir),
            Some((files, rewrite)) => write_volume(&dir, &files, rewrite.then_some(mounts)),
        };
        result.map_err(|e| format!("volume {}: writing {}: {e}", volume.name, dir.display()))?;
    }
    Ok(())
}

/// The files of a configMap or secret volume (and whether to rewrite paths
/// in them); `None` for an emptyDir.
type Files = BTreeMap<PathBuf, Vec<u8>>;

fn volume_files(
    emu: &Emulator,
    namespace: &str,
    volume: &Volume,
) -> Result<Option<(Files, bool)>, String> {
    let label = |e: String| format!("volume {}: {e}", volume.name);
    if volume.empty_dir.is_some() {
        Ok(None)
    } else if let Some(claim) = &volume.persistent_volume_claim {
        // The claim must exist; its directory is made on first use.
        match emu.get("PersistentVolumeClaim", namespace, &claim.claim_name) {
            Some(_) => Ok(None),
            None => Err(label(format!(
                "persistentVolumeClaim {namespace}/{} not found",
                claim.claim_name
            ))),
        }
    } else if let Some(src) = &volume.config_map {
        let data = config_map_data(emu, namespace, &src.name, src.optional.unwrap_or(false))
            .map_err(label)?;
        let files =
            project(data, src.items.as_deref(), src.optional.unwrap_or(false)).map_err(label)?;
        Ok(Some((files, true)))
    } else if let Some(src) = &volume.secret {
        let name = src.secret_name.as_deref().unwrap_or_default();
        let data =
            secret_data(emu, namespace, name, src.optional.unwrap_or(false)).map_err(label)?;
        let files =
            project(data, src.items.as_deref(), src.optional.unwrap_or(false)).map_err(label)?;
        Ok(Some((files, false)))
    } else {
        Err(label(
            "only configMap, secret, emptyDir and persistentVolumeClaim volumes are supported \
             by the sandbox kubelet"
                .into(),
        ))
    }
}

/// A ConfigMap's `data` and `binaryData` (empty if missing and optional).
fn config_map_data(
    emu: &Emulator,
    namespace: &str,
    name: &str,
    optional: bool,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let Some(value) = emu.get("ConfigMap", namespace, name) else {
        return missing("configMap", namespace, name, optional);
    };
    let cm: ConfigMap =
        serde_json::from_value(value).map_err(|e| format!("configMap {namespace}/{name}: {e}"))?;
    let mut data: BTreeMap<String, Vec<u8>> = cm
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    data.extend(
        cm.binary_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0)),
    );
    Ok(data)
}

/// A Secret's `data` (base64-decoded) and `stringData` (empty if missing and
/// optional).
fn secret_data(
    emu: &Emulator,
    namespace: &str,
    name: &str,
    optional: bool,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let Some(value) = emu.get("Secret", namespace, name) else {
        return missing("secret", namespace, name, optional);
    };
    let secret: Secret =
        serde_json::from_value(value).map_err(|e| format!("secret {namespace}/{name}: {e}"))?;
    let mut data: BTreeMap<String, Vec<u8>> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    data.extend(
        secret
            .string_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes())),
    );
    Ok(data)
}

fn missing(
    kind: &str,
    namespace: &str,
    name: &str,
    optional: bool,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    if optional {
        Ok(BTreeMap::new())
    } else {
        Err(format!("{kind} {namespace}/{name} not found"))
    }
}

/// Keys to files: every key under its own name, or only `items` under their
/// `path`s.
fn project(
    mut data: BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    optional: bool,
) -> Result<Files, String> {
    let Some(items) = items.filter(|i| !i.is_empty()) else {
        return data
            .into_iter()
            .map(|(k, v)| Ok((relative(&k)?, v)))
            .collect();
    };
    let mut files = Files::new();
    for item in items {
        match data.remove(&item.key) {
            Some(bytes) => {
                files.insert(relative(&item.path)?, bytes);
            }
            None if optional => {}
            None => return Err(format!("key {:?} not found", item.key)),
        }
    }
    Ok(files)
}

/// `path` if it is relative and stays inside its directory.
fn relative(path: &str) -> Result<PathBuf, String> {
    let p = Path::new(path);
    if path.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(format!("{path:?}: must be a relative path without `..`"));
    }
    Ok(p.to_path_buf())
}

/// Makes `dir` hold exactly `files`, rewriting mount paths in UTF-8 files
/// when `rewrite` is given. Only files whose bytes differ are written, each
/// atomically (a temporary file renamed over it), so a process reading a
/// file while the volume is refreshed sees the old or the new file, whole.
fn write_volume(dir: &Path, files: &Files, rewrite: Option<&[Mount]>) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (path, bytes) in files {
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let bytes = match (rewrite, std::str::from_utf8(bytes)) {
            (Some(mounts), Ok(text)) => rewrite_paths(text, mounts).into_bytes(),
            _ => bytes.clone(),
        };
        if std::fs::read(&target).is_ok_and(|have| have == bytes) {
            continue;
        }
        let tmp = target.with_file_name(format!(
            ".{}.tmp",
            target.file_name().unwrap_or_default().to_string_lossy()
        ));
        std::fs::write(&tmp, &bytes)?;
        std::fs::rename(&tmp, &target)?;
    }
    remove_stale(dir, dir, files)
}

/// Removes every file under `at` that `files` (relative to `root`) does not
/// hold, and directories left empty.
fn remove_stale(root: &Path, at: &Path, files: &Files) -> std::io::Result<()> {
    for entry in std::fs::read_dir(at)? {
        let path = entry?.path();
        if path.is_dir() {
            remove_stale(root, &path, files)?;
            if std::fs::read_dir(&path)?.next().is_none() {
                std::fs::remove_dir(&path)?;
            }
        } else if !path
            .strip_prefix(root)
            .is_ok_and(|rel| files.contains_key(rel))
        {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_select_and_rename_keys() {
        let data = BTreeMap::from([
            ("a".to_string(), b"1".to_vec()),
            ("b".to_string(), b"2".to_vec()),
        ]);
        let item = |key: &str, path: &str| KeyToPath {
            key: key.into(),
            path: path.into(),
            ..KeyToPath::default()
        };
        let files = project(data.clone(), Some(&[item("b", "x/b.txt")]), false).unwrap();
        assert_eq!(
            files,
            Files::from([(PathBuf::from("x/b.txt"), b"2".to_vec())])
        );
        assert!(project(data.clone(), Some(&[item("c", "c")]), false).is_err());
        assert!(
            project(data.clone(), Some(&[item("c", "c")]), true)
                .unwrap()
                .is_empty()
        );
        assert!(project(data, Some(&[item("a", "../a")]), false).is_err());
    }

    #[test]
    fn config_files_are_rewritten_and_stale_keys_removed() {
        let dir =
            std::env::temp_dir().join(format!("shardgate-volumes-test-{}", std::process::id()));
        let mounts = [Mount {
            container: "/data".into(),
            host: "/h/data".into(),
            empty_dir: true,
        }];
        let old = Files::from([(PathBuf::from("old"), b"x".to_vec())]);
        write_volume(&dir, &old, Some(&mounts)).unwrap();
        let new = Files::from([
            (PathBuf::from("valkey.conf"), b"dir /data\n".to_vec()),
            (PathBuf::from("bin"), vec![0xff, b'/', b'd']),
        ]);
        write_volume(&dir, &new, Some(&mounts)).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("valkey.conf")).unwrap(),
            "dir /h/data\n"
        );
        assert_eq!(std::fs::read(dir.join("bin")).unwrap(), [0xff, b'/', b'd']);
        assert!(!dir.join("old").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_refresh_rewrites_only_what_changed_and_renames_it_in() {
        use std::os::unix::fs::MetadataExt;
        let dir =
            std::env::temp_dir().join(format!("shardgate-volumes-refresh-{}", std::process::id()));
        let files = |acl: &str| {
            Files::from([
                (PathBuf::from("users.acl"), acl.as_bytes().to_vec()),
                (PathBuf::from("sub/keep"), b"k".to_vec()),
            ])
        };
        let ino = |p: &str| std::fs::metadata(dir.join(p)).unwrap().ino();
        write_volume(&dir, &files("a"), None).unwrap();
        let (acl, keep) = (ino("users.acl"), ino("sub/keep"));
        write_volume(&dir, &files("a"), None).unwrap();
        assert_eq!((ino("users.acl"), ino("sub/keep")), (acl, keep));
        write_volume(&dir, &files("b"), None).unwrap();
        assert_ne!(ino("users.acl"), acl, "a changed file is renamed in");
        assert_eq!(ino("sub/keep"), keep, "an unchanged file is left alone");
        assert_eq!(std::fs::read_to_string(dir.join("users.acl")).unwrap(), "b");
        write_volume(
            &dir,
            &Files::from([(PathBuf::from("users.acl"), b"b".to_vec())]),
            None,
        )
        .unwrap();
        assert!(!dir.join("sub").exists(), "stale files and empty dirs go");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
