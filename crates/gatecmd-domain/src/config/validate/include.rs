//! `include:`: fragments of devices and commands from other files (the bundled recipes, a
//! `conf.d`). Each fragment is read with its own positions, so its errors name its own
//! file and line; what it defines joins the main file's lists, a name once across all.

use std::path::{Path, PathBuf};

use super::super::load::parse_yaml;
use super::super::positions::Positions;
use super::super::raw::RawFragment;
use super::super::schema::DeviceClass;
use super::validator::Validator;

/// Most files one configuration may include (directories' files counted), so that a
/// `conf.d` pointed at the wrong directory fails clearly instead of reading it all.
const MAX_FRAGMENTS: usize = 64;
/// Largest fragment read (a pipe or a device that says nothing of its length is read up to
/// this bound, and refused past it). Its nesting is bounded by the YAML parser: its
/// recursion limit, and serde-saphyr's budget (depth 64, 250,000 nodes, aliases).
const MAX_FRAGMENT_BYTES: u64 = 1024 * 1024;

/// One included file: its validator (its positions, its errors) and what it holds.
pub(super) struct Fragment {
    pub(super) validator: Validator,
    pub(super) raw: RawFragment,
}

impl Fragment {
    /// Adds a fragment's device classes to the configuration's, refusing a name already
    /// defined (at the fragment's line).
    pub(super) fn add_devices(&mut self, theirs: Vec<DeviceClass>, all: &mut Vec<DeviceClass>) {
        for d in theirs {
            if all.iter().any(|o| o.name == d.name) {
                let item = self.validator.item_named("devices", &d.name);
                let field = format!("{item}.name");
                let at = self.validator.at(&field);
                self.validator.err(
                    at,
                    field,
                    format!(
                        "device class {:?} is already defined (in the main file or an \
                         earlier include); give it another name",
                        d.name
                    ),
                );
            } else {
                all.push(d);
            }
        }
    }
}

impl Validator {
    /// Reads the fragments `include:` names, in order; what cannot be read or parsed is an
    /// error at its entry (or in the fragment, where the fragment is wrong).
    pub(super) fn fragments(&mut self, include: &[String]) -> Vec<Fragment> {
        let mut out = Vec::new();
        let mut files: Vec<PathBuf> = Vec::new();
        for (i, entry) in include.iter().enumerate() {
            let field = format!("include[{i}]");
            let at = self.at(&field);
            let path = match self.resolve(entry) {
                Ok(p) => p,
                Err(m) => {
                    self.err(at, field, m);
                    continue;
                }
            };
            match files_of(&path) {
                Ok(found) if found.is_empty() => self.err(
                    at,
                    field,
                    format!("{} holds no *.yaml file to include", path.display()),
                ),
                Ok(found) => files.extend(found),
                Err(e) => self.err(at, field, format!("cannot read {}: {e}", path.display())),
            }
        }
        if files.len() > MAX_FRAGMENTS {
            let at = self.at("include");
            self.err(
                at,
                "include".into(),
                format!(
                    "{} files to include, more than the {MAX_FRAGMENTS} allowed: name the files, \
                     or a directory that holds only configuration fragments",
                    files.len()
                ),
            );
            return out;
        }
        for path in files {
            let name = path.display().to_string();
            let text = match read_bounded(&path) {
                Ok(t) => t,
                Err(m) => {
                    self.err_in(&name, m);
                    continue;
                }
            };
            let positions = Positions::new(&text);
            match parse_yaml::<RawFragment>(&text, &positions, &name) {
                Ok(raw) => out.push(Fragment {
                    validator: Validator::new(positions, &name),
                    raw,
                }),
                Err(errors) => {
                    let mut v = Validator::new(positions, &name);
                    for e in errors.0 {
                        // An unknown key in a fragment: say what a fragment may hold.
                        let message = if e.message.starts_with("unknown field") {
                            format!(
                                "{}; an included file holds only `devices:` and `commands:` \
                                 (clients, listeners and the rest belong in the main file)",
                                e.message
                            )
                        } else {
                            e.message
                        };
                        v.err(Some((e.line, e.column)), e.field, message);
                    }
                    self.absorb(v);
                }
            }
        }
        out
    }

