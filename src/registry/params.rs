//! A component's parameters as the registry reads and lists them: from the experiment file's
//! section (the fields beside `name`) into the component's own serde type, and back.

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// One parameter as `fedsim strategies`, `fedsim models`, `fedsim datasets` and `fedsim
/// schemes` list it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamInfo {
    /// Its field name.
    pub name: String,
    /// Its default, as JSON; `None` for a required parameter, or one whose default is to be
    /// absent (a data set's `dir`).
    pub default: Option<Value>,
    /// What it means.
    pub doc: &'static str,
}

impl ParamInfo {
    /// The parameters `docs` lists, in its order, with their defaults where `defaults` has
    /// them, then any undocumented one `defaults` has.
    pub(super) fn list(
        defaults: Option<Map<String, Value>>,
        docs: &[(&str, &'static str)],
    ) -> Vec<ParamInfo> {
        let mut defaults = defaults.unwrap_or_default();
        let mut params: Vec<ParamInfo> = docs
            .iter()
            .map(|&(name, doc)| ParamInfo {
                name: name.to_string(),
                default: defaults.remove(name),
                doc,
            })
            .collect();
        params.extend(defaults.into_iter().map(|(name, default)| ParamInfo {
            name,
            default: Some(default),
            doc: "",
        }));
        params
    }
}

/// Parameters of type `P` read from a section's fields; one that does not parse is (its field,
/// the message, worded as the rest of the file's errors).
pub(super) fn read_params<P: DeserializeOwned>(
    fields: Map<String, Value>,
) -> Result<P, (String, String)> {
    serde_path_to_error::deserialize(Value::Object(fields)).map_err(|error| {
        let field = error.path().to_string();
        let field = if field == "." { String::new() } else { field };
        let message = crate::config::explain(&error.into_inner().to_string());
        (field, message)
    })
}

/// The parameters of type `P` when none is given, as the section's fields, if every one has a
/// default; `name` is the component's, for messages.
pub(super) fn defaults_of<P: DeserializeOwned + Serialize>(
    name: &str,
) -> Option<Map<String, Value>> {
    let params = read_params::<P>(Map::new()).ok()?;
    Some(params_as_map(name, &params))
}

/// Parameters as the section's fields beside the name of the component `name`.
pub(super) fn params_as_map<P: Serialize>(name: &str, params: &P) -> Map<String, Value> {
    match serde_json::to_value(params) {
        Ok(Value::Object(fields)) => fields,
        Ok(Value::Null) => Map::new(),
        Ok(other) => {
            panic!("the parameters of {name:?} must serialise as a JSON object, not {other}")
        }
        Err(error) => panic!("the parameters of {name:?} do not serialise: {error}"),
    }
}

/// A component of the erased kind `C` with its parameters read, and those parameters as the
/// section holds them (defaults filled in); or the field that does not parse, with the message.
pub(super) type Read<C> = Result<(Arc<C>, Map<String, Value>), (String, String)>;

/// A component as the registry holds it.
pub(super) struct Plugged<C>(pub(super) Arc<C>);

/// A component and parameters of its type.
pub(super) struct WithParams<C, P> {
    pub(super) component: Arc<C>,
    pub(super) params: P,
}

impl<C> Plugged<C> {
    /// The component with `params`.
    pub(super) fn with<P>(&self, params: P) -> WithParams<C, P> {
        WithParams {
            component: self.0.clone(),
            params,
        }
    }
}
