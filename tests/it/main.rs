//! The one integration test binary (one binary links the crate once; see STYLE.md §7).

mod jcs;
mod lint;
