//! A sandbox's interpreter contexts: each one's id, working directory and
//! language, as the code interpreter (`interpreter`) made them.

use std::collections::BTreeMap;
use std::sync::Mutex;

use dockhand::kernel::Language;

/// A sandbox's contexts by id: their working directories and languages.
#[derive(Default)]
pub struct Contexts {
    made: Mutex<BTreeMap<String, (String, Language)>>,
}

impl Contexts {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (String, Language)>> {
        super::lock(&self.made)
    }
}
