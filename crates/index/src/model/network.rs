//! Client networks as policy resources write them (spec/policy.md §3.3): a CIDR or a bare IP,
//! with exceptions.

use ipnet::IpNet;

/// A client network with exceptions (§3.3).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Network {
    pub net: IpNet,
    pub except: Vec<IpNet>,
}

/// A CIDR or a bare IP (a /32 or /128). Errors name the text that is neither.
pub fn parse_net(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| format!("invalid CIDR {s:?}"))
}

/// A `{cidr, except}` network of a policy resource.
pub fn parse_network(n: &linkerd_k8s_api::Network) -> Result<Network, String> {
    Ok(Network {
        net: parse_net(&n.cidr)?,
        except: n
            .except
            .iter()
            .flatten()
            .map(|e| parse_net(e))
            .collect::<Result<_, _>>()?,
    })
}
