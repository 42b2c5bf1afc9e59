//! Which clients are online as the simulated clock advances, kept up to date by the moments
//! at which clients come and go rather than asked of every client at every round: a round of
//! a federation of a million clients then costs what its own clients and the moments it
//! passes cost, not a pass over the million.
//!
//! Every interval of every client becomes two moments in the period's own time, its start
//! (the client comes online) and its end (it goes offline), sorted once; advancing the clock
//! to `t` applies the moments passed since the last advance. At equal moments a departure
//! comes first, so that a client whose intervals touch stays online, and a client is online
//! while any of its intervals holds (the diurnal model's two pieces of a day that wraps may
//! overlap by a rounding). The set then holds exactly the clients that
//! [`Availability::online_at`] says are online at `t`. Beside whether each
//! client is online, it remembers which are busy (an asynchronous server's clients in flight),
//! and counts the free ones (online and not busy) in a Fenwick tree, so that the `k`-th free
//! client in id order is found in `O(log n)`: a uniform draw of a round's clients touches only
//! the clients it draws.

use super::{Availability, fold};
use crate::network::ClientId;

/// One client coming online or going offline, at a moment in the period's own time.
#[derive(Debug, Clone, Copy)]
struct Moment {
    at: f64,
    online: bool,
    position: u32,
}

/// The clients of a federation online at the clock's moment, with which of them are busy.
/// Clients are known by their position in the id-sorted list it was made for.
#[derive(Debug, Clone)]
pub struct OnlineClients {
    /// Every start and end of every client's intervals, by moment (departures first at equal
    /// moments, then by position); empty where every client is always online.
    moments: Vec<Moment>,
    /// The first moment not yet applied.
    next: usize,
    /// The start of the period of the clock's moment (0 without a period).
    base: f64,
    period: Option<f64>,
    /// How many of each client's intervals hold it online now: online where not 0.
    holding: Vec<u8>,
    busy: Vec<bool>,
    free: Fenwick,
}

impl OnlineClients {
    /// The clients `ids` (sorted) at moment `t`, none busy.
    pub fn new(availability: &Availability, ids: &[ClientId], t: f64) -> Self {
        let Some(intervals) = &availability.intervals else {
            return Self {
                moments: Vec::new(),
                next: 0,
                base: 0.0,
                period: None,
                holding: vec![1; ids.len()],
                busy: vec![false; ids.len()],
                free: Fenwick::full(ids.len()),
            };
        };
        let mut moments: Vec<Moment> = ids
            .iter()
            .enumerate()
            .flat_map(|(position, &client)| {
                let position = u32::try_from(position).expect("at most 2^32 clients");
                intervals[client].iter().flat_map(move |&(start, end)| {
                    [(start, true), (end, false)].map(|(at, online)| Moment {
                        at,
                        online,
                        position,
                    })
                })
            })
            .collect();
        moments.sort_unstable_by(|a, b| {
            (a.at.total_cmp(&b.at))
                .then(a.online.cmp(&b.online))
                .then(a.position.cmp(&b.position))
        });
        let mut set = Self {
            moments,
            next: 0,
            base: fold(availability.period, t).0,
            period: availability.period,
            holding: vec![0; ids.len()],
            busy: vec![false; ids.len()],
            free: Fenwick::empty(ids.len()),
        };
        set.advance(t);
        set
    }

    /// Moves the clock forward to `t` (never back), applying the comings and goings passed.
    pub fn advance(&mut self, t: f64) {
        if self.moments.is_empty() {
            return;
        }
        let (base, local) = fold(self.period, t);
        if base > self.base {
            // Every client is offline at the end of a period (intervals end within it): apply
            // the rest of this one, then start the new one from its beginning.
            self.apply_until(f64::INFINITY);
            self.next = 0;
            self.base = base;
        }
        self.apply_until(local);
    }

    /// Applies the moments at or before `local`.
    fn apply_until(&mut self, local: f64) {
        while let Some(&moment) = self.moments.get(self.next)
            && moment.at <= local
        {
            self.next += 1;
            let position = moment.position as usize;
            let was_online = self.is_online(position);
            let holding = &mut self.holding[position];
            *holding = if moment.online {
                *holding + 1
            } else {
                *holding - 1
            };
            let change = i32::from(self.is_online(position)) - i32::from(was_online);
            if change != 0 && !self.busy[position] {
                self.free.add(position, change);
            }
        }
    }

    /// Marks the client at `position` busy (in flight) or no longer busy.
    pub fn set_busy(&mut self, position: usize, busy: bool) {
        if self.busy[position] == busy {
            return;
        }
        self.busy[position] = busy;
        if self.is_online(position) {
            self.free.add(position, if busy { -1 } else { 1 });
        }
    }

    /// Whether the client at `position` is online and not busy.
    pub fn is_free(&self, position: usize) -> bool {
        self.is_online(position) && !self.busy[position]
    }

    fn is_online(&self, position: usize) -> bool {
        self.holding[position] > 0
    }

    /// How many clients are online and not busy.
    pub fn free_count(&self) -> usize {
        self.free.total()
    }

    /// The position of the `k`-th (from 0) client online and not busy, in position order.
    pub fn nth_free(&self, k: usize) -> usize {
        assert!(k < self.free_count(), "{k} of {} free clients", self.free_count());
        self.free.nth(k)
    }

