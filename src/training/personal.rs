//! Personal layers in training: a client trains the shared values it is sent joined with its
//! own personal values, kept in its state between rounds (the initial model's before its first
//! round), and sends only the shared values back.

use crate::model::Sharing;
use crate::network::Tensors;

/// The name of a client's personal values in its state.
pub const PERSONAL_LAYERS: &str = "personal_layers";

/// The model's personal values and where they start.
#[derive(Debug, Clone, PartialEq)]
pub struct PersonalSplit {
    /// Which values are personal.
    pub sharing: Sharing,
    /// The initial model's personal values: a client's before it first trains.
    pub initial: Vec<f32>,
}

impl PersonalSplit {
    /// The split `sharing` of a model that starts as `initial` (whole).
    pub fn new(sharing: Sharing, initial: &[f32]) -> Self {
        let initial = sharing.personal_of(initial);
        Self { sharing, initial }
    }

    /// A client's personal values, from its `state`.
    fn personal<'a>(&'a self, state: Option<&'a Tensors>) -> &'a [f32] {
        state
            .and_then(|state| state.get(PERSONAL_LAYERS))
            .unwrap_or(&self.initial)
    }

    /// The whole model a client with `state` trains from when sent the `shared` values.
    pub fn whole(&self, shared: &[f32], state: Option<&Tensors>) -> Vec<f32> {
        self.sharing.compose(shared, self.personal(state))
    }

    /// The whole model `sent`, its personal values replaced by those of the client with
    /// `state`: the model that client would use.
    pub fn with_own(&self, sent: &[f32], state: Option<&Tensors>) -> Vec<f32> {
        self.sharing.with_personal(sent, self.personal(state))
    }

    /// Keeps the personal values of the trained `model` in the client's `state`.
    pub fn keep(&self, model: &[f32], state: &mut Option<Tensors>) {
        state
            .get_or_insert_with(Tensors::new)
            .insert(PERSONAL_LAYERS, self.sharing.personal_of(model));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::flat::{Layout, ParamKind, ParamSpec};

    #[test]
    fn a_client_starts_with_the_initial_personal_values_and_keeps_its_own() {
        let param = |name: &str, len| ParamSpec {
            name: name.to_string(),
            kind: ParamKind::Weight,
            shape: vec![len],
            fan_in: 1,
        };
        let layout = Layout {
            params: vec![param("body.weight", 3), param("head.weight", 2)],
        };
        let sharing = Sharing::of(&layout, &["head".to_string()]).unwrap().unwrap();
        let split = PersonalSplit::new(sharing, &[0.0, 0.0, 0.0, 7.0, 8.0]);
        assert_eq!(split.whole(&[1.0, 2.0, 3.0], None), [1.0, 2.0, 3.0, 7.0, 8.0]);
        let mut state = None;
        split.keep(&[4.0, 5.0, 6.0, -1.0, -2.0], &mut state);
        let sent = [9.0, 9.0, 9.0, 0.5, 0.5];
        assert_eq!(split.with_own(&sent, state.as_ref()), [9.0, 9.0, 9.0, -1.0, -2.0]);
    }
}
