//! The one reader and writer of YAML. Every text from outside — files given to the CLI,
//! the JSS's bodies and artifacts, token files, topologies — is read by one `serde-saphyr`
//! parse that applies the budgets of `api::yaml_budget` while it builds the values, so a
//! text over budget stops at the breach and nothing else parses it.
//!
//! A document is read into a [`Node`] tree that keeps where each value stands; typed
//! values are read from the tree ([`Node::to`]), so a wrong type names its field path,
//! line and column. Scalars follow YAML 1.2: `yes`, `on` and `no` are strings, and a
//! plain scalar read as a string keeps its text (`version: 1.10` is `"1.10"`, `cpu: 1` a
//! quantity of `1`); an empty value reads as an empty list or mapping where one is
//! expected. Pure.

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Unexpected, Visitor};
use serde::{Deserialize, Serialize};
use serde_saphyr::MessageFormatter;

use super::yaml_budget::{self, OverBudget};

/// Why a YAML text could not be read at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// Larger, deeper or more aliased than any resource needs.
    #[error(transparent)]
    OverBudget(#[from] OverBudget),
    /// Not well-formed YAML.
    #[error("broken YAML at line {line}, column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
}

/// Why a YAML text could not be read as the value expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum YamlError {
    #[error(transparent)]
    Read(#[from] ReadError),
    /// More than the one document expected.
    #[error("expected one YAML document, found {found}")]
    NotOneDocument { found: usize },
    /// Well-formed, but not the value expected.
    #[error(transparent)]
    Field(#[from] FieldError),
}

/// A value that does not fit the type read: where it stands and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}{}", field_prefix(.field), place(*.line, *.column))]
pub struct FieldError {
    /// The field path (`spec.template.spec.containers[0].image`); none for the document.
    pub field: Option<String>,
    pub message: String,
    pub line: Option<usize>,
    pub column: Option<usize>,
}

fn field_prefix(field: &Option<String>) -> String {
    field.as_ref().map(|f| format!("{f}: ")).unwrap_or_default()
}

fn place(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" at line {l} column {c}"),
        _ => String::new(),
    }
}

/// Every document of `text` that is not empty, in order.
pub fn read_documents(text: &str) -> Result<Vec<Node>, ReadError> {
    yaml_budget::check_size(text)?;
    let mut docs: Vec<Node> =
        serde_saphyr::from_multiple_with_options(text, yaml_budget::options())
            .map_err(|e| parse_error(&e))?;
    for d in &mut docs {
        d.keep_text(text);
    }
    Ok(docs)
}

/// The one document of `text` as a `T`; an empty text reads as an empty value (`None`
/// for an `Option`).
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    let mut docs = read_documents(text)?;
    let doc = match docs.len() {
        0 => Node::empty(),
        1 => docs.remove(0),
        found => return Err(YamlError::NotOneDocument { found }),
    };
    Ok(doc.to()?)
}

/// Every non-empty document of `text`, each as a `T`.
pub fn documents<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, YamlError> {
    read_documents(text)?
        .iter()
        .map(|d| d.to().map_err(YamlError::from))
        .collect()
}

/// `value` as a YAML document. Strings with line breaks are written as literal blocks;
/// long ones stay on one line.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    let options = serde_saphyr::ser_options! { folded_wrap_chars: usize::MAX };
    serde_saphyr::to_string_with_options(value, options)
}

fn parse_error(e: &serde_saphyr::Error) -> ReadError {
    if let Some(b) = yaml_budget::breach(e) {
        return ReadError::OverBudget(b);
    }
    let (line, column) = e
        .location()
        .map(|l| (l.line() as usize, l.column() as usize))
        .unwrap_or((0, 0));
    let message = serde_saphyr::UserMessageFormatter
        .format_message(yaml_budget::innermost(e))
        .into_owned();
    ReadError::Syntax {
        line,
        column,
        message,
    }
}

