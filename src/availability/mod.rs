//! When each client is online, on the simulated clock: always, as a trace file lists, or as a
//! diurnal model drawn from the seed. The server samples (or, asynchronously, dispatches) only
//! clients online at that moment, and a client that goes offline before its training ends is
//! dropped with reason `offline`.
//!
//! A trace is a CSV file of online intervals, one per line, under the header
//! `client,start_s,end_s`: client `client` is online from `start_s` (included) to `end_s`
//! (excluded), in simulated seconds since the run started. A client's intervals may come in
//! any order but must not overlap; a client the file never names is never online. With a
//! period, the trace repeats: every interval must then lie within `[0, period)`, and the
//! client is online at `t` when it is at `t mod period`. FedScale's device-behaviour trace
//! (per client, lists of `active` and `inactive` times over a `duration`) turns into this
//! format line by line, each active time with the inactive time that follows it.

mod online;

use std::path::Path;

use rand::RngExt;

pub use online::OnlineClients;

use crate::network::ClientId;
use crate::seed::{Purpose, stream};

/// The draw of each client's phase in the diurnal model.
const DIURNAL_PHASE: Purpose = Purpose::new("diurnal-phase");

/// Each client's online intervals; see the module documentation.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Availability {
    /// Per client, its online intervals `[start, end)`, sorted and disjoint; `None` when every
    /// client is always online.
    intervals: Option<Vec<Vec<(f64, f64)>>>,
    /// The length after which the intervals repeat, if they do.
    period: Option<f64>,
}

impl Availability {
    /// Every client always online.
    pub fn always() -> Self {
        Self::default()
    }

    /// Whether every client is always online.
    pub fn is_always(&self) -> bool {
        self.intervals.is_none()
    }

