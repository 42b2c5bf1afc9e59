//! `fedsim data fetch` against a real HTTP server on 127.0.0.1 serving a generated CIFAR-10
//! archive in the real format: a cut download resumes with a range request, the archive is
//! checked before it is unpacked, and being offline gets a message that says what to do.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};

use common::{fails_with, write_cifar_files};
use fedsim::data::Normalization;
use fedsim::data::cifar;
use fedsim::data::fetch::{CIFAR10, Fetch, FetchError};
use md5::{Digest, Md5};

/// A `cifar-10-binary.tar.gz` as the authors pack it: `cifar-10-batches-bin/` with the six
/// files, `per_file` records each.
fn cifar_archive(per_file: usize) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("cifar-10-batches-bin");
    std::fs::create_dir(&folder).unwrap();
    write_cifar_files(&folder, per_file);
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    tar.append_dir_all("cifar-10-batches-bin", &folder).unwrap();
    tar.into_inner().unwrap().finish().unwrap()
}

/// Serves `body` at every path on 127.0.0.1, honouring `Range: bytes=N-`; the first answer
/// stops after `cut_first_at` bytes of the body, if given, and closes the connection. Returns
/// the base address and the Range header of each request.
fn serve(body: Vec<u8>, cut_first_at: Option<usize>) -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let ranges = Arc::new(Mutex::new(Vec::new()));
    let seen = ranges.clone();
    std::thread::spawn(move || {
        for (i, stream) in listener.incoming().enumerate() {
            let mut stream = stream.unwrap();
            let mut range = None;
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line.trim().is_empty() {
                    break;
                }
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("range:") {
                    range = Some(value.trim().to_string());
                }
            }
            seen.lock().unwrap().push(range.clone());
            let start: usize = range
                .as_deref()
                .and_then(|r| r.strip_prefix("bytes=")?.strip_suffix('-')?.parse().ok())
                .unwrap_or(0);
            let rest = &body[start..];
            let head = if start > 0 {
                format!(
                    "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {start}-{}/{}\r\nConnection: close\r\n\r\n",
                    rest.len(),
                    body.len() - 1,
                    body.len()
                )
            } else {
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    rest.len()
                )
            };
            let sent = match cut_first_at {
                Some(cut) if i == 0 => &rest[..cut],
                _ => rest,
            };
            stream.write_all(head.as_bytes()).unwrap();
            // The client may hang up first, as it does on a wrong checksum.
            let _ = stream.write_all(sent);
        }
    });
    (address, ranges)
}

fn md5_hex(bytes: &[u8]) -> String {
    hex::encode(Md5::digest(bytes))
}

fn fetch_from(url: String, md5: String) -> Fetch<'static> {
    Fetch {
        url,
        md5,
        progress: false,
        ..Fetch::new(&CIFAR10)
    }
}

fn assert_cifar_folder(folder: &Path, per_file: usize) {
    let data = cifar::load(folder, Normalization::Unit).unwrap();
    assert_eq!(
        (data.train.len(), data.test.len()),
        (5 * per_file, per_file)
    );
}

#[test]
fn a_cut_download_resumes_with_a_range_request_then_is_checked_and_unpacked() {
    let archive = cifar_archive(20);
    let half = archive.len() / 2;
    let (address, ranges) = serve(archive.clone(), Some(half));
    let dir = tempfile::tempdir().unwrap();
    let fetch = fetch_from(
        format!("{address}/cifar-10-binary.tar.gz"),
        md5_hex(&archive),
    );
    let error = fetch.run(dir.path()).unwrap_err();
    assert!(matches!(error, FetchError::Network { .. }), "{error}");
    assert!(
        error
            .to_string()
            .contains(&format!("after {half} of {} bytes", archive.len())),
        "{error}"
    );
    let part = dir.path().join("cifar-10-binary.tar.gz.part");
    assert_eq!(std::fs::metadata(&part).unwrap().len(), half as u64);
    let folder = fetch.run(dir.path()).unwrap();
    assert_eq!(folder, dir.path().join("cifar-10-batches-bin"));
    assert_eq!(
        *ranges.lock().unwrap(),
        [None, Some(format!("bytes={half}-"))]
    );
    assert_cifar_folder(&folder, 20);
    // The archive is gone once unpacked; a second fetch finds the folder and asks for nothing.
    assert!(!part.exists() && !dir.path().join("cifar-10-binary.tar.gz").exists());
    fetch.run(dir.path()).unwrap();
    assert_eq!(ranges.lock().unwrap().len(), 2);
}

#[test]
fn an_archive_that_does_not_match_its_checksum_is_deleted_and_not_unpacked() {
    let archive = cifar_archive(2);
    let (address, _) = serve(archive, None);
    let dir = tempfile::tempdir().unwrap();
    let fetch = fetch_from(format!("{address}/c.tar.gz"), "0".repeat(32));
    let error = fetch.run(dir.path()).unwrap_err().to_string();
    assert!(
        error.contains("c.tar.gz has MD5") && error.contains(&"0".repeat(32)),
        "{error}"
    );
    assert!(!dir.path().join("c.tar.gz").exists());
    assert!(!dir.path().join("cifar-10-batches-bin").exists());
}

#[test]
fn an_archive_put_in_the_folder_by_hand_is_used_without_a_download() {
    let archive = cifar_archive(3);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cifar-10-binary.tar.gz"), &archive).unwrap();
    // Nothing listens at this address.
    let fetch = fetch_from(
        "http://127.0.0.1:9/cifar-10-binary.tar.gz".into(),
        md5_hex(&archive),
    );
    assert_cifar_folder(&fetch.run(dir.path()).unwrap(), 3);
}

/// Runs `fedsim data fetch cifar10` into `dir` from `url`, which must fail; returns stderr.
fn fetch_fails(dir: &Path, url: &str) -> String {
    let dir = dir.to_str().unwrap();
    fails_with(
        &[
            "data", "fetch", "cifar10", "--dir", dir, "--url", url, "--quiet",
        ],
        1,
    )
}

#[test]
fn the_command_checks_a_mirrors_file_against_the_published_checksum() {
    let (address, _) = serve(cifar_archive(2), None);
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{address}/cifar-10-binary.tar.gz");
    let stderr = fetch_fails(dir.path(), &url);
    assert!(
        stderr.contains("the publisher gives c32a1d4ab5d03f1284b67883e8d87530"),
        "{stderr}"
    );
}

#[test]
fn offline_the_command_says_what_to_do() {
    // A port just freed: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{port}/cifar-10-binary.tar.gz");
    let stderr = fetch_fails(dir.path(), &url);
    assert!(
        stderr.contains(&format!("cannot download {url}"))
            && stderr.contains("Is this machine online?")
            && stderr.contains("as cifar-10-binary.tar.gz"),
        "{stderr}"
    );
}
