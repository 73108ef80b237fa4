//! File slots: a caller's path resolved (symlinks included) and confined to the file roots.

use std::path::{Component, Path, PathBuf};

/// What a command's file slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// Must exist and be a regular file inside a file root.
    Input,
    /// May be new; its parent must resolve inside a file root.
    Output,
}

/// Resolves a file argument inside the file roots, following symlinks.
///
/// Relative paths are taken relative to the first file root.
pub fn resolve_file(value: &str, kind: FileKind, roots: &[PathBuf]) -> Result<PathBuf, String> {
    let path = Path::new(value);
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err("'..' is not allowed in file arguments".into());
    }
    let Some(first_root) = roots.first() else {
        return Err("no file_roots are configured".into());
    };
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        first_root.join(path)
    };
    let roots_list = || {
        roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let canonical_roots: Vec<PathBuf> =
        roots.iter().filter_map(|r| r.canonicalize().ok()).collect();
    let inside = |p: &Path| canonical_roots.iter().any(|r| p.starts_with(r));
    match kind {
        FileKind::Input => {
            let real = joined
                .canonicalize()
                .map_err(|e| format!("cannot resolve {}: {}", joined.display(), io_reason(&e)))?;
            if !inside(&real) {
                return Err(format!(
                    "resolves to {} which is outside the file roots ({})",
                    real.display(),
                    roots_list()
                ));
            }
            let meta = std::fs::metadata(&real).map_err(|e| io_reason(&e))?;
            if !meta.is_file() {
                return Err(format!("{} is not a regular file", real.display()));
            }
            Ok(real)
        }
        FileKind::Output => {
            let name = joined.file_name().ok_or("an output needs a file name")?;
            let parent = joined
                .parent()
                .ok_or("an output needs a parent directory")?;
            let real_parent = parent.canonicalize().map_err(|e| {
                format!(
                    "cannot resolve the directory {}: {}",
                    parent.display(),
                    io_reason(&e)
                )
            })?;
            if !inside(&real_parent) {
                return Err(format!(
                    "its directory resolves to {} which is outside the file roots ({})",
                    real_parent.display(),
                    roots_list()
                ));
            }
            let target = real_parent.join(name);
            match std::fs::symlink_metadata(&target) {
                Err(_) => Ok(target),
                Ok(m) if m.is_file() => Ok(target),
                Ok(m) if m.file_type().is_symlink() => Err(format!(
                    "{} is a symbolic link; outputs must be plain files",
                    target.display()
                )),
                Ok(_) => Err(format!(
                    "{} exists and is not a regular file",
                    target.display()
                )),
            }
        }
    }
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}
