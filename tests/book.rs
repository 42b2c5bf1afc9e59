//! The book in a browser. `mdbook build` renders it. A small HTTP server on 127.0.0.1 serves
//! it, and headless Chromium opens a page that loads every chapter of `SUMMARY.md` in turn and
//! reports what it rendered. The test checks that each chapter has its title, that every image
//! on it loaded, and that the generated reference chapters show their tables.
//!
//! It needs `mdbook` and `chromium` on the path. Without them it says so and passes, unless
//! `FEDSIM_REQUIRE_BROWSER` is set, as `.ci/run` sets it: then their absence fails the test.

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::root;
use fedsim::cli::reference;
use fedsim::registry::Registry;
use serde_json::Value;

/// Whether `program` runs.
fn available(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The chapters `SUMMARY.md` links, as paths of the rendered book (`how-to/run.html`).
fn chapters() -> Vec<String> {
    let summary = fs::read_to_string(root().join("docs/src/SUMMARY.md")).unwrap();
    summary
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|target| target.replace(".md", ".html"))
        .collect()
}

/// The page that loads every chapter in an iframe, one after another, and writes what each
/// rendered into a `<pre id="results">` as JSON.
fn harness(chapters: &[String]) -> String {
    let list = serde_json::to_string(chapters).unwrap();
    format!(
        r#"<!doctype html><html><body><script>
const chapters = {list};
function check(path) {{
  return new Promise(resolve => {{
    const frame = document.createElement('iframe');
    frame.onload = () => {{
      const page = frame.contentDocument;
      const images = [...page.querySelectorAll('main img')];
      const heading = page.querySelector('main h1');
      resolve({{
        path,
        title: heading ? heading.textContent.trim() : null,
        images: images.length,
        broken: images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src')),
        tables: page.querySelectorAll('main table').length,
      }});
      frame.remove();
    }};
    frame.src = path;
    document.body.appendChild(frame);
  }});
}}
(async () => {{
  const results = [];
  for (const path of chapters) results.push(await check(path));
  const out = document.createElement('pre');
  out.id = 'results';
  out.textContent = JSON.stringify(results);
  document.body.appendChild(out);
}})();
</script></body></html>"#
    )
}

/// The content type of a file the book holds.
fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css",
        Some("js") => "text/javascript",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("json") => "application/json",
        Some("woff2") => "font/woff2",
        _ => "application/octet-stream",
    }
}

/// Serves `book` (and the harness at `/harness.html`) on 127.0.0.1, one request per
/// connection, from a thread of its own; returns the address.
fn serve(book: PathBuf, harness: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = String::new();
            if BufReader::new(&stream).read_line(&mut request).is_err() {
                continue;
            }
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let path = path
                .split(['?', '#'])
                .next()
                .unwrap_or("/")
                .trim_start_matches('/');
            let file = book.join(path);
            let (status, kind, body) = if path == "harness.html" {
                (
                    "200 OK",
                    "text/html; charset=utf-8",
                    harness.clone().into_bytes(),
                )
            } else if !path.contains("..") && file.is_file() {
                ("200 OK", content_type(&file), fs::read(&file).unwrap())
            } else {
                ("404 Not Found", "text/plain", b"not found".to_vec())
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    address
}

/// Text as Chromium's serialised DOM escapes it, unescaped.
fn unescaped(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

#[test]
fn every_chapter_renders_with_its_title_images_and_tables() {
    let required = std::env::var_os("FEDSIM_REQUIRE_BROWSER").is_some();
    for program in ["mdbook", "chromium"] {
        if !available(program) {
            assert!(!required, "{program} is not on the path");
            eprintln!("not checked: {program} is not on the path (.ci/run installs it)");
            return;
        }
    }
    let out = tempfile::tempdir().unwrap();
    let book = out.path().join("book");
    let built = Command::new("mdbook")
        .args(["build", "--dest-dir"])
        .arg(&book)
        .arg(root().join("docs"))
        .output()
        .unwrap();
    assert!(built.status.success(), "{built:?}");
    let chapters = chapters();
    assert!(chapters.len() >= 30, "{chapters:?}");
    let address = serve(book, harness(&chapters));
    let browser = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=60000",
            "--dump-dom",
        ])
        .arg(format!("{address}/harness.html"))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&browser.stdout);
    let results = dom
        .split("<pre id=\"results\">")
        .nth(1)
        .and_then(|rest| rest.split("</pre>").next())
        .unwrap_or_else(|| {
            panic!(
                "the harness wrote no results:\n{dom}\n{}",
                String::from_utf8_lossy(&browser.stderr)
            )
        });
    let results: Vec<Value> = serde_json::from_str(&unescaped(results)).unwrap();
    assert_eq!(results.len(), chapters.len());
    // The chapters that include a generated page are named after it (`tests/docs.rs`).
    let generated: Vec<String> = reference::pages(&Registry::builtin())
        .iter()
        .map(|page| format!("reference/{}", page.file.replace(".md", ".html")))
        .collect();
    let mut images = 0;
    for result in &results {
        let path = result["path"].as_str().unwrap();
        let title = result["title"].as_str().unwrap_or_default();
        assert!(!title.is_empty(), "{path} rendered no title: {result}");
        assert_eq!(result["broken"], Value::Array(vec![]), "{path}: {result}");
        images += result["images"].as_u64().unwrap();
        if generated.iter().any(|page| page == path) {
            assert!(
                result["tables"].as_u64().unwrap() > 0,
                "{path} shows no table of its generated page: {result}"
            );
        }
    }
    // The tutorial's charts and the strategies chart.
    assert!(images >= 10, "{images} images in the book");
    eprintln!(
        "{} chapters rendered, {images} images loaded",
        results.len()
    );
}
