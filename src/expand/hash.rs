//! The `pinterest.com/spec-hash` of a generated object: SHA-256 over a compact, canonical
//! binary encoding of the typed object, produced by a serde serializer that appends to a
//! reused byte buffer — no JSON text, no `serde_json::Value`, no per-token hasher calls.
//!
//! The encoding is self-delimiting (every value starts with a tag byte, strings carry
//! their length as LEB128, sequences and maps have end markers), so two different objects never
//! encode to the same bytes. It depends only on the object's content and field order, so
//! the hash is deterministic and changes whenever anything in the object changes.

use serde::Serialize;
use serde::ser;
use sha2::{Digest, Sha256};

/// First 16 hex characters (64 bits) of SHA-256 over `value`'s canonical encoding.
/// `buf` is scratch space, reused across calls.
pub(crate) fn spec_hash<T: Serialize + ?Sized>(value: &T, buf: &mut Vec<u8>) -> String {
    buf.clear();
    // The encoder cannot fail; a value whose Serialize impl fails on its own still hashes
    // what it wrote up to the failure, deterministically.
    let _ = value.serialize(Encoder(buf));
    let d = Sha256::digest(buf.as_slice());
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(16);
    for b in &d[..8] {
        hex.push(HEX[usize::from(b >> 4)] as char);
        hex.push(HEX[usize::from(b & 0xf)] as char);
    }
    hex
}

#[derive(Debug)]
pub(crate) struct Error;

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("spec-hash encoding failed")
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Error
    }
}

struct Encoder<'a>(&'a mut Vec<u8>);

impl Encoder<'_> {
    /// A length as LEB128: one byte for the usual short string, keeping the hashed input
    /// small.
    fn len(&mut self, mut n: usize) {
        while n >= 0x80 {
            self.0.push((n as u8) | 0x80);
            n >>= 7;
        }
        self.0.push(n as u8);
    }
    fn str(&mut self, s: &str) {
        self.0.push(b's');
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }
    fn tagged(&mut self, tag: u8, bytes: &[u8]) {
        self.0.push(tag);
        self.0.extend_from_slice(bytes);
    }
    /// Opens a variant's fields: its tag, its name and the bracket that opens them.
    fn variant(mut self, tag: u8, name: &str, open: u8) -> Self {
        self.0.push(tag);
        self.str(name);
        self.0.push(open);
        self
    }
    fn reborrow(&mut self) -> Encoder<'_> {
        Encoder(self.0)
    }
}

/// Narrow numbers are encoded as the widest of their family, so `1u8` and `1u64` hash alike.
macro_rules! widen {
    ($($($narrow:ident($from:ty)),+ => $wide:ident($to:ty);)+) => {
        $($(
            fn $narrow(self, v: $from) -> Result<(), Error> {
                self.$wide(<$to>::from(v))
            }
        )+)+
    };
}

/// A number written as a tag byte and its little-endian bytes.
macro_rules! tagged {
    ($($name:ident($t:ty, $tag:expr, $bytes:expr);)+) => {
        $(
            fn $name(mut self, v: $t) -> Result<(), Error> {
                self.tagged($tag, &($bytes)(v));
                Ok(())
            }
        )+
    };
}

/// A variant with fields: its tag, its name, then the bracket its fields open.
macro_rules! variant_like {
    ($($name:ident => $tag:expr, $open:expr;)+) => {
        $(
            fn $name(
                self,
                _: &'static str,
                _: u32,
                variant: &'static str,
                _: usize,
            ) -> Result<Self, Error> {
                Ok(self.variant($tag, variant, $open))
            }
        )+
    };
}

impl<'a> ser::Serializer for Encoder<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn serialize_bool(mut self, v: bool) -> Result<(), Error> {
        self.tagged(b'b', &[u8::from(v)]);
        Ok(())
    }
    widen! {
        serialize_i8(i8), serialize_i16(i16), serialize_i32(i32) => serialize_i64(i64);
        serialize_u8(u8), serialize_u16(u16), serialize_u32(u32) => serialize_u64(u64);
        serialize_f32(f32) => serialize_f64(f64);
    }
    tagged! {
        serialize_i64(i64, b'i', |v: i64| v.to_le_bytes());
        serialize_i128(i128, b'I', |v: i128| v.to_le_bytes());
        serialize_u64(u64, b'u', |v: u64| v.to_le_bytes());
        serialize_u128(u128, b'U', |v: u128| v.to_le_bytes());
        serialize_f64(f64, b'f', |v: f64| v.to_bits().to_le_bytes());
    }
    fn serialize_char(mut self, v: char) -> Result<(), Error> {
        self.str(v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_str(mut self, v: &str) -> Result<(), Error> {
        self.str(v);
        Ok(())
    }
    fn serialize_bytes(mut self, v: &[u8]) -> Result<(), Error> {
        self.0.push(b'B');
        self.len(v.len());
        self.0.extend_from_slice(v);
        Ok(())
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.0.push(b'n');
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        self.0.push(b'S');
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        self.0.push(b'0');
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(
        mut self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        self.0.push(b'v');
        self.str(variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        mut self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.0.push(b'V');
        self.str(variant);
        value.serialize(self)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self, Error> {
        self.0.push(b'[');
        Ok(self)
    }
    fn serialize_tuple(self, len: usize) -> Result<Self, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Self, Error> {
        self.serialize_seq(Some(len))
    }
    variant_like! {
        serialize_tuple_variant => b'T', b'[';
        serialize_struct_variant => b'W', b'{';
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self, Error> {
        self.0.push(b'{');
        Ok(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, Error> {
        self.serialize_map(None)
    }
}

macro_rules! seq_like {
    ($($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for Encoder<'_> {
            type Ok = ();
            type Error = Error;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
                value.serialize(self.reborrow())
            }
            fn end(self) -> Result<(), Error> {
                self.0.push(b']');
                Ok(())
            }
        }
    )*};
}
seq_like!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for Encoder<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        key.serialize(self.reborrow())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(self.reborrow())
    }
    fn end(self) -> Result<(), Error> {
        self.0.push(b'}');
        Ok(())
    }
}

macro_rules! struct_like {
    ($($trait:ident),*) => {$(
        impl ser::$trait for Encoder<'_> {
            type Ok = ();
            type Error = Error;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), Error> {
                self.str(key);
                value.serialize(self.reborrow())
            }
            fn end(self) -> Result<(), Error> {
                self.0.push(b'}');
                Ok(())
            }
        }
    )*};
}
struct_like!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn deterministic_and_sensitive() {
        let mut buf = Vec::new();
        let a: BTreeMap<&str, Vec<Option<&str>>> = [("k", vec![Some("ab"), None])].into();
        let b: BTreeMap<&str, Vec<Option<&str>>> = [("k", vec![Some("a"), Some("b")])].into();
        let ha = spec_hash(&a, &mut buf);
        assert_eq!(ha.len(), 16);
        assert_eq!(ha, spec_hash(&a, &mut buf));
        assert_ne!(ha, spec_hash(&b, &mut buf));
        // Strings carry their length: ("ab","") and ("a","b") differ.
        assert_ne!(
            spec_hash(&("ab", ""), &mut buf),
            spec_hash(&("a", "b"), &mut buf)
        );
    }
}