/// One YAML node as read: its value and where it stands.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    value: Value,
    /// 1-based; 0 when unknown. An alias stands where it is used.
    line: usize,
    column: usize,
    /// Where the text of a scalar that is not a string was defined (byte range), until
    /// `keep_text` copies it out.
    span: Option<(usize, usize)>,
    /// A plain scalar's own text (`0755`, `1.10`, `~`), for reading it as a string.
    text: Option<Box<str>>,
}

#[derive(Clone, Debug, PartialEq)]
enum Value {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Node {
    fn empty() -> Node {
        Node {
            value: Value::Null,
            line: 0,
            column: 0,
            span: None,
            text: Some("".into()),
        }
    }

    /// The node as a `T`, naming the field, line and column of what does not fit.
    pub fn to<T: DeserializeOwned>(&self) -> Result<T, FieldError> {
        T::deserialize(At {
            node: self,
            path: &Path::Root,
        })
        .map_err(DeError::into_field_error)
    }

    /// The node as JSON. Mapping keys must be scalars; they become their text.
    pub fn to_json(&self) -> Result<serde_json::Value, FieldError> {
        self.to()
    }

    /// The text of a scalar that is not a string: `1.10` stays `1.10`.
    fn scalar_text(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            Value::Seq(_) | Value::Map(_) => None,
            _ => Some(self.text.as_deref().unwrap_or_default()),
        }
    }

    fn keep_text(&mut self, source: &str) {
        if let Some((start, len)) = self.span.take() {
            let raw = source.get(start..start + len).unwrap_or_default().trim();
            self.text = Some(raw.into());
        }
        match &mut self.value {
            Value::Seq(items) => items.iter_mut().for_each(|n| n.keep_text(source)),
            Value::Map(entries) => entries.iter_mut().for_each(|(k, v)| {
                k.keep_text(source);
                v.keep_text(source);
            }),
            _ => {}
        }
    }

    fn unexpected(&self) -> Unexpected<'_> {
        match &self.value {
            Value::Null => Unexpected::Unit,
            Value::Bool(b) => Unexpected::Bool(*b),
            Value::Int(i) => Unexpected::Signed(*i),
            Value::UInt(u) => Unexpected::Unsigned(*u),
            Value::Float(f) => Unexpected::Float(*f),
            Value::Str(s) => Unexpected::Str(s),
            Value::Seq(_) => Unexpected::Seq,
            Value::Map(_) => Unexpected::Map,
        }
    }

    /// An empty plain value (`env:` with nothing after it), which reads as an empty list
    /// or mapping.
    fn is_blank(&self) -> bool {
        matches!(self.value, Value::Null) && self.text.as_deref().is_some_and(str::is_empty)
    }
}

/// Stack left below which a level of nesting continues on a new segment. The budget
/// bounds nesting at 64, but one level of saphyr's parse takes up to 60 KiB of stack in a
/// debug build (8 KiB in release): 64 levels would overflow a 2 MiB thread (a tokio
/// worker's, a test's) and abort the process.
const STACK_RED_ZONE: usize = 256 * 1024;
/// The size of each new segment.
const STACK_SEGMENT: usize = 4 * 1024 * 1024;

/// Built by saphyr's parse: every node with its place (`Spanned`).
impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        let spanned = stacker::maybe_grow(STACK_RED_ZONE, STACK_SEGMENT, || {
            serde_saphyr::Spanned::<Value>::deserialize(d)
        })?;
        let at = spanned.referenced;
        let defined = spanned.defined.span();
        let span = match spanned.value {
            Value::Str(_) | Value::Seq(_) | Value::Map(_) => None,
            _ => defined
                .byte_offset()
                .zip(defined.byte_len())
                .map(|(o, l)| (o as usize, l as usize)),
        };
        Ok(Node {
            value: spanned.value,
            line: at.line() as usize,
            column: at.column() as usize,
            span,
            text: None,
        })
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::UInt(v))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Value, E> {
        Ok(Value::Float(v as f64))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Value, E> {
        Ok(Value::Float(v as f64))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Value, E> {
        String::from_utf8(v.to_vec())
            .map(Value::Str)
            .map_err(|_| E::custom("binary data that is not UTF-8 text"))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(n) = seq.next_element::<Node>()? {
            items.push(n);
        }
        Ok(Value::Seq(items))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry::<Node, Node>()? {
            entries.push(entry);
        }
        Ok(Value::Map(entries))
    }
}

/// Where a node stands in its document, for messages: `spec.containers[0].image`.
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Key(Path::Root, k) => f.write_str(k),
            Path::Key(p, k) => write!(f, "{p}.{k}"),
            Path::Index(p, i) => write!(f, "{p}[{i}]"),
        }
    }
}

