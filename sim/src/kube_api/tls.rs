//! HTTPS, as the API server serves it. An in-cluster client (Multus thick's daemon: client-go's
//! `rest.InClusterConfig`) speaks HTTPS only, to `https://$KUBERNETES_SERVICE_HOST:PORT`, and
//! verifies the server against the service account's `ca.crt`. As kubeadm does, a CA of the
//! stand-in's own (made at start) signs its serving certificate, for `127.0.0.1` and `localhost`;
//! the CA's certificate goes to `<dir>/ca.crt` for the client. No client certificate is asked
//! for: the stand-in authenticates no one.
//!
//! The one port serves both: a connection that opens with a TLS handshake record gets HTTPS, any
//! other plain HTTP (kubeconfigs with an `http://` server, and the tests' own looks).

use std::io::{self, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// The first byte of a TLS record carrying a handshake (a ClientHello opens every connection).
const HANDSHAKE_RECORD: u8 = 0x16;

/// The server's TLS configuration, its CA's certificate written to `<dir>/ca.crt`.
pub(crate) fn server_config(dir: &Path) -> Result<Arc<ServerConfig>, String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("kube-api TLS: {what}: {e}");
    let ca_key = KeyPair::generate().map_err(|e| fail("a CA key", &e))?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(|e| fail("the CA", &e))?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.distinguished_name
        .push(DnType::CommonName, "contrail-agent-sim kube-api CA");
    let ca_cert = ca.self_signed(&ca_key).map_err(|e| fail("the CA", &e))?;
    let issuer = Issuer::from_params(&ca, &ca_key);

    let key = KeyPair::generate().map_err(|e| fail("a server key", &e))?;
    let mut server = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()])
        .map_err(|e| fail("the server certificate", &e))?;
    server
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = server
        .signed_by(&key, &issuer)
        .map_err(|e| fail("the server certificate", &e))?;

    let ca_file = dir.join("ca.crt");
    std::fs::write(&ca_file, ca_cert.pem())
        .map_err(|e| fail(&ca_file.display().to_string(), &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| fail("the protocol versions", &e))?
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone(), ca_cert.der().clone()], key)
        .map_err(|e| fail("the server certificate", &e))?;
    Ok(Arc::new(config))
}

/// Whether a new connection opens with a TLS handshake (waits for its first byte).
pub(crate) fn opens_tls(stream: &TcpStream) -> io::Result<bool> {
    let mut first = [0u8; 1];
    Ok(stream.peek(&mut first)? == 1 && first[0] == HANDSHAKE_RECORD)
}

/// A connection over TLS: `serve` has it while it is open; the client is told the end
/// (close_notify) when `serve` returns. A client that closes without close_notify (client-go
/// in a process that exits: Multus thin after each call) ends its connection as a plain close.
pub(crate) fn serve_tls(
    config: &Arc<ServerConfig>,
    stream: TcpStream,
    serve: impl FnOnce(&mut rustls::StreamOwned<rustls::ServerConnection, TcpStream>) -> io::Result<()>,
) -> io::Result<()> {
    let conn = rustls::ServerConnection::new(Arc::clone(config)).map_err(io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(conn, stream);
    let served = serve(&mut tls);
    tls.conn.send_close_notify();
    let _ = tls.flush();
    match served {
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(()),
        other => other,
    }
}
