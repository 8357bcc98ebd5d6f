//! Plain text laid out for a terminal: the command line's tables and the
//! view's. Callers escape untrusted cells first (`sanitize`).

#[macro_use]
pub mod spelled;

pub mod glob;
pub mod sanitize;

/// Left-aligned columns; the last column is not padded.
pub fn table<const N: usize>(head: [&str; N], rows: &[[String; N]]) -> String {
    let mut all = vec![head.map(String::from)];
    all.extend_from_slice(rows);
    columns(&all).into_iter().map(|l| l + "\n").collect()
}

/// The lines of left-aligned columns, two spaces apart, without a
/// header; the last column is not padded.
pub fn columns<const N: usize>(rows: &[[String; N]]) -> Vec<String> {
    let mut width = [0; N];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String; N]| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            l.push_str(c);
            if i + 1 < N {
                l.push_str(&" ".repeat(width[i] - c.chars().count() + 2));
            }
        }
        l.trim_end().to_string()
    };
    rows.iter().map(line).collect()
}

#[cfg(test)]
mod tests {
    use super::table;

    #[test]
    fn columns_align_on_the_widest_cell_and_the_last_is_not_padded() {
        let rows = [
            ["agent-one".to_string(), "7".to_string(), "/w".to_string()],
            ["b".to_string(), "12345".to_string(), String::new()],
        ];
        assert_eq!(
            table(["NAME", "PID", "WORKSPACE"], &rows),
            "NAME       PID    WORKSPACE\nagent-one  7      /w\nb          12345\n"
        );
    }
}
