//! `report.html`: the table and every chart in one file, the charts inlined as SVG, so it
//! opens in any browser, offline, and can be mailed or archived as it is.

use super::table::TextTable;

/// A chart as the page shows it.
pub struct Figure<'a> {
    /// Its heading.
    pub caption: &'a str,
    /// Its SVG text.
    pub svg: &'a str,
}

/// The page: a title, lines about the inputs, the table and the figures.
pub fn page(title: &str, about: &[String], table: &TextTable, figures: &[Figure<'_>]) -> String {
    let mut html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        escape(title),
        escape(title)
    );
    for line in about {
        html += &format!("<p>{}</p>\n", escape(line));
    }
    html += "<table>\n<thead><tr>";
    for name in &table.header {
        html += &format!("<th>{}</th>", escape(name));
    }
    html += "</tr></thead>\n<tbody>\n";
    for cells in &table.body {
        html += "<tr>";
        for cell in cells {
            html += &format!("<td>{}</td>", escape(cell));
        }
        html += "</tr>\n";
    }
    html += &format!(
        "</tbody>\n</table>\n<p class=\"note\">{}</p>\n",
        escape(&table.note)
    );
    for figure in figures {
        html += &format!(
            "<figure>\n{}\n<figcaption>{}</figcaption>\n</figure>\n",
            figure.svg.trim(),
            escape(figure.caption)
        );
    }
    html + "</body>\n</html>\n"
}

/// Readable on screen and in print; charts shrink to the window.
const STYLE: &str = "body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}\
table{border-collapse:collapse;font-size:14px}th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}\
th{background:#f3f3f3}td:not(:first-child){font-variant-numeric:tabular-nums}\
.note,figcaption{font-size:13px;color:#555}figure{margin:2em 0}\
svg{max-width:100%;height:auto}";

/// `text` with HTML's special characters escaped.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_holds_the_table_and_the_charts_and_escapes_text() {
        let table = TextTable {
            header: vec!["configuration".into()],
            body: vec![vec!["a<b".into()]],
            note: "n".into(),
        };
        let svg = "<svg width=\"1\" height=\"1\"></svg>";
        let html = page(
            "t",
            &["x & y".into()],
            &table,
            &[Figure { caption: "c", svg }],
        );
        assert!(html.contains("<td>a&lt;b</td>"));
        assert!(html.contains("<p>x &amp; y</p>"));
        assert!(html.contains(svg));
        assert!(
            !html.contains("src=") && !html.contains("href="),
            "nothing outside the file"
        );
    }
}
