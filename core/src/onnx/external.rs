//! External tensor data: resolving `location` safely, checking ranges, mapping files.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use bytes::Bytes;

use crate::error::TensorLoadError;

/// A source of external tensor data, keyed by the `location` written in the model.
pub trait ExternalData {
    /// Returns `length` bytes at `offset` of `location`.
    ///
    /// # Errors
    /// [`TensorLoadError::PathEscape`] for absolute or escaping locations,
    /// [`TensorLoadError::OutOfRange`] past the end of the file, or I/O failures.
    fn read(&self, location: &str, offset: u64, length: u64) -> Result<Bytes, TensorLoadError>;
}

/// For models loaded from bytes with no external data: every reference is an error.
pub struct NoExternalData;

impl ExternalData for NoExternalData {
    fn read(&self, location: &str, _: u64, _: u64) -> Result<Bytes, TensorLoadError> {
        normalize_location(location)?;
        Err(TensorLoadError::ExternalMissing { location: location.into() })
    }
}

/// Lexically normalizes a location, rejecting absolute paths and any `..` that leaves the folder.
///
/// # Errors
/// [`TensorLoadError::PathEscape`].
pub fn normalize_location(location: &str) -> Result<PathBuf, TensorLoadError> {
    let escape = || TensorLoadError::PathEscape { location: location.into() };
    // Windows drive letters and UNC prefixes are absolute on every platform we accept.
    if location.is_empty()
        || location.starts_with('/')
        || location.starts_with('\\')
        || location.as_bytes().get(1) == Some(&b':')
    {
        return Err(escape());
    }
    let mut out = PathBuf::new();
    for c in Path::new(&location.replace('\\', "/")).components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err(escape());
                }
            }
            Component::RootDir | Component::Prefix(_) => return Err(escape()),
        }
    }
    if out.as_os_str().is_empty() {
        return Err(escape());
    }
    Ok(out)
}

fn slice_checked(
    data: &Bytes,
    location: &str,
    offset: u64,
    length: u64,
) -> Result<Bytes, TensorLoadError> {
    let file_len = data.len() as u64;
    let end = offset.checked_add(length).filter(|&e| e <= file_len).ok_or_else(|| {
        TensorLoadError::OutOfRange { location: location.into(), offset, length, file_len }
    })?;
    Ok(data.slice(offset as usize..end as usize))
}

/// External data held in memory, e.g. files a browser user dropped next to the model.
#[derive(Default)]
pub struct MemoryExternalData {
    files: HashMap<PathBuf, Bytes>,
}

impl MemoryExternalData {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a file under the relative path the model refers to.
    ///
    /// # Errors
    /// [`TensorLoadError::PathEscape`] for paths that could never be referenced safely.
    pub fn insert(&mut self, path: &str, data: Bytes) -> Result<(), TensorLoadError> {
        self.files.insert(normalize_location(path)?, data);
        Ok(())
    }
}

impl ExternalData for MemoryExternalData {
    fn read(&self, location: &str, offset: u64, length: u64) -> Result<Bytes, TensorLoadError> {
        let key = normalize_location(location)?;
        let data = self
            .files
            .get(&key)
            .ok_or_else(|| TensorLoadError::ExternalMissing { location: location.into() })?;
        slice_checked(data, location, offset, length)
    }
}

/// External data in files next to the model, memory-mapped once per file on native targets.
pub struct DirExternalData {
    dir: PathBuf,
    files: Mutex<HashMap<PathBuf, Bytes>>,
}

impl DirExternalData {
    /// Resolves locations relative to `dir` (the folder holding the `.onnx` file).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DirExternalData { dir: dir.into(), files: Mutex::new(HashMap::new()) }
    }

    fn open(&self, location: &str, rel: &Path) -> Result<Bytes, TensorLoadError> {
        let io = |source| TensorLoadError::ExternalIo { location: location.into(), source };
        let path = self.dir.join(rel);
        // A symlink inside the folder must not lead outside it either.
        let canonical_dir = self.dir.canonicalize().map_err(io)?;
        let canonical = path.canonicalize().map_err(io)?;
        if !canonical.starts_with(&canonical_dir) {
            return Err(TensorLoadError::PathEscape { location: location.into() });
        }
        map_file(&canonical).map_err(io)
    }
}

impl ExternalData for DirExternalData {
    fn read(&self, location: &str, offset: u64, length: u64) -> Result<Bytes, TensorLoadError> {
        let rel = normalize_location(location)?;
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        let data = match files.get(&rel) {
            Some(d) => d.clone(),
            None => {
                let d = self.open(location, &rel)?;
                files.insert(rel, d.clone());
                d
            }
        };
        slice_checked(&data, location, offset, length)
    }
}

/// Maps a whole file read-only (reads it on wasm32, which has no mmap).
///
/// # Errors
/// Any I/O error opening or mapping the file.
pub fn map_file(path: &Path) -> std::io::Result<Bytes> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let file = std::fs::File::open(path)?;
        if file.metadata()?.len() == 0 {
            return Ok(Bytes::new());
        }
        // SAFETY: the map is read-only and private. Like every runtime that maps
        // weights, we rely on the model files not being truncated while loaded.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok(Bytes::from_owner(map))
    }
    #[cfg(target_arch = "wasm32")]
    {
        std::fs::read(path).map(Bytes::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_and_escaping_locations_are_rejected() {
        for bad in ["/etc/passwd", "../secret.bin", "a/../../b", "C:\\x", "\\\\server\\share", ""] {
            assert!(
                matches!(normalize_location(bad), Err(TensorLoadError::PathEscape { .. })),
                "{bad} accepted"
            );
        }
        assert_eq!(normalize_location("./w/../data.bin").unwrap(), PathBuf::from("data.bin"));
    }

    #[test]
    fn reads_past_the_end_of_a_file_are_rejected() {
        let mut m = MemoryExternalData::new();
        m.insert("w.bin", Bytes::from(vec![1u8; 10])).unwrap();
        assert_eq!(m.read("w.bin", 2, 8).unwrap().len(), 8);
        assert!(matches!(m.read("w.bin", 4, 8), Err(TensorLoadError::OutOfRange { .. })));
        assert!(matches!(m.read("w.bin", u64::MAX, 2), Err(TensorLoadError::OutOfRange { .. })));
    }

    #[test]
    fn a_symlink_out_of_the_model_folder_is_rejected() {
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret.bin");
        std::fs::write(&secret, [0u8; 16]).unwrap();
        let model_dir = tempfile::tempdir().unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(&secret, model_dir.path().join("link.bin")).unwrap();
            let ext = DirExternalData::new(model_dir.path());
            assert!(matches!(ext.read("link.bin", 0, 4), Err(TensorLoadError::PathEscape { .. })));
        }
        std::fs::write(model_dir.path().join("ok.bin"), [7u8; 8]).unwrap();
        let ext = DirExternalData::new(model_dir.path());
        assert_eq!(&ext.read("ok.bin", 4, 4).unwrap()[..], &[7, 7, 7, 7]);
    }
}
