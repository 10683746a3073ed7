//! The bench's errors: a message for stderr, `bench: <message>`.

pub(crate) type R<T> = Result<T, String>;