/// An error while reading typed values from the tree; placed at the innermost node.
#[derive(Debug)]
struct DeError {
    message: String,
    /// (path, line, column) of the node it arose at, once known.
    at: Option<(String, usize, usize)>,
}

impl DeError {
    fn into_field_error(self) -> FieldError {
        let (field, line, column) = self.at.unwrap_or_default();
        FieldError {
            field: (!field.is_empty()).then_some(field),
            message: self.message,
            line: (line > 0).then_some(line),
            column: (line > 0).then_some(column),
        }
    }
}

impl std::fmt::Display for DeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        DeError {
            message: msg.to_string(),
            at: None,
        }
    }
}

/// A node being read, and its path.
#[derive(Clone, Copy)]
struct At<'de, 'p> {
    node: &'de Node,
    path: &'p Path<'p>,
}

impl<'de> At<'de, '_> {
    /// The node's own value, whatever was asked for.
    fn visit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let r = match &self.node.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Int(i) => visitor.visit_i64(*i),
            Value::UInt(u) => visitor.visit_u64(*u),
            Value::Float(f) => visitor.visit_f64(*f),
            Value::Str(s) => visitor.visit_borrowed_str(s),
            Value::Seq(items) => visitor.visit_seq(Seq {
                items: items.iter().enumerate(),
                path: self.path,
            }),
            Value::Map(entries) => visitor.visit_map(Map {
                entries: entries.iter(),
                value: None,
                path: self.path,
            }),
        };
        r.map_err(|e| self.place(e))
    }

    fn place(&self, mut e: DeError) -> DeError {
        if e.at.is_none() {
            e.at = Some((self.path.to_string(), self.node.line, self.node.column));
        }
        e
    }
}

/// Whatever the visitor asked for, the node's own value.
macro_rules! as_any {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
            self.deserialize_any(visitor)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for At<'de, '_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        stacker::maybe_grow(STACK_RED_ZONE, STACK_SEGMENT, || self.visit(visitor))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.node.value {
            Value::Null => visitor.visit_none().map_err(|e| self.place(e)),
            _ => visitor.visit_some(self),
        }
    }

    /// A plain scalar read as a string is its text, as written.
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.node.scalar_text() {
            Some(s) => visitor.visit_borrowed_str(s).map_err(|e| self.place(e)),
            None => self.deserialize_any(visitor),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_any(visitor)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_any(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        if self.node.is_blank() {
            return visitor
                .visit_seq(Seq {
                    items: [].iter().enumerate(),
                    path: self.path,
                })
                .map_err(|e| self.place(e));
        }
        self.deserialize_any(visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        if self.node.is_blank() {
            return visitor
                .visit_map(Map {
                    entries: [].iter(),
                    value: None,
                    path: self.path,
                })
                .map_err(|e| self.place(e));
        }
        self.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_map(visitor)
    }

    /// `Variant`, or `{Variant: value}`.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let r = match (&self.node.value, self.node.scalar_text()) {
            (_, Some(name)) => {
                visitor.visit_enum(IntoDeserializer::<DeError>::into_deserializer(name))
            }
            (Value::Map(entries), _) if entries.len() == 1 => visitor.visit_enum(Variant {
                key: &entries[0].0,
                value: &entries[0].1,
                path: self.path,
            }),
            _ => Err(de::Error::invalid_type(self.node.unexpected(), &visitor)),
        };
        r.map_err(|e| self.place(e))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    as_any! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_u128 deserialize_f32 deserialize_f64 deserialize_bytes deserialize_byte_buf
    }
}

