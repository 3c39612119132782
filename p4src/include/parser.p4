/*
 * Ethernet + IPv4 parsing shared by both architectures, written as a
 * sub-parser that each architecture's top-level parser applies after its own
 * intrinsic metadata (nothing for v1model; the intrinsic metadata and port
 * metadata for TNA).
 *
 * Our choice: only option-less IPv4 (version 4, IHL 5: first byte 0x45) is
 * parsed as IPv4. The checksum update after CE marking then covers exactly the
 * parsed header; IPv4 with options is forwarded untouched and treated as
 * not ECN-capable by WRED. Behind it, the ports of TCP and UDP are parsed
 * when the packet is not a fragment or the first one (fragment offset 0).
 */
#ifndef CASSINI_PARSER_P4_
#define CASSINI_PARSER_P4_

#include "headers.p4"

parser EthernetIpv4Parser(packet_in pkt, out headers_t hdr) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4_if_plain;
            default: accept;
        }
    }

    state parse_ipv4_if_plain {
        transition select(pkt.lookahead<bit<8>>()) {
            8w0x45: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (13w0, IP_PROTO_TCP): parse_l4_ports;
            (13w0, IP_PROTO_UDP): parse_l4_ports;
            default: accept;
        }
    }

    state parse_l4_ports {
        pkt.extract(hdr.l4);
        transition accept;
    }
}

#endif  /* CASSINI_PARSER_P4_ */
