//! What the code printed, kept up to the print limit.

/// print() output, kept up to the print limit (in characters).
pub struct Printed {
    pub text: String,
    pub chars: usize,
    pub limit: usize,
    pub cut: bool,
}

impl Printed {
    pub fn push(&mut self, text: &str) {
        if self.cut {
            return;
        }
        let room = self.limit - self.chars;
        let count = text.chars().count();
        if count > room {
            self.text.extend(text.chars().take(room));
            self.chars = self.limit;
            self.cut = true;
        } else {
            self.text.push_str(text);
            self.chars += count;
        }
    }
}
