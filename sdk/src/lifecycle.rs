//! The lifecycle shared by long-lived containers ([code hosts](crate::codemode::CodeHost)
//! and [sessions](crate::session::Session)).
//!
//! ```text
//! init -> running | closed
//! running -> idle | error | closed
//! idle -> running | paused | error | closed
//! paused -> running | error | closed
//! error -> running | closed
//! closed -> (nothing)
//! ```
//! `running` means busy (starting or executing); `idle` means ready for work;
//! `error` means not usable until started again (the process died, or the
//! container was stopped on purpose).

use std::fmt;

use serde::Serialize;

use crate::error::{Error, Result};

/// A lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Created, never started.
    Init,
    /// Starting or working.
    Running,
    /// Started and waiting for work.
    Idle,
    /// Paused: its container is stopped (with its memory saved, or only
    /// its files); `resume` brings it back.
    Paused,
    /// Stopped or failed; `start` brings it back.
    Error,
    /// Closed for good; its container is gone.
    Closed,
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            State::Init => "init",
            State::Running => "running",
            State::Idle => "idle",
            State::Paused => "paused",
            State::Error => "error",
            State::Closed => "closed",
        })
    }
}

impl State {
    /// Whether `self -> to` is allowed.
    pub fn can_become(self, to: State) -> bool {
        use State::*;
        matches!(
            (self, to),
            (Init, Running | Closed)
                | (Running, Idle | Error | Closed)
                | (Idle, Running | Paused | Error | Closed)
                | (Paused, Running | Error | Closed)
                | (Error, Running | Closed)
        )
    }

    /// The transition, or [`Error::InvalidTransition`].
    pub fn transition(self, to: State) -> Result<State> {
        if self.can_become(to) {
            Ok(to)
        } else {
            Err(Error::InvalidTransition {
                from: self.to_string(),
                to: to.to_string(),
            })
        }
    }
}

/// What every long-lived container keeps about itself: its state, its
/// container and image, and why it is in `error`. Code hosts and sessions
/// wrap it with their own counters.
#[derive(Debug)]
pub(crate) struct Tracked {
    pub(crate) state: State,
    pub(crate) container_id: Option<String>,
    pub(crate) image: Option<String>,
    pub(crate) last_error: Option<String>,
}

impl Tracked {
    pub(crate) fn new() -> Self {
        Tracked {
            state: State::Init,
            container_id: None,
            image: None,
            last_error: None,
        }
    }

    /// Moves to `to`; leaving `error` forgets why it was entered.
    pub(crate) fn transition(&mut self, to: State) -> Result<()> {
        self.state = self.state.transition(to)?;
        if to != State::Error {
            self.last_error = None;
        }
        Ok(())
    }

    /// Records a failure: to `error` where allowed, with no container.
    pub(crate) fn fail(&mut self, why: String) {
        if self.state.can_become(State::Error) {
            self.state = State::Error;
        }
        self.container_id = None;
        self.last_error = Some(why);
    }

    /// `start` is for containers with no live process: from `init` or `error`
    /// only (idle -> running is how work begins, not how starting does).
    pub(crate) fn check_startable(&self) -> Result<()> {
        match self.state {
            State::Init | State::Error => Ok(()),
            other => Err(Error::InvalidTransition {
                from: other.to_string(),
                to: "running (start needs init or error)".into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::State::{self, *};

    const ALL: [State; 6] = [Init, Running, Idle, Paused, Error, Closed];

    #[test]
    fn exactly_the_documented_transitions_are_allowed() {
        let allowed = [
            (Init, Running),
            (Init, Closed),
            (Running, Idle),
            (Running, Error),
            (Running, Closed),
            (Idle, Running),
            (Idle, Paused),
            (Idle, Error),
            (Idle, Closed),
            (Paused, Running),
            (Paused, Error),
            (Paused, Closed),
            (Error, Running),
            (Error, Closed),
        ];
        for from in ALL {
            for to in ALL {
                let expected = allowed.contains(&(from, to));
                assert_eq!(from.can_become(to), expected, "{from} -> {to}");
                assert_eq!(from.transition(to).is_ok(), expected);
            }
        }
    }

    #[test]
    fn tracked_status_records_failures_and_forgets_them_on_recovery() {
        let mut t = super::Tracked::new();
        assert!(t.check_startable().is_ok());
        t.transition(Running).unwrap();
        t.container_id = Some("c".into());
        assert!(t.check_startable().is_err());
        t.fail("died".into());
        assert_eq!(
            (t.state, t.container_id.as_deref(), t.last_error.as_deref()),
            (Error, None, Some("died"))
        );
        t.transition(Running).unwrap();
        assert_eq!(t.last_error, None);
    }

    #[test]
    fn invalid_transitions_name_both_states() {
        let err = Closed.transition(Running).unwrap_err().to_string();
        assert!(err.contains("closed") && err.contains("running"), "{err}");
    }
}
