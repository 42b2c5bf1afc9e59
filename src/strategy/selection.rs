//! Who trains: the seam through which an algorithm chooses the clients of each round (and, in
//! an asynchronous federation, the client of each dispatch).
//!
//! The server hands a [`Selector`] the clients online now with their sample counts, how many
//! it wants, what it has seen of each client ([`ClientHistory`]) and the round's own seeded
//! stream; the selector answers with that many distinct online clients. It may first name
//! clients to **probe** ([`Selector::probe`]): the server sends them the current model, each
//! measures its loss on its own training data (a real evaluation, charged to the links and the
//! simulated clock like any job), and the losses come back in [`Candidates::probed`] before the
//! selector chooses. [`Uniform`], every algorithm's default, draws without replacement and
//! probes nothing.
//!
//! The server checks each answer: a selection of the wrong size, of a client offline or twice
//! ends the run with an error naming the round, never a silent fix.

use rand::RngExt;
use rand::seq::index;
use rand_chacha::ChaCha12Rng;

use crate::availability::OnlineClients;
use crate::history::ClientHistory;
use crate::network::{ClientId, ClientInfo, StateError, Tensors};

/// The clients a selection may choose, in id order: a list, or a federation's clients with the
/// set of those online and free, read in place. Making one costs nothing and reading the `i`-th
/// costs `O(log n)`, so a selection that draws `k` clients costs `O(k log n)` however many are
/// online; one that reads every candidate ([`Online::iter`]) pays for each.
#[derive(Debug, Clone, Copy)]
pub struct Online<'a> {
    clients: &'a [ClientInfo],
    /// Which of `clients`, by position, are candidates; all of them where `None`.
    free: Option<&'a OnlineClients>,
}

impl<'a> Online<'a> {
    /// The clients of `clients` (in id order) that `free` holds online and not busy.
    pub fn among(clients: &'a [ClientInfo], free: &'a OnlineClients) -> Self {
        Self {
            clients,
            free: Some(free),
        }
    }

    /// How many clients there are.
    pub fn len(&self) -> usize {
        self.free
            .map_or(self.clients.len(), OnlineClients::free_count)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th client (from 0), in id order.
    pub fn get(&self, i: usize) -> ClientInfo {
        match self.free {
            None => self.clients[i],
            Some(free) => self.clients[free.nth_free(i)],
        }
    }

    /// Every client, in id order.
    pub fn iter(&self) -> impl Iterator<Item = ClientInfo> + 'a {
        let free = self.free;
        let clients = self.clients.iter().enumerate();
        clients
            .filter(move |(position, _)| free.is_none_or(|f| f.is_free(*position)))
            .map(|(_, client)| *client)
    }

    /// Whether `client` is among them.
    pub fn contains(&self, client: ClientId) -> bool {
        ClientInfo::position_in(self.clients, client)
            .is_some_and(|p| self.free.is_none_or(|f| f.is_free(p)))
    }
}

impl<'a> From<&'a [ClientInfo]> for Online<'a> {
    fn from(clients: &'a [ClientInfo]) -> Self {
        Self {
            clients,
            free: None,
        }
    }
}

impl<'a> From<&'a Vec<ClientInfo>> for Online<'a> {
    fn from(clients: &'a Vec<ClientInfo>) -> Self {
        clients.as_slice().into()
    }
}

/// What a selection is handed: the candidates of one round (or dispatch).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Candidates<'a> {
    /// The round, from 1 (in an asynchronous federation, the number of the dispatch).
    pub round: u32,
    /// The clients online now (in an asynchronous federation, online and not in flight), with
    /// their sample counts, in id order; never empty.
    pub online: Online<'a>,
    /// How many clients to choose: at most `online.len()`.
    pub wanted: usize,
    /// What the server has seen of every client.
    pub history: &'a ClientHistory,
    /// The simulated time, in seconds since the run started.
    pub now_s: f64,
    /// The losses of the clients probed this round on the current global model, in id order:
    /// empty until [`Selector::probe`] has named clients and they have answered. Every client
    /// named answers (a probe ignores the round's dropout draw) except one whose measurement
    /// failed where failures are skipped (`on_client_failure`), so it may hold fewer clients
    /// than were named, never others; a selector still owes `wanted` clients.
    pub probed: &'a [(ClientId, f64)],
}

impl<'a> Candidates<'a> {
    /// Round `round`'s candidates: `wanted` of `online`, with nothing probed yet.
    pub fn new(
        round: u32,
        online: impl Into<Online<'a>>,
        wanted: usize,
        history: &'a ClientHistory,
        now_s: f64,
    ) -> Self {
        Self {
            round,
            online: online.into(),
            wanted,
            history,
            now_s,
            probed: &[],
        }
    }

    /// These candidates with the losses of the clients probed.
    pub fn with_probed(self, probed: &'a [(ClientId, f64)]) -> Self {
        Self { probed, ..self }
    }

