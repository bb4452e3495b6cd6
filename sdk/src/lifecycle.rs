//! The lifecycle shared by long-lived containers ([code hosts](crate::codemode::CodeHost)
//! and [sessions](crate::session::Session)).
//!
//! ```text
//! init -> running | closed
//! running -> idle | error | closed
//! idle -> running | error | closed
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
                | (Idle, Running | Error | Closed)
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

#[cfg(test)]
mod tests {
    use super::State::{self, *};

    const ALL: [State; 5] = [Init, Running, Idle, Error, Closed];

    #[test]
    fn exactly_the_documented_transitions_are_allowed() {
        let allowed = [
            (Init, Running),
            (Init, Closed),
            (Running, Idle),
            (Running, Error),
            (Running, Closed),
            (Idle, Running),
            (Idle, Error),
            (Idle, Closed),
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
    fn invalid_transitions_name_both_states() {
        let err = Closed.transition(Running).unwrap_err().to_string();
        assert!(err.contains("closed") && err.contains("running"), "{err}");
    }
}
