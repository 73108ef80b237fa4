//! [`named_enum!`](crate::named_enum): an enum of words declared once, each variant with
//! its stable name beside it; the list of every variant (`ALL`), the name of one
//! (`as_str`) and the variant a name means (`named`) are derived from that one list, so
//! a new word is written once and no list kept beside the enum can fall behind it.

/// Declares a field-less, `Copy` enum whose variants are words with stable names:
///
/// ```
/// gatecmd_core::named_enum! {
///     /// A colour.
///     #[derive(Debug, Clone, Copy, PartialEq, Eq)]
///     pub enum Colour {
///         /// The sky's.
///         Blue => "blue",
///         LightGreen => "light_green",
///     }
/// }
/// assert_eq!(Colour::ALL, [Colour::Blue, Colour::LightGreen]);
/// assert_eq!(Colour::LightGreen.as_str(), "light_green");
/// assert_eq!(Colour::named("blue"), Some(Colour::Blue));
/// assert_eq!(Colour::named("red"), None);
/// ```
///
/// The generated items: `ALL` (every variant, in declaration order), `as_str` (the
/// stable name), `named` (the variant with that name). A serde rename of the variants is
/// the type's own business: a unit test of that type checks it equal to `as_str`.
#[macro_export]
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $wire:literal, )*
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The variant's stable name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $wire, )*
                }
            }

            /// The variant whose stable name is `name`.
            pub fn named(name: &str) -> Option<$name> {
                Self::ALL.iter().copied().find(|v| v.as_str() == name)
            }
        }
    };
}
