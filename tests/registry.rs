//! placeholder, replaced by the registry tests.
