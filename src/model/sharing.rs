//! Which of a model's values the federation shares and which stay with each client: an
//! algorithm with personal layers (FedPer's head, LG-FedAvg's body) sends and receives only the
//! shared values, and each client keeps its personal ones between rounds.
//!
//! Layers are named as the parameter layout names them, a parameter's dotted path without its
//! last part (`layers.2` holds `layers.2.weight` and `layers.2.bias`), or by three words:
//! `head`, the model's last layer, `body`, every layer but the last, and `norm`, every
//! normalisation layer (its scale, shift and running statistics; none in a model without).

use std::ops::Range;

use super::flat::Layout;

/// The personal values of a model: the slices of its flat vector that stay with each client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sharing {
    /// The personal slices, in order, none empty, none touching another.
    personal: Vec<Range<usize>>,
    /// Values in the whole model.
    len: usize,
}

/// One layer of a layout.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Layer {
    /// Its parameters' name without their last part.
    name: String,
    /// The slice of the flat vector its parameters take.
    range: Range<usize>,
    /// Whether it is a normalisation layer (every parameter one).
    normalisation: bool,
}

/// The layers of `layout`, in order.
fn layers(layout: &Layout) -> Vec<Layer> {
    let mut layers: Vec<Layer> = Vec::new();
    let mut start = 0;
    for param in &layout.params {
        let name = param
            .name
            .rsplit_once('.')
            .map_or(param.name.as_str(), |(layer, _)| layer);
        let end = start + param.len();
        let normalisation = param.kind.is_normalisation();
        match layers.last_mut() {
            Some(last) if last.name == name => {
                last.range.end = end;
                last.normalisation &= normalisation;
            }
            _ => layers.push(Layer {
                name: name.to_string(),
                range: start..end,
                normalisation,
            }),
        }
        start = end;
    }
    layers
}

impl Sharing {
    /// The sharing of a model of `layout` whose layers `names` are personal; `None` where
    /// none is (every value shared). A name the model does not have is `Err` with its position
    /// in `names` and what the model has.
    pub fn of(layout: &Layout, names: &[String]) -> Result<Option<Self>, (usize, String)> {
        let layers = layers(layout);
        let last = layers.len().saturating_sub(1);
        let mut personal = vec![false; layers.len()];
        for (at, name) in names.iter().enumerate() {
            match name.as_str() {
                "head" => personal[last] = true,
                "body" => personal[..last].iter_mut().for_each(|p| *p = true),
                "norm" => {
                    for (personal, layer) in personal.iter_mut().zip(&layers) {
                        *personal |= layer.normalisation;
                    }
                }
                name => match layers.iter().position(|layer| layer.name == name) {
                    Some(index) => personal[index] = true,
                    None => {
                        let known: Vec<&str> = layers.iter().map(|l| l.name.as_str()).collect();
                        return Err((
                            at,
                            format!(
                                "the model has no layer {name:?}; its layers are {} (or \"head\", the last, \"body\", the others, and \"norm\", the normalisation layers)",
                                known.join(", ")
                            ),
                        ));
                    }
                },
            }
        }
        let mut slices: Vec<Range<usize>> = Vec::new();
        for (Layer { range, .. }, _) in layers.iter().zip(&personal).filter(|(_, p)| **p) {
            match slices.last_mut() {
                Some(last) if last.end == range.start => last.end = range.end,
                _ => slices.push(range.clone()),
            }
        }
        slices.retain(|range| !range.is_empty());
        Ok((!slices.is_empty()).then(|| Self {
            personal: slices,
            len: layout.params.iter().map(|p| p.len()).sum(),
        }))
    }

    /// Values the federation shares.
    pub fn shared_len(&self) -> usize {
        self.len - self.personal_len()
    }

    /// Values each client keeps.
    pub fn personal_len(&self) -> usize {
        self.personal.iter().map(ExactSizeIterator::len).sum()
    }

    /// Whether the value at `index` of the whole model's flat vector stays with each client.
    pub fn is_personal(&self, index: usize) -> bool {
        self.personal.iter().any(|range| range.contains(&index))
    }

    /// The slices the federation shares, in order.
    fn shared(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        let starts = std::iter::once(0).chain(self.personal.iter().map(|p| p.end));
        let ends = self
            .personal
            .iter()
            .map(|p| p.start)
            .chain(std::iter::once(self.len));
        starts
            .zip(ends)
            .map(|(start, end)| start..end)
            .filter(|range| !range.is_empty())
    }

    /// The shared values of the whole model `model`, in order: what travels.
    pub fn shared_of(&self, model: &[f32]) -> Vec<f32> {
        self.gather(model, self.shared())
    }

    /// The personal values of the whole model `model`, in order: what a client keeps.
    pub fn personal_of(&self, model: &[f32]) -> Vec<f32> {
        self.gather(model, self.personal.iter().cloned())
    }

    fn gather(&self, model: &[f32], slices: impl Iterator<Item = Range<usize>>) -> Vec<f32> {
        assert_eq!(model.len(), self.len, "a whole model");
        slices.flat_map(|range| &model[range]).copied().collect()
    }

