//! Policy events to the client: the connection's `EventSink`, bounded. Events are queued as
//! `event` frames behind the stream data already queued (so a command's events reach the client
//! before its answer); those the client does not take fast enough are dropped and counted, and
//! the count goes as one `eventsDropped` frame before the next event that finds room.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use pi_native_ops_core::policy::{EventSink, PolicyEvent};

use crate::budget::Budget;
use crate::outbox::Outbox;
use crate::wire::{Outgoing, WireEvent};

/// Bytes of event frames queued and not yet written, beyond which events are dropped (counted):
/// about a thousand events, far more than a command's refusals between two of the client's
/// reads, and little beside the output budget. The sink must never block the thread reporting
/// (a sandbox's handler, the proxy), so it cannot wait for room as answers do.
pub const EVENT_BUDGET: u64 = 256 << 10;

/// The events of one connection.
pub struct Events {
    out: Outbox,
    budget: Arc<Budget>,
    /// Whether the client asked for events (`policy` with `events: true`).
    wanted: AtomicBool,
    /// Events dropped since the last `eventsDropped` went out.
    dropped: Mutex<u64>,
}

impl Events {
    pub fn new(out: Outbox) -> Arc<Events> {
        Arc::new(Events {
            out,
            budget: Budget::new(EVENT_BUDGET),
            wanted: AtomicBool::new(false),
            dropped: Mutex::new(0),
        })
    }

    pub fn want(&self) {
        self.wanted.store(true, Ordering::Relaxed);
    }

    /// The sink the core's event sources report to (the sandboxed shell's, the proxy's); sends
    /// nothing until the client asked for events.
    pub fn sink(self: &Arc<Events>) -> EventSink {
        let events = Arc::clone(self);
        Arc::new(move |event| events.send(event))
    }

    /// Queues `event`, or counts it dropped when the client is behind; never waits.
    pub fn send(&self, event: PolicyEvent) {
        if !self.wanted.load(Ordering::Relaxed) {
            return;
        }
        let event = WireEvent::from(event);
        let mut dropped = self.dropped.lock().unwrap_or_else(PoisonError::into_inner);
        if *dropped > 0 {
            let notice = Outgoing::EventsDropped { count: *dropped };
            let Some(permit) = self.budget.try_hold(self.out.frame_size(&notice)) else {
                *dropped += 1;
                return;
            };
            self.out.queue_event(&notice, permit);
            *dropped = 0;
        }
        let message = Outgoing::Event(&event);
        match self.budget.try_hold(self.out.frame_size(&message)) {
            Some(permit) => self.out.queue_event(&message, permit),
            None => *dropped += 1,
        }
    }
}
