//! `emq` over TLS (`rediss://`) to a real server that asks for client certificates: with the
//! CA and a client certificate it works; without the certificate, with no CA to check the
//! server by, or in plain text to the TLS port, it is refused.

mod common;

use std::path::Path;

use common::{emq, enqueue, free_port, servers_load_the_module, Options, Server};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files in `dir`.
fn certificates(dir: &Path) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Each certificate its own name: a chain is built by names.
    ca.distinguished_name
        .push(DnType::CommonName, "EchoMQ test CA");
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("ca key")).expect("ca");
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write");
    for name in ["server", "client"] {
        let key = KeyPair::generate().expect("key");
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, format!("EchoMQ test {name}"));
        let cert = params.signed_by(&key, &ca).expect("sign");
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).expect("write");
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).expect("write");
    }
}

#[test]
fn rediss_with_the_ca_and_a_client_certificate_works_and_nothing_less_does() {
    servers_load_the_module();
    let dir = tempfile::tempdir().expect("dir");
    certificates(dir.path());
    let file = |n: &str| dir.path().join(n).to_string_lossy().into_owned();
    let tls_port = free_port();
    let s = Server::start(
        Options::default()
            .arg("tls-port", &tls_port.to_string())
            .arg("tls-cert-file", &file("server.pem"))
            .arg("tls-key-file", &file("server.key"))
            .arg("tls-ca-cert-file", &file("ca.pem"))
            .arg("tls-auth-clients", "yes"),
    );
    enqueue(&mut s.conn(), "secure", "x");
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let (ca, cert, key) = (file("ca.pem"), file("client.pem"), file("client.key"));

    let (code, text, err) = emq(
        &url,
        &[
            "--tls-ca",
            &ca,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "queues",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(text.lines().any(|l| l.starts_with("secure ")), "{text}");

    // The server asks for a client certificate.
    let (code, _, err) = emq(&url, &["--tls-ca", &ca, "queues"]);
    assert_eq!(code, 1, "{err}");
    // No CA to check the server by: its certificate is not trusted.
    let (code, _, err) = emq(&url, &["--tls-cert", &cert, "--tls-key", &key, "queues"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    // Plain text to the TLS port.
    let (code, _, err) = emq(&format!("redis://127.0.0.1:{tls_port}"), &["queues"]);
    assert_eq!(code, 1, "{err}");
    // A certificate without its key is a usage error.
    let (code, _, err) = emq(&url, &["--tls-cert", &cert, "queues"]);
    assert_eq!(code, 2, "{err}");
}

/// The image's TLS node (`docker/compose.yml`, profile `tls`), started by `make docker-test`
/// with certificates `scripts/tls-certs.sh` made: `ECHOMQ_TLS_EXTERNAL` is its address and
/// `ECHOMQ_TLS_CERTS` the certificates' directory.
#[test]
#[ignore = "run by make docker-test against the compose TLS node"]
fn the_docker_image_serves_echomq_over_tls_only() {
    let (Ok(addr), Ok(dir)) = (
        std::env::var("ECHOMQ_TLS_EXTERNAL"),
        std::env::var("ECHOMQ_TLS_CERTS"),
    ) else {
        panic!("ECHOMQ_TLS_EXTERNAL and ECHOMQ_TLS_CERTS name the TLS node and its certificates");
    };
    let file = |n: &str| Path::new(&dir).join(n).to_string_lossy().into_owned();
    let (ca, cert, key) = (file("ca.pem"), file("client.pem"), file("client.key"));
    let url = format!("rediss://{addr}");
    let tls = ["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key];
    let with_tls = |args: &[&str]| {
        let all: Vec<&str> = tls.iter().chain(args).copied().collect();
        emq(&url, &all)
    };

    let (code, id, err) = with_tls(&["enqueue", "over-tls", "a job sent over TLS"]);
    assert_eq!(code, 0, "{err}");
    let (code, text, err) = with_tls(&["job", "over-tls", id.trim()]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("a job sent over TLS"), "{text}");
    let (code, text, err) = with_tls(&["queues"]);
    assert_eq!(code, 0, "{err}");
    assert!(text.lines().any(|l| l.starts_with("over-tls ")), "{text}");

    // Nothing in plain text, and nothing without a client certificate.
    let (code, _, err) = emq(&format!("redis://{addr}"), &["queues"]);
    assert_eq!(code, 1, "plain text was answered: {err}");
    let (code, _, err) = emq(&url, &["--tls-ca", &ca, "queues"]);
    assert_eq!(
        code, 1,
        "a client without a certificate was answered: {err}"
    );
}
