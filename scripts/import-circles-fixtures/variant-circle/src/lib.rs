pub mod error;
pub mod library;