    /// These candidates, wanting `wanted` clients.
    pub fn wanting(self, wanted: usize) -> Self {
        Self { wanted, ..self }
    }
}

/// How an algorithm chooses who trains.
///
/// Every random draw comes from the `rng` handed in: the server derives it from the experiment
/// seed and the round, so that a selection is reproducible however the run is spread over
/// threads and whether it was resumed.
pub trait Selector: Send {
    /// The clients to measure the current model's loss on before choosing (distinct, online),
    /// drawing from `rng`; none (the default) to choose at once.
    fn probe(&mut self, _candidates: &Candidates<'_>, _rng: &mut ChaCha12Rng) -> Vec<ClientId> {
        Vec::new()
    }

    /// `candidates.wanted` distinct clients of `candidates.online`, in any order (the server
    /// sorts them), drawing from `rng` after [`Selector::probe`] did.
    fn select(&mut self, candidates: &Candidates<'_>, rng: &mut ChaCha12Rng) -> Vec<ClientId>;

    /// The client an asynchronous server dispatches next, among `candidates.online` (never
    /// empty): by default the one [`Selector::select`] would choose alone.
    fn dispatch(&mut self, candidates: &Candidates<'_>, rng: &mut ChaCha12Rng) -> ClientId {
        let chosen = self.select(&candidates.wanting(1), rng);
        chosen.first().copied().unwrap_or(ClientId::MAX)
    }

    /// What the selector remembers between rounds, for checkpoints.
    fn state(&self) -> Tensors {
        Tensors::new()
    }

    /// Takes back what [`Selector::state`] gave, when a run resumes.
    fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        super::no_state(state)
    }

    /// Whether every choice is uniform among the online clients, blind to what the server has
    /// seen of them: what a private run's accountant assumes of its sampling (no by default).
    fn samples_uniformly(&self) -> bool {
        false
    }
}

/// Every client online equally likely: `wanted` drawn without replacement. The default of
/// every algorithm, and the draws fedsim made before selection was open to algorithms.
#[derive(Debug, Clone, Copy, Default)]
pub struct Uniform;

impl Selector for Uniform {
    fn samples_uniformly(&self) -> bool {
        true
    }

    fn select(&mut self, candidates: &Candidates<'_>, rng: &mut ChaCha12Rng) -> Vec<ClientId> {
        let online = candidates.online;
        index::sample(rng, online.len(), candidates.wanted)
            .into_iter()
            .map(|i| online.get(i).id)
            .collect()
    }

    fn dispatch(&mut self, candidates: &Candidates<'_>, rng: &mut ChaCha12Rng) -> ClientId {
        let online = candidates.online;
        online.get(rng.random_range(0..online.len())).id
    }
}

/// What is wrong with a selection's answer (`3 clients, not 4`), or `None` where it can be
/// used: `chosen` must be `wanted` distinct clients of `online`.
pub fn misfit<'a>(
    chosen: &[ClientId],
    online: impl Into<Online<'a>>,
    wanted: usize,
) -> Option<String> {
    let online = online.into();
    if chosen.len() != wanted {
        return Some(format!("{} clients, not {wanted}", chosen.len()));
    }
    let mut seen = std::collections::BTreeSet::new();
    for &client in chosen {
        if !online.contains(client) {
            return Some(format!(
                "client {client}, which is not among the candidates"
            ));
        }
        if !seen.insert(client) {
            return Some(format!("client {client} twice"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::{Purpose, stream};

    fn online(ids: &[ClientId]) -> Vec<ClientInfo> {
        ids.iter()
            .map(|&id| ClientInfo {
                id,
                num_samples: 10,
            })
            .collect()
    }

    #[test]
    fn uniform_draws_wanted_distinct_online_clients_reproducibly() {
        let clients = online(&[1, 4, 5, 9, 12]);
        let history = ClientHistory::new();
        let candidates = Candidates::new(3, &clients, 3, &history, 0.0);
        let draw = || {
            let mut rng = stream(7, Purpose::CLIENT_SAMPLING, 3, 0);
            Uniform.select(&candidates, &mut rng)
        };
        let chosen = draw();
        assert_eq!(misfit(&chosen, &clients, 3), None);
        assert_eq!(chosen, draw());
    }

    #[test]
    fn a_selection_of_the_wrong_clients_is_named() {
        let clients = online(&[1, 4, 5]);
        assert_eq!(misfit(&[1, 5], &clients, 2), None);
        assert!(misfit(&[1], &clients, 2).unwrap().contains("not 2"));
        assert!(
            misfit(&[1, 2], &clients, 2)
                .unwrap()
                .contains("not among the candidates")
        );
        assert!(misfit(&[4, 4], &clients, 2).unwrap().contains("twice"));
    }
}
