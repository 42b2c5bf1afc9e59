//! A component's parameters as the registry reads and lists them: from the experiment file's
//! section (the fields beside `name`) into the component's own serde type, and back.

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// One parameter as `fedsim strategies` and `fedsim models` list it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamInfo {
    /// Its field name.
    pub name: String,
    /// Its default, as JSON.
    pub default: Value,
    /// What it means.
    pub doc: &'static str,
}

impl ParamInfo {
    /// The parameters of `defaults` in the order `docs` lists them, any undocumented one last.
    pub(super) fn list(
        mut defaults: Map<String, Value>,
        docs: &[(&str, &'static str)],
    ) -> Vec<ParamInfo> {
        let mut params: Vec<ParamInfo> = docs
            .iter()
            .filter_map(|&(name, doc)| {
                let default = defaults.remove(name)?;
                Some(ParamInfo {
                    name: name.to_string(),
                    default,
                    doc,
                })
            })
            .collect();
        params.extend(defaults.into_iter().map(|(name, default)| ParamInfo {
            name,
            default,
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
