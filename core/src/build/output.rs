//! The build script's output: `cargo:` directives and progress lines.

use std::io::Write;

use crate::Error;

/// Prints lines to the build script's output, keeping the first write error
/// for the end of the run.
pub(super) struct Printer<'a> {
    output: Box<dyn Write + 'a>,
    error: Option<std::io::Error>,
}

impl<'a> Printer<'a> {
    pub(super) fn new(output: Box<dyn Write + 'a>) -> Self {
        Printer {
            output,
            error: None,
        }
    }

    pub(super) fn line(&mut self, line: std::fmt::Arguments<'_>) {
        if self.error.is_none()
            && let Err(err) = writeln!(self.output, "{line}")
        {
            self.error = Some(err);
        }
    }

    pub(super) fn finish(mut self) -> Result<(), Error> {
        match self.error.take() {
            Some(err) => Err(Error::BuildOutput(err)),
            None => self.output.flush().map_err(Error::BuildOutput),
        }
    }
}
