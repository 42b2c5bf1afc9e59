//! A lower client group: trains the clients the server sends it, in parallel, and sends each
//! update back up as soon as it is ready.

use crate::network::{LinkEnd, Message, Update};
use crate::trainer::{ClientFailure, Job, Trainer};

use super::FederationError;

const TIER: &str = "client group 0";

/// The client-group tier: one thread that feeds a [`Trainer`] and forwards its results.
pub struct ClientGroup {
    trainer: Trainer,
    link: LinkEnd,
}

/// What the group's thread waits for.
enum Event {
    FromServer(Option<Message>),
    Trained(Result<Update, ClientFailure>),
}

impl ClientGroup {
    /// A group that trains with `trainer` and talks to the server on `link`.
    pub fn new(trainer: Trainer, link: LinkEnd) -> Self {
        Self { trainer, link }
    }

    /// Announces the group's clients, then serves downlinks until `Exit`; returns once every
    /// client in flight has finished and `ExitAck` is sent.
    pub fn run(self) -> Result<(), FederationError> {
        // A server that is already gone reports its own error; nothing to add here.
        let _ = self.link.send(Message::SetUp {
            clients: self.trainer.clients(),
        });
        let (done_tx, done_rx) = flume::unbounded();
        let mut in_flight = 0usize;
        let mut server_open = true;
        let mut exiting = false;
        while !(exiting && in_flight == 0) {
            let event = if exiting {
                Event::Trained(done_rx.recv().expect("the group holds a sender"))
            } else {
                flume::Selector::new()
                    .recv(self.link.receiver(), |m| Event::FromServer(m.ok()))
                    .recv(&done_rx, |r| {
                        Event::Trained(r.expect("the group holds a sender"))
                    })
                    .wait()
            };
            match event {
                Event::FromServer(Some(Message::Downlink {
                    round,
                    client,
                    model,
                })) => {
                    self.trainer.spawn(
                        Job {
                            round,
                            client,
                            model,
                        },
                        done_tx.clone(),
                    );
                    in_flight += 1;
                }
                Event::FromServer(Some(Message::Exit)) => exiting = true,
                Event::FromServer(Some(other)) => {
                    return Err(FederationError::Protocol {
                        tier: TIER.to_string(),
                        detail: format!("unexpected {} from the server", other.code()),
                    });
                }
                Event::FromServer(None) => {
                    server_open = false;
                    exiting = true;
                }
                Event::Trained(result) => {
                    in_flight -= 1;
                    let message = match result {
                        Ok(update) => Message::Uplink(update),
                        Err(failure) => Message::ClientFailed {
                            round: failure.round,
                            client: failure.client,
                            error: failure.error,
                        },
                    };
                    server_open &= self.link.send(message).is_ok();
                }
            }
        }
        if server_open {
            let _ = self.link.send(Message::ExitAck);
        }
        Ok(())
    }
}