    /// The trace in the CSV file at `path` for `num_clients` clients, repeating every
    /// `period` seconds if given; an error says which line is wrong and why.
    pub fn read_trace(
        path: &Path,
        num_clients: usize,
        period: Option<f64>,
    ) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
        Self::parse_trace(&text, num_clients, period)
    }

    /// [`Availability::read_trace`] of a file's text.
    pub fn parse_trace(
        text: &str,
        num_clients: usize,
        period: Option<f64>,
    ) -> Result<Self, String> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        match lines.next() {
            Some((_, header)) if header.trim() == "client,start_s,end_s" => {}
            _ => return Err("its first line must be the header client,start_s,end_s".into()),
        }
        let mut intervals = vec![Vec::new(); num_clients];
        for (index, line) in lines {
            let at = |message: String| format!("line {}: {message}", index + 1);
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            let [client, start, end] = fields[..] else {
                return Err(at(format!("{line:?} has {} fields, not 3", fields.len())));
            };
            let client: ClientId = client
                .parse()
                .map_err(|_| at(format!("client {client:?} is not a client id")))?;
            if client >= num_clients {
                return Err(at(format!(
                    "names client {client}, but federation.num_clients is {num_clients}"
                )));
            }
            let time = |text: &str| {
                text.parse::<f64>()
                    .ok()
                    .filter(|t| t.is_finite() && *t >= 0.0)
                    .ok_or_else(|| at(format!("{text:?} is not a time of at least 0 seconds")))
            };
            let (start, end) = (time(start)?, time(end)?);
            if start >= end {
                return Err(at(format!("the interval {start} to {end} is empty")));
            }
            if let Some(period) = period.filter(|&p| end > p) {
                return Err(at(format!(
                    "the interval ends at {end}, after the period of {period} seconds"
                )));
            }
            intervals[client].push((start, end));
        }
        for (client, list) in intervals.iter_mut().enumerate() {
            list.sort_by(|a, b| a.0.total_cmp(&b.0));
            if let Some(pair) = list.windows(2).find(|w| w[1].0 < w[0].1) {
                return Err(format!(
                    "client {client}'s intervals {:?} and {:?} overlap",
                    pair[0], pair[1]
                ));
            }
        }
        if intervals.iter().all(Vec::is_empty) {
            return Err("it lists no online interval".into());
        }
        Ok(Self {
            intervals: Some(intervals),
            period,
        })
    }

    /// The diurnal model: each client online for `online_fraction` of every `period` seconds,
    /// from a phase drawn uniformly in `[0, period)` from its own stream.
    pub fn diurnal(seed: u64, num_clients: usize, period: f64, online_fraction: f64) -> Self {
        let length = online_fraction * period;
        let intervals = (0..num_clients)
            .map(|client| {
                let mut rng = stream(seed, DIURNAL_PHASE, 0, client);
                let phase = rng.random_range(0.0..period);
                if phase + length <= period {
                    vec![(phase, phase + length)]
                } else {
                    vec![(0.0, phase + length - period), (phase, period)]
                }
            })
            .collect();
        Self {
            intervals: Some(intervals),
            period: Some(period),
        }
    }

    /// Whether `client` is online at `t`.
    pub fn online_at(&self, client: ClientId, t: f64) -> bool {
        self.interval_at(client, t).is_some()
    }

    /// The first moment at or after `t` at which `client` is online, if there is one.
    pub fn next_online(&self, client: ClientId, t: f64) -> Option<f64> {
        let Some(intervals) = &self.intervals else {
            return Some(t);
        };
        let list = &intervals[client];
        if self.online_at(client, t) {
            return Some(t);
        }
        let (base, local) = self.fold(t);
        let later = list.iter().find(|&&(start, _)| start > local);
        let next = match (later, self.period) {
            (Some(&(start, _)), _) => base + start,
            (None, Some(period)) => base + period + list.first()?.0,
            (None, None) => return None,
        };
        // `base + start` may round to just before the interval once folded again: step up to
        // the first representable moment that is online, so that a caller waiting for it
        // never waits for the same moment twice.
        let mut next = next.max(t);
        while !self.online_at(client, next) {
            next = next.next_up();
        }
        Some(next)
    }

    /// Those of `clients` online at `t`, in their order.
    pub fn online_among(
        &self,
        clients: impl IntoIterator<Item = ClientId>,
        t: f64,
    ) -> Vec<ClientId> {
        clients
            .into_iter()
            .filter(|&c| self.online_at(c, t))
            .collect()
    }

    /// The first moment at or after `t` at which one of `clients` is online, if there is one.
    pub fn next_online_among(
        &self,
        clients: impl IntoIterator<Item = ClientId>,
        t: f64,
    ) -> Option<f64> {
        clients
            .into_iter()
            .filter_map(|c| self.next_online(c, t))
            .min_by(f64::total_cmp)
    }

    /// The first moment in `[from, to)` at which `client` is offline, if there is one: when an
    /// online client's training from `from` to `to` is cut short.
    ///
    /// It walks the client's intervals in the period's own time (the start of a period and
    /// the time within it), never through an absolute time folded back into the period: that
    /// can round to just inside the interval just left, and find it again.
    pub fn first_offline(&self, client: ClientId, from: f64, to: f64) -> Option<f64> {
        let list = &self.intervals.as_ref()?[client];
        let (mut base, mut local) = self.fold(from);
        let mut moment = from;
        loop {
            let holding = list
                .iter()
                .find(|&&(start, end)| start <= local && local < end);
            let Some(&(_, end)) = holding else {
                return Some(moment);
            };
            if base + end >= to {
                return None;
            }
            // Each pass moves past one interval (or into the next period), so a client always
            // online ends the walk at `to`.
            match self.period {
                Some(period) if end >= period => (base, local) = (base + period, 0.0),
                _ => local = end,
            }
            moment = base + local;
        }
    }

    /// The interval holding `t`, with the start of the period it is in (0 without a period).
    fn interval_at(&self, client: ClientId, t: f64) -> Option<(f64, (f64, f64))> {
        let Some(intervals) = &self.intervals else {
            return Some((0.0, (0.0, f64::INFINITY)));
        };
        let (base, local) = self.fold(t);
        intervals[client]
            .iter()
            .find(|&&(start, end)| start <= local && local < end)
            .map(|&interval| (base, interval))
    }

    /// `t` as (the start of its period, its time within it); `(0, t)` without a period.
    fn fold(&self, t: f64) -> (f64, f64) {
        fold(self.period, t)
    }
}

