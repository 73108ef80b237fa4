//! A setting declared once. The `settings!` macro turns one declaration per section (the
//! top level, `limits:`, `leases:`, …) into its serde struct (the YAML keys and types, every
//! key optional with its default, unknown keys refused), its `Default`, its bounds'
//! checks, its docs/CONFIG.md rows and what a reload does with each key. What used to be
//! listed by hand beside the structs (the restart-only keys, the docs tables, the lock
//! manager's defaults) is derived from the declarations.
//!
//! A declaration reads:
//!
//! ```text
//! settings! {
//!     /// Resource limits; every one has a default.
//!     #[derive(Debug, Clone, Deserialize)]
//!     #[serde(deny_unknown_fields, default)]
//!     pub struct Limits {
//!         max_concurrent_children: usize {
//!             default: 16,
//!             check: at_least_one,
//!             docs: "children running at once, all clients together; further calls wait.",
//!         },
//!         session_idle_secs: u64 {
//!             default: 4 * 3600,
//!             note: "(4 h)",
//!             docs: "an idle 2025-11-25 session is closed after this long …",
//!             restart: "rmcp's session manager takes its keep-alive once, when the router is built",
//!         },
//!     }
//! }
//! ```
//!
//! Each key: its type and `default`; optionally `shown` (docs/CONFIG.md's default column,
//! when the value alone cannot say it: "this host's name"), `note` (words after the shown
//! value: "(4 h)"), `check` (a `fn(&T) -> Option<String>`: the refusal's message, or
//! `None`), `docs` (the row's meaning column, also the field's rustdoc) and `restart` (why a
//! reload cannot apply it; without it, a reload does). A key whose type is itself a
//! declared section (`limits: Limits`) nests that section's settings under its name.

use std::path::PathBuf;

/// One declared setting: its docs/CONFIG.md row and what a reload does with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// Its path in the file (`limits.max_output_bytes`; a top-level key alone).
    pub key: String,
    /// Its default as docs/CONFIG.md shows it.
    pub shown: String,
    /// What it means: docs/CONFIG.md's third column.
    pub docs: &'static str,
    /// Why a reload cannot apply it (it waits for a restart); `None`: a reload applies it.
    pub restart: Option<&'static str>,
}

impl Setting {
    /// Its section (`limits`; empty for the top level).
    pub fn section(&self) -> &str {
        self.key.rsplit_once('.').map_or("", |(s, _)| s)
    }

    /// Its name within its section (`max_output_bytes`).
    pub fn name(&self) -> &str {
        self.key.rsplit_once('.').map_or(&self.key, |(_, n)| n)
    }

    /// Its row in its section's table of docs/CONFIG.md.
    pub fn row(&self) -> String {
        format!("| `{}` | {} | {} |", self.name(), self.shown, self.docs)
    }
}

/// `key` under `prefix` (`limits` + `max_output_bytes`; no prefix at the top level).
pub fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// What a setting's type brings to its declaration: how its default is shown, and, for a
/// declared section, the settings nested in it.
pub trait Value {
    /// The value as docs/CONFIG.md's default column shows it (`16`, `` `auto` ``, `—`);
    /// `None` when the type cannot say (the declaration then gives `shown`).
    fn shown(&self) -> Option<String>;

    /// The settings of a section of this type, under `prefix`; none for a plain value.
    fn nested(_prefix: &str) -> Vec<Setting> {
        Vec::new()
    }

    /// The values as written of the restart-only settings in a section of this type.
    fn written(&self, _prefix: &str, _out: &mut Written) {}

    /// The refusals of the declared checks in a section of this type: `(key, message)`.
    fn refusals(&self, _prefix: &str) -> Vec<(String, String)> {
        Vec::new()
    }
}

macro_rules! shown_as_number {
    ($($t:ty),*) => {
        $(impl Value for $t {
            fn shown(&self) -> Option<String> {
                Some(self.to_string())
            }
        })*
    };
}
shown_as_number!(u32, u64, usize);

impl Value for bool {
    fn shown(&self) -> Option<String> {
        Some(format!("`{self}`"))
    }
}

