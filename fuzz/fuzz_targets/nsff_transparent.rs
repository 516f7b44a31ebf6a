//! The nSFF's transparent-interception filter on arbitrary client-port
//! frames: never panics, and what it lets smoltcp intercept is always TCP
//! to an intercepted port, sent to the port's own MAC, for an address that
//! is not ours, and what it passes as ours is never for a multicast group
//! smoltcp would not take without `any_ip`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, IpAddress, IpCidr, IpProtocol, Ipv4Address,
    Ipv4Packet, Ipv6Address, Ipv6Packet, TcpPacket,
};
use svcroute_nsff::transparent::{Filter, Interceptor, Scope};

const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);

fuzz_target!(|data: &[u8]| {
    let mut f = Interceptor::new(Scope::Any, &[80, 443]);
    f.bind(
        MAC,
        &[
            IpCidr::new(IpAddress::Ipv4(Ipv4Address::new(10, 0, 1, 1)), 24),
            IpCidr::new(
                IpAddress::Ipv6(Ipv6Address::new(0xfd00, 1, 0, 0, 0, 0, 0, 1)),
                64,
            ),
        ],
    );
    match f.filter(data) {
        Filter::Intercept => intercepted(&f, data),
        Filter::Ours => ours(data),
        Filter::Drop(_) => {}
    }
});

/// A multicast packet let through is for a group smoltcp takes without
/// `any_ip` (the interface joins no others).
fn ours(data: &[u8]) {
    let Ok(eth) = EthernetFrame::new_checked(data) else {
        return;
    };
    match eth.ethertype() {
        EthernetProtocol::Ipv4 => {
            if let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) {
                let d = ip.dst_addr();
                if d.is_multicast() {
                    assert_eq!(d, Ipv4Address::new(224, 0, 0, 1));
                }
            }
        }
        EthernetProtocol::Ipv6 => {
            if let Ok(ip) = Ipv6Packet::new_checked(eth.payload()) {
                let d = ip.dst_addr().octets();
                if d[0] == 0xff {
                    // ff02::1, or the solicited-node group of fd00:1::1.
                    let all_nodes = Ipv6Address::new(0xff02, 0, 0, 0, 0, 0, 0, 1).octets();
                    let solicited = Ipv6Address::new(0xff02, 0, 0, 0, 0, 1, 0xff00, 1).octets();
                    assert!(d == all_nodes || d == solicited, "{:?}", ip.dst_addr());
                }
            }
        }
        _ => {}
    }
}

fn intercepted(f: &Interceptor, data: &[u8]) {
    let eth = EthernetFrame::new_checked(data).expect("intercepted frames parse");
    assert_eq!(eth.dst_addr(), MAC);
    let (dst, proto, payload) = match eth.ethertype() {
        EthernetProtocol::Ipv4 => {
            let ip = Ipv4Packet::new_checked(eth.payload()).expect("an IPv4 header");
            let dst = IpAddress::Ipv4(ip.dst_addr());
            (dst, ip.next_header(), ip.payload().to_vec())
        }
        EthernetProtocol::Ipv6 => {
            let ip = Ipv6Packet::new_checked(eth.payload()).expect("an IPv6 header");
            let dst = IpAddress::Ipv6(ip.dst_addr());
            (dst, ip.next_header(), ip.payload().to_vec())
        }
        other => panic!("intercepted {other}"),
    };
    assert_eq!(proto, IpProtocol::Tcp);
    assert!(!f.is_own(dst));
    let tcp = TcpPacket::new_checked(&payload[..]).expect("a TCP header");
    assert!(f.ports().contains(&tcp.dst_port()));
}
