//! Mock HTTP APIs on a free loopback port, and the pieces every mock backend
//! repeats: the bearer token a request presents and the contract's error body.

use axum::Json;
use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;

/// Serves `app` on 127.0.0.1 at a free port, in the background, for the
/// rest of the test; returns its address.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("a bound address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("mock server") });
    addr
}

/// [`serve`], returning the base URL (`http://127.0.0.1:PORT`).
pub async fn serve_url(app: Router) -> String {
    format!("http://{}", serve(app).await)
}

/// A loopback address nothing listens on (bound, then released).
pub fn closed_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("a bound address")
}

/// The token of an `Authorization: Bearer ...` header, or "" without one.
pub fn bearer(headers: &HeaderMap) -> &str {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
}

/// The backend contract's error answer: `status` with
/// `{"error": {"code": code, "message": message}}`.
pub fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        Json(serde_json::json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;

    #[tokio::test]
    async fn serves_on_loopback_and_reads_the_bearer() {
        async fn echo(headers: HeaderMap) -> Response {
            match bearer(&headers) {
                "" => error(StatusCode::UNAUTHORIZED, "unauthorized", "no token"),
                token => token.to_owned().into_response(),
            }
        }
        let addr = serve(Router::new().route("/", get(echo))).await;
        assert!(addr.ip().is_loopback());
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t0k\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("t0k"), "{answer}");
    }

    #[tokio::test]
    async fn a_closed_address_refuses() {
        let addr = closed_addr();
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }
}