impl Value for String {
    fn shown(&self) -> Option<String> {
        Some(format!("`{self}`"))
    }
}

impl Value for PathBuf {
    fn shown(&self) -> Option<String> {
        Some(format!("`{}`", self.display()))
    }
}

impl<T: Value> Value for Option<T> {
    fn shown(&self) -> Option<String> {
        match self {
            None => Some("—".into()),
            Some(v) => v.shown(),
        }
    }
}

impl<T> Value for Vec<T> {
    fn shown(&self) -> Option<String> {
        self.is_empty().then(|| "`[]`".into())
    }
}

/// The restart-only settings' values as written in one file, by key (`{:?}` of the value):
/// a reload compares them with the running configuration's to name the keys that wait for
/// a restart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written(Vec<(String, String)>);

impl Written {
    /// Records `key`'s value.
    pub fn record(&mut self, key: String, value: &impl std::fmt::Debug) {
        self.0.push((key, format!("{value:?}")));
    }

    /// `key`'s value as written (its default when the key is absent).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The check of a count or size that must be positive: "must be at least 1".
pub fn at_least_one<T: PartialEq + From<u8>>(v: &T) -> Option<String> {
    (*v == T::from(0)).then(|| "must be at least 1".to_string())
}

/// The check of a path that must be absolute.
#[allow(clippy::ptr_arg)] // a check takes its key's declared type
pub fn absolute(p: &PathBuf) -> Option<String> {
    (!p.is_absolute()).then(|| format!("{} is not an absolute path", p.display()))
}

/// Declares a section of settings (see the module's documentation for the form).
macro_rules! settings {
    // The default column: what the declaration says, or what the value says.
    (@shown $value:expr, $shown:expr) => { String::from($shown) };
    (@shown $value:expr) => { Value::shown(&$value).unwrap_or_default() };
    (@why $why:literal) => { Some($why) };
    (@why) => { None };
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $field:ident : $ty:ty {
                    default: $default:expr,
                    $(shown: $shown:expr,)?
                    $(note: $note:literal,)?
                    $(check: $check:expr,)?
                    docs: $docs:literal
                    $(, restart: $why:literal)?
                    $(,)?
                }
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $( #[doc = $docs] pub $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $( $field: $default, )* }
            }
        }

        impl $crate::config::declare::Value for $name {
            fn shown(&self) -> Option<String> {
                Some("see below".into())
            }

            fn nested(prefix: &str) -> Vec<$crate::config::declare::Setting> {
                use $crate::config::declare::{Setting, Value, join};
                let defaults = <$name as Default>::default();
                let mut out = Vec::new();
                $(
                    let key = join(prefix, stringify!($field));
                    let shown = $crate::config::declare::settings!(@shown defaults.$field $(, $shown)?);
                    $( let shown = format!("{shown} {}", $note); )?
                    out.push(Setting {
                        key: key.clone(),
                        shown,
                        docs: $docs,
                        restart: $crate::config::declare::settings!(@why $($why)?),
                    });
                    out.extend(<$ty as Value>::nested(&key));
                )*
                out
            }

            fn written(&self, prefix: &str, out: &mut $crate::config::declare::Written) {
                use $crate::config::declare::{Value, join};
                $(
                    $( let _: &str = $why; out.record(join(prefix, stringify!($field)), &self.$field); )?
                    Value::written(&self.$field, &join(prefix, stringify!($field)), out);
                )*
            }

            fn refusals(&self, prefix: &str) -> Vec<(String, String)> {
                // Each declared check's verdict on its key's value, in the section's order.
                let verdicts: Vec<(&str, Option<String>)> = vec![$($(
                    (stringify!($field), {
                        let check: fn(&$ty) -> Option<String> = $check;
                        check(&self.$field)
                    }),
                )?)*];
                verdicts
                    .into_iter()
                    .filter_map(|(key, refused)| {
                        Some(($crate::config::declare::join(prefix, key), refused?))
                    })
                    .collect()
            }
        }
    };
}

pub(crate) use settings;
