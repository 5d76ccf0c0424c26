//! Thin napi bindings: argument conversion, error mapping, Buffers. No logic.

mod exec;
mod find;
mod fs;
mod grep;
