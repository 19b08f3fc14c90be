//! A small client of the JSS API, used by the CLI, the tests and the benchmark: HTTP/1.1
//! with keep-alive, TLS through rustls when the server URL is `https://` (trusting the
//! given CA certificate).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokio_rustls::rustls;

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// A JSS answer: the status and the JSON body (`Null` when the body is not JSON).
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub text: String,
}

impl Reply {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The error body as people read it: the message, then one line per detail
    /// (`  spec.replicas: must be at least 0`, quota rows with their numbers); a body
    /// that is not the JSS's error shape is shown as text.
    pub fn error_text(&self) -> String {
        match serde_json::from_value::<super::wire::ErrorReply>(self.body.clone()) {
            Ok(e) => e.describe(self.status),
            Err(_) => format!("{} (error): {}", self.status, self.text.trim()),
        }
    }

    /// A successful reply's body as `T`, or the JSS's error as the error.
    pub fn decode<T: serde::de::DeserializeOwned>(self) -> anyhow::Result<T> {
        anyhow::ensure!(self.is_success(), "{}", self.error_text());
        serde_json::from_value(self.body).with_context(|| {
            format!(
                "the JSS's reply is not what this client reads: {}",
                self.text.trim()
            )
        })
    }
}

/// A bearer token travels in clear over `http://`: allowed only to a loopback host
/// (tests, a port-forward), refused with the URL otherwise.
pub fn check_plain_http(server: &str) -> anyhow::Result<()> {
    let Some(rest) = server.strip_prefix("http://") else {
        return Ok(());
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    // `http://127.0.0.1:1@jss.example/` is a request to jss.example: user info is
    // refused rather than read past.
    anyhow::ensure!(
        !authority.contains('@'),
        "{server}: a URL with user info (`user@host`) is not accepted; give the JSS's host"
    );
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    anyhow::ensure!(
        loopback,
        "{server}: plain http would send the token in clear to a host that is not loopback; \
         use https:// (with --ca-cert)"
    );
    Ok(())
}

#[derive(Clone)]
pub struct JssClient {
    base: String,
    token: Option<String>,
    http: Client<Https, Full<Bytes>>,
    timeout: Duration,
}

impl JssClient {
    /// `server` is `http://host:port` or `https://host:port`; `ca_cert` a PEM file of the
    /// CA (or the server's own certificate) to trust for https.
    pub fn new(
        server: &str,
        token: Option<String>,
        ca_cert: Option<&Path>,
    ) -> anyhow::Result<JssClient> {
        check_plain_http(server)?;
        let mut roots = rustls::RootCertStore::empty();
        if let Some(ca) = ca_cert {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            for cert in CertificateDer::pem_file_iter(ca)
                .with_context(|| format!("reading CA certificate {}", ca.display()))?
            {
                roots
                    .add(cert.with_context(|| format!("parsing {}", ca.display()))?)
                    .with_context(|| format!("adding {} to the trusted roots", ca.display()))?;
            }
        } else if server.starts_with("https://") {
            anyhow::bail!(
                "{server} is https: give --ca-cert (or PINFED_CA_CERT) to trust its certificate"
            );
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        let http = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(https);
        Ok(JssClient {
            base: server.trim_end_matches('/').to_string(),
            token,
            http,
            timeout: Duration::from_secs(60),
        })
    }

    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> anyhow::Result<Reply> {
        let url = format!("{}{path}", self.base);
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(&url)
            .header("accept", "application/json");
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let req = match body {
            Some((ct, bytes)) => req
                .header("content-type", ct)
                .body(Full::new(Bytes::from(bytes)))?,
            None => req.body(Full::new(Bytes::new()))?,
        };
        let resp = tokio::time::timeout(self.timeout, self.http.request(req))
            .await
            .with_context(|| format!("{method} {url}: timed out"))?
            .with_context(|| format!("{method} {url}"))?;
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await?.to_bytes();
        let text = String::from_utf8_lossy(&bytes).to_string();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Reply { status, body, text })
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Reply> {
        self.request("GET", path, None).await
    }

    pub async fn delete(&self, path: &str) -> anyhow::Result<Reply> {
        self.request("DELETE", path, None).await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> anyhow::Result<Reply> {
        self.request(
            "POST",
            path,
            Some(("application/json", body.to_string().into_bytes())),
        )
        .await
    }
}

#[cfg(test)]
mod plain_http_tests {
    use super::check_plain_http;

    #[test]
    fn plain_http_is_for_loopback_only() {
        for ok in [
            "http://127.0.0.1:8443",
            "http://localhost:8443/",
            "http://[::1]:8443",
            "http://127.0.0.2",
            "https://jss.example:8443",
        ] {
            assert!(check_plain_http(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://jss.example:8443",
            "http://10.0.0.1:8443",
            "http://[2001:db8::1]:8443",
            "http://localhost.evil.example",
        ] {
            let err = check_plain_http(bad).unwrap_err().to_string();
            assert!(err.contains(bad) && err.contains("https://"), "{err}");
        }
        for fooled in [
            "http://127.0.0.1:1@jss.example/",
            "http://localhost@evil.example:80",
        ] {
            let err = check_plain_http(fooled).unwrap_err().to_string();
            assert!(err.contains("user info"), "{fooled}: {err}");
        }
    }
}
