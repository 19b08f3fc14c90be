//! The one shape of a staged reconcile (the hub's and the agent's pipelines): each stage
//! hands the next what it produced, or ends the reconcile with when to look again.

use kube::runtime::controller::Action;

/// What a stage hands the next one, or the end of this reconcile (held back, waiting,
/// invalid, refused, gone) with when to look again.
pub enum Step<T> {
    Next(T),
    Done(Action),
}

/// The next stage's input, or the reconcile's end (`return Ok(action)`).
macro_rules! next {
    ($step:expr) => {
        match $step {
            $crate::controller::step::Step::Next(x) => x,
            $crate::controller::step::Step::Done(action) => return Ok(action),
        }
    };
}
pub(crate) use next;