    /// An `include:` entry as a path: absolute as written, relative from the file's
    /// directory.
    fn resolve(&self, entry: &str) -> Result<PathBuf, String> {
        if entry.is_empty() {
            return Err("an empty path: name a file or a directory".into());
        }
        let p = Path::new(entry);
        if p.is_absolute() {
            return Ok(p.to_path_buf());
        }
        match &self.base {
            Some(base) => Ok(base.join(p)),
            None => Err(format!(
                "{entry:?} is relative, and this configuration has no directory to take it \
                 from (the embedded default): write an absolute path"
            )),
        }
    }
}

/// A file, or a directory's `*.yaml` files in name order.
fn files_of(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if !std::fs::metadata(path)?.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(path)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml") && p.is_file())
        // One past the bound is enough to refuse (`fragments`): a directory of millions of
        // files is not listed whole.
        .take(MAX_FRAGMENTS + 1)
        .collect();
    found.sort();
    Ok(found)
}

fn read_bounded(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let too_large = |len: String| {
        format!(
            "the file is {len} bytes, more than the {MAX_FRAGMENT_BYTES} an included file may \
             be: include the fragments themselves (a recipe, a conf.d of small files)"
        )
    };
    let cannot = |e: std::io::Error| format!("cannot read the file: {e}");
    let file = std::fs::File::open(path).map_err(cannot)?;
    let len = file.metadata().map_err(cannot)?.len();
    if len > MAX_FRAGMENT_BYTES {
        return Err(too_large(len.to_string()));
    }
    // Bounded even where the length said nothing (a pipe, a device, a file still growing).
    let mut bytes = Vec::new();
    file.take(MAX_FRAGMENT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > MAX_FRAGMENT_BYTES {
        return Err(too_large(format!("more than {MAX_FRAGMENT_BYTES}")));
    }
    String::from_utf8(bytes).map_err(|_| "the file is not UTF-8 text".to_string())
}

#[cfg(test)]
mod tests {
    use super::super::super::Config;
    use super::MAX_FRAGMENT_BYTES;

    fn load(dir: &std::path::Path, include: &str) -> String {
        let main = dir.join("main.yaml");
        std::fs::write(&main, format!("include: [{include}]\n")).expect("main");
        match Config::load_file(&main) {
            Ok(_) => "loaded".into(),
            Err(e) => e.to_string(),
        }
    }

    /// Issue 37: a fragment whose length says nothing (a FIFO here; /dev/zero alike) is
    /// read up to the bound and refused there, naming the file. Before, the bound was
    /// taken from the length alone (0) and the whole stream was read.
    #[test]
    fn a_fragment_without_a_length_is_read_up_to_the_bound() {
        let dir = tempfile::tempdir().expect("tmp");
        let fifo = dir.path().join("pipe.yaml");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: mkfifo on a NUL-terminated path; no memory is shared.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                use std::io::Write;
                // Blocks until the loader opens it; a comment line repeated: valid YAML.
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&fifo)
                    .expect("open");
                let line = format!("#{}\n", "x".repeat(1023));
                for _ in 0..(2 * MAX_FRAGMENT_BYTES / 1024) {
                    if f.write_all(line.as_bytes()).is_err() {
                        break; // the reader stopped at the bound
                    }
                }
            })
        };
        let e = load(dir.path(), "pipe.yaml");
        assert!(e.contains("pipe.yaml"), "{e}");
        assert!(
            e.contains(&format!("more than {MAX_FRAGMENT_BYTES}")),
            "{e}"
        );
        writer.join().expect("writer");
    }

    /// Nesting in a fragment is bounded by the parser (its recursion limit) and refused
    /// at a line of the fragment, quickly: flow and block nesting 300,000 deep.
    #[test]
    fn a_deeply_nested_fragment_is_refused_at_its_line() {
        let dir = tempfile::tempdir().expect("tmp");
        let n = 300_000;
        for (name, text) in [
            (
                "flow.yaml",
                format!("devices: {}{}\n", "[".repeat(n), "]".repeat(n)),
            ),
            ("block.yaml", format!("devices:\n{}x\n", "- ".repeat(n))),
        ] {
            std::fs::write(dir.path().join(name), &text).expect("write");
            let e = load(dir.path(), name);
            assert!(e.contains(&format!("{name}:")), "{e}");
        }
    }
}
