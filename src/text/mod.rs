//! Plain text laid out for a terminal: the command line's tables and the
//! view's. Callers escape untrusted cells first (`sanitize`).

#[macro_use]
pub mod spelled;

pub mod glob;
pub mod sanitize;

/// Left-aligned columns; the last column is not padded.
pub fn table<const N: usize>(head: [&str; N], rows: &[[String; N]]) -> String {
    let head = [head.map(String::from)];
    let all: Vec<&[String]> = head.iter().chain(rows).map(|r| &r[..]).collect();
    lay(&all).into_iter().map(|l| l + "\n").collect()
}

/// `table` with a first column before the others (a `HOST`): `first`
/// heads it, and each row is `(its cell, the other cells)`.
pub fn table_with<const N: usize>(
    first: &str,
    head: [&str; N],
    rows: &[(String, [String; N])],
) -> String {
    let head = (first.to_string(), head.map(String::from));
    let rows: Vec<Vec<String>> = (std::iter::once(&head).chain(rows))
        .map(|(c, r)| std::iter::once(c).chain(r).cloned().collect())
        .collect();
    let all: Vec<&[String]> = rows.iter().map(|r| &r[..]).collect();
    lay(&all).into_iter().map(|l| l + "\n").collect()
}

/// The lines of left-aligned columns, two spaces apart, without a
/// header; the last column is not padded.
pub fn columns<const N: usize>(rows: &[[String; N]]) -> Vec<String> {
    lay(&rows.iter().map(|r| &r[..]).collect::<Vec<_>>())
}

fn lay(rows: &[&[String]]) -> Vec<String> {
    let n = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut width = vec![0; n];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let line = |cells: &&[String]| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            l.push_str(c);
            if i + 1 < n {
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
