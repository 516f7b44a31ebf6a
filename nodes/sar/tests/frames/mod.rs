//! Frame helpers the SAR simulations share: addresses, the ROSA option
//! and ports of an Ethernet + IPv6 frame, and inserting a ROSA option.

use std::net::Ipv6Addr;

use smoltcp::wire::IpProtocol;
use svcroute_stack::shim::edit;
use svcroute_stack::wire::ipv6opt::{self, OptionRepr, OptionType};
use svcroute_stack::wire::rosa::Message;

const ETH: usize = 14;

pub(crate) fn ipv6_addrs(frame: &[u8]) -> Option<(Ipv6Addr, Ipv6Addr)> {
    if frame.get(12..14)? != [0x86, 0xdd] || frame.len() < ETH + 40 {
        return None;
    }
    let s: [u8; 16] = frame[ETH + 8..ETH + 24].try_into().ok()?;
    let d: [u8; 16] = frame[ETH + 24..ETH + 40].try_into().ok()?;
    Some((Ipv6Addr::from(s), Ipv6Addr::from(d)))
}

/// The ROSA message in a frame's Destination Options header, if any.
pub(crate) fn rosa_of(frame: &[u8]) -> Option<Message> {
    let layout = edit::walk(frame).ok()?;
    let at = layout.dest_opts?;
    let hdr = ipv6opt::Packet::new_checked(&frame[at.range]).ok()?;
    hdr.options_iter().find_map(|o| match o {
        Ok(OptionRepr::Rosa(d)) => Message::from_bytes(d.as_bytes()).ok(),
        _ => None,
    })
}

/// (protocol, source port, destination port) of a TCP or UDP packet.
pub(crate) fn ports_of(frame: &[u8]) -> Option<(IpProtocol, u16, u16)> {
    let layout = edit::walk(frame).ok()?;
    let l4 = frame.get(layout.upper_offset..layout.upper_offset + 4)?;
    matches!(layout.upper_protocol, IpProtocol::Tcp | IpProtocol::Udp).then(|| {
        (
            layout.upper_protocol,
            u16::from_be_bytes([l4[0], l4[1]]),
            u16::from_be_bytes([l4[2], l4[3]]),
        )
    })
}

pub(crate) fn insert_rosa(frame: &mut Vec<u8>, msg: &Message) {
    let bytes = msg.to_bytes().unwrap();
    let opt = OptionRepr::new(OptionType::Rosa, &bytes).unwrap();
    edit::insert_dest_opts(frame, &[opt]).unwrap();
}
