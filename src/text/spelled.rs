//! A name the protocol defines (a delivery status, an outcome, a mode, an
//! event kind) is one enum with one spelling: `spelled!` writes, for each,
//! the variants' wire spellings once and derives from them `ALL`,
//! `as_str`, `Display`, `FromStr` and serde, so that the four cannot
//! disagree.

use std::fmt;

/// A string that spells none of a name's variants.
#[derive(Debug, PartialEq, Eq)]
pub struct Unknown {
    /// What was being read: "delivery status", "outcome", ...
    pub of: &'static str,
    pub text: String,
}

impl fmt::Display for Unknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {} {:?}", self.of, self.text)
    }
}

impl std::error::Error for Unknown {}

/// `spelled! { /// doc  pub enum Name ("what it is") { /// doc  Variant = "wire", ... } }`
macro_rules! spelled {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in the order of the protocol's table.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $wire, )+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::text::spelled::Unknown;

            fn from_str(s: &str) -> ::core::result::Result<$name, $crate::text::spelled::Unknown> {
                match s {
                    $( $wire => Ok($name::$variant), )+
                    _ => Err($crate::text::spelled::Unknown { of: $what, text: s.to_string() }),
                }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> ::core::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> ::core::result::Result<$name, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    spelled! {
        /// A name for the test.
        pub enum Sample ("sample") {
            One = "one",
            TwoWords = "two_words",
        }
    }

    #[test]
    fn serde_parse_and_display_spell_every_variant_alike() {
        for &v in Sample::ALL {
            let wire = serde_json::to_value(v).unwrap();
            assert_eq!(wire, serde_json::json!(v.as_str()));
            assert_eq!(serde_json::from_value::<Sample>(wire).unwrap(), v);
            assert_eq!(v.as_str().parse::<Sample>(), Ok(v));
            assert_eq!(v.to_string(), v.as_str());
        }
        let e = "TwoWords".parse::<Sample>().unwrap_err();
        assert_eq!(e.to_string(), "unknown sample \"TwoWords\"");
        assert!(serde_json::from_str::<Sample>(r#""three""#).is_err());
        assert!(serde_json::from_str::<Sample>("1").is_err());
    }
}
