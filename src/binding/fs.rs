use napi_derive::napi;

/// Version of the native addon, for diagnostics.
#[napi]
pub fn native_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
