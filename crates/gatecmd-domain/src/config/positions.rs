//! Where each field of the YAML text is: a dotted path (`commands[1].binary`, the same
//! spelling a [`super::ConfigError`]'s `field` uses) mapped to the line and column of its
//! key, read from the parser's own event spans.
//!
//! serde gives the validator values without positions, and the checks that relate several
//! fields (an unknown device class, a duplicate name, a chunk larger than the body limit)
//! run after deserializing; they name the field they blame, and this index turns that name
//! into the place to jump to. Built from the same parser serde-saphyr deserializes with, so
//! the two never disagree about where a node is.

use std::collections::HashMap;

use serde_saphyr::granit_parser::{Event, Parser, Span};

/// Line and column (1-based) of a node.
pub(crate) type At = (usize, usize);

struct Entry {
    /// The key of a mapping entry, or the item itself in a sequence.
    key: At,
    /// Where the value starts (a mapping's or sequence's first token, or the scalar).
    value: Option<At>,
    /// The scalar's text as written (without quotes), for values read as text.
    text: Option<String>,
}

/// Field paths of one YAML document and where they are.
#[derive(Default)]
pub(crate) struct Positions {
    entries: Vec<(String, Entry)>,
    by_path: HashMap<String, usize>,
}

enum Frame {
    Map {
        path: String,
        key: Option<String>,
    },
    Seq {
        path: String,
        index: usize,
    },
    /// A complex (non-scalar) mapping key: nothing inside it is a field.
    Skip {
        depth: usize,
    },
}

fn at(span: &Span) -> At {
    (span.start.line(), span.start.col() + 1)
}

fn join_key(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

impl Positions {
    /// Indexes `text`. A syntax error ends the index where it is: the deserializer reports
    /// that error itself, with its own position.
    pub(crate) fn new(text: &str) -> Self {
        let mut p = Positions::default();
        let mut stack: Vec<Frame> = Vec::new();
        for event in Parser::new_from_str(text) {
            let Ok((event, span)) = event else { break };
            let (opens, closes) = match &event {
                Event::MappingStart(..) | Event::SequenceStart(..) => (true, false),
                Event::MappingEnd | Event::SequenceEnd => (false, true),
                Event::Scalar(..) | Event::Alias(..) | Event::UnresolvedAlias(..) => (false, false),
                // Stream and document markers, anchors and comments are not nodes.
                _ => continue,
            };
            if let Some(Frame::Skip { depth }) = stack.last_mut() {
                if opens {
                    *depth += 1;
                    continue;
                }
                if closes {
                    *depth -= 1;
                }
                if *depth == 0 {
                    // The key is complete; its value comes next.
                    stack.pop();
                }
                continue;
            }
            if closes {
                stack.pop();
                p.advance(&mut stack);
                continue;
            }
            // A key of the mapping on top, or a value (of a mapping entry or a sequence item).
            if let Some(Frame::Map {
                path,
                key: key @ None,
            }) = stack.last_mut()
            {
                match &event {
                    Event::Scalar(k, ..) => {
                        let full = join_key(path, k);
                        *key = Some(k.to_string());
                        p.insert(full, at(&span));
                    }
                    _ if opens => {
                        *key = Some("?".into());
                        stack.push(Frame::Skip { depth: 1 });
                    }
                    _ => *key = Some("?".into()),
                }
                continue;
            }
            let child = match stack.last() {
                None => String::new(),
                Some(Frame::Map { path, key }) => join_key(path, key.as_deref().unwrap_or("?")),
                Some(Frame::Seq { path, index }) => format!("{path}[{index}]"),
                Some(Frame::Skip { .. }) => unreachable!("handled above"),
            };
            if matches!(stack.last(), Some(Frame::Seq { .. })) {
                p.insert(child.clone(), at(&span));
            }
            if let Some(&i) = p.by_path.get(&child) {
                let e = &mut p.entries[i].1;
                e.value = Some(at(&span));
                if let Event::Scalar(v, ..) = &event {
                    e.text = Some(v.to_string());
                }
            }
            match &event {
                Event::MappingStart(..) => stack.push(Frame::Map {
                    path: child,
                    key: None,
                }),
                Event::SequenceStart(..) => stack.push(Frame::Seq {
                    path: child,
                    index: 0,
                }),
                _ => p.advance(&mut stack),
            }
        }
        p
    }

    fn insert(&mut self, path: String, key: At) {
        // A repeated key is the deserializer's error; the first one keeps the place.
        if self.by_path.contains_key(&path) {
            return;
        }
        self.by_path.insert(path.clone(), self.entries.len());
        self.entries.push((
            path,
            Entry {
                key,
                value: None,
                text: None,
            },
        ));
    }

    /// A value is complete: the mapping on top waits for its next key, the sequence for
    /// its next item.
    fn advance(&self, stack: &mut [Frame]) {
        match stack.last_mut() {
            Some(Frame::Map { key, .. }) => *key = None,
            Some(Frame::Seq { index, .. }) => *index += 1,
            _ => {}
        }
    }

    /// Where `path` is written, or else the nearest enclosing field that is (a key left
    /// out is blamed on the item or section that should hold it); `None` when not even
    /// the top-level section is in the file.
    pub(crate) fn at(&self, path: &str) -> Option<At> {
        let mut p = path;
        loop {
            if let Some(&i) = self.by_path.get(p) {
                return Some(self.entries[i].1.key);
            }
            p = parent(p)?;
        }
    }

    /// Where `path` itself is written, without falling back to its parents.
    pub(crate) fn exact(&self, path: &str) -> Option<At> {
        self.by_path.get(path).map(|&i| self.entries[i].1.key)
    }

    /// The scalar text written at `path`, as the parser read it (so `0x2207` and `2207`
    /// stay the digits the author typed, whatever number YAML makes of them).
    pub(crate) fn text(&self, path: &str) -> Option<&str> {
        let i = *self.by_path.get(path)?;
        self.entries[i].1.text.as_deref()
    }

    /// The first field, in file order, whose path satisfies `pred`.
    pub(crate) fn first(&self, pred: impl Fn(&str) -> bool) -> Option<At> {
        self.entries
            .iter()
            .find(|(p, _)| pred(p))
            .map(|(_, e)| e.key)
    }

    /// The field a deserializer error at `pos` concerns: the deepest field whose value
    /// starts there (a wrong type, a missing field), else the one whose key is there
    /// (an unknown key: reported as a field of its parent, which is what the key is wrong
    /// for).
    pub(crate) fn field_at(&self, pos: At) -> Option<(&str, bool)> {
        let deepest = |by_value: bool| {
            self.entries
                .iter()
                .filter(|(_, e)| {
                    if by_value {
                        e.value == Some(pos)
                    } else {
                        e.key == pos
                    }
                })
                .max_by_key(|(p, _)| p.len())
                .map(|(p, _)| p.as_str())
        };
        deepest(true)
            .map(|p| (p, true))
            .or_else(|| deepest(false).map(|p| (p, false)))
    }
}

/// `a.b[2].c` → `a.b[2]` → `a.b` → `a` → `None`.
pub(crate) fn parent(path: &str) -> Option<&str> {
    if path.is_empty() {
        return None;
    }
    let cut = path.rfind(['.', '['])?;
    Some(&path[..cut])
}
