/*
 * Headers shared by the v1model (cassini.p4) and TNA (cassini_tna.p4) programs.
 *
 * The IPv4 type-of-service byte is split into DSCP (6 bits) and ECN (2 bits,
 * RFC 3168) because WRED reads and rewrites the ECN codepoint. Of TCP and
 * UDP only the two ports are parsed: they (with the IPv4 addresses) tell
 * which job a packet belongs to (cassini.p4, job_by_dst / job_by_src).
 */
#ifndef CASSINI_HEADERS_P4_
#define CASSINI_HEADERS_P4_

typedef bit<48> mac_addr_t;

const bit<16> ETHERTYPE_IPV4 = 16w0x0800;
const bit<8>  IP_PROTO_TCP   = 8w6;
const bit<8>  IP_PROTO_UDP   = 8w17;

/* RFC 3168 ECN codepoints. */
const bit<2> ECN_NOT_ECT = 2w0;
const bit<2> ECN_ECT1    = 2w1;
const bit<2> ECN_ECT0    = 2w2;
const bit<2> ECN_CE      = 2w3;

header ethernet_h {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16>    ether_type;
}

header ipv4_h {
    bit<4>  version;
    bit<4>  ihl;
    bit<6>  dscp;
    bit<2>  ecn;
    bit<16> total_len;
    bit<16> identification;
    bit<3>  flags;
    bit<13> frag_offset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdr_checksum;
    bit<32> src_addr;
    bit<32> dst_addr;
}

/* The first four bytes of a TCP or UDP header. */
header l4_ports_h {
    bit<16> src_port;
    bit<16> dst_port;
}

struct headers_t {
    ethernet_h ethernet;
    ipv4_h     ipv4;
    l4_ports_h l4;
}

#endif  /* CASSINI_HEADERS_P4_ */
