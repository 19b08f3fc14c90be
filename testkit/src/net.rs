//! Loopback ports.

use std::net::TcpListener;
use std::time::Duration;

/// A free loopback port (the listener that found it is closed again).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `n` distinct free loopback ports (every listener is held until all are chosen).
pub fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
pub fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
        .is_ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn free_ports_are_distinct_and_closed() {
        let ports = super::free_ports(5).unwrap();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), 5, "{ports:?}");
        assert!(ports.iter().all(|p| !super::port_open(*p)), "{ports:?}");
    }

    #[test]
    fn port_open_sees_a_listener() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(super::port_open(l.local_addr().unwrap().port()));
    }
}