/// A mapping key's text, for paths.
fn key_text(key: &Node) -> &str {
    key.scalar_text().unwrap_or("?")
}

struct Seq<'de, 'p> {
    items: std::iter::Enumerate<std::slice::Iter<'de, Node>>,
    path: &'p Path<'p>,
}

impl<'de> de::SeqAccess<'de> for Seq<'de, '_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        let Some((i, node)) = self.items.next() else {
            return Ok(None);
        };
        let path = Path::Index(self.path, i);
        seed.deserialize(At { node, path: &path }).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct Map<'de, 'p> {
    entries: std::slice::Iter<'de, (Node, Node)>,
    value: Option<&'de (Node, Node)>,
    path: &'p Path<'p>,
}

impl<'de> de::MapAccess<'de> for Map<'de, '_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some(entry) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(entry);
        let key = &entry.0;
        if key.scalar_text().is_none() {
            let path = self.path.to_string();
            return Err(At {
                node: key,
                path: self.path,
            }
            .place(de::Error::custom(format!(
                "a mapping key must be a scalar{}",
                if path.is_empty() {
                    String::new()
                } else {
                    format!(" (in {path})")
                }
            ))));
        }
        let path = Path::Key(self.path, key_text(key));
        seed.deserialize(At {
            node: key,
            path: &path,
        })
        .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let (key, node) = self
            .value
            .take()
            .ok_or_else(|| <DeError as de::Error>::custom("a value before its key"))?;
        let path = Path::Key(self.path, key_text(key));
        seed.deserialize(At { node, path: &path })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// `{Variant: value}`.
struct Variant<'de, 'p> {
    key: &'de Node,
    value: &'de Node,
    path: &'p Path<'p>,
}

impl<'de, 'p> de::EnumAccess<'de> for Variant<'de, 'p> {
    type Error = DeError;
    type Variant = Self;

    fn variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<(T::Value, Self), DeError> {
        let path = Path::Key(self.path, key_text(self.key));
        let v = seed.deserialize(At {
            node: self.key,
            path: &path,
        })?;
        Ok((v, self))
    }
}

