//! An item's attributes as the store holds them: JSON text. A typed record is encoded
//! straight to it and decoded straight from it; a `serde_json::Value` is built only where code
//! reads the attributes as one (through `Deref`), and then once per item. This saves a record
//! the two passes through a `Value` that each write and each read would otherwise make.

use serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::sync::OnceLock;

/// An item's attributes: encoded JSON, a `Value`, or both (never neither).
pub struct Data {
    /// The JSON text, while it matches the value (a mutable borrow of the value drops it).
    bytes: Option<Vec<u8>>,
    /// A value given, or changed through a mutable borrow: then it is what the item holds.
    owned: Option<Value>,
    /// The value parsed from `bytes`, made on first use as a `Value`.
    parsed: OnceLock<Value>,
}

/// Parses stored text; text that is not JSON reads as `Null` (typed decoding reports it).
fn parse(bytes: Option<&[u8]>) -> Value {
    bytes.map_or(Value::Null, |b| {
        crate::json::from_bytes(b).unwrap_or_else(|e| {
            tracing::error!(error = %e, "stored item data is not JSON");
            Value::Null
        })
    })
}

impl Data {
    /// Attributes read from the store, as stored.
    pub fn from_bytes(bytes: Vec<u8>) -> Data {
        Data {
            bytes: Some(bytes),
            owned: None,
            parsed: OnceLock::new(),
        }
    }

    /// A typed record's attributes, encoded once.
    pub fn encode<T: Serialize + ?Sized>(rec: &T) -> serde_json::Result<Data> {
        serde_json::to_vec(rec).map(Data::from_bytes)
    }

    /// Decodes a typed record, from the JSON text if it is at hand.
    pub fn decode<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        match &self.bytes {
            Some(bytes) => crate::json::from_bytes(bytes),
            None => T::deserialize(self.value()),
        }
    }

    /// False only if the JSON text is at hand and does not hold `needle`: a search that lets
    /// a reader pass over an item without parsing it, where the attribute it looks for is
    /// always written when set.
    pub fn may_hold(&self, needle: &[u8]) -> bool {
        self.bytes
            .as_deref()
            .is_none_or(|b| memchr::memmem::find(b, needle).is_some())
    }

    /// The JSON text, encoding the value if that is all there is.
    pub fn encoded(&self) -> serde_json::Result<Cow<'_, [u8]>> {
        match &self.bytes {
            Some(bytes) => Ok(Cow::Borrowed(bytes)),
            None => serde_json::to_vec(self.value()).map(Cow::Owned),
        }
    }

    /// The attributes as a `Value`.
    pub fn into_value(self) -> Value {
        self.owned
            .or_else(|| self.parsed.into_inner())
            .unwrap_or_else(|| parse(self.bytes.as_deref()))
    }

    fn value(&self) -> &Value {
        match &self.owned {
            Some(v) => v,
            None => self.parsed.get_or_init(|| parse(self.bytes.as_deref())),
        }
    }
}

impl From<Value> for Data {
    fn from(value: Value) -> Data {
        Data {
            bytes: None,
            owned: Some(value),
            parsed: OnceLock::new(),
        }
    }
}

impl std::ops::Deref for Data {
    type Target = Value;
    fn deref(&self) -> &Value {
        self.value()
    }
}

impl std::ops::DerefMut for Data {
    fn deref_mut(&mut self) -> &mut Value {
        let bytes = self.bytes.take();
        let value = self
            .owned
            .take()
            .or_else(|| self.parsed.take())
            .unwrap_or_else(|| parse(bytes.as_deref()));
        self.owned.insert(value)
    }
}

impl Clone for Data {
    fn clone(&self) -> Data {
        Data {
            bytes: self.bytes.clone(),
            owned: self.owned.clone(),
            parsed: self.parsed.clone(),
        }
    }
}

impl std::fmt::Debug for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.value().fmt(f)
    }
}

impl PartialEq for Data {
    fn eq(&self, other: &Data) -> bool {
        self.value() == other.value()
    }
}

impl PartialEq<Value> for Data {
    fn eq(&self, other: &Value) -> bool {
        self.value() == other
    }
}

impl Serialize for Data {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Only text at hand can rule an attribute out; a value, or text changed through the
    /// value, may hold anything.
    #[test]
    fn only_text_at_hand_rules_a_name_out() {
        let mut d = Data::from_bytes(br#"{"outbox":[],"a":1}"#.to_vec());
        assert!(!d.may_hold(br#""outbox":[{"#));
        assert!(d.may_hold(br#""a":1"#));
        d["outbox"] = json!([{ "id": "e" }]);
        assert!(d.may_hold(br#""outbox":[{"#));
        assert!(Data::from(json!({})).may_hold(b"anything"));
    }

    #[test]
    fn a_record_goes_to_text_and_back_without_a_value() {
        let rec = json!({"a": 1, "b": ["x"]});
        let data = Data::encode(&rec).unwrap();
        assert!(data.parsed.get().is_none());
        assert_eq!(data.encoded().unwrap().as_ref(), br#"{"a":1,"b":["x"]}"#);
        let back: Value = data.decode().unwrap();
        assert_eq!(back, rec);
        assert!(data.parsed.get().is_none(), "decoding built no Value");
        assert_eq!(data["b"][0], "x");
    }

    #[test]
    fn a_change_through_the_value_is_what_gets_encoded() {
        let mut data = Data::from_bytes(br#"{"a":1}"#.to_vec());
        data["a"] = json!(2);
        assert_eq!(data.encoded().unwrap().as_ref(), br#"{"a":2}"#);
        assert_eq!(data.decode::<Value>().unwrap(), json!({"a": 2}));
        assert_eq!(Data::from(json!({"a": 2})), data);
        assert_eq!(data.into_value(), json!({"a": 2}));
    }

    #[test]
    fn corrupt_text_fails_its_decoding_and_reads_as_null() {
        let data = Data::from_bytes(b"{nope".to_vec());
        assert!(data.decode::<Value>().is_err());
        assert_eq!(*data, Value::Null);
    }
}
