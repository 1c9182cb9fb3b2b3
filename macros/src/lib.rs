//! kiln-macros (being written).