/// [`Availability::fold`] for intervals that repeat every `period` seconds, if they do.
fn fold(period: Option<f64>, t: f64) -> (f64, f64) {
    match period {
        Some(period) => {
            let base = (t / period).floor() * period;
            (base, (t - base).clamp(0.0, period))
        }
        None => (0.0, t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_says_who_is_online_when() {
        let text = "client,start_s,end_s\n0,10,20\n0,0,5\n1,3,4\n";
        let trace = Availability::parse_trace(text, 3, None).unwrap();
        assert!(trace.online_at(0, 0.0) && !trace.online_at(0, 5.0) && trace.online_at(0, 19.0));
        assert!(!trace.online_at(2, 0.0));
        assert_eq!(trace.next_online(0, 6.0), Some(10.0));
        assert_eq!(trace.next_online(0, 20.0), None);
        assert_eq!(trace.next_online(2, 0.0), None);
        assert_eq!(trace.first_offline(0, 1.0, 4.0), None);
        assert_eq!(trace.first_offline(0, 1.0, 12.0), Some(5.0));
        assert_eq!(trace.first_offline(1, 0.0, 1.0), Some(0.0));
    }

    #[test]
    fn a_periodic_trace_repeats_and_joins_across_the_period() {
        let text = "client,start_s,end_s\n0,0,2\n0,8,10\n";
        let trace = Availability::parse_trace(text, 1, Some(10.0)).unwrap();
        assert!(trace.online_at(0, 21.0) && !trace.online_at(0, 25.0));
        assert_eq!(trace.next_online(0, 25.0), Some(28.0));
        // Online from 28 through 32 without a break.
        assert_eq!(trace.first_offline(0, 28.0, 31.0), None);
        assert_eq!(trace.first_offline(0, 28.0, 35.0), Some(32.0));
    }

    #[test]
    fn leaving_an_interval_of_a_later_period_is_found_although_the_clock_rounds() {
        // 2400 + 1089.2, folded back into its period, rounds to just below 1089.2: a walk in
        // absolute time found the interval it had just left, for ever.
        let trace =
            Availability::parse_trace("client,start_s,end_s\n0,0,1089.2\n", 1, Some(1200.0))
                .unwrap();
        let offline = trace
            .first_offline(0, 2410.0, 3500.0)
            .expect("it goes offline");
        assert!((offline - 3489.2).abs() < 1e-9, "{offline}");
        assert_eq!(trace.first_offline(0, 2410.0, 3489.0), None);
        // Always online: the walk crosses period after period.
        let always =
            Availability::parse_trace("client,start_s,end_s\n0,0,10\n", 1, Some(10.0)).unwrap();
        assert_eq!(always.first_offline(0, 5.0, 1e4), None);
    }

    #[test]
    fn malformed_traces_name_the_line_and_the_problem() {
        for (text, expected) in [
            ("client,start,end\n", "header"),
            (
                "client,start_s,end_s\n0,1\n",
                "line 2: \"0,1\" has 2 fields",
            ),
            ("client,start_s,end_s\n7,0,1\n", "line 2: names client 7"),
            ("client,start_s,end_s\nx,0,1\n", "not a client id"),
            ("client,start_s,end_s\n0,-1,1\n", "at least 0"),
            ("client,start_s,end_s\n0,2,1\n", "empty"),
            ("client,start_s,end_s\n0,0,2\n0,1,3\n", "overlap"),
            ("client,start_s,end_s\n", "no online interval"),
        ] {
            let error = Availability::parse_trace(text, 2, None).unwrap_err();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
        let error =
            Availability::parse_trace("client,start_s,end_s\n0,0,11\n", 1, Some(10.0)).unwrap_err();
        assert!(error.contains("after the period"), "{error}");
    }

    #[test]
    fn the_diurnal_model_keeps_each_client_online_for_its_fraction_of_a_day() {
        let model = Availability::diurnal(7, 50, 100.0, 0.25);
        for client in 0..50 {
            let online = (0..1000)
                .filter(|&i| model.online_at(client, f64::from(i) * 0.1 + 300.0))
                .count();
            assert!((245..=255).contains(&online), "client {client}: {online}");
        }
        assert_eq!(model, Availability::diurnal(7, 50, 100.0, 0.25));
        assert_ne!(model, Availability::diurnal(8, 50, 100.0, 0.25));
    }
}