    /// The positions of the clients not busy, online or not.
    pub fn idle(&self) -> impl Iterator<Item = usize> + '_ {
        self.busy
            .iter()
            .enumerate()
            .filter(|(_, busy)| !**busy)
            .map(|(position, _)| position)
    }
}

/// Counts over positions with prefix sums and order statistics in `O(log n)` (Fenwick 1994).
#[derive(Debug, Clone)]
struct Fenwick {
    /// `tree[i]` (from 1) sums the counts of positions `i - lowbit(i)` to `i - 1`.
    tree: Vec<u32>,
    total: usize,
}

impl Fenwick {
    fn empty(len: usize) -> Self {
        Self {
            tree: vec![0; len + 1],
            total: 0,
        }
    }

    /// Every position counted once, built in `O(n)`.
    fn full(len: usize) -> Self {
        let mut tree: Vec<u32> = (0..=len).map(|i| u32::from(i > 0)).collect();
        for i in 1..=len {
            let parent = i + (i & i.wrapping_neg());
            if parent <= len {
                tree[parent] += tree[i];
            }
        }
        Self { tree, total: len }
    }

    fn total(&self) -> usize {
        self.total
    }

    fn add(&mut self, position: usize, delta: i32) {
        self.total = self.total.wrapping_add_signed(delta as isize);
        let mut i = position + 1;
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// The position holding the `k`-th (from 0) count, where each position counts 0 or 1.
    fn nth(&self, k: usize) -> usize {
        let mut remaining = k as u32;
        let mut at = 0;
        let mut step = (self.tree.len() - 1).next_power_of_two();
        while step > 0 {
            let next = at + step;
            if next < self.tree.len() && self.tree[next] <= remaining {
                remaining -= self.tree[next];
                at = next;
            }
            step /= 2;
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The free positions, asked of the set one by one through its order statistics.
    fn free(set: &OnlineClients) -> Vec<usize> {
        (0..set.free_count()).map(|k| set.nth_free(k)).collect()
    }

    /// The positions `online_at` says are online and not in `busy`.
    fn expected(availability: &Availability, ids: &[ClientId], busy: &[usize], t: f64) -> Vec<usize> {
        (0..ids.len())
            .filter(|p| !busy.contains(p) && availability.online_at(ids[*p], t))
            .collect()
    }

    #[test]
    fn the_set_follows_the_clock_as_asking_every_client_does() {
        let trace = "client,start_s,end_s\n0,0,2\n0,2,5\n1,1,4\n1,6,10\n3,9.5,10\n4,0,10\n";
        let availabilities = [
            Availability::parse_trace(trace, 5, Some(10.0)).unwrap(),
            Availability::parse_trace(trace, 5, None).unwrap(),
            Availability::diurnal(3, 40, 10.0, 0.3),
            Availability::diurnal(4, 40, 10.0, 1.0),
            Availability::always(),
        ];
        for availability in availabilities {
            let n = availability.intervals.as_ref().map_or(7, Vec::len);
            // Every client but the third, so that positions and ids differ.
            let ids: Vec<ClientId> = (0..n).filter(|&c| c != 2).collect();
            let mut set = OnlineClients::new(&availability, &ids, 0.5);
            assert_eq!(free(&set), expected(&availability, &ids, &[], 0.5));
            // Steps within a period, onto moments of comings and goings, across one and
            // across several periods at once.
            for t in [1.0, 2.0, 4.0, 5.0, 6.0, 9.75, 10.0, 11.5, 19.9, 20.0, 47.25, 50.0] {
                set.advance(t);
                assert_eq!(free(&set), expected(&availability, &ids, &[], t), "at {t}");
                for k in 0..set.free_count() {
                    assert!(set.is_free(set.nth_free(k)));
                }
            }
        }
    }

    #[test]
    fn busy_clients_are_not_free_whether_they_come_or_go_meanwhile() {
        let availability = Availability::diurnal(5, 30, 10.0, 0.5);
        let ids: Vec<ClientId> = (0..30).collect();
        let mut set = OnlineClients::new(&availability, &ids, 0.0);
        let busy = [0, 3, 4, 17, 29];
        for &position in &busy {
            set.set_busy(position, true);
        }
        for t in [0.0, 2.5, 5.0, 7.5, 12.0] {
            set.advance(t);
            assert_eq!(free(&set), expected(&availability, &ids, &busy, t), "at {t}");
        }
        set.set_busy(3, false);
        assert_eq!(free(&set), expected(&availability, &ids, &[0, 4, 17, 29], 12.0));
        let idle: Vec<usize> = set.idle().collect();
        assert_eq!(idle.len(), 26);
        assert!(!idle.contains(&0) && idle.contains(&3));
    }

    #[test]
    fn a_full_tree_counts_as_one_filled_position_by_position() {
        for len in [0, 1, 2, 7, 8, 33] {
            let full = Fenwick::full(len);
            let mut filled = Fenwick::empty(len);
            (0..len).for_each(|p| filled.add(p, 1));
            assert_eq!(full.tree, filled.tree);
            assert_eq!((0..len).map(|k| full.nth(k)).collect::<Vec<_>>(), (0..len).collect::<Vec<_>>());
        }
    }
}
