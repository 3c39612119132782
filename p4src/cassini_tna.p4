/*
 * Cassini data plane for the Tofino Native Architecture (bf-p4c, Stratum).
 *
 * Same P4Runtime names and semantics as cassini.p4 (v1model): logical_forward
 * maps <ingress port, destination MAC> to an egress port; wred_profile gives
 * each egress port its WRED thresholds in cells (Tofino's enq_qdepth is in
 * cells: 80 B on Tofino1, 176 B on Tofino2); ECN capable packets are CE-marked
 * with a probability rising from 0 at min_cells to max_prob percent at
 * max_cells, always above max_cells; other packets are dropped there.
 *
 * Our choice: the MAU cannot multiply two run-time values, so the linear ramp
 * is approximated by four steps: the range [min, max) is cut into quarters
 * with shifts, and in quarter j (0..3) a packet is marked with probability
 * max_prob * (2j + 1) / 8, the ramp's value at the quarter's middle. A random
 * 7-bit number is compared with max_prob scaled from percent to 1/128
 * (x * 1.28125, by shifts). Comparisons of two run-time values are written as
 * saturating subtractions tested against zero, which the gateways support.
 *
 * Queue classes, as in cassini.p4 (see there): queue_class_by_flow, then
 * queue_class, set the packet's queue id (ig_tm_md.qid) and its class of
 * service (ingress_cos) to one of 8 classes; (our choice) the port's queues
 * 0..7 are configured strict priority, 7 first, in the TM (BfRt tm.queue
 * sched_cfg, outside P4Runtime).
 *
 * Per job, as in cassini.p4 (see there for the key, our choice): job_by_dst,
 * then job_by_src, give a packet its 4-bit job class; job_tx and
 * job_ecn_marked count per (egress port, class) at index port ++ class
 * (13 bits); max_qdepth keeps each egress port's deepest enq_qdepth, in
 * cells (80 B on Tofino1), until its reader sets it back to 0.
 *
 * PFC, buffer and queue settings of the traffic manager are not reachable
 * from P4; controlplane/tofino.py writes the BfRt script for them.
 *
 * @name gives every table, action and counter its P4Info name; @id pins its
 * P4Runtime id (p4c: type prefix << 24 | @id) so p4c reproduces
 * cassini.p4info.txtpb id for id (tests/controlplane/test_p4c.py checks).
 */
#include <core.p4>
#include <tna.p4>

#include "include/headers.p4"
#include "include/parser.p4"

struct ingress_metadata_t { }

struct egress_metadata_t {
    bit<1>  wred_enabled;
    bit<24> wred_min_cells;
    bit<24> wred_max_cells;
    bit<8>  wred_max_prob;
    bit<4>  job_class;
    bit<32> qdepth;
}

// ---------------------------------------------------------------------------
// Ingress
// ---------------------------------------------------------------------------

parser CassiniIngressParser(packet_in pkt,
                            out headers_t hdr,
                            out ingress_metadata_t ig_md,
                            out ingress_intrinsic_metadata_t ig_intr_md) {
    EthernetIpv4Parser() ethernet_ipv4;

    state start {
        pkt.extract(ig_intr_md);
        transition select(ig_intr_md.resubmit_flag) {
            1w1: reject;  // the program never resubmits
            default: skip_port_metadata;
        }
    }

    state skip_port_metadata {
        pkt.advance(PORT_METADATA_SIZE);
        ethernet_ipv4.apply(pkt, hdr);
        transition accept;
    }
}

