//! Shorthands for the common cases: a run with no inputs, inputs of mixed
//! types, and a one-off snippet with nothing declared.

use super::attempt::RunOutput;
use super::spec::Sandbox;
use super::value::Value;
use crate::client::Client;
use crate::error::Result;
use crate::settings::CacheMode;

/// The inputs of a run that takes none.
///
/// ```no_run
/// # async fn demo(client: dockhand::Client, sandbox: dockhand::Sandbox) -> dockhand::Result<()> {
/// let out = client.run(&sandbox, dockhand::NO_INPUTS).await?;
/// # Ok(()) }
/// ```
pub const NO_INPUTS: [(&str, Value); 0] = [];

/// Inputs of mixed types by name, each converted with `Value::from`.
///
/// ```no_run
/// # async fn demo(client: dockhand::Client, sandbox: dockhand::Sandbox) -> dockhand::Result<()> {
/// use dockhand::inputs;
/// let out = client.run(&sandbox, inputs! { x: 21, name: "web", verbose: true }).await?;
/// let none = client.run(&sandbox, inputs! {}).await?;
/// # Ok(()) }
/// ```
#[macro_export]
macro_rules! inputs {
    () => {
        $crate::NO_INPUTS
    };
    ($($name:ident : $value:expr),+ $(,)?) => {
        [$((stringify!($name), $crate::Value::from($value))),+]
    };
}

impl Client {
    /// Runs a Python snippet once with nothing declared, in a fresh container
    /// of the default image, and returns what it printed (`out.stdout`).
    /// Never cached: a one-off is meant to run.
    ///
    /// ```no_run
    /// # async fn demo() -> dockhand::Result<()> {
    /// let client = dockhand::Client::connect().await?;
    /// let out = client.run_code("print(6 * 7)").await?;
    /// assert_eq!(out.stdout.text, "42\n");
    /// # Ok(()) }
    /// ```
    pub async fn run_code(&self, code: &str) -> Result<RunOutput> {
        let sandbox = Sandbox::code("run-code", code)
            .cache(CacheMode::Disable)
            .build()?;
        self.run(&sandbox, NO_INPUTS).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_of_mixed_types_convert_by_name() {
        let given = inputs! { x: 21, name: "web", ratio: 0.5, verbose: true };
        let names: Vec<&str> = given.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["x", "name", "ratio", "verbose"]);
        assert_eq!(given[0].1, Value::Int(21));
        assert_eq!(given[1].1, Value::Str("web".into()));
        assert_eq!(given[3].1, Value::Bool(true));
        assert!(inputs! {}.is_empty());
    }
}
