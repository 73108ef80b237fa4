//! Paths as agents give them: which root, which path below it, and whether the client may
//! write there. Nothing is opened here except the root itself and, for [`Target::parent`],
//! the directories above the last component (beneath the root, see [`super::beneath`]).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::error::StagingError;
use super::temp::final_name_of;
use crate::config::{ClientStaging, WriteRoots};
use gatecmd_core::beneath::{Denied, Dir, RelPath};

/// A path inside a root, resolved lexically (no file system access yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Index of the root in `file_roots`.
    pub index: usize,
    /// The root as configured.
    pub root: PathBuf,
    /// The path below the root.
    pub rel: RelPath,
}

impl Target {
    /// The absolute path, for messages and results.
    pub fn display(&self) -> String {
        self.root.join(self.rel.to_path()).display().to_string()
    }

    /// The path relative to the root (`.` for the root itself).
    pub fn relative(&self) -> String {
        if self.rel.is_empty() {
            ".".into()
        } else {
            self.rel.to_path().display().to_string()
        }
    }

    pub(super) fn open_root(&self) -> Result<Dir, StagingError> {
        Dir::open_root(&self.root)
            .map_err(|e| StagingError::io("opening the root", &self.root.display().to_string(), e))
    }

    /// The parent directory (opened beneath the root) and the last component.
    pub(super) fn parent(&self) -> Result<(Dir, &OsStr), StagingError> {
        let (parent, name) = self.split_last()?;
        let dir = self.open_root()?.open_dir(&parent);
        Ok((dir.map_err(|d| self.denied(d))?, name))
    }

    /// The parent path and the last component; refused for the root itself.
    pub(super) fn split_last(&self) -> Result<(RelPath, &OsStr), StagingError> {
        self.rel
            .split_last()
            .ok_or_else(|| StagingError::IsDirectory {
                path: self.display(),
                what: "it is a file root: give a file name inside it",
            })
    }

    /// Refuses a reserved temporary upload name (`.<name>.gatecmd-upload`) among the
    /// directories of the path, and as its last component too when `last`: no staging call
    /// makes or enters a directory of that name, so none can block an upload's temporary
    /// file (`resolve` refuses it above the last component for every call).
    pub fn refuse_reserved(&self, last: bool) -> Result<(), StagingError> {
        let path = self.rel.to_path();
        let n = self.rel.len();
        for (i, c) in path.components().enumerate() {
            let name = c.as_os_str().to_string_lossy();
            if (last || i + 1 < n) && final_name_of(&name).is_some() {
                return Err(StagingError::ReservedName {
                    name: name.into_owned(),
                });
            }
        }
        Ok(())
    }

    pub(super) fn denied(&self, d: Denied) -> StagingError {
        let at = |p: PathBuf| self.root.join(p).display().to_string();
        match d {
            // Staging follows no symlink at all, so a way out shows as the symlink it is.
            Denied::Symlink(p) | Denied::Outside(p) => StagingError::Symlink {
                path: self.display(),
                link: at(p),
            },
            Denied::NotDir(p) => StagingError::NotADirectory {
                path: self.display(),
                component: at(p),
            },
            Denied::NotFound(p) => StagingError::NotFound {
                path: self.display(),
                missing: at(p),
                hint: String::new(),
            },
            // Only `create_dirs` says this, and the upload maps it with its limit first.
            Denied::TooManyNew(p) => StagingError::Io {
                op: "creating directories for",
                path: self.display(),
                reason: format!("too many new directories, up to {}", at(p)),
            },
            Denied::Io(p, e) => StagingError::io("resolving", &at(p), e),
        }
    }
}

/// Which root `list_files` lists: its index in `file_roots` or its path.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum RootSel {
    Index(usize),
    Path(String),
}

