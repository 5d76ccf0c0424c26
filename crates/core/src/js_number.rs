//! A JS number option in JSON (docs/protocol.md): JSON has no infinities or NaN, so those travel
//! as the strings JS's `String()` makes of them; null or absent is `None`. The core then reads
//! the number as the napi binding reads the same JS value.

use serde::{Deserialize, Deserializer};

/// `deserialize_with` of an `Option<f64>` option (with `#[serde(default)]` for absent).
pub fn option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum JsNumber {
        Number(f64),
        Text(String),
    }
    Ok(match Option::<JsNumber>::deserialize(d)? {
        None => None,
        Some(JsNumber::Number(n)) => Some(n),
        Some(JsNumber::Text(t)) => Some(match t.as_str() {
            "Infinity" => f64::INFINITY,
            "-Infinity" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            _ => {
                let msg =
                    format!("expected a number, \"Infinity\", \"-Infinity\" or \"NaN\", got {t:?}");
                return Err(serde::de::Error::custom(msg));
            }
        }),
    })
}
