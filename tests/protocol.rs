//! placeholder, replaced by the protocol tests.
