//! Source locations: the line of a key in YAML text.

/// Finds the line of a key in YAML text, for errors that relate several fields.
///
/// serde_yaml keeps no spans after parsing; this searches the text instead. It looks for
/// the list item whose `name:` is the given name and then the key within that item.
pub(crate) struct Locator<'a> {
    lines: Vec<&'a str>,
}

impl<'a> Locator<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Locator {
            lines: text.lines().collect(),
        }
    }

    fn indent(line: &str) -> usize {
        line.len() - line.trim_start_matches([' ', '-']).len()
    }

    fn key_of(line: &str) -> Option<&str> {
        let t = line.trim_start_matches([' ', '-']);
        let (k, _) = t.split_once(':')?;
        Some(k.trim().trim_matches(['"', '\'']))
    }

    /// `key:` after the first line that opens the top-level section `section:`.
    pub(crate) fn section_key(&self, section: &str, key: &str) -> Option<(usize, usize)> {
        let opening = format!("{section}:");
        let start = self.lines.iter().position(|l| l.starts_with(&opening))?;
        self.key_line(key, start)
    }

    /// Line and column (1-based) of the first `key:` at or after `from`.
    pub(crate) fn key_line(&self, key: &str, from: usize) -> Option<(usize, usize)> {
        self.lines
            .iter()
            .enumerate()
            .skip(from)
            .find_map(|(n, l)| (Self::key_of(l) == Some(key)).then(|| (n + 1, Self::indent(l) + 1)))
    }

    /// The first line whose value part contains `value`.
    pub(crate) fn value_line(&self, value: &str) -> Option<(usize, usize)> {
        self.lines.iter().enumerate().find_map(|(n, l)| {
            let col = l.find(value)?;
            (!l.trim_start().starts_with('#')).then_some((n + 1, col + 1))
        })
    }

    /// `key:` inside the list item whose `name:` is `name`.
    pub(crate) fn item_key(&self, name: &str, key: &str) -> Option<(usize, usize)> {
        self.item_key_nth(name, key, 0)
    }

    /// Like [`Self::item_key`], but `None` unless `key:` has a line of its own in the item
    /// (not when it sits in a flow mapping such as `console: {baud: 1}`).
    pub(crate) fn item_own_key(&self, name: &str, key: &str) -> Option<(usize, usize)> {
        let (line, col) = self.item_key(name, key)?;
        (Self::key_of(self.lines[line - 1]) == Some(key)).then_some((line, col))
    }

    /// `key: value` inside the item (for keys that repeat, such as `pattern`).
    pub(crate) fn item_value(&self, name: &str, key: &str, value: &str) -> Option<(usize, usize)> {
        let (start, _) = self.item_key(name, "name")?;
        self.lines
            .iter()
            .enumerate()
            .skip(start)
            .find_map(|(n, l)| {
                (Self::key_of(l) == Some(key) && l.contains(value))
                    .then(|| (n + 1, Self::indent(l) + 1))
            })
    }

    /// Like [`Self::item_key`], for the `nth` item with that name (0-based).
    pub(crate) fn item_key_nth(&self, name: &str, key: &str, nth: usize) -> Option<(usize, usize)> {
        let start = self
            .lines
            .iter()
            .enumerate()
            .filter(|(_, l)| {
                Self::key_of(l) == Some("name")
                    && l.split_once(':')
                        .map(|(_, v)| v.trim().trim_matches(['"', '\'']))
                        == Some(name)
            })
            .nth(nth)?
            .0;
        let item_indent = Self::indent(self.lines[start]);
        if key == "name" {
            return Some((start + 1, item_indent + 1));
        }
        for (n, l) in self.lines.iter().enumerate().skip(start + 1) {
            if l.trim().is_empty() || l.trim_start().starts_with('#') {
                continue;
            }
            if l.trim_start().starts_with('-')
                && Self::indent(l) <= item_indent
                && l.len() - l.trim_start().len() < item_indent
            {
                break;
            }
            if Self::indent(l) < item_indent {
                break;
            }
            if Self::key_of(l) == Some(key) {
                return Some((n + 1, Self::indent(l) + 1));
            }
        }
        Some((start + 1, item_indent + 1))
    }
}