control CassiniIngress(inout headers_t hdr,
                       inout ingress_metadata_t ig_md,
                       in ingress_intrinsic_metadata_t ig_intr_md,
                       in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                       inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                       inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    @name(".CassiniIngress.port_rx") @id(1)
    Counter<bit<64>, bit<9>>(512, CounterType_t.PACKETS_AND_BYTES) port_rx;

    @name(".CassiniIngress.set_egress_port") @id(1)
    action set_egress_port(bit<9> port) {
        ig_tm_md.ucast_egress_port = port;
    }

    @name(".CassiniIngress.drop") @id(2)
    action drop() {
        ig_dprsr_md.drop_ctl = 3w1;
    }

    @name(".CassiniIngress.logical_forward") @id(1)
    table logical_forward {
        key = {
            ig_intr_md.ingress_port : exact @name("ingress_port");
            hdr.ethernet.dst_addr   : exact @name("dst_mac");
        }
        actions = {
            set_egress_port;
            drop;
        }
        const default_action = drop();
        // 128 SRAM blocks, two stages of twelve (the budget is in p4src/README.md).
        size = 262144;
    }

    @name(".CassiniIngress.set_queue_class") @id(5)
    action set_queue_class(bit<3> queue_class) {
        ig_tm_md.qid = (QueueId_t)queue_class;
        ig_tm_md.ingress_cos = queue_class;
    }

    @name(".CassiniIngress.queue_class") @id(5)
    table queue_class {
        key = {
            hdr.ipv4.dscp : exact @name("dscp");
        }
        actions = {
            set_queue_class;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = 64;
    }

    @name(".CassiniIngress.queue_class_by_flow") @id(6)
    table queue_class_by_flow {
        key = {
            hdr.ipv4.src_addr : exact @name("src_addr");
            hdr.ipv4.dst_addr : exact @name("dst_addr");
            hdr.ipv4.protocol : exact @name("protocol");
            hdr.l4.src_port   : exact @name("src_port");
            hdr.l4.dst_port   : exact @name("dst_port");
        }
        actions = {
            set_queue_class;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = 4096;
    }

    apply {
        port_rx.count(ig_intr_md.ingress_port);
        if (hdr.ethernet.isValid()) {
            logical_forward.apply();
        } else {
            drop();
        }
        ig_tm_md.qid = 0;
        ig_tm_md.ingress_cos = 0;
        if (hdr.ipv4.isValid()) {
            bool by_flow = false;
            if (hdr.l4.isValid()) {
                by_flow = queue_class_by_flow.apply().hit;
            }
            if (!by_flow) {
                queue_class.apply();
            }
        }
    }
}

control CassiniIngressDeparser(packet_out pkt,
                               inout headers_t hdr,
                               in ingress_metadata_t ig_md,
                               in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.l4);
    }
}

// ---------------------------------------------------------------------------
// Egress
// ---------------------------------------------------------------------------

parser CassiniEgressParser(packet_in pkt,
                           out headers_t hdr,
                           out egress_metadata_t eg_md,
                           out egress_intrinsic_metadata_t eg_intr_md) {
    EthernetIpv4Parser() ethernet_ipv4;

    state start {
        pkt.extract(eg_intr_md);
        ethernet_ipv4.apply(pkt, hdr);
        transition accept;
    }
}

