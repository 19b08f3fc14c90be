//! The CLI's tables: columns sized to their content (comfy-table), kubectl's look — no
//! borders, two spaces between columns — and lines that never end in spaces. A row may
//! carry detail lines printed under it (a workload's members under the workload).

use comfy_table::{CellAlignment, ColumnConstraint, ContentArrangement, presets::NOTHING};

pub struct Table {
    inner: comfy_table::Table,
    /// Detail lines under each row, by row index.
    details: Vec<Vec<String>>,
    indent: &'static str,
    header: bool,
    right: Vec<usize>,
}

impl Table {
    /// A table with these column titles.
    pub fn new<const N: usize>(header: [&str; N]) -> Table {
        let mut t = Table::headless();
        t.inner.set_header(header);
        t.header = true;
        t
    }

    /// A table of rows only (aligned lines within a section of `describe`).
    pub fn headless() -> Table {
        let mut inner = comfy_table::Table::new();
        inner
            .load_preset(NOTHING)
            .set_content_arrangement(ContentArrangement::Disabled);
        Table {
            inner,
            details: Vec::new(),
            indent: "",
            header: false,
            right: Vec::new(),
        }
    }

    /// Every line starts with `by` (a table inside an indented section).
    pub fn indent(mut self, by: &'static str) -> Table {
        self.indent = by;
        self
    }

    /// These columns (0-based) are right-aligned: numbers.
    pub fn right(mut self, columns: &[usize]) -> Table {
        self.right.extend_from_slice(columns);
        self
    }

    pub fn row<I, S>(&mut self, cells: I) -> &mut Table
    where
        I: IntoIterator<Item = S>,
        S: Into<comfy_table::Cell>,
    {
        self.row_with(cells, Vec::new())
    }

    /// A row with lines printed under it, as they are.
    pub fn row_with<I, S>(&mut self, cells: I, details: Vec<String>) -> &mut Table
    where
        I: IntoIterator<Item = S>,
        S: Into<comfy_table::Cell>,
    {
        self.inner.add_row(cells);
        self.details.push(details);
        self
    }

    /// The table's lines, each ending in a newline.
    pub fn render(&mut self) -> String {
        for (i, col) in self.inner.column_iter_mut().enumerate() {
            // Two spaces between columns, none before the first.
            col.set_padding((0, 2));
            col.set_constraint(ColumnConstraint::ContentWidth);
            if self.right.contains(&i) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
        let mut out = String::new();
        let mut lines = self.inner.lines();
        if self.header
            && let Some(h) = lines.next()
        {
            push_line(&mut out, self.indent, &h);
        }
        for (line, details) in lines.zip(&self.details) {
            push_line(&mut out, self.indent, &line);
            for d in details {
                push_line(&mut out, self.indent, d);
            }
        }
        out
    }
}

fn push_line(out: &mut String, indent: &str, line: &str) {
    out.push_str(indent);
    out.push_str(line.trim_end());
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_fit_their_content_with_details_under_rows() {
        let mut t = Table::new(["NAME", "CPU"]).right(&[1]);
        t.row_with(["use1a", "32"], vec!["  └ detail".into()]);
        t.row(["b", "4"]);
        assert_eq!(
            t.render(),
            "NAME   CPU\nuse1a   32\n  └ detail\nb        4\n"
        );
    }

    #[test]
    fn indented_rows_without_a_header() {
        let mut t = Table::headless().indent("  ");
        t.row(["Ready", "True", "a message with spaces"]);
        t.row(["Invalid", "False", ""]);
        assert_eq!(
            t.render(),
            "  Ready    True   a message with spaces\n  Invalid  False\n"
        );
    }
}