fn roots_list(roots: &[PathBuf]) -> String {
    roots
        .iter()
        .map(|r| r.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Resolves what an agent wrote: relative to `root` (or the first root), or absolute
/// under one of the roots. Nothing is opened; `..` is refused outright, and so is a
/// reserved temporary upload name above the last component ([`Target::refuse_reserved`]).
pub fn resolve(
    roots: &[PathBuf],
    root: Option<&RootSel>,
    path: &str,
) -> Result<Target, StagingError> {
    let t = resolve_lexically(roots, root, path)?;
    t.refuse_reserved(false)?;
    Ok(t)
}

fn resolve_lexically(
    roots: &[PathBuf],
    root: Option<&RootSel>,
    path: &str,
) -> Result<Target, StagingError> {
    if roots.is_empty() {
        return Err(StagingError::NoRoots);
    }
    let bad = |reason| StagingError::BadPath {
        path: path.to_string(),
        reason,
    };
    if path.contains('\0') {
        return Err(bad("a path may not contain NUL"));
    }
    let chosen = match root {
        None => None,
        Some(sel) => Some(select_root(roots, sel)?),
    };
    let p = Path::new(path);
    if p.components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(bad("'..' is not allowed: give the path from the root down"));
    }
    if !p.is_absolute() {
        let index = chosen.unwrap_or(0);
        let rel = RelPath::parse(p).map_err(bad)?;
        return Ok(Target {
            index,
            root: roots[index].clone(),
            rel,
        });
    }
    // The longest root that contains the path, as configured or canonicalised (an agent
    // may give a path it saw in a command's argv, which has symlinks resolved).
    let mut best: Option<(usize, usize, PathBuf)> = None;
    for (i, r) in roots.iter().enumerate() {
        if chosen.is_some_and(|c| c != i) {
            continue;
        }
        let forms = [Some(r.clone()), r.canonicalize().ok()];
        for form in forms.into_iter().flatten() {
            if let Ok(rest) = p.strip_prefix(&form) {
                let len = form.components().count();
                if best.as_ref().is_none_or(|(_, l, _)| len > *l) {
                    best = Some((i, len, rest.to_path_buf()));
                }
            }
        }
    }
    let Some((index, _, rest)) = best else {
        let within = match chosen {
            Some(i) => roots[i].display().to_string(),
            None => roots_list(roots),
        };
        return Err(StagingError::OutsideRoots {
            path: path.to_string(),
            roots: within,
        });
    };
    Ok(Target {
        index,
        root: roots[index].clone(),
        rel: RelPath::parse(&rest).map_err(bad)?,
    })
}

fn select_root(roots: &[PathBuf], sel: &RootSel) -> Result<usize, StagingError> {
    let found = match sel {
        RootSel::Index(i) => (*i < roots.len()).then_some(*i),
        RootSel::Path(s) => match s.parse::<usize>() {
            Ok(i) if i < roots.len() => Some(i),
            _ => roots
                .iter()
                .position(|r| r.components().eq(Path::new(s).components())),
        },
    };
    found.ok_or_else(|| StagingError::UnknownRoot {
        given: match sel {
            RootSel::Index(i) => i.to_string(),
            RootSel::Path(s) => s.clone(),
        },
        roots: roots_list(roots),
    })
}

/// Refuses unless `client` may write under the target's root.
pub fn check_writable(
    client: &str,
    policy: &ClientStaging,
    roots: &[PathBuf],
    t: &Target,
) -> Result<(), StagingError> {
    if policy.write_roots.allows(&t.root) {
        return Ok(());
    }
    let hint = match &policy.write_roots {
        WriteRoots::Only(w) if !w.is_empty() => format!("it may write under: {}", roots_list(w)),
        _ => format!(
            "it may not write files at all (no write_roots for it in the server's config; the roots are {}): ask the operator",
            roots_list(roots)
        ),
    };
    Err(StagingError::NotWritable {
        client: client.to_string(),
        root: t.root.display().to_string(),
        hint,
    })
}