impl<'de> de::VariantAccess<'de> for Variant<'de, '_> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        let path = Path::Key(self.path, key_text(self.key));
        de::Deserialize::deserialize(At {
            node: self.value,
            path: &path,
        })
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        let path = Path::Key(self.path, key_text(self.key));
        seed.deserialize(At {
            node: self.value,
            path: &path,
        })
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, DeError> {
        let path = Path::Key(self.path, key_text(self.key));
        de::Deserializer::deserialize_seq(
            At {
                node: self.value,
                path: &path,
            },
            visitor,
        )
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let path = Path::Key(self.path, key_text(self.key));
        de::Deserializer::deserialize_map(
            At {
                node: self.value,
                path: &path,
            },
            visitor,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Container;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[test]
    fn plain_scalars_keep_their_text_where_a_string_is_wanted() {
        let m: BTreeMap<String, String> =
            from_str("a: 1.10\nb: 0755\nc: 0x1F\nd: true\ne: ~\nf:\n1: one\n").unwrap();
        let want = [
            ("1", "one"),
            ("a", "1.10"),
            ("b", "0755"),
            ("c", "0x1F"),
            ("d", "true"),
            ("e", "~"),
            ("f", ""),
        ];
        assert_eq!(
            m,
            want.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        );
        // The same text as JSON keeps the types YAML 1.2 gives it.
        let v: serde_json::Value =
            from_str("a: 1\nb: 1.5\nc: yes\nd: on\ne: ~\nf: \"2\"\n").unwrap();
        assert_eq!(
            v,
            json!({"a": 1, "b": 1.5, "c": "yes", "d": "on", "e": null, "f": "2"})
        );
        // YAML 1.1 booleans are not booleans.
        let e = from_str::<BTreeMap<String, bool>>("a: yes\n").unwrap_err();
        assert!(
            e.to_string().contains("a: invalid type: string \"yes\""),
            "{e}"
        );
    }

    #[test]
    fn quantities_read_from_numbers_and_text() {
        let c: Container = from_str(
            "name: a\nresources:\n  limits: {cpu: 1, memory: 1Gi}\n  requests: {cpu: 0.5, memory: 100M}\n",
        )
        .unwrap();
        let r = c.resources.unwrap();
        assert_eq!(r.limits.unwrap()["cpu"].0, "1");
        let requests = r.requests.unwrap();
        assert_eq!(requests["cpu"].0, "0.5");
        assert_eq!(requests["memory"].0, "100M");
    }

    #[test]
    fn a_wrong_type_names_its_field_line_and_column() {
        let e = from_str::<Container>("name: a\nports:\n  - containerPort: http\n").unwrap_err();
        let YamlError::Field(f) = &e else {
            panic!("{e}")
        };
        assert_eq!(f.field.as_deref(), Some("ports[0].containerPort"));
        assert_eq!((f.line, f.column), (Some(3), Some(20)));
        assert_eq!(
            e.to_string(),
            "ports[0].containerPort: invalid type: string \"http\", expected i32 at line 3 column 20"
        );
        // A missing field is placed at its mapping.
        #[derive(Debug, Deserialize)]
        struct Named {
            #[allow(dead_code)]
            name: String,
        }
        let e = from_str::<BTreeMap<String, Named>>("a: {image: a}\n").unwrap_err();
        assert_eq!(e.to_string(), "a: missing field `name` at line 1 column 4");
    }

    #[test]
    fn empty_values_read_as_empty_collections_or_none() {
        let m: BTreeMap<String, Vec<String>> = from_str("a:\nb: []\n").unwrap();
        assert_eq!(m["a"], Vec::<String>::new());
        let c: Container = from_str("name: a\nenv:\ncommand: ~\n").unwrap();
        assert_eq!((c.env, c.command), (None, None));
        assert_eq!(from_str::<Option<Container>>("").unwrap(), None);
        assert_eq!(from_str::<Option<Container>>("# nothing\n").unwrap(), None);
    }

    #[test]
    fn documents_aliases_and_merges() {
        let docs: Vec<serde_json::Value> =
            documents("---\na: &x {b: 1}\nc: *x\n---\n---\ny: &y {e: 2}\nd: {<<: *y, f: 3}\n")
                .unwrap();
        assert_eq!(
            docs,
            vec![
                json!({"a": {"b": 1}, "c": {"b": 1}}),
                json!({"y": {"e": 2}, "d": {"e": 2, "f": 3}})
            ]
        );
        assert_eq!(
            from_str::<serde_json::Value>("a: 1\n---\nb: 2\n").unwrap_err(),
            YamlError::NotOneDocument { found: 2 }
        );
        // An alias before its anchor is broken YAML.
        assert!(matches!(
            read_documents("a: *x\nb: &x 1\n"),
            Err(ReadError::Syntax { line: 1, .. })
        ));
    }

    #[test]
    fn broken_yaml_and_duplicate_keys_have_line_and_column() {
        let e = read_documents("a: 1\nb: [unclosed\n").unwrap_err();
        let ReadError::Syntax { line, column, .. } = e else {
            panic!("{e}")
        };
        assert!(line >= 2 && column > 0, "{line}:{column}");
        let e = read_documents("a: 1\na: 2\n").unwrap_err();
        assert!(matches!(e, ReadError::Syntax { line: 2, .. }), "{e}");
    }

    #[test]
    fn what_is_written_reads_back_the_same() {
        let v = json!({
            "s": ["yes", "on", "~", "null", "1", "0755", "1.10", "", " padded ", "a: b", "#x",
                  "multi\nline\n", "tab\there", "x".repeat(200)],
            "n": [1, -2, 1.5, true, null],
            "e": {"empty": {}, "list": []},
            "1": "numeric key"
        });
        let text = to_string(&v).unwrap();
        assert_eq!(from_str::<serde_json::Value>(&text).unwrap(), v, "{text}");
        assert!(text.contains("multi\n") || text.contains("|"), "{text}");
    }
}