control CassiniEgress(inout headers_t hdr,
                      inout egress_metadata_t eg_md,
                      in egress_intrinsic_metadata_t eg_intr_md,
                      in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                      inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                      inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    @name(".CassiniEgress.port_tx") @id(2)
    Counter<bit<64>, bit<9>>(512, CounterType_t.PACKETS_AND_BYTES) port_tx;
    @name(".CassiniEgress.ecn_marked") @id(3)
    Counter<bit<64>, bit<9>>(512, CounterType_t.PACKETS_AND_BYTES) ecn_marked;
    @name(".CassiniEgress.wred_dropped") @id(4)
    Counter<bit<64>, bit<9>>(512, CounterType_t.PACKETS_AND_BYTES) wred_dropped;
    @name(".CassiniEgress.job_tx") @id(5)
    Counter<bit<64>, bit<13>>(8192, CounterType_t.PACKETS_AND_BYTES) job_tx;
    @name(".CassiniEgress.job_ecn_marked") @id(6)
    Counter<bit<64>, bit<13>>(8192, CounterType_t.PACKETS_AND_BYTES) job_ecn_marked;
    @name(".CassiniEgress.max_qdepth") @id(1)
    Register<bit<32>, bit<9>>(512, 0) max_qdepth;
    RegisterAction<bit<32>, bit<9>, bit<32>>(max_qdepth) keep_deepest = {
        void apply(inout bit<32> deepest) {
            if (eg_md.qdepth > deepest) {
                deepest = eg_md.qdepth;
            }
        }
    };

    @name(".CassiniEgress.set_job_class") @id(4)
    action set_job_class(bit<4> job_class) {
        eg_md.job_class = job_class;
    }

    @name(".CassiniEgress.job_by_dst") @id(3)
    table job_by_dst {
        key = {
            hdr.ipv4.dst_addr : exact @name("dst_addr");
            hdr.l4.dst_port   : exact @name("dst_port");
        }
        actions = {
            set_job_class;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = 1024;
    }

    @name(".CassiniEgress.job_by_src") @id(4)
    table job_by_src {
        key = {
            hdr.ipv4.src_addr : exact @name("src_addr");
            hdr.l4.src_port   : exact @name("src_port");
        }
        actions = {
            set_job_class;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = 1024;
    }

    Random<bit<8>>() coin;

    @name(".CassiniEgress.set_wred") @id(3)
    action set_wred(bit<24> min_cells, bit<24> max_cells, bit<8> max_prob) {
        eg_md.wred_enabled = 1w1;
        eg_md.wred_min_cells = min_cells;
        eg_md.wred_max_cells = max_cells;
        eg_md.wred_max_prob = max_prob;
    }

    @name(".CassiniEgress.wred_profile") @id(2)
    table wred_profile {
        key = {
            eg_intr_md.egress_port : exact @name("egress_port");
        }
        actions = {
            set_wred;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = 512;
    }

    apply {
        eg_md.wred_enabled = 1w0;
        wred_profile.apply();

        eg_md.job_class = 4w0;
        if (hdr.l4.isValid()) {
            if (!job_by_dst.apply().hit) {
                job_by_src.apply();
            }
        }
        bit<13> job_index = eg_intr_md.egress_port ++ eg_md.job_class;
        eg_md.qdepth = (bit<32>)eg_intr_md.enq_qdepth;
        keep_deepest.execute(eg_intr_md.egress_port);

        bool congested = false;
        if (eg_md.wred_enabled == 1w1) {
            bit<24> depth = (bit<24>)eg_intr_md.enq_qdepth;
            // depth - min, 0 below min; depth >= max <=> (max - depth) == 0.
            bit<24> above_min = depth |-| eg_md.wred_min_cells;
            bit<24> below_max = eg_md.wred_max_cells |-| depth;
            bit<24> span = eg_md.wred_max_cells |-| eg_md.wred_min_cells;
            bit<24> quarter = span >> 2;
            bit<24> half = span >> 1;
            bit<24> three_quarters = half + quarter;

            // max_prob percent in units of 1/128: x * (1 + 1/4 + 1/32) = x * 1.28125.
            bit<8> prob = eg_md.wred_max_prob;
            bit<8> prob128 = prob + (prob >> 2) + (prob >> 5);
            bit<8> eighth = prob128 >> 3;
            bit<8> threshold;
            if ((above_min |-| three_quarters) != 0) {
                threshold = prob128 - eighth;                 // 7/8
            } else if ((above_min |-| half) != 0) {
                threshold = (prob128 >> 1) + eighth;          // 5/8
            } else if ((above_min |-| quarter) != 0) {
                threshold = (prob128 >> 2) + eighth;          // 3/8
            } else {
                threshold = eighth;                           // 1/8
            }
            bit<8> draw = coin.get() & 8w0x7f;

            if (below_max == 0) {
                congested = true;
            } else if (above_min != 0 && (threshold |-| draw) != 8w0) {
                congested = true;  // draw < threshold
            }
        }

        if (congested) {
            if (hdr.ipv4.isValid() && (hdr.ipv4.ecn == ECN_ECT0 || hdr.ipv4.ecn == ECN_ECT1)) {
                hdr.ipv4.ecn = ECN_CE;
                ecn_marked.count(eg_intr_md.egress_port);
                port_tx.count(eg_intr_md.egress_port);
                job_ecn_marked.count(job_index);
                job_tx.count(job_index);
            } else if (hdr.ipv4.isValid() && hdr.ipv4.ecn == ECN_CE) {
                port_tx.count(eg_intr_md.egress_port);
                job_tx.count(job_index);
            } else {
                wred_dropped.count(eg_intr_md.egress_port);
                eg_dprsr_md.drop_ctl = 3w1;
            }
        } else {
            port_tx.count(eg_intr_md.egress_port);
            job_tx.count(job_index);
        }
    }
}

control CassiniEgressDeparser(packet_out pkt,
                              inout headers_t hdr,
                              in egress_metadata_t eg_md,
                              in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_checksum;

    apply {
        // The deparser's checksum unit only emits for a valid ipv4 header.
        hdr.ipv4.hdr_checksum = ipv4_checksum.update({
            hdr.ipv4.version,
            hdr.ipv4.ihl,
            hdr.ipv4.dscp,
            hdr.ipv4.ecn,
            hdr.ipv4.total_len,
            hdr.ipv4.identification,
            hdr.ipv4.flags,
            hdr.ipv4.frag_offset,
            hdr.ipv4.ttl,
            hdr.ipv4.protocol,
            hdr.ipv4.src_addr,
            hdr.ipv4.dst_addr});
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.l4);
    }
}

Pipeline(CassiniIngressParser(),
         CassiniIngress(),
         CassiniIngressDeparser(),
         CassiniEgressParser(),
         CassiniEgress(),
         CassiniEgressDeparser()) pipe;

Switch(pipe) main;
