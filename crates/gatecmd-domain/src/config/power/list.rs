//! What the list of backends in `mod.rs` becomes: the [`PowerConfig`] enum (one variant per
//! backend), the raw `power:` section with each backend's keys, and the dispatch from one to
//! the other. Written as a macro so that the list is the only place a backend is named.
//!
//! [`PowerConfig`]: super::PowerConfig

/// `backends! { module::Type { key: RawType, ... }, ... }` generates, for the backends
/// listed (each implementing `Backend`, its keys under `power:` given with what they hold):
///
/// - `PowerConfig`, one variant per backend holding its checked value, with `backend()`,
///   `describe()`, `commands()` and `spec()` passed to the backend, and `NAMES`;
/// - `RawPower`, the `power:` section as written: every backend's keys (each optional) and
///   `maskrom`, which stands beside any switch; unknown keys are refused;
/// - `PowerConfig::check`: exactly one backend's keys, all of them, or an error listing
///   every backend's form.
macro_rules! backends {
    ($(
        $(#[doc = $doc:literal])*
        $module:ident :: $ty:ident { $($key:ident : $raw:ty),+ $(,)? }
    ),+ $(,)?) => {
        /// A board's power switch: one of the backends.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum PowerConfig {
            $( $(#[doc = $doc])* $ty($module::$ty), )+
        }

        /// `boards[].power` as written: each backend's keys, and `maskrom` beside any.
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct RawPower {
            $( $( pub(crate) $key: Option<$raw>, )+ )+
            /// Holds the MaskROM button and resets the board (`boot_board {to: maskrom}`).
            pub(crate) maskrom: Option<commands::RawAction>,
            /// Sends the board to its recovery or flashing mode, and the family and mode
            /// that then enumerate (`boot_board {to: recovery}`).
            pub(crate) recovery: Option<commands::RawRecovery>,
        }

        impl PowerConfig {
            /// Every backend's name, in the list's order.
            pub const NAMES: &'static [&'static str] =
                &[$(<$module::$ty as Backend>::NAME),+];

            /// The switch written in `raw`: exactly one backend's keys, all of them, each
            /// checked by its backend. `maskrom` is the caller's (it is taken out first).
            #[allow(unused_parens)] // a backend with one key gets its value, not a tuple
            pub(crate) fn check(raw: RawPower, c: &mut Check<'_>) -> Option<PowerConfig> {
                // Which backends have any of their keys written.
                let written = [$( false $(|| raw.$key.is_some())+ ),+];
                if written.iter().filter(|w| **w).count() == 1 {
                    $(
                        if let ($(Some($key)),+) = ($(raw.$key),+) {
                            return <$module::$ty as Backend>::check(($($key),+), c)
                                .map(PowerConfig::$ty);
                        }
                    )+
                }
                let forms: &[&str] = &[$(<$module::$ty as Backend>::FORM),+];
                c.error("", format!("give exactly one switch: {}", forms.join("; or ")));
                None
            }

            /// Its backend's name (`uhubctl`), as `list_boards` shows it.
            pub fn backend(&self) -> &'static str {
                match self {
                    $( PowerConfig::$ty(_) => <$module::$ty as Backend>::NAME, )+
                }
            }

            /// What `gatecmd check` prints after `power `.
            pub fn describe(&self) -> String {
                match self {
                    $( PowerConfig::$ty(b) => b.describe(), )+
                }
            }

            /// The `commands:` entries it runs (they belong to the board).
            pub fn commands(&self) -> Vec<&str> {
                match self {
                    $( PowerConfig::$ty(b) => b.commands(), )+
                }
            }

            /// The command that switches the board on (`on`) or off.
            pub fn spec(&self, ctx: &Context<'_>, on: bool) -> Result<Spec, SpecError> {
                match self {
                    $( PowerConfig::$ty(b) => b.spec(ctx, on), )+
                }
            }
        }
    };
}

pub(super) use backends;
