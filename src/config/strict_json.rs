//! JSON read as a user means it: a key given twice in one object is an error, where
//! `serde_json` would keep the last value silently (`"lr": 0.05, "lr": 500` trains at 500).

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// What a duplicate key's message asks for.
pub const ONCE: &str = "each field may be given once";

/// Why a text is not strict JSON.
#[derive(Debug, thiserror::Error)]
pub enum StrictJsonError {
    /// The text is not JSON.
    #[error("not valid JSON: {0}")]
    Syntax(serde_json::Error),
    /// An object gives one key twice.
    #[error("{path}: given twice (line {line}); {ONCE}")]
    Duplicate {
        /// The key's path, as `client.lr` or `variants[1].set`.
        path: String,
        /// The line of the second one, from 1.
        line: usize,
    },
}

/// A file's bytes as text: UTF-8, with a byte-order mark ignored (RFC 8259 allows a reader
/// to, and some editors write one); anything else is refused with where it stops being UTF-8.
pub fn text(bytes: Vec<u8>) -> Result<String, String> {
    const BYTE_ORDER_MARK: &[u8] = b"\xEF\xBB\xBF";
    let bytes = match bytes.strip_prefix(BYTE_ORDER_MARK) {
        Some(rest) => rest.to_vec(),
        None => bytes,
    };
    String::from_utf8(bytes).map_err(|error| {
        let at = error.utf8_error().valid_up_to();
        let line = 1 + error.as_bytes()[..at]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        format!(
            "is not UTF-8 text: byte {at} (line {line}) is {:#04x}; save it as UTF-8",
            error.as_bytes()[at]
        )
    })
}

/// Reads `text` as one JSON value, refusing an object that gives a key twice.
pub fn parse(text: &str) -> Result<Value, StrictJsonError> {
    let duplicate = RefCell::new(None);
    let mut reader = serde_json::Deserializer::from_str(text);
    let value = Strict {
        path: String::new(),
        duplicate: &duplicate,
    }
    .deserialize(&mut reader)
    .and_then(|value| reader.end().map(|()| value));
    value.map_err(|error| match duplicate.into_inner() {
        Some(path) => StrictJsonError::Duplicate {
            path,
            line: error.line(),
        },
        None => StrictJsonError::Syntax(error),
    })
}

/// A value at `path` being read; a duplicate key found under it is left in `duplicate`.
struct Strict<'a> {
    path: String,
    duplicate: &'a RefCell<Option<String>>,
}

impl Strict<'_> {
    /// The value of the key `key` of the object being read.
    fn field(&self, key: &str) -> Self {
        self.at(match self.path.is_empty() {
            true => key.to_string(),
            false => format!("{}.{key}", self.path),
        })
    }

    /// The `index`-th item of the array being read.
    fn item(&self, index: usize) -> Self {
        self.at(format!("{}[{index}]", self.path))
    }

    fn at(&self, path: String) -> Self {
        Strict {
            path,
            duplicate: self.duplicate,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_string()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.item(items.len()))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let child = self.field(&key);
            if object.contains_key(&key) {
                let message = format!("{} given twice", child.path);
                *self.duplicate.borrow_mut() = Some(child.path);
                return Err(de::Error::custom(message));
            }
            let value = map.next_value_seed(child)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_serde_json_reads_to_the_bit() {
        let text = r#"{"a": [1, -2, 0.1, 1e-300, 18446744073709551615, "x", null, true],
            "b": {"c": 0.30000000000000004}}"#;
        let strict = parse(text).unwrap();
        assert_eq!(strict, serde_json::from_str::<Value>(text).unwrap());
        assert_eq!(
            strict["b"]["c"].as_f64().unwrap().to_bits(),
            0.300_000_000_000_000_04_f64.to_bits()
        );
    }

    #[test]
    fn a_key_given_twice_is_named_by_its_path_and_line() {
        let text = "{\"client\": {\"lr\": 0.05,\n \"lr\": 500}}";
        match parse(text).unwrap_err() {
            StrictJsonError::Duplicate { path, line } => {
                assert_eq!((path.as_str(), line), ("client.lr", 2));
            }
            other => panic!("{other}"),
        }
        let nested = r#"{"variants": [{"name": "a"}, {"set": {"seed": 1, "seed": 2}}]}"#;
        assert!(matches!(
            parse(nested).unwrap_err(),
            StrictJsonError::Duplicate { path, .. } if path == "variants[1].set.seed"
        ));
        assert!(matches!(
            parse(r#"{"seed": 1, "seed": 1}"#).unwrap_err(),
            StrictJsonError::Duplicate { path, .. } if path == "seed"
        ));
    }

    #[test]
    fn text_ignores_a_byte_order_mark_and_locates_bytes_that_are_not_utf8() {
        assert_eq!(text(b"\xEF\xBB\xBF{}".to_vec()).unwrap(), "{}");
        let refused = text(b"{\n\"a\": \"\xE9\"}".to_vec()).unwrap_err();
        assert!(refused.contains("byte 8 (line 2) is 0xe9"), "{refused}");
    }

    #[test]
    fn syntax_errors_and_trailing_text_stay_syntax_errors() {
        for text in ["{\"a\": 1", "{\"a\": 1} x", "", "[1,]"] {
            assert!(
                matches!(parse(text), Err(StrictJsonError::Syntax(_))),
                "{text:?}"
            );
        }
    }
}
