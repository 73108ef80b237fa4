//! The loader files the operator allows (`flash.loaders`), as an agent is shown them: in
//! `list_boards`, and in the refusals of a loader that is not allowed or missing, whatever
//! sends it (`flash_board`, or `execute_command`'s `loader_args`). A directory entry
//! stands for the regular files directly inside it.

use std::path::PathBuf;

/// Most loader files listed (a directory of hundreds is named, not listed in full).
pub const MAX_LISTED: usize = 32;

/// The allowed loader files, sorted within each entry, of a board's loaders
/// (`BoardConfig::loaders`); `None` when none are set (any file in the file roots).
pub fn allowed_loader_files(allowed: Option<&[PathBuf]>) -> Option<Vec<String>> {
    let entries = allowed?;
    let mut out = Vec::new();
    for entry in entries {
        match std::fs::read_dir(entry) {
            Ok(dir) => {
                let mut files: Vec<String> = dir
                    .filter_map(Result::ok)
                    .take(4 * MAX_LISTED)
                    .filter(|e| e.path().is_file())
                    .map(|e| e.path().display().to_string())
                    .collect();
                files.sort();
                if files.is_empty() {
                    out.push(format!("{}/ (empty)", entry.display()));
                }
                out.extend(files);
            }
            Err(_) => out.push(entry.display().to_string()),
        }
        if out.len() >= MAX_LISTED {
            out.truncate(MAX_LISTED);
            out.push(format!("… (more under {})", entry.display()));
            break;
        }
    }
    Some(out)
}

/// The allowed loaders in words, for a refusal: "a, b" or "any file in the file roots".
pub fn allowed_loaders_words(allowed: Option<&[PathBuf]>) -> String {
    match allowed_loader_files(allowed) {
        None => "any file in the file roots (no loaders are set)".into(),
        Some(l) if l.is_empty() => "none (the loaders list is empty)".into(),
        Some(l) => l.join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_lists_its_files_and_a_file_itself() {
        let dir = tempfile::tempdir().expect("tempdir");
        let loaders = dir.path().join("loaders");
        std::fs::create_dir(&loaders).expect("mkdir");
        std::fs::write(loaders.join("b.bin"), b"b").expect("write");
        std::fs::write(loaders.join("a.bin"), b"a").expect("write");
        std::fs::create_dir(loaders.join("sub")).expect("mkdir");
        let single = dir.path().join("one.bin");
        let list = vec![loaders.clone(), single.clone()];
        let got = allowed_loader_files(Some(&list)).expect("set");
        assert_eq!(
            got,
            [
                loaders.join("a.bin").display().to_string(),
                loaders.join("b.bin").display().to_string(),
                single.display().to_string(),
            ]
        );
        assert_eq!(allowed_loader_files(None), None);
        assert!(allowed_loaders_words(None).contains("any file"));
    }
}
