//! Markdown tables: the matrices print themselves in the test output in the
//! form RELIABILITY.md quotes.

/// A Markdown table with a header row.
#[derive(Clone, Debug)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new<S: ToString>(header: impl IntoIterator<Item = S>) -> Table {
        Table {
            header: header.into_iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (cells beyond the header's width are kept).
    pub fn row<S: ToString>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows
            .push(cells.into_iter().map(|c| c.to_string()).collect());
    }

    /// The rows so far.
    pub fn rows(&self) -> &[Vec<String>] {
        &self.rows
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let line = |cells: &[String]| format!("| {} |", cells.join(" | "));
        writeln!(f, "{}", line(&self.header))?;
        let rule: Vec<String> = self.header.iter().map(|_| "---".to_owned()).collect();
        writeln!(f, "{}", line(&rule))?;
        for row in &self.rows {
            writeln!(f, "{}", line(row))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn renders_markdown() {
        let mut table = Table::new(["a", "b"]);
        table.row(["1", "2"]);
        assert_eq!(table.to_string(), "| a | b |\n| --- | --- |\n| 1 | 2 |\n");
    }
}
