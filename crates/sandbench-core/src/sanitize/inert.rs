//! One exit for untrusted text (issue 42). The records that carry what a
//! program produced (the run report, the run log's entry, the gauntlet's
//! matrix, the shared report) serialize only through [`Inert`]: a serde
//! `Serializer` that hands every string and every map key through
//! [`json_text`] on its way to the real serializer, whatever the field, so a
//! field added tomorrow cannot skip it. Markup has its own inert forms
//! ([`html_text`], [`html_block`], [`xml_text`]) that the HTML page and
//! every SVG are written with.
//!
//! What inert means, per output:
//! - **JSON** (and anything else serde writes): every hidden character
//!   ([`super::is_hidden`]: C0 and C1 controls, DEL, bidi, zero-width, tag
//!   and other invisible characters, U+2028/U+2029) is shown by name (`␛`,
//!   `^M`, `<U+202E>`); newline and tab stay, which JSON escapes anyway.
//!   Single-line fields are made single-line where they are created.
//! - **HTML**: the JSON form (a block) or [`super::inert_line`] (a line),
//!   then `& < > " '` escaped, and Unicode's noncharacters shown by name.
//! - **SVG/XML**: one line, [`super::inert_line`]; noncharacters (U+FFFE,
//!   U+FFFF, … which XML 1.0 forbids) shown by name; `& < > " '` escaped, so
//!   neither markup, nor `]]>`, nor an entity the program wrote as text acts.

use std::borrow::Cow;

use serde::ser::{self, Serialize, Serializer};

use super::{inert_line, is_hidden, visible_controls};

/// Whether a string needs the JSON pass: it holds a hidden character other
/// than newline and tab.
pub fn needs_inert(s: &str) -> bool {
    s.chars().any(|c| c != '\n' && c != '\t' && is_hidden(c))
}

/// A string as a serialized record carries it: hidden characters shown by
/// name, newlines and tabs kept. Inert text comes back as it is (the pass is
/// idempotent), so a record serialized twice reads the same.
pub fn json_text(s: &str) -> Cow<'_, str> {
    if needs_inert(s) {
        Cow::Owned(visible_controls(s.as_bytes()))
    } else {
        Cow::Borrowed(s)
    }
}

/// A noncharacter: U+FDD0–FDEF and the last two of every plane. XML 1.0
/// forbids U+FFFE and U+FFFF outright; none of them is text.
fn is_nonchar(c: char) -> bool {
    let u = c as u32;
    (0xFDD0..=0xFDEF).contains(&u) || u & 0xFFFE == 0xFFFE
}

/// `& < > " '` escaped and noncharacters named: text (ours or already
/// inert) for HTML or SVG, in an element or a quoted attribute.
pub(crate) fn escape_markup(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if is_nonchar(c) => {
                use std::fmt::Write;
                let _ = write!(out, "&lt;U+{:04X}&gt;", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// One line of untrusted text for HTML: inert, cut at `max_chars`, escaped.
pub fn html_text(s: &str, max_chars: usize) -> String {
    escape_markup(&inert_line(s, max_chars))
}

/// A block of untrusted output for HTML (`<pre>`): lines and tabs kept,
/// everything else hidden shown by name, escaped.
pub fn html_block(s: &str) -> String {
    escape_markup(&visible_controls(s.as_bytes()))
}

/// One line of untrusted text for SVG (text content or an attribute value):
/// inert, cut at `max_chars`, XML-escaped; always well-formed XML 1.0.
pub fn xml_text(s: &str, max_chars: usize) -> String {
    escape_markup(&inert_line(s, max_chars))
}

/// `value` serialized with every string and key made inert ([`json_text`]):
/// the `Serialize` of the records that carry a program's text.
pub fn serialize<T: ?Sized + Serialize, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    value.serialize(Inert(s))
}

/// The serializer adapter: strings, chars and keys inert, everything else
/// passed on as it is.
pub struct Inert<S>(pub S);

/// A value of a compound (an element, a field, a key) on its way through
/// [`Inert`].
struct Via<'a, T: ?Sized>(&'a T);

impl<T: ?Sized + Serialize> Serialize for Via<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(Inert(s))
    }
}

/// A compound serializer of the wrapped one, whose parts go through [`Via`].
pub struct Compound<C>(C);

