//! API types and the value syntax they share. No I/O here.

pub mod quantity;
pub mod validation;
