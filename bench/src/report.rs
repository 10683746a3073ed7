//! BENCHMARKS.md: the generated section, and the text around it kept; one module per part of
//! the section (its targets, the sections' tables, section 9's), and the numbers they share.

pub(crate) mod format;
pub(crate) mod load;
pub(crate) mod machine;
pub(crate) mod markdown;
pub(crate) mod results;
pub(crate) mod sections;
pub(crate) mod targets;
