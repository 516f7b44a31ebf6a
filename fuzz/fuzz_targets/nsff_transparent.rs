//! The nSFF's transparent-interception filter on arbitrary client-port
//! frames: never panics, and what it lets smoltcp intercept is always TCP
//! to an intercepted port, sent to the port's own MAC, for an address that
//! is not ours.
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
    if f.filter(data) != Filter::Intercept {
        return;
    }
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
});
