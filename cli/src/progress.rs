//! Progress of pulls, base bootstraps and builds: a spinner per image on a
//! terminal, one line per stage change otherwise.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use dockhand::{Progress, Stage};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

/// A progress handler for [`dockhand::ClientBuilder::on_progress`].
pub fn bars() -> impl Fn(&Progress) + Send + Sync + 'static {
    let tty = std::io::stderr().is_terminal();
    let multi = MultiProgress::new();
    let bars: Mutex<HashMap<String, (ProgressBar, Stage)>> = Mutex::default();
    move |p: &Progress| {
        let mut bars = bars.lock().unwrap_or_else(|e| e.into_inner());
        let stage = p.stage;
        if !tty {
            let changed = bars.get(&p.image).is_none_or(|(_, s)| *s != stage);
            if changed {
                eprintln!("dockhand: {:?} {}: {}", stage, p.image, p.message);
                bars.insert(p.image.clone(), (ProgressBar::hidden(), stage));
            }
            return;
        }
        let (bar, last) = bars.entry(p.image.clone()).or_insert_with(|| {
            let bar = multi.add(ProgressBar::new_spinner());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {prefix:.bold} {wide_msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            (bar, stage)
        });
        *last = stage;
        bar.set_prefix(format!("{stage:?} {}", p.image));
        bar.set_message(p.message.clone());
        if stage == Stage::Ready {
            bar.finish_with_message(p.message.clone());
        }
    }
}
