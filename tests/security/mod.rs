//! The trust boundaries of docs/security.md: each way in refuses a caller
//! outside its row of the access table, and each attack that once got
//! through is pinned by a test named after it.

mod verify;
