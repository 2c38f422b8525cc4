//! Flag value parsers that accept what upstream's Go flags accept.

use std::net::SocketAddr;

/// Parses a listen address: `0.0.0.0:8086`, `[::]:8086`, or Go's `:8086` (all interfaces).
///
/// Errors name the value: `invalid listen address "x": ...`.
pub fn parse_listen_addr(value: &str) -> Result<SocketAddr, String> {
    let full = match value.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => value.to_string(),
    };
    full.parse()
        .map_err(|e| format!("invalid listen address {value:?}: {e} (expected IP:PORT or :PORT)"))
}

/// Parses a boolean as Go's `strconv.ParseBool` does: `1 t T TRUE true True 0 f F FALSE false
/// False`. Used with `--flag=VALUE` so `--enable-ipv6=false` works as upstream's flags do.
pub fn parse_bool(value: &str) -> Result<bool, String> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "invalid boolean {value:?} (expected true or false)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen_addr(":8086").unwrap(),
            "0.0.0.0:8086".parse().unwrap()
        );
        assert_eq!(
            parse_listen_addr("127.0.0.1:0").unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert_eq!(
            parse_listen_addr("[::1]:9996").unwrap(),
            "[::1]:9996".parse().unwrap()
        );
        let err = parse_listen_addr("localhost:80").unwrap_err();
        assert!(err.contains("\"localhost:80\""), "{err}");
        assert!(parse_listen_addr(":99999").is_err());
    }

    #[test]
    fn go_booleans() {
        assert_eq!(parse_bool("false"), Ok(false));
        assert_eq!(parse_bool("T"), Ok(true));
        assert_eq!(parse_bool("1"), Ok(true));
        assert!(parse_bool("yes").unwrap_err().contains("\"yes\""));
    }
}
