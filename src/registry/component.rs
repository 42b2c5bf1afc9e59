//! What every kind of registered component shares: how the registry lists it ([`Listing`],
//! read off the component when it is registered), and what it is once an experiment file has
//! chosen it (its name, parameters and origin).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::params::ParamInfo;
use super::{Origin, Registered};

/// A registered component with its parameters read: what an experiment uses. `C` is the
/// erased half of its kind's trait (algorithm, model, data set, partition scheme), through
/// which the kind's own methods reach it. Cheap to clone.
pub struct Choice<C: ?Sized> {
    pub(super) chosen: Arc<C>,
    name: &'static str,
    params: Map<String, Value>,
    origin: Origin,
}

impl<C: ?Sized> Choice<C> {
    pub(super) fn new<E: ?Sized>(
        chosen: Arc<C>,
        params: Map<String, Value>,
        registered: &Registered<E>,
    ) -> Self {
        Self {
            chosen,
            name: registered.listing.name,
            params,
            origin: registered.origin.clone(),
        }
    }

    /// Its registered name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The crate that registered it.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// Its parameters, every default filled in (and paths absolute), as the experiment file's
    /// section holds them beside the name.
    pub fn params(&self) -> &Map<String, Value> {
        &self.params
    }
}

impl<C: ?Sized> Clone for Choice<C> {
    fn clone(&self) -> Self {
        Self {
            chosen: self.chosen.clone(),
            name: self.name,
            params: self.params.clone(),
            origin: self.origin.clone(),
        }
    }
}

impl<C: ?Sized> std::fmt::Debug for Choice<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Choice")
            .field("name", &self.name)
            .field("params", &self.params)
            .finish()
    }
}

/// A model, data set or partition scheme as the registry lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentInfo {
    /// The name to give in the experiment file.
    pub name: &'static str,
    /// What it is, in a line.
    pub about: &'static str,
    /// Its parameters, with their defaults where it has them.
    pub params: Vec<ParamInfo>,
    /// The crate that registered it.
    pub origin: Origin,
}

impl ComponentInfo {
    pub(super) fn of<E: ?Sized>(registered: &Registered<E>) -> Self {
        let listing = &registered.listing;
        Self {
            name: listing.name,
            about: listing.about,
            params: ParamInfo::list(listing.defaults.clone(), listing.param_docs),
            origin: registered.origin.clone(),
        }
    }
}

/// What the registry lists of a component of any kind, read off it when it is registered.
#[derive(Debug, Clone)]
pub(super) struct Listing {
    pub(super) name: &'static str,
    /// What it is in a line (an algorithm's paper).
    pub(super) about: &'static str,
    pub(super) param_docs: &'static [(&'static str, &'static str)],
    /// Its parameters when none is given, if every one has a default.
    pub(super) defaults: Option<Map<String, Value>>,
}