    /// The whole model of `shared` values and `personal` ones.
    pub fn compose(&self, shared: &[f32], personal: &[f32]) -> Vec<f32> {
        assert_eq!(shared.len(), self.shared_len(), "the shared values");
        assert_eq!(personal.len(), self.personal_len(), "the personal values");
        let mut model = vec![0.0; self.len];
        scatter(&mut model, self.shared(), shared);
        scatter(&mut model, self.personal.iter().cloned(), personal);
        model
    }

    /// The whole model `model` with the personal values `personal` in place of its own.
    pub fn with_personal(&self, model: &[f32], personal: &[f32]) -> Vec<f32> {
        assert_eq!(model.len(), self.len, "a whole model");
        assert_eq!(personal.len(), self.personal_len(), "the personal values");
        let mut model = model.to_vec();
        scatter(&mut model, self.personal.iter().cloned(), personal);
        model
    }

    /// Copies the personal values of `from` into `into`, both whole models.
    pub fn keep_personal(&self, from: &[f32], into: &mut [f32]) {
        for range in &self.personal {
            into[range.clone()].copy_from_slice(&from[range.clone()]);
        }
    }
}

/// Puts `values`, in order, into the `slices` of `model`.
fn scatter(model: &mut [f32], slices: impl Iterator<Item = Range<usize>>, values: &[f32]) {
    let mut next = 0;
    for range in slices {
        let len = range.len();
        model[range].copy_from_slice(&values[next..next + len]);
        next += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::flat::{ParamKind, ParamSpec};

    /// Three dense layers of 2 → 3 → 2 → 1 values.
    fn layout() -> Layout {
        let param = |name: &str, shape: Vec<usize>| ParamSpec {
            name: name.to_string(),
            kind: ParamKind::Weight,
            shape,
            fan_in: 1,
        };
        Layout {
            params: vec![
                param("layers.0.weight", vec![2, 3]),
                param("layers.0.bias", vec![3]),
                param("layers.1.weight", vec![3, 2]),
                param("layers.1.bias", vec![2]),
                param("out.weight", vec![2, 1]),
                param("out.bias", vec![1]),
            ],
        }
    }

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn layers_are_named_by_their_parameters_prefix() {
        let found: Vec<(String, Range<usize>)> = layers(&layout())
            .into_iter()
            .map(|layer| (layer.name, layer.range))
            .collect();
        assert_eq!(
            found,
            [
                ("layers.0".to_string(), 0..9),
                ("layers.1".to_string(), 9..17),
                ("out".to_string(), 17..20),
            ]
        );
    }

    #[test]
    fn the_head_stays_and_the_body_travels_and_back_again() {
        let model: Vec<f32> = (0..20).map(|v| v as f32).collect();
        let head = Sharing::of(&layout(), &names(&["head"])).unwrap().unwrap();
        assert_eq!(head.personal_of(&model), [17.0, 18.0, 19.0]);
        assert_eq!(head.shared_of(&model), model[..17]);
        let composed = head.compose(&head.shared_of(&model), &head.personal_of(&model));
        assert_eq!(composed, model);

        let body = Sharing::of(&layout(), &names(&["body"])).unwrap().unwrap();
        assert_eq!(body.shared_of(&model), [17.0, 18.0, 19.0]);
        assert_eq!((body.shared_len(), body.personal_len()), (3, 17));

        // A middle layer: the shared values are those before it and after it.
        let middle = Sharing::of(&layout(), &names(&["layers.1"]))
            .unwrap()
            .unwrap();
        let shared = middle.shared_of(&model);
        assert_eq!(shared.len(), 12);
        assert_eq!(&shared[9..], [17.0, 18.0, 19.0]);
        let mut into = vec![-1.0; 20];
        middle.keep_personal(&model, &mut into);
        assert_eq!(&into[9..17], &model[9..17]);
        assert_eq!(into[8], -1.0);
    }

    #[test]
    fn no_personal_layer_shares_everything_and_an_unknown_one_is_named() {
        assert_eq!(Sharing::of(&layout(), &[]), Ok(None));
        let (at, message) = Sharing::of(&layout(), &names(&["head", "fc9"])).unwrap_err();
        assert_eq!(at, 1);
        assert!(
            message.contains("no layer \"fc9\"") && message.contains("layers.0, layers.1, out")
        );
    }

    #[test]
    fn norm_names_every_normalisation_layer_and_none_where_the_model_has_none() {
        let param = |name: &str, kind, len| ParamSpec {
            name: name.to_string(),
            kind,
            shape: vec![len],
            fan_in: 1,
        };
        let layout = Layout {
            params: vec![
                param("conv.weight", ParamKind::Weight, 4),
                param("norm.gamma", ParamKind::NormScale, 2),
                param("norm.beta", ParamKind::NormShift, 2),
                param("norm.running_mean", ParamKind::RunningMean, 2),
                param("norm.running_var", ParamKind::RunningVariance, 2),
                param("out.weight", ParamKind::Weight, 3),
            ],
        };
        let sharing = Sharing::of(&layout, &names(&["norm"])).unwrap().unwrap();
        let model: Vec<f32> = (0..15).map(|v| v as f32).collect();
        assert_eq!(
            sharing.personal_of(&model),
            (4..12).map(|v| v as f32).collect::<Vec<_>>()
        );
        assert_eq!(Sharing::of(&self::layout(), &names(&["norm"])), Ok(None));
    }
}
