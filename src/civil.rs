//! A wall-clock date and time, as `sys::local_time` gives it.

/// A date and time of day on the wall clock, as `struct tm` holds it but
/// with the month from 1 and the full year.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}
