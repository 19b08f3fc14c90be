//! A small HTTP/1.1 client for loopback endpoints (metrics, health and readiness), on
//! hyper and hyper-util as pinfed's own servers and clients.

use std::time::Duration;

use anyhow::Context;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A response: status code and body as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

/// GET `url` (plain `http://`); connecting and reading the whole answer must take at most
/// `timeout`.
pub async fn get(url: &str, timeout: Duration) -> anyhow::Result<Response> {
    let uri: hyper::Uri = url.parse().with_context(|| format!("URL {url:?}"))?;
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(timeout));
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build(connector);
    let call = async {
        let resp = client.get(uri).await?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        anyhow::Ok(Response {
            status,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    };
    tokio::time::timeout(timeout, call)
        .await
        .with_context(|| format!("GET {url}: no answer within {timeout:?}"))?
        .with_context(|| format!("GET {url}"))
}

/// The status code of GET `url`, or None if nothing answered within `timeout`.
pub async fn status(url: &str, timeout: Duration) -> Option<u16> {
    get(url, timeout).await.ok().map(|r| r.status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn get_reads_status_and_body_and_status_sees_nothing_listening() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).await.unwrap();
            assert!(String::from_utf8_lossy(&buf[..n]).starts_with("GET /metrics HTTP/1.1"));
            s.write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 9\r\n\r\nnot ready")
                .await
                .unwrap();
        });
        let r = get(
            &format!("http://127.0.0.1:{port}/metrics"),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert_eq!((r.status, r.body.as_str()), (503, "not ready"));
        let closed = crate::free_port().unwrap();
        assert_eq!(
            status(
                &format!("http://127.0.0.1:{closed}/"),
                Duration::from_secs(2)
            )
            .await,
            None
        );
    }
}