impl<S: Serializer> Serializer for Inert<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = Compound<S::SerializeSeq>;
    type SerializeTuple = Compound<S::SerializeTuple>;
    type SerializeTupleStruct = Compound<S::SerializeTupleStruct>;
    type SerializeTupleVariant = Compound<S::SerializeTupleVariant>;
    type SerializeMap = Compound<S::SerializeMap>;
    type SerializeStruct = Compound<S::SerializeStruct>;
    type SerializeStructVariant = Compound<S::SerializeStructVariant>;

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
    fn serialize_str(self, v: &str) -> Result<S::Ok, S::Error> {
        self.0.serialize_str(&json_text(v))
    }
    fn serialize_char(self, v: char) -> Result<S::Ok, S::Error> {
        let mut b = [0u8; 4];
        self.serialize_str(v.encode_utf8(&mut b))
    }
    fn serialize_bool(self, v: bool) -> Result<S::Ok, S::Error> {
        self.0.serialize_bool(v)
    }
    fn serialize_i8(self, v: i8) -> Result<S::Ok, S::Error> {
        self.0.serialize_i8(v)
    }
    fn serialize_i16(self, v: i16) -> Result<S::Ok, S::Error> {
        self.0.serialize_i16(v)
    }
    fn serialize_i32(self, v: i32) -> Result<S::Ok, S::Error> {
        self.0.serialize_i32(v)
    }
    fn serialize_i64(self, v: i64) -> Result<S::Ok, S::Error> {
        self.0.serialize_i64(v)
    }
    fn serialize_i128(self, v: i128) -> Result<S::Ok, S::Error> {
        self.0.serialize_i128(v)
    }
    fn serialize_u8(self, v: u8) -> Result<S::Ok, S::Error> {
        self.0.serialize_u8(v)
    }
    fn serialize_u16(self, v: u16) -> Result<S::Ok, S::Error> {
        self.0.serialize_u16(v)
    }
    fn serialize_u32(self, v: u32) -> Result<S::Ok, S::Error> {
        self.0.serialize_u32(v)
    }
    fn serialize_u64(self, v: u64) -> Result<S::Ok, S::Error> {
        self.0.serialize_u64(v)
    }
    fn serialize_u128(self, v: u128) -> Result<S::Ok, S::Error> {
        self.0.serialize_u128(v)
    }
    fn serialize_f32(self, v: f32) -> Result<S::Ok, S::Error> {
        self.0.serialize_f32(v)
    }
    fn serialize_f64(self, v: f64) -> Result<S::Ok, S::Error> {
        self.0.serialize_f64(v)
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<S::Ok, S::Error> {
        self.0.serialize_bytes(v)
    }
    fn serialize_none(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_none()
    }
    fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> Result<S::Ok, S::Error> {
        self.0.serialize_some(&Via(v))
    }
    fn serialize_unit(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit()
    }
    fn serialize_unit_struct(self, name: &'static str) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit_struct(name)
    }
    fn serialize_unit_variant(self, name: &'static str, i: u32, variant: &'static str) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit_variant(name, i, variant)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, name: &'static str, v: &T) -> Result<S::Ok, S::Error> {
        self.0.serialize_newtype_struct(name, &Via(v))
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        name: &'static str,
        i: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_newtype_variant(name, i, variant, &Via(v))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        self.0.serialize_seq(len).map(Compound)
    }
    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        self.0.serialize_tuple(len).map(Compound)
    }
    fn serialize_tuple_struct(self, name: &'static str, len: usize) -> Result<Self::SerializeTupleStruct, S::Error> {
        self.0.serialize_tuple_struct(name, len).map(Compound)
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        i: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        self.0.serialize_tuple_variant(name, i, variant, len).map(Compound)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        self.0.serialize_map(len).map(Compound)
    }
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Self::SerializeStruct, S::Error> {
        self.0.serialize_struct(name, len).map(Compound)
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        i: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        self.0.serialize_struct_variant(name, i, variant, len).map(Compound)
    }
}

impl<C: ser::SerializeSeq> ser::SerializeSeq for Compound<C> {
    type Ok = C::Ok;
    type Error = C::Error;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), C::Error> {
        self.0.serialize_element(&Via(v))
    }
    fn end(self) -> Result<C::Ok, C::Error> {
        self.0.end()
    }
}

impl<C: ser::SerializeTuple> ser::SerializeTuple for Compound<C> {
    type Ok = C::Ok;
    type Error = C::Error;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), C::Error> {
        self.0.serialize_element(&Via(v))
    }
    fn end(self) -> Result<C::Ok, C::Error> {
        self.0.end()
    }
}

impl<C: ser::SerializeTupleStruct> ser::SerializeTupleStruct for Compound<C> {
    type Ok = C::Ok;
    type Error = C::Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), C::Error> {
        self.0.serialize_field(&Via(v))
    }
    fn end(self) -> Result<C::Ok, C::Error> {
        self.0.end()
    }
}

impl<C: ser::SerializeTupleVariant> ser::SerializeTupleVariant for Compound<C> {
    type Ok = C::Ok;
    type Error = C::Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), C::Error> {
        self.0.serialize_field(&Via(v))
    }
    fn end(self) -> Result<C::Ok, C::Error> {
        self.0.end()
    }
}

