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

/// What the failed runs' section says before listing them.
pub const FAILED_NOTE: &str = "These runs ended with an error and are not in the table or the \
     charts; each folder keeps its error in failure.json and its finished rounds in \
     metrics.jsonl.";

/// The heading of the settings every compared run shares.
pub const SHARED_HEADING: &str = "Settings the runs share";

/// A report page's parts.
pub struct Page<'a> {
    /// Its title.
    pub title: &'a str,
    /// Lines about the inputs.
    pub about: &'a [String],
    /// The configurations' table.
    pub table: &'a TextTable,
    /// The settings every run shares, as `(path, value)`: what the table's labels leave out.
    pub shared: &'a [(String, String)],
    /// The runs that failed, one line each with its error.
    pub failed: &'a [String],
    /// The charts.
    pub figures: &'a [Figure<'a>],
}

impl Page<'_> {
    /// The page: the title, the lines about the inputs, the table, the settings the runs
    /// share, the failed runs (if any) and the figures.
    pub fn render(&self) -> String {
        let title = escape(self.title);
        let mut html = format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{title}</h1>\n"
        );
        for line in self.about {
            html += &format!("<p>{}</p>\n", escape(line));
        }
        html += &table(self.table);
        if !self.shared.is_empty() {
            html += &format!("<h2>{SHARED_HEADING}</h2>\n<ul class=\"settings\">\n");
            for (path, value) in self.shared {
                html += &format!("<li><code>{}</code>: {}</li>\n", escape(path), escape(value));
            }
            html += "</ul>\n";
        }
        if !self.failed.is_empty() {
            html += &format!(
                "<h2>Failed runs</h2>\n<p class=\"note\">{}</p>\n<ul class=\"failed\">\n",
                escape(FAILED_NOTE)
            );
            for line in self.failed {
                html += &format!("<li>{}</li>\n", escape(line));
            }
            html += "</ul>\n";
        }
        for figure in self.figures {
            html += &format!(
                "<figure>\n{}\n<figcaption>{}</figcaption>\n</figure>\n",
                figure.svg.trim(),
                escape(figure.caption)
            );
        }
        html + "</body>\n</html>\n"
    }
}

/// The table and its note, as HTML.
fn table(table: &TextTable) -> String {
    let mut html = String::new();
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
    html + &format!(
        "</tbody>\n</table>\n<p class=\"note\">{}</p>\n",
        escape(&table.note)
    )
}

/// Readable on screen and in print; charts shrink to the window.
const STYLE: &str = "body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}\
table{border-collapse:collapse;font-size:14px}th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}\
th{background:#f3f3f3}td:not(:first-child){font-variant-numeric:tabular-nums}\
.note,figcaption{font-size:13px;color:#555}figure{margin:2em 0}\
.failed li{color:#a00;margin:.3em 0}\
.settings{columns:2;font-size:13px;padding-left:1.2em}.settings li{break-inside:avoid}\
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
        let page = Page {
            title: "t",
            about: &["x & y".into()],
            table: &table,
            shared: &[("model".into(), "mlp".into())],
            failed: &[],
            figures: &[Figure { caption: "c", svg }],
        };
        let html = page.render();
        assert!(html.contains("<td>a&lt;b</td>"));
        assert!(html.contains("<p>x &amp; y</p>"));
        assert!(html.contains(svg));
        assert!(html.contains("<li><code>model</code>: mlp</li>"));
        assert!(!html.contains("Failed runs"));
        let failed = ["runs/s/a: training diverged <here>".to_string()];
        let html = Page {
            failed: &failed,
            ..page
        }
        .render();
        assert!(html.contains("<h2>Failed runs</h2>"));
        assert!(html.contains("<li>runs/s/a: training diverged &lt;here&gt;</li>"));
        assert!(
            !html.contains("src=") && !html.contains("href="),
            "nothing outside the file"
        );
    }
}
