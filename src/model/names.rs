//! Each enum's names written once: [`names!`] declares the canonical name and the aliases of every
//! variant and derives `ALL`, `name`, `parse` and `choices` from that one table, so parsers,
//! pickers, links and messages cannot disagree.

/// `names!(Type { Variant => "name" | "alias", ... })` implements, for an existing enum:
/// `ALL` (declaration order), `name()`, `parse()` (case-insensitive, surrounding blanks ignored,
/// `-` read as `_`) and `choices()` (the names, comma-separated, for messages).
macro_rules! names {
    ($T:ident { $($V:ident => $name:literal $(| $alias:literal)*),+ $(,)? }) => {
        impl $T {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$T] = &[$($T::$V),+];

            /// Canonical name (as the libraries and the CLI spell it).
            pub fn name(self) -> &'static str {
                match self {
                    $($T::$V => $name),+
                }
            }

            /// Parses the canonical name or an alias.
            pub fn parse(s: &str) -> Option<$T> {
                let n = s.trim().to_ascii_lowercase().replace('-', "_");
                $(
                    if n == $name $(|| n == $alias)* {
                        return Some($T::$V);
                    }
                )+
                None
            }

            /// The canonical names, comma-separated.
            pub fn choices() -> String {
                [$($name),+].join(", ")
            }
        }
    };
}

pub(crate) use names;
