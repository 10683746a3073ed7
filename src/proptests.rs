//! Property-based tests of every parser of untrusted input.
