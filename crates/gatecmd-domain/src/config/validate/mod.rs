//! Cross-field validation: raw YAML values turned into a [`super::Config`], every problem
//! recorded with its line instead of stopping at the first.
//!
//! One file per part of the schema; each adds methods to the [`Validator`].

mod approvals;
mod boards;
mod boot_patterns;
mod clients;
mod commands;
mod devices;
mod flash;
mod include;
mod lab;
mod metrics;
mod page;
mod peers;
mod settings;
mod shell;
mod staging;
mod validator;

pub(crate) use validator::Validator;
