//! placeholder, replaced by the spool tests.