impl<C: ser::SerializeMap> ser::SerializeMap for Compound<C> {
    type Ok = C::Ok;
    type Error = C::Error;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, k: &T) -> Result<(), C::Error> {
        self.0.serialize_key(&Via(k))
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), C::Error> {
        self.0.serialize_value(&Via(v))
    }
    fn end(self) -> Result<C::Ok, C::Error> {
        self.0.end()
    }
}

// Field names are sandbench's own (`&'static str` from the derive): only
// the values go through the pass.
impl<C: ser::SerializeStruct> ser::SerializeStruct for Compound<C> {
    type Ok = C::Ok;
    type Error = C::Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, v: &T) -> Result<(), C::Error> {
        self.0.serialize_field(key, &Via(v))
    }
    fn skip_field(&mut self, key: &'static str) -> Result<(), C::Error> {
        self.0.skip_field(key)
    }
    fn end(self) -> Result<C::Ok, C::Error> {
        self.0.end()
    }
}

impl<C: ser::SerializeStructVariant> ser::SerializeStructVariant for Compound<C> {
    type Ok = C::Ok;
    type Error = C::Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, v: &T) -> Result<(), C::Error> {
        self.0.serialize_field(key, &Via(v))
    }
    fn skip_field(&mut self, key: &'static str) -> Result<(), C::Error> {
        self.0.skip_field(key)
    }
    fn end(self) -> Result<C::Ok, C::Error> {
        self.0.end()
    }
}

/// A record whose `Serialize` is [`serialize`] over its derived one: the
/// derive is kept as inherent functions (`#[serde(remote = "Self")]`) and
/// only these impls are the type's `Serialize` and `Deserialize`, so nothing
/// can write the record raw.
macro_rules! inert_serialize {
    ($t:ty) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                struct Raw<'a>(&'a $t);
                impl serde::Serialize for Raw<'_> {
                    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                        <$t>::serialize(self.0, s)
                    }
                }
                $crate::sanitize::inert::serialize(&Raw(self), s)
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                <$t>::deserialize(d)
            }
        }
    };
}
pub(crate) use inert_serialize;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_string_and_key_of_a_serialized_value_is_inert() {
        #[derive(serde::Serialize)]
        enum E {
            V { s: String },
            T(String, char),
        }
        #[derive(serde::Serialize)]
        struct R {
            a: String,
            m: std::collections::BTreeMap<String, Vec<Option<String>>>,
            e: Vec<E>,
            j: serde_json::Value,
        }
        let evil = "x\x1b]52;c;aGk=\x07\u{9b}2J\u{202e}\u{200b}\u{e0041}\u{2028}\r\n\t";
        let r = R {
            a: evil.into(),
            m: [(evil.to_string(), vec![Some(evil.to_string()), None])].into(),
            e: vec![E::V { s: evil.into() }, E::T(evil.into(), '\u{202e}')],
            j: serde_json::json!({ evil: [evil] }),
        };
        let mut out = vec![];
        serialize(&r, &mut serde_json::Serializer::new(&mut out)).unwrap();
        let text = String::from_utf8(out).unwrap();
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut strings = vec![];
        fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
            match v {
                serde_json::Value::String(s) => out.push(s.clone()),
                serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
                serde_json::Value::Object(o) => o.iter().for_each(|(k, x)| {
                    out.push(k.clone());
                    walk(x, out)
                }),
                _ => {}
            }
        }
        walk(&back, &mut strings);
        assert_eq!(strings.len(), 15, "{text}");
        for s in &strings {
            assert!(!needs_inert(s), "{s:?} in {text}");
        }
        let want = "x␛]52;c;aGk=^G<U+009B>2J<U+202E><U+200B><U+E0041><U+2028>^M\n\t";
        assert_eq!(back["a"], want);
        assert_eq!(back["e"][1]["T"][1], "<U+202E>");
        assert_eq!(json_text(want), want, "inert text stays as it is");
    }

    #[test]
    fn markup_forms_escape_and_hold_no_hidden_or_noncharacter() {
        let evil = "</script><svg onload=alert(1)>]]>&#27;\u{ffff}\u{fffe}\u{fdd0}\u{1fffe}\x1b\u{202e}\n";
        for out in [html_text(evil, 200), html_block(evil), xml_text(evil, 200)] {
            assert!(!out.contains('<') && !out.contains('>') && !out.contains("]]>"), "{out}");
            assert!(!out.contains("&#27;"), "an entity the program wrote stays text: {out}");
            assert!(out.contains("&lt;/script&gt;") && out.contains("&amp;#27;"), "{out}");
            assert!(out.contains("&lt;U+FFFF&gt;") && out.contains("&lt;U+1FFFE&gt;"), "{out}");
            assert!(out.chars().all(|c| c == '\n' || !(is_hidden(c) || is_nonchar(c))), "{out:?}");
        }
        assert!(xml_text(evil, 200).ends_with("␤"), "one line");
    }
}
